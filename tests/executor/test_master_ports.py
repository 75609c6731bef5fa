"""The local executor's rendezvous ports (``[executor] ports``): every attempt's MASTER_PORT is
in the range and not one a live attempt was given; a range with none left refuses the launch
for now (the controller retries it). Real processes."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from exec_helpers import gang, wait_for

from stint.ports import PortRange
from stint.runtime.executor.base import LaunchError
from stint.runtime.executor.local import LocalExecutor

PRINT_PORT = "import os, time\nprint('port', os.environ['MASTER_PORT'], flush=True)\ntime.sleep(60)\n"


def _two_free_ports() -> PortRange:
    """Two adjacent ports free right now (as far as a probe can tell)."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            p = s.getsockname()[1]
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", p + 1))
            except OSError:
                continue
        return PortRange(p, p + 1)
    raise AssertionError("no two adjacent free ports")


def test_attempts_get_distinct_ports_of_the_range_and_a_full_range_refuses_for_now(tmp_path: Path) -> None:
    ports = _two_free_ports()
    ex = LocalExecutor(tmp_path / "state", nodes=1, gpus_per_node=3, term_grace_s=0.5, ports=ports)
    try:
        for i, job in enumerate(("a", "b")):
            ex.launch(gang(tmp_path, job, PRINT_PORT, slot0=i))
        logs = [tmp_path / "logs" / f"{j}.log" for j in ("a", "b")]
        wait_for(lambda: all(p.exists() and "port" in p.read_text() for p in logs), 30, "the ports")
        got = {int(p.read_text().split('port ')[-1].split()[0]) for p in logs}
        assert got == {ports.first, ports.last}  # (neither listens: the executor kept them apart)
        with pytest.raises(LaunchError, match=f"no free port in {ports}") as refused:
            ex.launch(gang(tmp_path, "c", PRINT_PORT, slot0=2))
        assert refused.value.transient
    finally:
        for job in ex.running():
            ex.kill(job)
        ex.close()
