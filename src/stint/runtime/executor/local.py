"""The local executor: every worker is a process on this machine, on a virtual node.

``LocalExecutor(state_dir, nodes=N, gpus_per_node=G)`` offers N nodes named ``node-0`` ..
``node-{N-1}`` (as ``model.Cluster.uniform`` names them) with G accelerator slots each; a worker's
slots reach it as ``CUDA_VISIBLE_DEVICES``, so the same code drives real GPUs. Each worker runs under
its own supervisor (``shim.py``), started in a new session (so its own process group) and detached
from the controller: the controller may be SIGKILLed and restarted, and a new ``LocalExecutor`` on
the same ``state_dir`` re-adopts every worker. Liveness is checked by pid *and* kernel start time,
so a recycled pid is never mistaken for a worker.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from stint.ports import PortRange
from stint.runtime.executor import cgroup, netns
from stint.runtime.executor.base import TERM_GRACE_S, LaunchError, NodeInfo, WorkerLaunch
from stint.runtime.executor.shim import open_log, proc_start_ticks, read_json, write_json_atomic
from stint.runtime.executor.supervised import (
    PENDING_TIMEOUT_S,
    SHIM_PATH,
    SupervisedExecutor,
    spec_path,
)

NETWORKS = ("host", "private")


class LocalExecutor(SupervisedExecutor):
    """Workers as local processes on ``nodes`` virtual nodes of ``gpus_per_node`` slots."""

    def __init__(
        self,
        state_dir: str | os.PathLike[str],
        nodes: int = 1,
        gpus_per_node: int = 1,
        python: str = sys.executable,
        term_grace_s: float = TERM_GRACE_S,
        network: str = "host",
        node_list: Sequence[NodeInfo] = (),
        ports: PortRange | None = None,
    ) -> None:
        """``network``: "host" (workers share this machine's network) or "private" (each
        attempt runs in a network namespace of its own with only a loopback interface, so its
        rendezvous is reachable by its own workers only; needs root and ``ip``).
        ``node_list``: the virtual nodes, named and typed (a cluster file's), instead of
        ``nodes`` x ``gpus_per_node``. ``ports``: the attempts' rendezvous ports (``MASTER_PORT``;
        None: any free port below the kernel's ephemeral range)."""
        if nodes < 1 or gpus_per_node < 1:
            raise ValueError(
                f"local executor needs nodes >= 1 and gpus_per_node >= 1 "
                f"(got nodes={nodes}, gpus_per_node={gpus_per_node})"
            )
        if network not in NETWORKS:
            raise ValueError(f"network must be one of {', '.join(NETWORKS)}, not {network!r}")
        if network == "private" and (why := netns.unavailable()) is not None:
            raise ValueError(f"network 'private' needs network namespaces: {why}")
        given = list(node_list) or [NodeInfo(f"node-{i}", gpus_per_node) for i in range(nodes)]
        super().__init__(state_dir, given, term_grace_s, ports)
        self.python = python
        self.network = network
        self._children: list[subprocess.Popen[bytes]] = []
        self._cgroups = cgroup.detect()
        self._sweep()

    def _spawn(self, w: WorkerLaunch, env: dict[str, str], attempt_dir: Path) -> None:
        Path(w.log_path).parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(str(spec_path(attempt_dir, w.rank)), self.spec(w, env))
        log = open_log(w.log_path, self.account(w))
        try:
            p = subprocess.Popen(
                [self.python, "-I", SHIM_PATH, *self.shim_args(w, attempt_dir)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.supervisor_env(w),
                start_new_session=True,  # own process group; survives the controller
                close_fds=True,
            )
        finally:
            os.close(log)
        self._children.append(p)
        # The supervisor writes the same record itself; writing it here too closes the window
        # in which a crash of the controller would leave a running rank without a pid file.
        write_json_atomic(
            str(attempt_dir / f"rank-{w.rank}.pid"),
            {"pid": p.pid, "start": proc_start_ticks(p.pid)},
        )

    def _netns(self, w: WorkerLaunch) -> str | None:
        if self.network != "private":
            return None
        return f"{self._netns_prefix()}{w.job_id}-{w.attempt}"

    def _netns_prefix(self) -> str:
        return f"stint-{self.sid}-"

    def _prepare(self, ws: list[WorkerLaunch]) -> None:
        super()._prepare(ws)
        name = self._netns(ws[0])
        if name is not None:
            try:
                netns.create(name)
            except OSError as exc:
                raise LaunchError(f"job {ws[0].job_id!r} attempt {ws[0].attempt}: cannot make "
                                  f"its network namespace: {exc}", transient=True) from None

    def _release(self, job_id: str, attempt: int) -> None:
        """Kill what is left in the attempt's cgroups (each supervisor removes its own; one that
        was killed could not) and delete its network namespace."""
        if self._cgroups.kind != "none":
            rec = read_json(str(self._dir(job_id, attempt) / "launch.json")) or {}
            for rank in range(len(rec.get("workers", []))):
                cg = cgroup.WorkerCgroup(self.cgroup_name(job_id, attempt, rank), self._cgroups)
                cg.kill_all()
                try:
                    cg.remove()
                except OSError:
                    pass  # still busy: the next executor's sweep retries
        if self.network == "private":
            netns.delete(f"{self._netns_prefix()}{job_id}-{attempt}")

    def _sweep(self) -> None:
        """Remove the empty cgroups and the namespaces of this state directory's attempts that
        are no longer active (a crash left them)."""
        live = {(job, str(attempt)) for job, attempt in self._active()}
        mine = f"{self.sid}-"

        def keep(name: str) -> bool:
            job_attempt, _, _rank = name.removeprefix(mine).rpartition("-")
            job, _, attempt = job_attempt.rpartition("-")
            return not name.startswith(mine) or (job, attempt) in live

        if self._cgroups.kind != "none":
            cgroup.sweep(self._cgroups, keep)
        if self.network == "private":
            names = {f"{self._netns_prefix()}{job}-{attempt}" for job, attempt in live}
            for name in netns.names(self._netns_prefix()):
                if name not in names:
                    netns.delete(name)

    def _is_alive(self, w: WorkerLaunch, attempt_dir: Path, launched_at: float) -> bool | None:
        rec = read_json(str(attempt_dir / f"rank-{w.rank}.pid"))
        if rec is None:
            if time.time() - launched_at < PENDING_TIMEOUT_S:
                return None
            return self._adopt_orphan(w, attempt_dir)
        return rec["start"] is not None and proc_start_ticks(rec["pid"]) == rec["start"]

    def _signal(self, w: WorkerLaunch, attempt_dir: Path, sig: int) -> None:
        rec = read_json(str(attempt_dir / f"rank-{w.rank}.pid"))
        if rec is None or proc_start_ticks(rec["pid"]) != rec["start"]:
            return
        try:
            os.kill(rec["pid"], sig)
        except ProcessLookupError:
            pass

    def _reap(self) -> None:
        self._children = [p for p in self._children if p.poll() is None]

    def _adopt_orphan(self, w: WorkerLaunch, attempt_dir: Path) -> bool:
        """Find this rank's supervisor by the token in its environment; record its pid if found."""
        needle = f"STINT_SHIM_TOKEN={self._token(w)}\0".encode()
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/environ", "rb") as f:
                    if needle not in f.read():
                        continue
                with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                    if SHIM_PATH.encode() not in f.read():
                        continue  # the worker itself inherits the token; we want its supervisor
            except OSError:
                continue
            pid = int(entry.name)
            write_json_atomic(
                str(attempt_dir / f"rank-{w.rank}.pid"),
                {"pid": pid, "start": proc_start_ticks(pid)},
            )
            return True
        return False
