"""A small, strict JSONPath subset for picking one value out of a verified body:
``$.a.b``, ``$['a-b'].c``, ``$.items[0].id``."""

from __future__ import annotations

import re
from dataclasses import dataclass

from sidecar.core.errors import ConfigError

_STEP = re.compile(
    r"""\.(?P<name>[A-Za-z0-9_-]+)
      | \[(?P<index>\d+)\]
      | \[(?P<quote>['"])(?P<key>(?:(?!(?P=quote)).)*)(?P=quote)\]""",
    re.VERBOSE,
)

Step = str | int


@dataclass(frozen=True, slots=True)
class JsonPath:
    text: str
    steps: tuple[Step, ...]

    def lookup(self, document: object) -> tuple[bool, object]:
        """``(True, value)`` if every step exists, else ``(False, None)``. Never raises."""
        node = document
        for step in self.steps:
            if isinstance(step, int):
                if not isinstance(node, list) or step >= len(node):
                    return False, None
                node = node[step]
            else:
                if not isinstance(node, dict) or step not in node:
                    return False, None
                node = node[step]
        return True, node


def parse_json_path(text: object, path: str) -> JsonPath:
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
        else:
            steps.append(match.group("key"))
        pos = match.end()
    if not steps:
        raise ConfigError(path, "must select a value below the root, e.g. $.id")
    return JsonPath(text, tuple(steps))
