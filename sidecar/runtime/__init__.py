"""The running process and its wiring: the composition root (the only module naming concrete
adapters), the two listeners and their graceful stop, the worker group, and the same wiring for
tests (``testing``)."""
