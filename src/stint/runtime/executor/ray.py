"""The Ray executor: each worker runs under its supervisor, started by a Ray actor on its node.

A stint node is a Ray node carrying the custom resource ``stint_node_<name>`` (and ``stint_slot``,
its accelerator slot count); ``nodes()`` is read from the cluster. Every worker gets one *detached*,
*named* actor (``stint/<state id>/<job>/<attempt>/<rank>`` in namespace ``stint``) pinned to its node
by a sliver of that resource. The actor starts the same supervisor (``shim.py``) as the local
executor, so stop requests, escalation, exit codes and logs behave identically; the actor only
carries signals to it and reports whether it is alive.

Durable state is the same directory layout as the local executor, written by the supervisors on
the worker nodes and read by the controller: ``state_dir``, like ``ckpt_dir``, must be on storage
that every node sees (trivially true for a cluster on one machine). Detached actors outlive the
driver, so a restarted controller re-adopts them by name. An actor that dies (its node failed) while
its worker has not recorded an exit makes the attempt FAILED ("supervisor died").

For a cluster on 127.0.0.1 (``raycluster.LoopbackRayCluster``), construct the executor before
anything else imports Ray in this process: it sets ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` so that
Ray keeps 127.0.0.1 instead of swapping in the interface address (see ``raycluster``).
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from stint.ray_env import LOOPBACK_ENV
from stint.runtime.executor.base import TERM_GRACE_S, ExecutorError, NodeInfo, WorkerLaunch
from stint.runtime.executor.raycluster import GPU_TYPE_PREFIX, node_resource
from stint.runtime.executor.shim import open_log, resolve_account, write_json_atomic
from stint.runtime.executor.supervised import (
    PENDING_TIMEOUT_S,
    SHIM_PATH,
    SupervisedExecutor,
    spec_path,
    worker_base_env,
)

NAMESPACE = "stint"
PROBE_WAIT_S = 0.0  # probes never wait: an answer that is not in yet is picked up by the next one


class WorkerHost:
    """Ray actor body: runs one worker's supervisor on this node. Methods are tiny and never block."""

    def __init__(
        self, shim_args: list[str], spec: dict[str, Any], spec_file: str,
        supervisor_env: dict[str, str], log_path: str, os_user: str | None = None,
    ) -> None:
        # This node's Python and copy of the supervisor. The worker's environment is the fresh
        # part of this node's plus stint's (never the actor's own: it holds Ray's credentials),
        # in the spec only the supervisor reads; the supervisor's own is fixed.
        argv = [sys.executable, "-I", SHIM_PATH, "--die-with-parent", str(os.getpid()),
                *shim_args]
        write_json_atomic(spec_file, {**spec, "env": {**worker_base_env(os.environ),
                                                      **spec["env"]}})
        Path(log_path).parent.mkdir(parents=True, exist_ok=True)
        log = open_log(log_path, resolve_account(os_user) if os_user is not None else None)
        try:
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=supervisor_env,
                start_new_session=True,
                close_fds=True,
            )
        finally:
            os.close(log)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def signal(self, sig: int) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, sig)


def node_gpu_type(resources: dict[str, float]) -> str:
    """A Ray node's accelerator type: its custom resource ``stint_gpu_type_<type>`` (``ray start
    --resources``), else the one Ray sets itself, ``accelerator_type:<TYPE>`` (lower-cased: ``A100``
    is ``a100``); "" (untyped) if it has neither."""
    for key in sorted(resources):
        if key.startswith(GPU_TYPE_PREFIX):
            return key.removeprefix(GPU_TYPE_PREFIX)
    for key in sorted(resources):
        if key.startswith("accelerator_type:"):
            return key.removeprefix("accelerator_type:").lower()
    return ""

