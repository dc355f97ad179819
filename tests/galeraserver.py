"""A throwaway three-node Galera cluster (Debian's ``galera-4`` with ``mariadbd``) for the test
suite: each node with its own data dir, SQL port, socket, group port, IST port and SST port,
all on free loopback ports, never :3306. The first node's data dir is made by
``mariadb-install-db`` and bootstraps the cluster (``--wsrep-new-cluster``); the others start
empty and join it, filled by a state transfer (rsync) from a synced node.

:meth:`Cluster.kill` SIGKILLs one node (the others keep quorum, two of three);
:meth:`Cluster.restart` (or :meth:`Cluster.heal`) brings it back on the same data and ports
(it rejoins by IST or SST).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncmy

from tests.mariadbserver import MariaDBServerError, _connect_args, probe
from tests.pgserver import free_port, run_sync

PROVIDER = Path("/usr/lib/galera/libgalera_smm.so")
START_TIMEOUT = 90.0  # seconds for a node to answer as a synced member of the cluster
# Failure detection tuned for a test on loopback: a SIGKILLed node is dropped from the view
# within about four seconds, so the other two go on writing; not sooner, so that a node starved
# of CPU on a loaded machine is not taken for dead.
_EVS = ("evs.keepalive_period=PT1S;evs.suspect_timeout=PT3S;"
        "evs.inactive_timeout=PT6S;evs.inactive_check_period=PT1S;"
        "evs.install_timeout=PT6S;gcache.size=32M")


def missing() -> str | None:
    """Why a cluster cannot start here, or None."""
    if not PROVIDER.exists():
        return f"{PROVIDER} is missing: install Debian's galera-4"
    for tool in ("mariadbd", "mariadb-install-db", "rsync", "wsrep_sst_rsync"):
        if not (shutil.which(tool) or shutil.which(tool, path="/usr/sbin:/usr/bin")):
            return f"{tool} not found: install Debian's mariadb-server, galera-4 and rsync"
    return None


def _bin(name: str) -> str:
    found = shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/bin")
    if found is None:
        raise MariaDBServerError(f"{name} not found: install Debian's mariadb-server")
    return found


@dataclass
class Node:
    index: int
    base: Path
    port: int = field(default_factory=free_port)
    group_port: int = field(default_factory=free_port)
    ist_port: int = field(default_factory=free_port)
    sst_port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def dsn(self) -> str:
        return f"mysql://root@127.0.0.1:{self.port}/"

    @property
    def data(self) -> Path:
        return self.base / "data"

    @property
    def log(self) -> Path:
        return self.base / "mariadbd.log"


class Cluster:
    """Three ``mariadbd`` with wsrep on, one Galera cluster. :meth:`start`, then
    :meth:`cleanup` (stops every node, removes the files)."""

    def __init__(self, size: int = 3) -> None:
        self._root = Path(tempfile.mkdtemp(prefix="sidecar-galera-"))
        self.nodes = [Node(i, self._root / f"node{i}") for i in range(size)]
        self.name = f"sidecar-test-{os.getpid()}"

    def dsn(self, index: int) -> str:
        return self.nodes[index].dsn

    def start(self) -> None:
        reason = missing()
        if reason:
            raise MariaDBServerError(reason)
        # The joiners start from an empty data dir that the donor's rsync fills. Run by root,
        # the nodes run as Debian's "mysql" user: an rsync daemon started by root would drop
        # to "nobody", who may not write the data dir.
        self._root.chmod(0o755)
        for node in self.nodes:
            node.base.mkdir(mode=0o755)
            (node.base / "tmp").mkdir()  # its own temporary files: no reliance on /tmp
            if node.index > 0:
                node.data.mkdir()
            _own(node.base)
        self._install(self.nodes[0])
        self._launch(self.nodes[0], bootstrap=True)
        self._wait_synced(self.nodes[0])
        # The joiners one after another: each takes a state transfer from a synced donor.
        for node in self.nodes[1:]:
            self._launch(node)
            self._wait_synced(node)

    def kill(self, index: int) -> None:
        """SIGKILL one node: no shutdown, no goodbye to the group."""
        node = self.nodes[index]
        assert node.proc is not None
        node.proc.kill()
        node.proc.wait(timeout=30)
        node.proc = None

    def restart(self, index: int) -> None:
        node = self.nodes[index]
        self._launch(node)
        self._wait_synced(node)

    def died(self) -> list[str]:
        """The nodes that exited without :meth:`kill`, each with its log's last lines."""
        return [f"node{n.index} exited with {n.proc.returncode}: "
                f"{n.log.read_text(errors='replace')[-4000:]}"
                for n in self.nodes if n.proc is not None and n.proc.poll() is not None]

    def cluster_size(self, index: int) -> int:
        return int(self._status(self.nodes[index], "wsrep_cluster_size") or 0)

    def heal(self) -> None:
        """Every node killed by :meth:`kill`, or that exited by itself, started again (it
        rejoins by IST or SST)."""
        for node in self.nodes:
            if node.data.exists() and (node.proc is None or node.proc.poll() is not None):
                self.restart(node.index)

    def cleanup(self) -> None:
        """Every node SIGKILLed (its data is thrown away: no shutdown to wait for), the files
        removed."""
        for node in self.nodes:
            if node.proc is not None:
                node.proc.kill()
                node.proc.wait(timeout=30)
                node.proc = None
        shutil.rmtree(self._root, ignore_errors=True)

    def _install(self, node: Node) -> None:
        install = [_bin("mariadb-install-db"), "--no-defaults", f"--datadir={node.data}",
                   f"--tmpdir={node.base / 'tmp'}",
                   "--auth-root-authentication-method=normal", "--skip-test-db",
                   *_user()]
        done = subprocess.run(install, capture_output=True, text=True, timeout=120, check=False)
        if done.returncode != 0:
            raise MariaDBServerError(f"mariadb-install-db failed: {done.stderr[-2000:]}")

    def _launch(self, node: Node, *, bootstrap: bool = False) -> None:
        members = ",".join(f"127.0.0.1:{n.group_port}" for n in self.nodes)
        options = (f"gmcast.listen_addr=tcp://127.0.0.1:{node.group_port};"
                   f"ist.recv_addr=127.0.0.1:{node.ist_port};{_EVS}")
        args = [
            _bin("mariadbd"), "--no-defaults", f"--datadir={node.data}",
            f"--tmpdir={node.base / 'tmp'}",
            "--bind-address=127.0.0.1", f"--port={node.port}",
            f"--socket={node.base / 'mariadbd.sock'}", f"--pid-file={node.base / 'pid'}",
            "--skip-name-resolve", "--innodb-buffer-pool-size=48M",
            "--innodb-log-file-size=16M", "--max-connections=300",
            # Galera's rules: row-based binary log format, interleaved auto-increment locks.
            "--binlog-format=ROW", "--innodb-autoinc-lock-mode=2",
            "--default-storage-engine=InnoDB",
            # Durability comes from the other nodes (a commit is certified cluster-wide first).
            "--innodb-flush-log-at-trx-commit=0",
            "--wsrep-on=ON", f"--wsrep-provider={PROVIDER}",
            f"--wsrep-cluster-name={self.name}",
            f"--wsrep-cluster-address=gcomm://{members}",
            f"--wsrep-provider-options={options}",
            f"--wsrep-node-name=node{node.index}",
            f"--wsrep-node-address=127.0.0.1:{node.group_port}",
            f"--wsrep-node-incoming-address=127.0.0.1:{node.port}",
            f"--wsrep-sst-receive-address=127.0.0.1:{node.sst_port}",
            "--wsrep-sst-method=rsync", "--wsrep-slave-threads=2",
            *(["--wsrep-new-cluster"] if bootstrap else []), *_user(),
        ]
        with open(node.log, "ab") as log:
            node.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)

    def _wait_synced(self, node: Node) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        reason: str | None = "not started"
        while time.monotonic() < deadline:
            assert node.proc is not None
            if node.proc.poll() is not None:
                reason = f"exited with {node.proc.returncode}"
                break
            reason = run_sync(probe(node.dsn))
            if reason is None:
                state = self._status(node, "wsrep_local_state_comment")
                if state == "Synced":
                    return
                reason = f"state {state}"
            time.sleep(0.2)  # polling the node's readiness, bounded by START_TIMEOUT
        tail = node.log.read_text(errors="replace")[-3000:]
        raise MariaDBServerError(f"galera node{node.index} not synced ({reason}): {tail}")

    def _status(self, node: Node, name: str) -> str | None:
        return run_sync(_status(node.dsn, name))


