"""The config, once: the supervisor reads the config file once, and every worker, a replacement
too, starts from those bytes, handed over as an anonymous file it inherits (see the package's
docstring for why)."""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ConfigFile:
    """The config file as the supervisor read it, once: its text, the path it was read from
    (named in messages) and the folder its relative paths are relative to."""

    text: str
    path: str
    folder: str


def config_copy(text: str) -> int:
    """A file descriptor of an anonymous file holding ``text``, for the workers to inherit: in
    memory on Linux (memfd), an unlinked temporary file elsewhere; never a copy of the config,
    inline secrets and all, on disk under a name."""
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("webhook-sidecar-config", os.MFD_CLOEXEC)
    else:
        fd, path = tempfile.mkstemp(prefix="webhook-sidecar-config-")
        os.unlink(path)
    with open(fd, "wb", closefd=False) as copy:
        copy.write(text.encode())
    return fd


def read_copy(fd: int) -> str:
    """What ``config_copy`` wrote. Every worker shares the descriptor's offset, so it is read
    by position."""
    size = os.fstat(fd).st_size
    data = b""
    while len(data) < size:
        chunk = os.pread(fd, size - len(data), len(data))
        if not chunk:
            break
        data += chunk
    os.close(fd)
    return data.decode()
