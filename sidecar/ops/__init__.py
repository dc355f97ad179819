"""The operator's side: verbs on stored events (the events CLI and the admin API), and the
upkeep loop (retention, gauges, secret reloads)."""
