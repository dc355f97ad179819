"""Getting events to the app: the forwarder (one attempt, sent and recorded), the HTTP client
to the app, and queue mode's delivery workers."""
