"""The declaration engine: a YAML mapping read by its block's declarations (keys, kinds,
defaults: ``sidecar.config.declarations``), in the order declared. Every mistake is reported and
reading goes on; a value that is wrong is ``FAILED``, and whatever needs it is skipped
(``Unusable``), so one mistake is reported once. What a declaration cannot say is a *step*
(``sidecar.config.steps``), run right after the key it is filed under; the ``Load`` carries the
steps, the environment and what was read so far.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final

from sidecar.config.declarations import NO_DEFAULT, Block, Nested, Setting
from sidecar.config.interpolate import interpolate
from sidecar.config.problems import Problem, did_you_mean, problems_of, with_suggestion
from sidecar.core.errors import ConfigError


class Failed:
    """A value that could not be read (its problem is reported already)."""

    def __repr__(self) -> str:
        return "FAILED"


FAILED: Final = Failed()


class Unusable(Exception):
    """A value cannot be read: its problems are reported already, or it needs a value that
    could not be read. Nothing more is reported for it (no cascade of noise)."""


class Values(dict[str, Any]):
    """A block's values so far by key name; reading one that failed raises ``Unusable``, so a
    step that needs it is skipped. (``get`` returns ``FAILED`` as it is.)"""

    def __getitem__(self, name: str) -> Any:
        value = super().__getitem__(name)
        if value is FAILED:
            raise Unusable(name)
        return value

    @property
    def complete(self) -> bool:
        return not any(value is FAILED for value in self.values())

    def known(self, name: str) -> Any:
        """The value of ``name``; ``None`` if it could not be read (a check comparing with it
        is then skipped)."""
        value = self.get(name)
        return None if value is FAILED else value


@dataclass
class Load:
    """What the steps read besides the value: the environment, the config file's folder, the
    keys left unread (``Secrets``) and every value read so far by key path; the steps by key
    path and the keys whose step interpolates them itself; what the load found: warnings and
    problems."""

    env: Mapping[str, str]
    base: Path
    unread: Mapping[str, object] = field(default_factory=dict)
    steps: Mapping[str, Step] = field(default_factory=dict)
    own_interpolation: frozenset[str] = frozenset()
    warnings: list[str] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    read: dict[str, Any] = field(default_factory=dict)

    def report(self, error: ConfigError) -> None:
        self.problems.extend(with_suggestion(p) for p in problems_of(error))

    def known(self, path: str) -> Any:
        """The value read for the key ``path`` (e.g. ``upstream.timeout``); ``None`` if it
        could not be read (a check comparing with it is then skipped)."""
        value = self.read.get(path)
        return None if value is FAILED else value


# A step: (the value as its kind read it, its key path, the block's values so far, the load)
# → the model's value, or a ConfigError (reported), or ``Unusable`` (skipped).
Step = Callable[[Any, str, Values, Load], Any]


def read_block(block: Block, raw: object, path: str, rule: str, load: Load,
               defaults: Mapping[str, object] | None = None) -> Values:
    """``raw``'s values by key name, in declaration order. An absent key takes ``defaults``
    (values known only while loading) or its declared default, else it is ``None`` (or its
    kind's error when required); a nullable key set to null is ``None``. Each value then goes
    through the step filed under ``rule``.key, if any. Nested blocks are read the same way.
    A key whose value is wrong is reported and ``FAILED``; the others are still read."""
    data = allowed_keys(raw, path, block.names, load)
    values = Values()
    for name, key in block.keys.items():
        where, key_rule = join(path, name), join(rule, name)
        try:
            if key_rule in load.unread:  # a secret this load does not read (``Secrets``)
                values[name] = load.unread[key_rule]
            else:
                values[name] = _value(key, data, name, where, key_rule, values, load,
                                      defaults)
        except ConfigError as exc:
            load.report(exc)
            values[name] = FAILED
        except Unusable:
            values[name] = FAILED
        load.read[where] = dict.get(values, name)
    return values


def _value(key: Setting, data: Mapping[str, Any], name: str, where: str, rule: str,
           values: Values, load: Load, defaults: Mapping[str, object] | None) -> Any:
    if isinstance(key.kind, Nested):
        nested = key.kind.block
        inner = read_block(nested, data.get(name), where, rule, load)
        if not inner.complete:
            raise Unusable(where)
        built = (build(nested, inner) if nested.inherits is None
                 else _inherited(nested, inner, where, load))
        step = load.steps.get(rule)
        return built if step is None else step(built, where, values, load)
    if name in data:
        raw_value = data[name]
        if raw_value is None and key.nullable:
            return None
    elif defaults is not None and name in defaults:
        raw_value = defaults[name]
    elif key.default is not NO_DEFAULT:
        raw_value = key.default
    elif not key.required:
        return None
    else:
        raw_value = None
    if raw_value is FAILED:
        raise Unusable(where)
    value = key.kind.parse(raw_value, where)
    step = load.steps.get(rule)
    return value if step is None else step(value, where, values, load)


def _inherited(block: Block, values: Values, where: str, load: Load) -> Any:
    """The model read at ``block.inherits`` with the keys ``values`` sets (not ``None``)
    replacing its own."""
    assert block.inherits is not None
    base = load.read.get(block.inherits)
    if base is None or base is FAILED:  # its problem is reported already
        raise Unusable(where)
    given = {key.fills: dict.get(values, name) for name, key in block.keys.items()
             if key.fills is not None and dict.get(values, name) is not None}
    return replace(base, **given)


def build(block: Block, values: Mapping[str, Any]) -> Any:
    """The block's model filled with ``values``; without a model, the fields it fills."""
    fields = block.fill(values)
    return fields if block.model is None else block.model(**fields)


def join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def sibling(path: str, name: str) -> str:
    return join(path.rpartition(".")[0], name)


def allowed_keys(raw: object, path: str, allowed: frozenset[str], load: Load) -> dict[str, Any]:
    """``raw``'s allowed keys; each other key is reported (and left out)."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(path, "must be a mapping")
    known = {}
    for key, value in raw.items():
        if key in allowed:
            known[key] = value
        else:
            load.report(ConfigError(join(path, str(key)), _unknown_key(key, allowed)))
    return known


def _unknown_key(key: object, allowed: frozenset[str]) -> str:
    if key in REPLACED_KEYS:
        return REPLACED_KEYS[str(key)]
    names = ", ".join(sorted(allowed))
    suggestion = did_you_mean(str(key), allowed)
    if suggestion is None:
        return f"unknown key (allowed: {names})"
    return f"unknown key; did you mean {suggestion}? (allowed: {names})"


# Keys a release removed, with what to write instead (a config written for it fails loudly).
REPLACED_KEYS: Final[Mapping[str, str]] = {
    "retryable_statuses": "replaced by final_statuses in 0.2: only a 2xx answer makes an "
                          "event done now, every other answer leaves it failed for the "
                          "provider's retry; list in final_statuses the non-2xx answers that "
                          "should be recorded and replayed instead (e.g. [400, 422])",
}


def interpolated(block: Block, raw: object, path: str, rule: str, load: Load) -> object:
    """``raw`` with ``${VAR}`` interpolated in the values of the block's keys, key by key (an
    unset variable is reported and its key ``FAILED``). Unknown keys are left as they are
    (they are reported, never read); so are keys this load leaves unread, and those whose step
    interpolates them (``OWN_INTERPOLATION``)."""
    if not isinstance(raw, dict):
        return raw
    out: dict[Any, Any] = {}
    for name, value in raw.items():
        key, where, key_rule = block.keys.get(name), join(path, str(name)), join(rule, str(name))
        if key is None or key_rule in load.own_interpolation or key_rule in load.unread:
            out[name] = value
        elif isinstance(key.kind, Nested):
            out[name] = interpolated(key.kind.block, value, where, key_rule, load)
        else:
            try:
                out[name] = interpolate(value, load.env, where)
            except ConfigError as exc:
                load.report(exc)
                out[name] = FAILED
    return out


def read_items(block: Block, items: list[Any], path: str, rule: str, load: Load
               ) -> Iterator[tuple[str, Values]]:
    """Each item of a list of ``block`` mappings (``notify.targets``, a provider's
    ``destinations``), interpolated and read at ``path[i]``: its path and values, for those read
    whole. A problem in an item is reported and the item left out."""
    for i, item in enumerate(items):
        where = f"{path}[{i}]"
        try:
            read = read_block(block, interpolated(block, item, where, rule, load), where, rule,
                              load)
        except ConfigError as exc:
            load.report(exc)
            continue
        except Unusable:
            continue
        if read.complete:
            yield where, read
