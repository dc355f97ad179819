"""A small, strict JSONPath subset for picking values out of a verified body:
``$.a.b``, ``$['a-b'].c``, ``$.items[0].id``, and (only where a caller allows it) the
wildcard ``[*]`` over the elements of an array: ``$[*]``, ``$.notificationItems[*].item``."""

from __future__ import annotations

import re
from dataclasses import dataclass

from sidecar.core.errors import ConfigError

_STEP = re.compile(
    r"""\.(?P<name>[A-Za-z0-9_-]+)
      | \[(?P<index>[0-9]+)\]
      | (?P<wildcard>\[\*\])
      | \[(?P<quote>['"])(?P<key>(?:(?!(?P=quote)).)*)(?P=quote)\]""",
    re.VERBOSE,
)

class Wildcard:
    """The ``[*]`` step: every element of an array."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "[*]"


WILDCARD = Wildcard()

Step = str | int | Wildcard


@dataclass(frozen=True, slots=True)
class JsonPath:
    text: str
    steps: tuple[Step, ...]

    def lookup(self, document: object) -> tuple[bool, object]:
        """``(True, value)`` if every step exists, else ``(False, None)``. Never raises.
        A wildcard step never matches here (batches expand it themselves)."""
        node = document
        for step in self.steps:
            if isinstance(step, Wildcard):
                return False, None
            if isinstance(step, int):
                if not isinstance(node, list) or step >= len(node):
                    return False, None
                node = node[step]
            else:
                if not isinstance(node, dict) or step not in node:
                    return False, None
                node = node[step]
        return True, node


def parse_json_path(text: object, path: str, *, wildcards: bool = False) -> JsonPath:
    """Parse a path; ``[*]`` is accepted only with ``wildcards=True``."""
    if not isinstance(text, str) or not text.startswith("$"):
        raise ConfigError(path, "must be a JSON path starting with '$', e.g. $.id")
    steps: list[Step] = []
    pos = 1
    while pos < len(text):
        match = _STEP.match(text, pos)
        if match is None:
            raise ConfigError(path, f"unsupported JSON path {text!r} at position {pos} "
                              "(use $.a.b, $['a-b'] or $.items[0])")
        if match.group("name") is not None:
            steps.append(match.group("name"))
        elif match.group("index") is not None:
            steps.append(int(match.group("index")))
        elif match.group("wildcard") is not None:
            if not wildcards:
                raise ConfigError(path, f"[*] selects several values; {text!r} must select one "
                                  "(wildcards are for batch items)")
            steps.append(WILDCARD)
        else:
            steps.append(match.group("key"))
        pos = match.end()
    if not steps:
        raise ConfigError(path, "must select a value below the root, e.g. $.id")
    return JsonPath(text, tuple(steps))