async def query(dsn: str, sql: str) -> list[tuple[Any, ...]]:
    """``sql``'s rows on the node and database of ``dsn``, after every commit the cluster
    ordered before it (causal read)."""
    conn = await asyncmy.connect(db=dsn.rsplit("/", 1)[1], **_connect_args(dsn))
    try:
        async with conn.cursor() as cur:
            await cur.execute("SET SESSION wsrep_sync_wait = 1")
            await cur.execute(sql)
            return list(await cur.fetchall())
    finally:
        conn.close()


async def certification_failures(dsn: str) -> int:
    """The node's transactions rolled back by Galera: failed certification, or aborted by
    another node's write applied there."""
    found = await query(dsn, "SHOW GLOBAL STATUS WHERE Variable_name IN"
                             " ('wsrep_local_cert_failures', 'wsrep_local_bf_aborts')")
    return sum(int(value) for _, value in found)


async def _status(dsn: str, name: str) -> str | None:
    try:
        conn = await asyncmy.connect(**_connect_args(dsn))
    except (OSError, asyncmy.errors.Error):
        return None
    try:
        async with conn.cursor() as cur:
            await cur.execute("SHOW STATUS LIKE %s", (name,))
            row = await cur.fetchone()
    finally:
        conn.close()
    return str(row[1]) if row else None


def _user() -> list[str]:
    return ["--user=mysql"] if os.geteuid() == 0 else []


def _own(path: Path) -> None:
    """Everything under ``path`` owned by the user the nodes run as (when started by root)."""
    if os.geteuid() != 0:
        return
    import pwd

    user = pwd.getpwnam("mysql")
    for top, dirs, files in os.walk(path):
        for name in [top, *(os.path.join(top, n) for n in dirs + files)]:
            os.chown(name, user.pw_uid, user.pw_gid)


__all__ = ["Cluster", "Node", "certification_failures", "missing", "query"]
