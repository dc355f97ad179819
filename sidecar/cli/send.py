"""``webhook-sidecar send``: sign a payload as a provider would and deliver it to a URL — once,
N times one after another (redeliveries of one event), or N times at once — printing every
response. Used to try a deployment, and to watch the dedupe work: every copy carries the same
event id, so the app behind the proxy should see it once.

The scheme comes from a config file (``--config FILE --provider KEY``, the file defaulting to
``$WEBHOOK_SIDECAR_CONFIG`` like every subcommand's: signature block, event id and first secret
as the proxy would use them) or from a preset (``--preset NAME --secret
S``). Public-key schemes (Discord, SendGrid, Standard Webhooks ``v1a``) verify with a public
key, so signing needs the private key: pass it with ``--secret`` (Discord: hex 32-byte seed;
SendGrid: base64 DER PKCS#8; Standard Webhooks: ``whsk_`` + base64 seed).

The payload is a file (``--file``) or one of the preset's sample payloads (``--sample TYPE``,
shipped in ``sidecar/samples``; ``--list-samples`` names them); with neither, the preset's
first sample. A sample brings the headers the provider sends beside it (``X-GitHub-Event:
push``); a file gets the provider's test-event value (``X-GitHub-Event: ping``). Apps route on
that header; ``--header`` overrides either.

It prints the event id(s) the delivery carries (every copy carries the same; a batch carries
several). A non-2xx answer's line says why: the ``reason`` of the
proxy's JSON error, or the start of the app's answer. ``--quiet`` prints only the event ids, one
a line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from sidecar.cli import CONFIG_ENV, default_config
from sidecar.cli.samples import Sample, find_sample, sample_lines
from sidecar.cli.signing_scheme import (
    Scheme,
    event_ids,
    generated_headers,
    scheme_from_config,
    scheme_from_preset,
)
from sidecar.config.presets import preset_names
from sidecar.core.errors import ConfigError, EventIdError
from sidecar.core.headers import ATTEMPT_HEADER, REPLAY_HEADER, header_value
from sidecar.core.signing import (
    Delivery,
    sign_delivery,
)
from sidecar.runtime import loop as event_loop

if TYPE_CHECKING:
    import aiohttp


@dataclass(frozen=True, slots=True)
class Outcome:
    index: int
    status: int | None
    replay: str
    attempt: str
    latency_ms: float
    error: str = ""
    why: str = ""  # for a non-2xx answer: what its body says about it (``refusal``)

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300


def configure_parser(parser: argparse.ArgumentParser) -> None:
    source = parser.add_argument_group("scheme (one of)")
    source.add_argument("--config", "-c", help="YAML config file of the proxy (default, "
                        f"without --preset: ${CONFIG_ENV})")
    source.add_argument("--provider", help="provider key in --config")
    source.add_argument("--preset", help=f"preset name: {', '.join(preset_names())}")
    parser.add_argument("--secret", help="signing secret (with --preset; or, with --config, a "
                        "private key for public-key schemes)")
    parser.add_argument("--url", help="where to deliver (required to send), e.g. "
                        "http://127.0.0.1:8080/webhooks/stripe")
    parser.add_argument("--signed-url", help="with --preset, the public URL URL-signed schemes "
                        "sign (Square, HubSpot, Twilio); default: --url without its query")
    payload = parser.add_mutually_exclusive_group()
    payload.add_argument("--file", "-f", help="payload file, or - for stdin")
    payload.add_argument("--sample", metavar="TYPE", help="send the preset's sample payload "
                         "TYPE (default, without --file: its first sample)")
    payload.add_argument("--list-samples", nargs="?", const="", metavar="PRESET",
                         help="list the sample payloads of PRESET (default: the --preset or "
                         "--config provider's), then exit")
    parser.add_argument("--header", "-H", action="append", default=[], metavar="K=V",
                        help="extra request header (repeatable), e.g. webhook-id=msg_1 to "
                        "reuse an event id")
    parser.add_argument("--method", default="POST", help="HTTP method (default POST)")
    parser.add_argument("--count", "-n", type=int, default=1, help="deliveries (default 1)")
    parser.add_argument("--concurrent", action="store_true",
                        help="send all --count deliveries at once (default: one after another)")
    parser.add_argument("--timeout", type=float, default=30.0,
                        help="seconds to wait for each response (default 30)")
    parser.add_argument("--quiet", "-q", action="store_true",
                        help="print only the event id(s), one a line (for scripts); the exit "
                        "code says whether every response was 2xx")


def _headers(pairs: list[str]) -> dict[str, str]:
    headers: dict[str, str] = {}
    for pair in pairs:
        name, found, value = pair.partition("=")
        if not found or not name.strip():
            raise ConfigError("--header", f"{pair!r} is not NAME=VALUE")
        headers[name.strip()] = value
    return headers


async def _deliver(
    session: aiohttp.ClientSession, args: argparse.Namespace, scheme: Scheme, body: bytes,
    headers: dict[str, str], index: int,
) -> Outcome:
    import aiohttp

    query = urlsplit(args.url).query
    signed = sign_delivery(scheme.signature, scheme.key,
                           Delivery(body, headers, args.method.upper(), query), time.time())
    started = time.monotonic()
    try:
        async with session.request(args.method.upper(), args.url, data=signed.body,
                                   headers={**headers, **signed.headers}) as response:
            answer = await response.read()
            return Outcome(index, response.status, response.headers.get(REPLAY_HEADER, "-"),
                           response.headers.get(ATTEMPT_HEADER, "-"),
                           (time.monotonic() - started) * 1000,
                           why="" if 200 <= response.status < 300 else refusal(answer))
    except (aiohttp.ClientError, TimeoutError) as exc:
        return Outcome(index, None, "-", "-", (time.monotonic() - started) * 1000,
                       f"{type(exc).__name__}: {exc}".rstrip(": "))


# How much of an answer without a proxy reason (the app's own) a result line shows.
ANSWER_EXCERPT = 200


def refusal(body: bytes) -> str:
    """What a non-2xx answer says about itself: ``reason=R: message`` from the proxy's JSON
    error (``{"error": …, "reason": …}``), else ``answer=`` and the start of the body (the app's
    answer, relayed); control characters escaped. Empty for an empty body."""
    try:
        error = json.loads(body)
    except ValueError:
        error = None
    if isinstance(error, dict) and isinstance(error.get("reason"), str):
        message = error.get("error")
        text = f"reason={error['reason']}" + (f": {message}" if isinstance(message, str) else "")
    elif body:
        cut = body[:ANSWER_EXCERPT].decode("utf-8", errors="replace")
        text = f"answer={cut}" + ("…" if len(body) > ANSWER_EXCERPT else "")
    else:
        return ""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _line(outcome: Outcome, ids: list[str] | None) -> str:
    """One result line; ``ids`` None leaves out the event part (``--quiet`` printed them)."""
    status = str(outcome.status) if outcome.status is not None else f"error ({outcome.error})"
    parts = [f"#{outcome.index} status={status} replay={outcome.replay} "
             f"attempt={outcome.attempt} latency={outcome.latency_ms:.1f}ms"]
    if ids is not None:
        parts.append(f"event={','.join(ids) or '-'}")
    if outcome.why:
        parts.append(outcome.why)
    return " ".join(parts)


async def send(args: argparse.Namespace, scheme: Scheme, body: bytes,
               sample: Sample | None = None) -> list[Outcome]:
    headers = _headers(args.header)
    for name, value in (sample.headers if sample is not None else {}).items():
        if header_value(headers, name) is None:
            headers[name] = value
    if header_value(headers, "Content-Type") is None:
        form = "application/x-www-form-urlencoded"
        headers["Content-Type"] = form if scheme.form_body else "application/json"
    headers.update(generated_headers(scheme, headers, time.time()))
    quiet = args.quiet
    try:
        ids = event_ids(scheme, body, headers)
    except EventIdError as exc:
        ids = []
        print(f"webhook-sidecar: warning: the proxy will find no event id in this delivery "
              f"({exc}): it answers 400", file=sys.stderr)
    if quiet:
        for event_id in ids:
            print(event_id, flush=True)
    elif ids:
        label = "event id" if len(ids) == 1 else f"event ids ({len(ids)})"
        copies = f", in each of {args.count} copies" if args.count > 1 else ""
        print(f"{label}: {', '.join(ids)}{copies}", flush=True)

    def report(outcome: Outcome) -> None:
        if not quiet:
            print(_line(outcome, ids), flush=True)

    import aiohttp  # here: every command's parser is built from this module

    timeout = aiohttp.ClientTimeout(total=args.timeout)
    connector = aiohttp.TCPConnector(limit=max(args.count, 1))
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
        if args.concurrent:
            outcomes = await asyncio.gather(*(
                _deliver(session, args, scheme, body, headers, i)
                for i in range(1, args.count + 1)
            ))
            for outcome in outcomes:
                report(outcome)
            return list(outcomes)
        done = []
        for i in range(1, args.count + 1):
            outcome = await _deliver(session, args, scheme, body, headers, i)
            report(outcome)
            done.append(outcome)
        return done


def _read_body(name: str) -> bytes:
    if name == "-":
        return sys.stdin.buffer.read()
    try:
        with open(name, "rb") as handle:
            return handle.read()
    except OSError as exc:
        raise ConfigError("--file", f"cannot read {name}: {exc.strerror}") from exc


def _preset_named(args: argparse.Namespace) -> str:
    """The preset --list-samples names, else the --preset or --config provider's."""
    if args.list_samples:
        return str(args.list_samples)
    if args.preset:
        return str(args.preset)
    if args.config and args.provider:
        from sidecar.config.loader import load_config_file

        config = load_config_file(args.config)
        provider = next((p for p in config.providers if p.key == args.provider), None)
        if provider is not None and provider.preset:
            return provider.preset
    raise ConfigError("--list-samples", "name a preset: --list-samples PRESET")


