"""Filters: which verified events a provider's app does not want (``filter:``), decided per
event as a pure function of plain values — the event's type (``event_type:``) and its JSON.

    type rules (drop, then allow) ─ conditions (all must hold) ─ keep

A rule that cannot read what it looks at never drops: an event whose type cannot be read passes
the type rules, a body that is not JSON passes the conditions (``Why.NO_EVENT_TYPE``,
``Why.NOT_JSON``). A field a condition names that is missing from a JSON body is a fact the
condition is about: ``equals`` and ``in`` do not hold, ``exists: false`` does.

Globs are ``fnmatch``'s, case-sensitive: ``*`` (any text, dots included), ``?`` (one
character), ``[abc]`` / ``[!abc]`` (one of / none of). The config is read into these specs by
``sidecar.core.filter_config``.
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

from sidecar.core.headers import first_header
from sidecar.core.jsonpath import JsonPath

# -- where the event type is ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EventTypeSpec:
    """Where a provider's event type is: a header (the first of its names present) or a JSON
    path (relative to the item, in a batch)."""

    source: str  # as written, for logs and docs
    headers: tuple[str, ...] = ()
    json_path: JsonPath | None = None


class NotRead:
    """A body that is not JSON, as a filter sees it."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "NOT_JSON"


NOT_JSON = NotRead()


def read_event_type(spec: EventTypeSpec, document: object | NotRead,
                    headers: Mapping[str, str]) -> str | None:
    """The event's type as text (an integer as its decimal digits), or None: the header is
    absent, the body is not JSON, the path is missing, or its value is neither a string nor an
    integer."""
    if spec.headers:
        return first_header(headers, spec.headers)
    assert spec.json_path is not None
    if isinstance(document, NotRead):
        return None
    found, value = spec.json_path.lookup(document)
    if not found or isinstance(value, bool):
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, int):
        return str(value)
    return None


# -- the filter ---------------------------------------------------------------------------------


class Operator(enum.StrEnum):
    EQUALS = "equals"  # the field is present and equal to the value (JSON equality)
    IN = "in"  # the field is present and equal to one of the values
    EXISTS = "exists"  # true: the field is present (null included); false: it is absent


@dataclass(frozen=True, slots=True)
class Condition:
    """One ``when:`` item: a JSON path and one operator with its operand."""

    path: JsonPath
    operator: Operator
    values: tuple[object, ...]  # equals: one value; in: the values; exists: (True|False,)

    def __str__(self) -> str:
        operand = list(self.values) if self.operator is Operator.IN else self.values[0]
        return f"{self.path.text} {self.operator.value} {_json_text(operand)}"


@dataclass(frozen=True, slots=True)
class Glob:
    text: str
    pattern: re.Pattern[str]

    def matches(self, value: str) -> bool:
        return self.pattern.match(value) is not None


@dataclass(frozen=True, slots=True)
class FilterSpec:
    """A provider's ``filter:`` block: type globs (``types.allow``, ``types.drop``) and
    conditions (``when``). At least one of them is given."""

    allow: tuple[Glob, ...] = ()
    drop: tuple[Glob, ...] = ()
    when: tuple[Condition, ...] = ()

    @property
    def uses_types(self) -> bool:
        return bool(self.allow or self.drop)


class Why(enum.StrEnum):
    """Why an event is kept or dropped: the ``filter`` field of the delivery's log line."""

    PASSED = "passed"  # kept: every rule given let it through
    NO_EVENT_TYPE = "no_event_type"  # kept: its type could not be read; conditions held
    NOT_JSON = "not_json"  # kept: the body is not JSON, so conditions were not read
    TYPE_DROPPED = "type_dropped"  # dropped: its type matches a drop glob
    TYPE_NOT_ALLOWED = "type_not_allowed"  # dropped: allow globs given, none matches its type
    CONDITION_FAILED = "condition_failed"  # dropped: a condition does not hold


@dataclass(frozen=True, slots=True)
class Verdict:
    """Keep (forward) or drop (record as filtered, answer 200) one event, and why; ``rule``:
    the glob or condition that dropped it, as written."""

    keep: bool
    why: Why
    rule: str | None = None


def judge(spec: FilterSpec, event_type: str | None, document: object | NotRead) -> Verdict:
    """The verdict on one event: its type (None: unreadable) and its JSON document (for a
    batch item, the item; ``NOT_JSON`` for a body that is not JSON)."""
    unread: Why | None = None
    if spec.uses_types:
        if event_type is None:
            unread = Why.NO_EVENT_TYPE
        else:
            for glob in spec.drop:
                if glob.matches(event_type):
                    return Verdict(False, Why.TYPE_DROPPED, glob.text)
            if spec.allow and not any(glob.matches(event_type) for glob in spec.allow):
                return Verdict(False, Why.TYPE_NOT_ALLOWED, event_type)
    if spec.when:
        if isinstance(document, NotRead):
            unread = unread or Why.NOT_JSON
        else:
            for condition in spec.when:
                if not holds(condition, document):
                    return Verdict(False, Why.CONDITION_FAILED, str(condition))
    return Verdict(True, unread or Why.PASSED)


def holds(condition: Condition, document: object) -> bool:
    found, value = condition.path.lookup(document)
    match condition.operator:
        case Operator.EXISTS:
            return found is condition.values[0]
        case Operator.EQUALS | Operator.IN:
            return found and any(_same(value, wanted) for wanted in condition.values)


def _same(a: object, b: object) -> bool:
    """JSON equality: a boolean is not a number (Python's ``True == 1`` is not JSON's), an
    integer equals the same float (``1 == 1.0``), arrays and objects compare element-wise."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a is b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def _json_text(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))
