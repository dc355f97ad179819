"""``webhook-sidecar completion``: the scripts it prints, loaded by the real shells. bash is
asked to complete (COMP_WORDS/COMP_CWORD set, the function called, COMPREPLY read); fish
answers ``complete -C``; zsh loads the script through bashcompinit. zsh and fish are skipped
where they are not installed."""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sidecar.cli import _parser
from tests.support import REPO


def script(shell: str) -> str:
    done = subprocess.run([sys.executable, "-m", "sidecar", "completion", shell], cwd=REPO,
                          capture_output=True, text=True, timeout=60, check=True)
    return done.stdout


@pytest.fixture(scope="module")
def bash_script(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("completion") / "webhook-sidecar.bash"
    path.write_text(script("bash"))
    return path


def bash_complete(script_path: Path, *words: str) -> list[str]:
    """What bash offers for the last of ``words`` (the word being completed)."""
    array = " ".join(f"'{word}'" for word in ("webhook-sidecar", *words))
    program = (f"source '{script_path}'; COMP_WORDS=({array}); COMP_CWORD={len(words)}; "
               "_webhook_sidecar; printf '%s\\n' \"${COMPREPLY[@]}\"")
    done = subprocess.run(["bash", "--norc", "--noprofile", "-c", program],
                          capture_output=True, text=True, timeout=30, check=True)
    assert done.stderr == ""
    return [line for line in done.stdout.splitlines() if line]


def test_bash_completes_verbs_flags_and_their_values(bash_script: Path, tmp_path: Path) -> None:
    assert bash_complete(bash_script, "se") == ["send"]
    assert bash_complete(bash_script, "send", "--pre") == ["--preset"]
    assert bash_complete(bash_script, "send", "--preset", "gi") == ["github", "gitlab"]
    assert bash_complete(bash_script, "send", "--list-samples", "str") == ["stripe"]
    assert bash_complete(bash_script, "events", "re") == ["release", "redrive"]
    assert bash_complete(bash_script, "events", "list", "--state", "d") == ["done", "dead"]
    assert bash_complete(bash_script, "completion", "") == ["bash", "zsh", "fish",
                                                            "-h", "--help"]
    assert bash_complete(bash_script, "send", "--url", "") == []  # nothing to guess
    (tmp_path / "config.yaml").write_text("")
    assert bash_complete(bash_script, "run", "--config", f"{tmp_path}/con") == [
        f"{tmp_path}/config.yaml"]


def _tree(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> dict[
        tuple[str, ...], set[str]]:
    """Every command path and the words it takes (subcommands, visible options), read from
    the parser here rather than through the module under test."""
    words: set[str] = set()
    tree = {path: words}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                words.add(name)
                tree.update(_tree(sub, (*path, name)))
        elif action.help != argparse.SUPPRESS:
            words.update(action.option_strings or [str(c) for c in action.choices or ()])
    return tree


def test_every_subcommand_and_option_is_offered(bash_script: Path) -> None:
    help_text = subprocess.run([sys.executable, "-m", "sidecar", "--help"], cwd=REPO,
                               capture_output=True, text=True, timeout=60).stdout
    listed = re.search(r"\{([a-z,-]+)\}", help_text)
    assert listed is not None
    verbs = set(listed.group(1).split(","))
    assert {"run", "send", "events", "completion"} <= verbs
    assert verbs <= set(bash_complete(bash_script, ""))
    tree = _tree(_parser())
    assert ("events", "redrive") in tree
    for path, words in tree.items():
        assert set(bash_complete(bash_script, *path, "")) == words, path
    assert "--worker" not in bash_complete(bash_script, "run", "--")  # hidden from --help


@pytest.mark.skipif(shutil.which("fish") is None, reason="fish is not installed")
def test_fish_loads_and_completes(tmp_path: Path) -> None:
    path = tmp_path / "webhook-sidecar.fish"
    path.write_text(script("fish"))
    subprocess.run(["fish", "--no-execute", str(path)], check=True, timeout=30)

    def complete(line: str) -> list[str]:
        done = subprocess.run(["fish", "--no-config", "-c",
                               f"source '{path}'; complete -C '{line}'"],
                              capture_output=True, text=True, timeout=30, check=True)
        return [entry.split("\t")[0] for entry in done.stdout.splitlines()]

    assert complete("webhook-sidecar se") == ["send"]
    assert complete("webhook-sidecar send --pre") == ["--preset"]
    assert complete("webhook-sidecar send --preset gi") == ["github", "gitlab"]
    assert complete("webhook-sidecar events list --state d") == ["dead", "done"]
    assert set(complete("webhook-sidecar completion ")) == {"bash", "zsh", "fish"}


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed")
def test_zsh_script_parses_and_loads_through_bashcompinit(tmp_path: Path) -> None:
    path = tmp_path / "_webhook-sidecar"
    path.write_text(script("zsh"))
    subprocess.run(["zsh", "-n", str(path)], check=True, timeout=30)
    # zsh filters the candidates by prefix itself (compadd): here the whole list arrives.
    program = (f"autoload -U compinit && compinit -u -D; source '{path}'; setopt ksharrays; "
               "COMP_WORDS=(webhook-sidecar send --pre); COMP_CWORD=2; _webhook_sidecar; "
               "print -rl -- \"${COMPREPLY[@]}\"")
    done = subprocess.run(["zsh", "-f", "-c", program], capture_output=True, text=True,
                          timeout=30, check=True, cwd=tmp_path)
    assert "--preset" in done.stdout.split() and "--sample" in done.stdout.split()
