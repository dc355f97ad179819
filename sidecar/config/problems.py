"""Every mistake in a configuration at once: each a ``Problem`` (key path, message and, when read
from a file, the line and column of the key), all carried by one ``ConfigProblems`` — a
``ConfigError`` naming the first, for callers that read one.

Also here: "did you mean …?" for a misspelt name, and reading YAML text with the position of
every key, so a problem can name its line and a syntax error its line and column.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import yaml

from sidecar.core.errors import ConfigError

Mark = tuple[int, int]  # line, column; both from 1


@dataclass(frozen=True, slots=True)
class Problem:
    """One mistake: the key path it is about (``""`` for the file as a whole) and what is wrong.
    ``mark``: where the key is written (or, for a missing key, the nearest enclosing one)."""

    path: str
    message: str
    mark: Mark | None = None

    def render(self, source: str = "") -> str:
        """``config.yaml:12:5: providers.stripe.lease: must exceed …``."""
        where = f"{self.path}: " if self.path else ""
        return f"{_location(source, self.mark)}{where}{self.message}"


def _location(source: str, mark: Mark | None) -> str:
    if mark is None:
        return f"{source}: " if source else ""
    line, column = mark
    return f"{source}:{line}:{column}: " if source else f"line {line}, column {column}: "


class ConfigProblems(ConfigError):
    """All the problems found in one configuration, in the order they are written in the file.
    ``path`` and ``message`` are the first one's; ``str()`` lists them all."""

    def __init__(self, problems: Sequence[Problem], source: str = "") -> None:
        if not problems:
            raise ValueError("ConfigProblems needs at least one problem")
        self.problems = tuple(problems)
        self.source = source
        super().__init__(problems[0].path, problems[0].message)

    @property
    def lines(self) -> tuple[str, ...]:
        """One line per problem, each with the file, line and column when known."""
        return tuple(problem.render(self.source) for problem in self.problems)

    @property
    def summary(self) -> str:
        """``3 problems in config.yaml``."""
        count = len(self.problems)
        where = f" in {self.source}" if self.source else ""
        return f"{count} problem{'' if count == 1 else 's'}{where}"

    def __str__(self) -> str:
        if len(self.problems) == 1:
            return self.lines[0]
        return f"{self.summary}:\n" + "\n".join(f"  {line}" for line in self.lines)

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.problems, self.source)


def problems_of(error: ConfigError) -> tuple[Problem, ...]:
    """The problems an error carries: its own list, or the one it names."""
    if isinstance(error, ConfigProblems):
        return error.problems
    return (Problem(error.path, error.message),)


# --- did you mean … -------------------------------------------------------------------------

def did_you_mean(word: str, choices: Iterable[str]) -> str | None:
    """The allowed name closest to ``word``, if one is close enough to be a typo of it."""
    matches = difflib.get_close_matches(word, sorted(choices), n=1, cutoff=0.6)
    if not matches and word != word.lower():
        matches = difflib.get_close_matches(word.lower(), sorted(choices), n=1, cutoff=0.6)
    return matches[0] if matches else None


# How the core parsers (``sidecar.core.fields.check_keys``) word an unknown key.
_CORE_UNKNOWN_KEY: Final = re.compile(r"^(unknown key[^;]*); allowed: (.+)$")


def with_suggestion(problem: Problem) -> Problem:
    """A core parser's "unknown key …; allowed: a, b" with "did you mean …?" added."""
    match = _CORE_UNKNOWN_KEY.match(problem.message)
    if match is None:
        return problem
    allowed = [name.strip() for name in match.group(2).split(",")]
    suggestion = did_you_mean(problem.path.rpartition(".")[2], allowed)
    if suggestion is None:
        return problem
    message = f"{match.group(1)}; did you mean {suggestion}? allowed: {match.group(2)}"
    return Problem(problem.path, message, problem.mark)


# --- YAML with the position of every key ----------------------------------------------------

@dataclass(frozen=True, slots=True)
class Document:
    """A YAML document's data (as ``yaml.safe_load`` reads it) and where each key path is
    written."""

    data: object
    marks: Mapping[str, Mark]


