"""``python -m sidecar.cli.worker_main SEAT``: a worker process of a group (``workers`` > 1),
started by its supervisor only (``sidecar.runtime.workers``).

Ctrl-C in a terminal sends SIGINT to every process of the group, and the supervisor alone acts
on it: it stops each worker with SIGTERM. So a worker ignores SIGINT from its first line, before
its imports — Python would otherwise raise KeyboardInterrupt wherever the start-up is, and the
worker would fail instead of stopping. (An ignored SIGINT stays ignored: ``asyncio.run`` installs
no handler of its own then, and the worker's stop handles SIGTERM only.)
"""

import signal

signal.signal(signal.SIGINT, signal.SIG_IGN)

import sys  # noqa: E402 -- after SIGINT is ignored

from sidecar.cli import main  # noqa: E402

raise SystemExit(main(["run", "--worker", *sys.argv[1:]]))
