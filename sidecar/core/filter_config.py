"""Reading a provider's ``filter:`` and ``event_type:`` blocks into the specs
``sidecar.core.filtering`` judges by. Strict: every error names its key path."""

from __future__ import annotations

import fnmatch
import re

from sidecar.core.errors import ConfigError
from sidecar.core.fields import as_mapping, check_keys, get_header_names, get_str, join_path
from sidecar.core.filtering import Condition, EventTypeSpec, FilterSpec, Glob, Operator
from sidecar.core.jsonpath import parse_json_path


def parse_event_type_spec(data: object, path: str) -> EventTypeSpec:
    """``{header: Name}`` (or a list of names) or ``{json: "$.type"}``."""
    mapping = as_mapping(data, path)
    check_keys(mapping, path, optional=("header", "json"))
    if "header" in mapping and "json" in mapping:
        raise ConfigError(join_path(path, "json"), "give header or json, not both")
    if "header" in mapping:
        names = tuple(get_header_names(mapping, "header", path))
        return EventTypeSpec(names[0] if len(names) == 1 else f"[{', '.join(names)}]",
                             headers=names)
    if "json" in mapping:
        text = get_str(mapping, "json", path)
        return EventTypeSpec(text, json_path=parse_json_path(text, join_path(path, "json")))
    raise ConfigError(join_path(path, "header"), 'required (or json: "$.path")')


_CONDITION_KEYS = ("path", *(op.value for op in Operator))


def parse_filter_spec(data: object, path: str) -> FilterSpec:
    """``{types: {allow: [glob…], drop: [glob…]}, when: [{path: "$.x", equals: v} …]}``."""
    mapping = as_mapping(data, path)
    check_keys(mapping, path, optional=("types", "when"))
    allow: tuple[Glob, ...] = ()
    drop: tuple[Glob, ...] = ()
    if "types" in mapping:
        where = join_path(path, "types")
        types = as_mapping(mapping["types"], where)
        check_keys(types, where, optional=("allow", "drop"))
        allow = _globs(types.get("allow"), join_path(where, "allow"))
        drop = _globs(types.get("drop"), join_path(where, "drop"))
        if not allow and not drop:
            raise ConfigError(where, "give allow or drop (a list of globs such as invoice.*)")
    when: tuple[Condition, ...] = ()
    if "when" in mapping:
        where = join_path(path, "when")
        raw = mapping["when"]
        if not isinstance(raw, list) or not raw:
            raise ConfigError(where, 'must be a non-empty list of conditions, e.g. '
                              '[{path: "$.livemode", equals: true}]')
        when = tuple(_condition(item, f"{where}[{i}]") for i, item in enumerate(raw))
    if not allow and not drop and not when:
        raise ConfigError(path, "an empty filter drops nothing: give types (allow, drop) or "
                          "when, or remove filter")
    return FilterSpec(allow, drop, when)


def _globs(raw: object, path: str) -> tuple[Glob, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list) or not raw:
        raise ConfigError(path, "must be a non-empty list of globs, e.g. [invoice.*]")
    globs = []
    for i, text in enumerate(raw):
        where = f"{path}[{i}]"
        if not isinstance(text, str) or not text.strip():
            raise ConfigError(where, "must be a non-empty glob, e.g. invoice.*")
        if text != text.strip():
            raise ConfigError(where, f"{text!r} has spaces around it; event types have none")
        _check_brackets(text, where)
        globs.append(Glob(text, re.compile(fnmatch.translate(text))))
    return tuple(globs)


def _check_brackets(text: str, path: str) -> None:
    """``fnmatch`` reads an unclosed ``[`` as a literal; here it is a mistake."""
    pos = 0
    while (start := text.find("[", pos)) != -1:
        end = start + 1
        if end < len(text) and text[end] == "!":
            end += 1
        if end < len(text) and text[end] == "]":
            end += 1
        close = text.find("]", end)
        if close == -1:
            raise ConfigError(path, f"{text!r}: '[' at position {start} is not closed "
                              "(a set is [abc] or [!abc])")
        pos = close + 1


def _condition(raw: object, path: str) -> Condition:
    mapping = as_mapping(raw, path)
    check_keys(mapping, path, optional=_CONDITION_KEYS,
               context=" (a condition is path plus one of equals, in, exists)")
    if "path" not in mapping:
        raise ConfigError(join_path(path, "path"), 'required, a JSON path such as "$.type"')
    json_path = parse_json_path(get_str(mapping, "path", path), join_path(path, "path"))
    given = [op for op in Operator if op.value in mapping]
    if not given:
        raise ConfigError(path, "give one operator: equals, in or exists")
    if len(given) > 1:
        raise ConfigError(join_path(path, given[1].value),
                          "give one operator per condition (add another condition instead)")
    operator = given[0]
    operand = mapping[operator.value]
    where = join_path(path, operator.value)
    match operator:
        case Operator.EXISTS:
            if not isinstance(operand, bool):
                raise ConfigError(where, "must be true or false")
            return Condition(json_path, operator, (operand,))
        case Operator.IN:
            if not isinstance(operand, list) or not operand:
                raise ConfigError(where, "must be a non-empty list of values")
            for i, value in enumerate(operand):
                _check_value(value, f"{where}[{i}]")
            return Condition(json_path, operator, tuple(operand))
        case Operator.EQUALS:
            _check_value(operand, where)
            return Condition(json_path, operator, (operand,))


def _check_value(value: object, path: str) -> None:
    """A JSON scalar: what YAML reads as a date or anything else is refused, so a value never
    silently fails to equal the body's text."""
    if value is None or isinstance(value, bool | int | float | str):
        return
    raise ConfigError(path, "must be a string, number, true, false or null (quote a date or "
                      "time to compare it as text)")
