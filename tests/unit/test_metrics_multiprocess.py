"""/metrics of a worker group (``workers`` > 1): the sum over every worker's metric files, and the
supervisor's word on the group, read from those files once per scrape. prometheus_client's
multiprocess mode is chosen when it is imported, so each case runs in a Python of its own."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

RENDER = textwrap.dedent("""
    from prometheus_client import multiprocess

    from sidecar.core.workergroup import GroupHealth
    from sidecar.obs.metrics import Metrics

    reads = 0
    collect = multiprocess.MultiProcessCollector.collect

    def counted(self):
        global reads
        reads += 1
        return collect(self)

    multiprocess.MultiProcessCollector.collect = counted
    metrics = Metrics(multiprocess_dir=multiprocess.os.environ["PROMETHEUS_MULTIPROC_DIR"])
    metrics.events.labels("stripe", "new").inc(3)
    metrics.export_group(GroupHealth(5.0, heard_at=0.0, vacant=(2,), replaced=1))
    print(metrics.render().decode())
    print("reads", reads)
""")


def test_a_scrape_reads_the_groups_metric_files_once(tmp_path: Path) -> None:
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", RENDER], env=env, capture_output=True,
                          text=True, timeout=60, check=True)
    lines = done.stdout.splitlines()
    assert 'webhook_events_total{provider="stripe",result="new"} 3.0' in lines
    assert "webhook_workers_replaced_total 1.0" in lines
    assert "webhook_workers_vacant 1.0" in lines
    assert lines[-1] == "reads 1"
