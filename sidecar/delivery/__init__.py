"""The delivery pipeline: one inbound webhook in, one answer out. No HTTP server, database driver,
logger or metrics library here: collaborators are passed in once, as ports, and every rule is a
call into the core (``decide``, ``core.answers``, ``core.batch``).

    verify ─ bind nonce ─ handshake ─ event ids ─ body replay ─┐
      ┌────────────────────────────────────────────────────────┘
      ├─ forward mode: claim each ─┬─ forward, record
      │                            └─ or answer from rows
      └─ queue mode: enqueue, answer "accepted" (a row forward mode wrote: forward mode's rules)

A single event is a batch of one item: the same path claims it, forwards it and answers.

Each step takes one frozen value, the ``Delivery`` (the provider, the request as received, its
body, its items, its trace), and gives back an answer or a value for the next step:

- ``context``: ``Inbound`` (the request as received) and ``Delivery``;
- ``ports``: what the pipeline is given besides the store (forwarder, keyring, observer);
- ``steps``: the steps every mode shares, verify … body replay, and what both modes do when
  they claim (timing it, a known event with another body);
- ``forward``: forward mode, claim each item … forward once, record, answer;
- ``queue``: queue mode, enqueue and answer "accepted";
- ``pipeline``: ``Pipeline.deliver``, which runs a delivery through them.
"""

from sidecar.delivery.context import Delivery, Inbound, Trace
from sidecar.delivery.pipeline import Pipeline
from sidecar.delivery.ports import Forwarding, Keys, Observer
from sidecar.delivery.queue import order_key_of

__all__ = ["Delivery", "Forwarding", "Inbound", "Keys", "Observer", "Pipeline", "Trace",
           "order_key_of"]
