"""config.example.yaml's header says how to validate it: the shell lines of that comment, run
exactly as printed (in a shell, from the repository's root, with nothing else exported), pass
`check-config`."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.support import REPO

EXAMPLE = REPO / "config.example.yaml"


def validation_commands(text: str) -> list[str]:
    """The indented command lines of the header comment (`#   command`), in order."""
    header = text.split("\n\n", 1)[0]
    return [m.group(1) for m in re.finditer(r"^#   (\S.*)$", header, re.M)]


def test_the_header_s_commands_validate_the_example_as_printed(tmp_path: Path) -> None:
    commands = validation_commands(EXAMPLE.read_text(encoding="utf-8"))
    assert any("check-config --config config.example.yaml" in c for c in commands), commands
    # Only what a fresh shell has: the installed command on PATH, and a home.
    env = {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.defpath}",
           "HOME": str(tmp_path), "LANG": "C.UTF-8"}
    done = subprocess.run(["sh", "-ec", "\n".join(commands)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "stripe: POST /webhooks/stripe" in done.stdout


def test_the_comment_reader_finds_indented_lines_only() -> None:
    text = "# Validate:\n#   export A=1\n#   cmd --x\n# prose\n\nkey: 1\n#   not header\n"
    assert validation_commands(text) == ["export A=1", "cmd --x"]
