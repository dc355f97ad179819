"""``workers: N`` > 1: ``webhook-sidecar run`` becomes a small supervisor of N worker processes.

Each worker is ``python -m sidecar.cli.worker_main SEAT``: the whole proxy (its own event loop,
store pool, app client, keyring and secret reloads) on a socket the supervisor bound for it.
What the supervisor does, and why:

- **The config, once.** The supervisor reads the config file once, and every worker, a
  replacement too, starts from those bytes (an anonymous in-memory file, inherited), whatever
  the file says by then: Kubernetes updates a mounted ConfigMap in place, and a group must not
  serve two configurations, nor stop because the file broke meanwhile. A changed file takes
  effect at the next start of the group. Secret files are read by each worker, and re-read
  while it runs (rotation), as in a single process.
- **Sockets.** It binds ``listen`` N times on one port with ``SO_REUSEPORT`` — the first socket
  picks the port when it is 0, the others bind the same one — and hands one set to each worker (its
  *seat*): a socket for every address ``listen`` resolves to, as a single process binds
  (``localhost``: ``127.0.0.1`` and ``::1``). A socket starts listening when its worker opens its
  listener (accept queue ``SOMAXCONN``), so no connection waits on a seat whose worker never
  listened: the kernel spreads new connections over the listening sockets by a hash of the peer's
  address and port, evenly, so N workers take N shares of a pool of kept-alive connections too (on
  one shared socket the worker that wakes first accepts every connection queued). Binding here
  means a port conflict is reported once, before any worker starts, and port 0 works. It keeps its
  own copy of each socket while the group runs, so a worker that is replaced leaves the connections
  queued on its socket for its successor, and closes them all when the group stops.
  ``admin_listen`` is bound once and goes to worker 0 only.
- **Once for the group.** Worker 0 serves the admin listener (``/healthz``, ``/readyz``,
  ``/metrics``, ``/admin``) and runs the store upkeep (retention sweeps, the stuck-row gauge).
- **Metrics.** The workers write their metrics to files in a private directory the supervisor
  creates and removes (prometheus_client's multiprocess mode, ``$PROMETHEUS_MULTIPROC_DIR`` in
  the workers' environment); worker 0's ``/metrics`` renders the sum over all workers. A
  worker's gauges summed over live processes (forwards in flight) go with it when it exits, a
  worker killed and replaced too; its counters stay in the sums.
- **The channel.** Each worker has a socket pair to the supervisor
  (``sidecar.core.workergroup``): it says ``ready`` once it listens, and sends a heartbeat every
  fifth of ``worker_timeout`` from its event loop. The ``listening`` line is logged here, once,
  with the real addresses, when all N are ready. Worker 0 hears from the supervisor at the same
  pace how the group is, for its ``/healthz`` and ``/metrics``.
- **A worker falls silent** (its event loop blocked by a synchronous call or a deadlock, its
  process stopped or starved): past ``worker_timeout`` since its last heartbeat it is logged
  (``worker_unresponsive``), counted (``webhook_workers_replaced_total``), killed (SIGKILL: a
  blocked loop cannot run a graceful stop) and replaced by a new worker in its seat, on the same
  socket: the connections that queued for it meanwhile are accepted by its successor
  (``worker_replaced``). Until then the seat is *down* and worker 0's ``/healthz`` answers 503.
  The rest of the group serves on throughout, which is why a silent worker is replaced rather
  than the group stopped (as gunicorn's arbiter does with its ``timeout``): stopping would
  refuse every connection until the orchestrator restarts the pod, and a provider that does not
  retry (GitHub) would lose far more deliveries than the silent worker's share. A replacement
  is not allowed to hide a loop: a fourth silence within ten minutes stops the group with exit
  1, as a crash does.
- **A worker cannot start** — the OS refuses to start its process (no more processes, no more
  files, the interpreter gone), or it exits before it listens (the store unavailable, say), or
  it has not said ready within ten ``worker_timeout``s (``core.workergroup.start_deadline``): at
  the group's start, the group stops (exit 1, or the worker's own status), as a single process
  that cannot start does. Later, while another worker serves, its seat becomes *vacant*
  (``worker_start_failed``, ``action: retry``): its socket is closed, so the kernel gives its
  share of connections to the other workers (during a store outage they answer 503, the
  documented outage answer, rather than leaving connections to hang), and the seat is tried
  again — a new socket, a new worker — after a backoff doubling from 1 s to twice
  ``worker_timeout``, for as long as it takes. A vacant seat is no reason for /healthz to fail
  (a restarted pod could not start either; it lists the seat); when no worker serves any more,
  the group stops (exit 1).
- **Stop.** SIGTERM or SIGINT (Ctrl-C reaches every process of the group; the workers ignore
  it): every worker gets SIGTERM and runs the single process's graceful stop
  (``sidecar.runtime.serve``); the group has exited ``shutdown_timeout`` + 2 s after the signal at
  most: a worker still running just before that is killed. Exit status 0.
- **A worker exits unexpectedly** after it listened (a crash, the OOM killer, SIGKILL from
  elsewhere): it is logged (``worker_exited``), the other workers are stopped gracefully as on
  SIGTERM, and the supervisor exits 1, so that Kubernetes (or systemd) restarts the whole pod
  and counts the restart where it is seen and alerted on, rather than a supervisor hiding a
  crash loop. A deployment runs several replicas; an event the lost worker had in flight is
  retried by its provider and taken over after its lease, as after any crash.
- **The supervisor is gone** (SIGKILL, the OOM killer): on Linux each worker is killed with it
  (``PR_SET_PDEATHSIG``), a stopped or wedged one too, so no orphan keeps a socket on the port;
  as when the supervisor is PID 1 of a container, whose end takes every process of the
  container with it. Elsewhere a worker reads end of file on its channel and stops as on
  SIGTERM. **The supervisor is silent** (stopped): worker 0's ``/healthz`` answers 503 past
  ``worker_timeout``, since no one would replace a silent worker.

Worker log lines carry ``worker`` (the index); the supervisor's do not.

By concern:

- ``seats``: the sockets bound for the seats, and the worker in each: ``Seat`` owns a seat's
  transitions (filled, served, lost, vacant, bound again) and checks its invariants;
- ``group``: the group's state, spawning a worker in a seat, and listening to its channel;
- ``supervisor``: :func:`supervise`, and its loop over the group's messages (ready, silent,
  late, exited, a retry, a signal): replacements, vacant seats and their retries;
- ``stopping``: the graceful stop of every worker within its bound;
- ``config_copy``: the config read once, handed to every worker as an inherited file;
- ``worker``: a worker process's start (:func:`run_worker`), before it serves.
"""

from sidecar.runtime.workers.config_copy import ConfigFile
from sidecar.runtime.workers.supervisor import supervise
from sidecar.runtime.workers.worker import run_worker

__all__ = ["ConfigFile", "run_worker", "supervise"]