def read_yaml(text: str, source: str = "") -> Document:
    """``text`` read as ``yaml.safe_load`` does; a syntax error is a ``ConfigProblems`` naming
    the line and column (never quoting the line: it may hold a secret)."""
    loader = None
    try:
        loader = yaml.SafeLoader(text)
        node = loader.get_single_node()
        data = None if node is None else loader.construct_document(node)
    except yaml.MarkedYAMLError as exc:
        raise ConfigProblems([_yaml_problem(exc)], source) from None
    except yaml.reader.ReaderError as exc:  # a character YAML does not allow
        raise ConfigProblems([_reader_problem(exc, text)], source) from None
    except yaml.YAMLError as exc:  # none other is raised while reading; just in case
        raise ConfigProblems([Problem("", f"invalid YAML: {type(exc).__name__}")],
                             source) from None
    finally:
        if loader is not None:
            loader.dispose()
    marks: dict[str, Mark] = {}
    if node is not None:
        _walk_marks(node, "", marks, set())
    return Document(data, marks)


def _reader_problem(exc: Any, text: str) -> Problem:
    position = int(exc.position)
    line = text.count("\n", 0, position) + 1
    column = position - text.rfind("\n", 0, position)
    return Problem("", f"invalid YAML: unacceptable character #x{exc.character:04x}: special "
                       "characters are not allowed", (line, column))


def _yaml_problem(exc: Any) -> Problem:
    mark = exc.problem_mark or exc.context_mark
    message = exc.problem or exc.context or "not a YAML document"
    if exc.problem and exc.context:
        message += f" ({exc.context}"
        if exc.context_mark is not None and exc.context_mark is not mark:
            message += f" at line {exc.context_mark.line + 1}, column {exc.context_mark.column + 1}"
        message += ")"
    return Problem("", f"invalid YAML: {message}", _mark(mark) if mark is not None else None)


def _mark(mark: Any) -> Mark:
    return int(mark.line) + 1, int(mark.column) + 1


def _walk_marks(node: Any, path: str, marks: dict[str, Mark], seen: set[int]) -> None:
    """Each key (and list item) under ``node`` by key path, at its start. A node met again
    through an alias is not walked twice; a later key overrides an earlier one (as for a
    merge key ``<<``, whose keys come first)."""
    if id(node) in seen:
        return
    seen.add(id(node))
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            if isinstance(key, yaml.ScalarNode):
                where = f"{path}.{key.value}" if path else str(key.value)
                marks[where] = _mark(key.start_mark)
                _walk_marks(value, where, marks, seen)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            where = f"{path}[{i}]"
            marks[where] = _mark(item.start_mark)
            _walk_marks(item, where, marks, seen)


# --- in file order, with their lines --------------------------------------------------------

def located(problems: Iterable[Problem], data: object,
            marks: Mapping[str, Mark]) -> list[Problem]:
    """``problems`` in the order their keys are written in ``data`` (a problem about a key not
    written goes with the nearest enclosing one; ties keep the order found), each with the mark
    of its key, or of the nearest enclosing key written."""
    order = _order(data)

    def first(path: str, table: Mapping[str, Any]) -> Any:
        return next((table[p] for p in _enclosing(path) if p in table), None)

    placed = [(first(p.path, order) or 0, i, Problem(p.path, p.message, first(p.path, marks)))
              for i, p in enumerate(problems)]
    return [problem for _, _, problem in sorted(placed, key=lambda item: item[:2])]


def _enclosing(path: str) -> Iterator[str]:
    """``a.b[0].c``, then ``a.b[0]``, ``a.b``, ``a``."""
    while path:
        yield path
        cut = max(path.rfind("."), path.rfind("["))
        path = path[:cut] if cut > 0 else ""


def _order(data: object) -> dict[str, int]:
    """Every key path in ``data`` (mappings keep the file's order), numbered as met."""
    order: dict[str, int] = {}
    seen: set[int] = set()

    def walk(value: object, path: str) -> None:
        if id(value) in seen:
            return
        if isinstance(value, dict):
            items = [(f"{path}.{k}" if path else str(k), v) for k, v in value.items()]
        elif isinstance(value, list):
            items = [(f"{path}[{i}]", v) for i, v in enumerate(value)]
        else:
            return
        seen.add(id(value))
        for where, item in items:
            order.setdefault(where, len(order) + 1)
            walk(item, where)

    walk(data, "")
    return order