class RayExecutor(SupervisedExecutor):
    """Workers on the nodes of the Ray cluster at ``address`` (``host:port``; default $RAY_ADDRESS)."""

    def __init__(
        self,
        state_dir: str | os.PathLike[str],
        address: str | None = None,
        term_grace_s: float = TERM_GRACE_S,
    ) -> None:
        address = address or os.environ.get("RAY_ADDRESS")
        if not address:
            raise ExecutorError(
                "the Ray executor needs a cluster address (host:port or RAY_ADDRESS)"
            )
        loopback = address.split(":")[0] in ("127.0.0.1", "localhost")
        if loopback:
            os.environ.update(LOOPBACK_ENV)
        import ray
        import ray._private.ray_constants

        if loopback:  # in case Ray was imported before the variable was set
            ray._private.ray_constants.ENABLE_RAY_CLUSTER = False

        self._ray = ray
        self._owns_ray = not ray.is_initialized()
        if self._owns_ray:
            ray.init(address=address, namespace=NAMESPACE, logging_level=logging.ERROR)
        self._actor_cls = ray.remote(WorkerHost)
        # Build Ray's serialization context now, on the constructing thread: built lazily by the
        # first remote call, it imports pydantic.v1, which can race with imports on other threads
        # of the server (seen as "KeyError: 'pydantic.v1'" in the controller thread).
        ray.get(ray.put(None))
        self._handles: dict[str, Any] = {}
        self._pings: dict[str, Any] = {}  # outstanding alive() calls, by actor name
        self._known: dict[str, bool] = {}  # last answer, by actor name
        super().__init__(state_dir, self._discover_nodes(), term_grace_s)
        if not self._nodes:
            raise ExecutorError(
                f"the Ray cluster at {address} has no stint nodes (custom resource "
                "'stint_node_<name>'); start nodes with raycluster.LoopbackRayCluster or "
                "ray start --resources"
            )

    def nodes(self) -> list[NodeInfo]:
        self._nodes = {n.name: n for n in self._discover_nodes()}
        return list(self._nodes.values())

    def close(self) -> None:
        super().close()
        self._handles.clear()
        self._pings.clear()
        if self._owns_ray:
            self._ray.shutdown()

    # ---- backend ------------------------------------------------------------------------------
    def _discover_nodes(self) -> list[NodeInfo]:
        out = []
        for n in self._ray.nodes():  # type: ignore[no-untyped-call]
            if not n["Alive"]:
                continue
            for key in n["Resources"]:
                if key.startswith("stint_node_"):
                    slots = int(n["Resources"].get("stint_slot", 0))
                    out.append(NodeInfo(key.removeprefix("stint_node_"), slots,
                                        node_gpu_type(n["Resources"])))
        return sorted(out, key=lambda x: x.name)

    def _name(self, w: WorkerLaunch) -> str:
        return f"stint/{self._token(w)}"

    def _spawn(self, w: WorkerLaunch, env: dict[str, str], attempt_dir: Path) -> None:
        shim_args = self.shim_args(w, attempt_dir)
        delta = {
            k: v
            for k, v in env.items()
            if os.environ.get(k) != v or k.startswith("STINT_") or k in w.env
        }
        name = self._name(w)
        try:
            self._handles[name] = self._actor_cls.options(
                name=name,
                namespace=NAMESPACE,
                lifetime="detached",
                num_cpus=0,
                resources={node_resource(w.node): 0.001},
                max_restarts=0,
            ).remote(shim_args, self.spec(w, delta), str(spec_path(attempt_dir, w.rank)),
                     self.supervisor_env(w), w.log_path, w.os_user)
        except self._ray.exceptions.ActorAlreadyExistsError:
            pass  # started just before a controller crash: adopt it

    def _handle(self, w: WorkerLaunch) -> Any | None:
        name = self._name(w)
        h = self._handles.get(name)
        if h is None:
            try:
                h = self._ray.get_actor(name, namespace=NAMESPACE)
            except ValueError:
                return None
            self._handles[name] = h
        return h

    def _alive_many(
        self, ws: Sequence[WorkerLaunch], d: Path, launched_at: float
    ) -> dict[int, bool | None]:
        """Ask the actors without waiting: an unanswered ping stays outstanding and the rank keeps
        its last known state (None = starting) until the answer comes, so a dead actor is noticed
        one call later and a call costs no round trip."""
        out: dict[int, bool | None] = {}
        asked: dict[int, tuple[str, Any]] = {}
        for w in ws:
            name = self._name(w)
            h = self._handle(w)
            if h is None:  # not (yet) registered, or already released
                out[w.rank] = None if time.time() - launched_at < PENDING_TIMEOUT_S else False
                continue
            if name not in self._pings:
                self._pings[name] = h.alive.remote()
            asked[w.rank] = (name, self._pings[name])
        if asked:
            refs = [ref for _, ref in asked.values()]
            ready, _ = self._ray.wait(refs, num_returns=len(refs), timeout=PROBE_WAIT_S)
            done = set(ready)
            for rank, (name, ref) in asked.items():
                if ref in done:
                    del self._pings[name]
                    try:
                        self._known[name] = bool(self._ray.get(ref))
                    except self._ray.exceptions.RayActorError:
                        self._known[name] = False
                out[rank] = self._known.get(name)
        return out

    def _is_alive(self, w: WorkerLaunch, attempt_dir: Path, launched_at: float) -> bool | None:
        return self._alive_many([w], attempt_dir, launched_at)[w.rank]

    def _signal(self, w: WorkerLaunch, attempt_dir: Path, sig: int) -> None:
        h = self._handle(w)
        if h is not None:
            h.signal.remote(int(sig))

    def _adopt_orphan(self, w: WorkerLaunch, attempt_dir: Path) -> bool:
        return self._handle(w) is not None

    def _release(self, job_id: str, attempt: int) -> None:
        for w in self._workers(job_id, attempt):
            h = self._handle(w)
            if h is not None:
                self._ray.kill(h, no_restart=True)
            for table in (self._handles, self._pings, self._known):
                table.pop(self._name(w), None)