def _payload(args: argparse.Namespace, scheme: Scheme) -> tuple[bytes, Sample | None]:
    if args.file is not None:
        return _read_body(args.file), None
    if scheme.preset is None:
        raise ConfigError("--file", "required: the provider uses no preset, so it has no "
                          "samples")
    sample = find_sample(scheme.preset, args.sample)
    return sample.body(), sample


def run(args: argparse.Namespace) -> int:
    """Exit 0 when every response was 2xx, 1 otherwise (2 for a usage/config error, raised as
    ``ConfigError`` to the CLI)."""
    if args.config is None and args.preset is None:
        # Like every subcommand; but only here, so that --preset still works where it is set.
        args.config = default_config()
    if args.list_samples is not None:
        for line in sample_lines(_preset_named(args)):
            print(line)
        return 0
    if (args.config is None) == (args.preset is None):
        raise ConfigError("", "give --config FILE --provider KEY, or --preset NAME --secret S")
    if not args.url:
        raise ConfigError("--url", "required: where to deliver")
    if args.count < 1:
        raise ConfigError("--count", "must be at least 1")
    scheme = scheme_from_config(args) if args.config else scheme_from_preset(args)
    body, sample = _payload(args, scheme)
    if sample is not None and not args.quiet:
        print(f"sample: {sample.preset} {sample.type} ({sample.source})", flush=True)
    try:
        outcomes = event_loop.run(send(args, scheme, body, sample))
    except ValueError as exc:  # the payload cannot be signed this way (e.g. not JSON)
        raise ConfigError("--file", str(exc)) from None
    ok = sum(outcome.ok for outcome in outcomes)
    errors = sum(outcome.status is None for outcome in outcomes)
    replays = sum(outcome.replay == "true" for outcome in outcomes)
    if args.quiet:
        for outcome in outcomes:
            if not outcome.ok:
                print(_line(outcome, None), file=sys.stderr)
        return 0 if ok == len(outcomes) else 1
    print(f"sent {len(outcomes)}: {ok} 2xx, {len(outcomes) - ok - errors} other, "
          f"{errors} errors, {replays} replays")
    return 0 if ok == len(outcomes) else 1
