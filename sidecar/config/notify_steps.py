"""The loader's steps for ``notify:``: each target read by its declarations (``notify.targets[]``),
its secret read like a provider's and decoded as a Standard Webhooks ``whsec_`` secret."""

from __future__ import annotations

from typing import Final

from sidecar.config.declarations import block_of
from sidecar.config.model import NotifyFormat, NotifyTarget, SecretRef
from sidecar.config.reading import Load, Unusable, Values, build, read_items
from sidecar.config.secret_sources import one_signing_secret
from sidecar.core.errors import ConfigError

TARGET: Final = block_of(NotifyTarget)
TARGET_RULE: Final = "notify.targets[]"  # the rule its keys' steps are filed under


def read_targets(raw: object, path: str, values: Values, load: Load
                 ) -> tuple[NotifyTarget, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ConfigError(path, "must be a list of targets, each a mapping with url (and "
                          "secret, format, events, headers)")
    targets: list[NotifyTarget] = []
    for where, read in read_items(TARGET, raw, path, TARGET_RULE, load):
        if (read["format"] is NotifyFormat.STANDARD and read["secret"] is None
                and f"{TARGET_RULE}.secret" not in load.unread):
            load.report(ConfigError(f"{where}.secret", "is required for format: standard (a "
                                    "whsec_ secret that signs each message); or set format: "
                                    "slack"))
            continue
        targets.append(build(TARGET, read))
    if len(targets) < len(raw):
        raise Unusable(path)
    return tuple(targets)


def target_secret(raw: object, path: str, values: Values, load: Load) -> SecretRef | None:
    """A standard target's ``whsec_`` secret (its absence is ``read_targets``' check); a Slack
    target's messages are not signed, so it takes none."""
    if values.known("format") is NotifyFormat.SLACK:
        raise ConfigError(path, "format: slack messages are not signed; remove the secret")
    return one_signing_secret(raw, path, load)
