"""The modules mypyc compiles when a compiled build is asked for (``WEBHOOK_SIDECAR_COMPILE``),
by group. setup.py reads this file; nothing at runtime does. Why compile at all, what it buys
and how to tell a compiled install: docs/design.md, "Compiled modules".

No package ``__init__`` is here: compiled into the shared library inside the package, a
package gets a wrong ``__path__`` and its submodules are not found (and they only re-export).
A module is here only if it is fully typed (``mypy --strict``), is on a delivery's path, and
its group was measured to pay (``bench.instructions``: at least 2 % fewer instructions per
known duplicate or per new event, on top of the other groups); one that mypyc cannot take as
it is stays out, with the reason beside the group. A group is measured on top of the others
as well as alone: a call between two compiled modules is a C call, one between a compiled and
a pure module goes through Python's, so a group compiled alone buys less than its share.
"""

from __future__ import annotations

# group -> modules. WEBHOOK_SIDECAR_COMPILE=1 builds every group; a comma-separated list of
# group names builds only those (to measure a group on its own).
GROUPS: dict[str, list[str]] = {
    # The pure rules every delivery runs through: the decision, the answers, the body, the
    # event ids, the headers and the signatures. Plain values and functions, no I/O.
    "core": [
        "sidecar.core.answers",
        "sidecar.core.batch",
        "sidecar.core.body",
        "sidecar.core.bodyreplay",
        "sidecar.core.breaker",
        "sidecar.core.decision",
        "sidecar.core.durations",
        # not sidecar.core.errors: the exception root, subclassed by uncompiled modules
        # (config, ops), which a compiled class does not allow; raising is not the hot path
        "sidecar.core.eventid.extract",
        "sidecar.core.eventid.spec",
        "sidecar.core.events",
        "sidecar.core.fields",
        "sidecar.core.filtering",
        "sidecar.core.forwarded",
        "sidecar.core.handshake",
        "sidecar.core.headers",
        "sidecar.core.hops",
        "sidecar.core.jsonpath",
        "sidecar.core.known",
        "sidecar.core.limits",
        "sidecar.core.notices",
        "sidecar.core.notifying",
        "sidecar.core.phases",
        "sidecar.core.ports.delivery",
        "sidecar.core.ports.operator",
        "sidecar.core.queueing",
        "sidecar.core.rates",
        "sidecar.core.signing.algorithms",
        # not sidecar.core.signing.asymmetric: its key types subclass bytes, which mypyc's
        # native classes cannot (and its time is the cryptography library's)
        "sidecar.core.signing.delivery",
        "sidecar.core.signing.encodings",
        "sidecar.core.signing.formats",
        "sidecar.core.signing.forward",
        # not sidecar.core.signing.keys: compiled, `raise ... from None` leaves
        # __suppress_context__ False, so a codec error quoting the secret would stay chained
        # to the ConfigError; it decodes secrets once, at start-up and reload, not per delivery
        "sidecar.core.signing.plugins.adyen_items",
        "sidecar.core.signing.plugins.base",
        "sidecar.core.signing.plugins.mailgun_token",
        "sidecar.core.signing.plugins.twilio_form",
        "sidecar.core.signing.scheme",
        "sidecar.core.signing.sign",
        "sidecar.core.signing.spec",
        "sidecar.core.signing.template",
        "sidecar.core.signing.timestamps",
        "sidecar.core.signing.verify",
        "sidecar.core.tracing",
        "sidecar.core.workergroup",
    ],
    # The pipeline: an inbound value in, an answer value out, each step a call on frozen values.
    "delivery": [
        "sidecar.delivery.context",
        "sidecar.delivery.filtering",
        "sidecar.delivery.forward",
        "sidecar.delivery.held",
        "sidecar.delivery.limits",
        "sidecar.delivery.pipeline",
        "sidecar.delivery.ports",
        "sidecar.delivery.queue",
        "sidecar.delivery.steps",
        "sidecar.delivery.unclaimed",
    ],
}

# Measured and left out (instructions per request, medians of 3, docs/design.md "Compiled
# modules"; "alone": only that group compiled, against none; "on top": added to the groups
# above, against them):
# - forwarding (the forwarder, holds, limits, queue workers, sidecar.store.coalesce): 0 %
#   alone, about -1 % on top on either kind, under the 2 % a group must buy.
# - obs (sidecar.obs.logs, sidecar.obs.metrics): under 0.5 % alone (most of a log line and a
#   count is spent inside structlog and prometheus-client, which stay Python).
# - the store's row decoding, PostgreSQL results, retries and connections: nothing alone.
#   sidecar.store.verbs's SQLStore is subclassed by every adapter, which
#   would all have to be compiled with it, and the SQLite adapter's async generator is not
#   something mypyc compiles.
# - sidecar.http.proxy: aiohttp's @web.middleware sets an attribute on the function, which a
#   compiled function refuses.


def modules(selection: str) -> list[str]:
    """The modules to compile for ``WEBHOOK_SIDECAR_COMPILE=selection``: ``1`` for all groups,
    else a comma-separated list of group names; empty or ``0`` for none (pure Python)."""
    selection = selection.strip()
    if selection in ("", "0"):
        return []
    names = list(GROUPS) if selection == "1" else [g.strip() for g in selection.split(",")]
    unknown = [name for name in names if name not in GROUPS]
    if unknown:
        raise SystemExit(f"WEBHOOK_SIDECAR_COMPILE: unknown group(s) {unknown}; "
                         f"give 1 or some of {sorted(GROUPS)}")
    return [module for name in names for module in GROUPS[name]]
