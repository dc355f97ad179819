"""``webhook-sidecar completion bash|zsh|fish``: a shell completion script, generated from the
argparse parser itself (its subcommands, their options and the options' choices), so it cannot
drift from the command line. zsh loads the bash script through ``bashcompinit``.

Completed: subcommands at every level (``events list``), options, the values of options with
fixed choices (``--state``, ``--preset``) and file names after ``--config`` and ``--file``.
"""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from sidecar.config.presets import preset_names

SHELLS = ("bash", "zsh", "fish")
PROG = "webhook-sidecar"
# Options whose value is a path, and options whose value is one of a list argparse does not
# enforce (--preset checks its name itself, to suggest the nearest one).
FILE_OPTIONS = frozenset({"--config", "--file"})
VALUE_WORDS: dict[str, Callable[[], list[str]]] = {"--preset": preset_names,
                                                   "--list-samples": preset_names}


@dataclass(frozen=True, slots=True)
class Option:
    names: tuple[str, ...]
    help: str
    takes_value: bool
    words: tuple[str, ...]  # the values to offer; empty: none known
    files: bool


@dataclass(frozen=True, slots=True)
class Command:
    path: tuple[str, ...]  # () for the program itself, ("events", "list") for a subcommand
    help: str
    options: tuple[Option, ...]
    subcommands: tuple[str, ...]
    arguments: tuple[str, ...]  # the choices of its positional arguments (``completion bash``)


def _option(action: argparse.Action) -> Option:
    names = tuple(action.option_strings)
    words = tuple(str(choice) for choice in action.choices or ())
    for name in names:
        if name in VALUE_WORDS:
            words = tuple(VALUE_WORDS[name]())
    return Option(names, action.help or "", action.nargs != 0, words,
                  any(name in FILE_OPTIONS for name in names))


def commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = (),
             help_text: str = "") -> Iterator[Command]:
    """Every command of ``parser``, depth first, options hidden from ``--help`` left out."""
    options: list[Option] = []
    children: list[tuple[str, argparse.ArgumentParser, str]] = []
    arguments: list[str] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            children += [(name, sub, helps.get(name, ""))
                         for name, sub in action.choices.items()]
        elif action.help == argparse.SUPPRESS:
            continue
        elif action.option_strings:
            options.append(_option(action))
        else:
            arguments += [str(choice) for choice in action.choices or ()]
    yield Command(path, help_text, tuple(options), tuple(name for name, _, _ in children),
                  tuple(arguments))
    for name, sub, text in children:
        yield from commands(sub, (*path, name), text)


def script(shell: str, parser: argparse.ArgumentParser) -> str:
    """The completion script for ``shell`` (one of ``SHELLS``)."""
    tree = list(commands(parser))
    if shell == "bash":
        return _bash(tree)
    if shell == "zsh":
        return ("#compdef webhook-sidecar\n# Load: source <(webhook-sidecar completion zsh)\n"
                "autoload -U +X bashcompinit && bashcompinit\n" + _bash(tree, header=False))
    if shell == "fish":
        return _fish(tree)
    raise ValueError(f"unknown shell {shell!r}")


def _words(words: Iterable[str]) -> str:
    return shlex.quote(" ".join(words))


def _bash(tree: list[Command], *, header: bool = True) -> str:
    path_cases = []  # which word extends the command path where
    value_cases = []  # what to offer after an option that takes a value
    word_cases = []  # subcommands and options of each command
    for command in tree:
        key = " ".join(command.path)
        for sub in command.subcommands:
            path_cases.append(shlex.quote(f"{key}:{sub}"))
        offered = [*command.subcommands, *command.arguments]
        free = []  # options whose value cannot be guessed: offer nothing
        for option in command.options:
            offered += option.names
            if not option.takes_value:
                continue
            patterns = "|".join(shlex.quote(f"{key}:{name}") for name in option.names)
            if option.files:
                value_cases.append(f"        {patterns}) COMPREPLY=($(compgen -f -- \"$cur\")); "
                                   "return ;;")
            elif option.words:
                value_cases.append(f"        {patterns}) COMPREPLY=($(compgen -W "
                                   f"{_words(option.words)} -- \"$cur\")); return ;;")
            else:
                free.append(patterns)
        if free:
            value_cases.append(f"        {'|'.join(free)}) COMPREPLY=(); return ;;")
        word_cases.append(f"        {shlex.quote(key)}) words={_words(offered)} ;;")
    lines = [f"# {PROG} completion for bash; load: source <({PROG} completion bash)"] \
        if header else []
    lines += [
        "_webhook_sidecar() {",
        "    local cur=\"${COMP_WORDS[COMP_CWORD]}\" prev=\"\" path=\"\" words=\"\" i",
        "    (( COMP_CWORD > 0 )) && prev=\"${COMP_WORDS[COMP_CWORD-1]}\"",
        "    for (( i = 1; i < COMP_CWORD; i++ )); do",
        "        case \"$path:${COMP_WORDS[i]}\" in",
        f"            {'|'.join(path_cases)}) path=\"${{path:+$path }}${{COMP_WORDS[i]}}\" ;;",
        "        esac",
        "    done",
        "    case \"$path:$prev\" in",
        *value_cases,
        "    esac",
        "    case \"$path\" in",
        *word_cases,
        "    esac",
        "    COMPREPLY=($(compgen -W \"$words\" -- \"$cur\"))",
        "}",
        f"complete -F _webhook_sidecar {PROG}",
    ]
    return "\n".join(lines) + "\n"


def _fish_quote(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _fish(tree: list[Command]) -> str:
    lines = [f"# {PROG} completion for fish; load: {PROG} completion fish | source",
             f"complete -c {PROG} -f"]
    for command in tree:
        if command.path:  # in this command, and not yet in one of its subcommands
            seen = " && ".join(f"__fish_seen_subcommand_from {word}" for word in command.path)
        else:
            seen = "true"
        deeper = " ".join(sorted(command.subcommands))
        where = seen + (f" && not __fish_seen_subcommand_from {deeper}" if deeper else "")
        for child in tree:
            if child.path and child.path[:-1] == command.path:
                lines.append(f"complete -c {PROG} -n {_fish_quote(where)} -a {child.path[-1]} "
                             f"-d {_fish_quote(child.help)}")
        if command.arguments:
            lines.append(f"complete -c {PROG} -n {_fish_quote(where)} "
                         f"-a {_fish_quote(' '.join(command.arguments))}")
        for option in command.options:
            flags = " ".join(f"-l {name[2:]}" if name.startswith("--") else f"-s {name[1:]}"
                             for name in option.names)
            value = ""
            if option.takes_value:
                # -x: a value, and no file names unless the value is a path (-r -F)
                value = " -r -F" if option.files else " -x"
                if option.words:
                    value += f" -a {_fish_quote(' '.join(option.words))}"
            lines.append(f"complete -c {PROG} -n {_fish_quote(where)} {flags}{value} "
                         f"-d {_fish_quote(option.help.replace('%%', '%'))}")
    return "\n".join(lines) + "\n"
