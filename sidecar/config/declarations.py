"""How a configuration key is declared: once, on the model field it fills
(``sidecar.config.model``), with its kind (type, bounds, choices), its default as written in YAML
and a line of documentation::

    @block("The app the proxy forwards to.")
    class UpstreamConfig:
        connect_timeout: float = setting(Duration(), "Time to connect to the app.",
                                         yaml_default="2s")

``block`` makes the class a frozen dataclass (with slots) and records its keys, in the order
declared, as a ``Block``. The loader reads the YAML by it (``sidecar.config.reading``); the JSON
Schemas and the reference tables are generated from it (``python -m sidecar.config.schema
--write``). Keys are read in the order declared; every mistake is collected and reported in
the order the file has them (``sidecar.config.problems``).

The YAML key is the field's name unless ``key=`` names another. ``block`` is a
``dataclass_transform`` with ``setting`` and ``nested`` as field specifiers, so type checkers see
a plain frozen dataclass; ``setting`` returns the kind's value type (``Duration()`` reads a
``float``), so mypy checks the kind against the field's type. The default is ``yaml_default``,
not ``default=``: a field specifier's ``default`` would make the field optional in ``__init__``,
and the loader fills every field.

Besides ``setting``, a class body may hold:

- ``nested(Model)``: a key whose value is the block of another ``block`` class;
- ``inheriting(Model, "path", doc)``: the same block with every key optional, a key left out
  taking its value from the block read at ``path`` (a provider's ``upstream``);
- ``_name = group(doc)``: a mapping ``name`` without a model of its own, whose keys fill fields
  of this one, declared with ``key="name.key"`` (``log.level`` fills ``Config.log_level``);
- ``_name = fieldless(kind, doc)``: a key ``name`` read and checked whose value fills no field;
- a field without ``setting``: not a key, filled by the loader (``ProviderConfig.key``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import Field, dataclass, field, replace
from typing import Any, Final, Literal, TypeVar, cast, dataclass_transform, overload

from sidecar.config.kinds import JSON, Kind

T = TypeVar("T")
Model = TypeVar("Model", bound=type)


class _NoDefault:
    def __repr__(self) -> str:
        return "NO_DEFAULT"


NO_DEFAULT: Final = _NoDefault()


@dataclass(frozen=True, slots=True)
class Setting:
    """One key of a mapping.

    ``default``: as written in YAML (``NO_DEFAULT`` when it has none: the value is then
    ``None``, or the kind's error when ``required``). ``nullable``: an explicit ``null`` means
    "not set" (``None``); elsewhere it is a wrong value. ``fills``: the model field the value
    fills, ``None`` for none (read and checked, not kept)."""

    kind: Kind[Any] | Nested
    doc: str
    default: object = NO_DEFAULT
    required: bool = False
    nullable: bool = False
    fills: str | None = None

    @property
    def label(self) -> str:
        return self.kind.label

    @property
    def inline_block(self) -> Block | None:
        """A nested block without a model: its keys fill fields of this key's block's model."""
        kind = self.kind
        return kind.block if isinstance(kind, Nested) and kind.block.model is None else None


@dataclass(frozen=True, slots=True)
class Block:
    """A mapping with a fixed set of keys (unknown keys are errors). ``model``: the frozen
    dataclass its values fill; ``None`` for a ``group``, whose values fill fields of the
    enclosing block's model. ``nullable``: an empty ``key:`` means "all defaults". ``extra``:
    JSON Schema for rules between its keys. ``inherits``: the key path of a block of the same
    model whose values fill the keys left out here (``inheriting``)."""

    doc: str
    keys: Mapping[str, Setting]
    model: type | None = None
    nullable: bool = False
    extra: JSON = field(default_factory=dict)
    inherits: str | None = None  # a key left out takes its value from the block at this path

    @property
    def names(self) -> frozenset[str]:
        return frozenset(self.keys)

    def fill(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """The model fields ``values`` (by key name) fill. A group fills fields of this block's
        model: its value is then its own ``fill``."""
        out: dict[str, Any] = {}
        for name, key in self.keys.items():
            if key.inline_block is not None:
                out.update(values[name])
            elif key.fills is not None:
                out[key.fills] = values[name]
        return out


@dataclass(frozen=True, slots=True)
class Nested:
    """A key whose value is a block of keys."""

    block: Block
    label = "mapping"


# --- declaring ----------------------------------------------------------------------------------

_METADATA: Final = "sidecar.config.setting"


@dataclass(frozen=True, slots=True)
class _OnField:
    """What ``setting`` and ``nested`` leave in a field's metadata."""

    setting: Setting
    key: str | None


@overload
def setting(kind: Kind[T], doc: str, *, yaml_default: object = ..., required: bool = ...,
            nullable: Literal[False] = ..., key: str | None = ..., repr: bool = ...) -> T: ...


@overload
def setting(kind: Kind[T], doc: str, *, yaml_default: object = ..., required: bool = ...,
            nullable: Literal[True], key: str | None = ..., repr: bool = ...) -> T | None: ...


def setting(kind: Kind[Any], doc: str, *, yaml_default: object = NO_DEFAULT,
            required: bool = False, nullable: bool = False, key: str | None = None,
            repr: bool = True) -> Any:
    """The key a field is filled from: ``kind`` reads its value, ``doc`` is its line in the
    docs, ``yaml_default`` applies when it is absent (as written in YAML: ``"10s"``). ``key``:
    the YAML key when it is not the field's name. ``repr=False`` keeps a secret out of
    ``repr``."""
    if required and yaml_default is not NO_DEFAULT:
        raise TypeError("a required key has no default")
    return field(repr=repr, metadata={_METADATA: _OnField(
        Setting(kind, doc, yaml_default, required, nullable), key)})


def nested(model: type[T], *, required: bool = False) -> T:
    """The key a field is filled from, whose value is ``model``'s block of keys."""
    declared = block_of(model)
    on_field = _OnField(Setting(Nested(declared), declared.doc, required=required), None)
    return cast(T, field(metadata={_METADATA: on_field}))


def inheriting(model: type[T], inherits: str, doc: str) -> T:
    """The key a field is filled from, whose value is ``model``'s block of keys, each optional:
    the model is the block read at ``inherits`` (a key path read before this one) with the keys
    given here replacing its own."""
    declared = block_of(model)
    keys = {name: replace(key, default=NO_DEFAULT, required=False)
            for name, key in declared.keys.items()}
    inherited = replace(declared, doc=doc, keys=keys, nullable=True, extra={},
                        inherits=inherits)
    return cast(T, field(metadata={_METADATA: _OnField(Setting(Nested(inherited), doc), None)}))


def fieldless(kind: Kind[Any], doc: str, *, yaml_default: object = NO_DEFAULT) -> Setting:
    """A key read and checked whose value fills no field (the loader may use it otherwise);
    declared as ``_name = fieldless(…)`` for the key ``name``."""
    return Setting(kind, doc, yaml_default)


def group(doc: str, *, nullable: bool = False) -> Block:
    """A mapping ``name`` whose keys fill fields of the class it is declared in; declared as
    ``_name = group(…)``, its keys with ``setting(…, key="name.key")``."""
    return Block(doc, {}, nullable=nullable)


_BLOCKS: dict[type, Block] = {}


def block_of(model: type) -> Block:
    """The keys declared on ``model`` (a ``block`` class)."""
    try:
        return _BLOCKS[model]
    except KeyError:
        raise TypeError(f"{model.__name__} is not declared with @block") from None


@dataclass_transform(frozen_default=True,
                     field_specifiers=(setting, nested, inheriting, field))
def block(doc: str, *, nullable: bool = False,
             extra: JSON | None = None) -> Callable[[Model], Model]:
    """A frozen dataclass whose fields declare the keys of a mapping (``doc`` describes it;
    ``nullable``: an empty ``key:`` means "all defaults"; ``extra``: JSON Schema for rules
    between its keys)."""

    def declare(cls: Model) -> Model:
        declared = list(vars(cls).items())  # in the order written, before dataclass() runs
        model = cast(Model, dataclass(frozen=True, slots=True)(cls))
        _BLOCKS[model] = Block(doc, _keys(cls.__name__, declared), model, nullable,
                               extra or {})
        return model

    return declare


def _keys(where: str, declared: list[tuple[str, object]]) -> dict[str, Setting]:
    """The keys of a class body in the order written; a group's keys go where it is declared."""
    groups: dict[str, dict[str, Setting]] = {  # each group's keys, filled as they are met
        name.removeprefix("_"): {} for name, value in declared if isinstance(value, Block)}
    keys: dict[str, Setting] = {}
    for name, value in declared:
        if isinstance(value, Block):  # a group
            key = name.removeprefix("_")
            keys[key] = Setting(Nested(replace(value, keys=groups[key])), value.doc)
        elif isinstance(value, Setting):  # fieldless
            keys[name.removeprefix("_")] = value
        elif isinstance(value, Field) and isinstance(
                on_field := value.metadata.get(_METADATA), _OnField):
            prefix, dot, key = (on_field.key or name).rpartition(".")
            if dot and prefix not in groups:
                raise TypeError(f"{where}.{name}: key {on_field.key!r}, but no group {prefix!r}")
            (groups[prefix] if dot else keys)[key] = replace(on_field.setting, fills=name)
    return keys
