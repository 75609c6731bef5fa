"""A multi-node Ray cluster on this machine, kept on loopback (for tests, benchmarks, development).

Ray, left to itself, turns 127.0.0.1 into the machine's interface address (``resolve_ip_for_localhost``)
and its servers then listen there. Two things keep it on loopback:

1. ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` in every Ray process and driver: Ray's own switch for
   "single-host cluster", under which it resolves the node address to 127.0.0.1 and binds its
   servers (GCS, raylets, workers, agents) to it.
2. That switch also makes ``ray start --address`` refuse to add nodes, so extra nodes are started the
   way ``ray start`` starts them internally (``ray._private.node.Node``, as Ray's own
   ``cluster_utils`` does) with ``node_ip_address="127.0.0.1"``.

Each stint node ``<name>`` is one raylet with the custom resources ``stint_node_<name>: 1`` and
``stint_slot: G``; the Ray executor pins a worker to its node with a sliver of the first.
``stop()`` ends exactly the processes of this cluster (found by its temp dir, plus their
descendants), never other Ray clusters on the machine (so no ``ray stop``).

The cluster uses Ray's token authentication with a token of its own (``RAY_AUTH_MODE=token``,
``RAY_AUTH_TOKEN``), set explicitly so that a token another user left in ``~/.ray`` plays no part.
A driver needs ``client_env()`` in its environment: the two variables above, ``RAY_ADDRESS``, and
the loopback switch.

CLI: ``python -m stint.runtime.executor.raycluster up --nodes 2 --gpus-per-node 2`` prints the
temp dir and that environment as JSON; ``... down --temp-dir DIR`` stops it.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from stint.ray_env import LOOPBACK_ENV

OBJECT_STORE_BYTES = 80 * 1024 * 1024  # workers pass no objects through Ray; keep /dev/shm free


def node_resource(node: str) -> str:
    return f"stint_node_{node}"


GPU_TYPE_PREFIX = "stint_gpu_type_"  # a node's custom resource naming its accelerator type


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LoopbackRayCluster:
    """Head plus worker nodes, all raylets on 127.0.0.1, one stint node per raylet."""

    def __init__(
        self, temp_dir: str | None = None, port: int | None = None, token: str | None = None
    ) -> None:
        # Short path: Ray puts unix sockets under it (107-byte limit).
        self.temp_dir = temp_dir or tempfile.mkdtemp(prefix="stint-ray-", dir="/tmp")
        self.port = port or _free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.nodes: dict[str, int] = {}
        self.token = token or secrets.token_hex(32)

    def client_env(self) -> dict[str, str]:
        """What a driver (the controller) needs in its environment to use this cluster."""
        return {
            **LOOPBACK_ENV,
            "RAY_ADDRESS": self.address,
            "RAY_AUTH_MODE": "token",  # explicit, so that ~/.ray/auth_token plays no part
            "RAY_AUTH_TOKEN": self.token,
        }

    def env(self) -> dict[str, str]:
        return {**os.environ, **self.client_env()}

    def start(self, nodes: int, gpus_per_node: int, wait: bool = True) -> LoopbackRayCluster:
        """Start ``node-0`` as the head and ``node-1`` .. as extra raylets; wait until all joined
        (unless ``wait`` is False: then the caller checks, e.g. from its own driver)."""
        try:
            for i in range(nodes):
                self.add_node(f"node-{i}", gpus_per_node)
            if wait:
                self.wait_for_nodes(nodes)
        except BaseException:
            self.stop()
            raise
        return self

    def add_node(self, name: str, slots: int, gpu_type: str = "") -> None:
        """Start raylet ``name`` with ``slots`` accelerator slots of ``gpu_type`` ("": untyped)."""
        kinds = {GPU_TYPE_PREFIX + gpu_type: 1} if gpu_type else {}
        resources = json.dumps({node_resource(name): 1, "stint_slot": slots, **kinds})
        if not self.nodes:
            ray = str(Path(sys.executable).with_name("ray"))
            cmd = [
                ray, "start", "--head", "--node-ip-address=127.0.0.1", f"--port={self.port}",
                "--include-dashboard=false", "--num-cpus=1", "--num-gpus=0",
                f"--object-store-memory={OBJECT_STORE_BYTES}", f"--temp-dir={self.temp_dir}",
                f"--resources={resources}", "--disable-usage-stats",
            ]  # fmt: skip
        else:
            cmd = [
                sys.executable,
                "-m",
                "stint.runtime.executor.raycluster",
                "_join",
                self.address,
                self.temp_dir,
                resources,
            ]
        out = subprocess.run(
            cmd, check=False, env=self.env(), capture_output=True, text=True, timeout=120
        )
        if out.returncode != 0:
            raise RuntimeError(f"starting Ray node {name!r} failed:\n{out.stdout}\n{out.stderr}")
        self.nodes[name] = slots

    def wait_for_nodes(self, n: int, timeout: float = 60.0) -> None:
        code = (
            "import ray, sys; ray.init(address=sys.argv[1], logging_level='ERROR');"
            "print(sum(1 for x in ray.nodes() if x['Alive']))"
        )
        deadline = time.monotonic() + timeout
        while True:
            out = subprocess.run(
                [sys.executable, "-c", code, self.address],
                check=False, env=self.env(), capture_output=True, text=True, timeout=timeout,
            )  # fmt: skip
            if out.returncode == 0 and int(out.stdout.split()[-1]) >= n:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"only part of the Ray cluster came up: {out.stdout}{out.stderr}"
                )
            time.sleep(0.5)

    def pids(self) -> list[int]:
        """Every process of this cluster: those naming its temp dir, and their descendants."""
        roots, parent = set(), {}
        needle = self.temp_dir.encode()
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            pid = int(entry.name)
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if needle in f.read() and pid != os.getpid():
                        roots.add(pid)
                with open(f"/proc/{pid}/stat", "rb") as f:
                    stat = f.read().decode(errors="replace")
                parent[pid] = int(stat[stat.rindex(")") + 2 :].split()[1])
            except (OSError, ValueError):
                continue
        found, changed = set(roots), True
        while changed:
            changed = False
            for pid, ppid in parent.items():
                if ppid in found and pid not in found and pid != os.getpid():
                    found.add(pid)
                    changed = True
        return sorted(found)

    def stop(self, timeout: float = 3.0) -> None:
        """SIGTERM every process of this cluster, SIGKILL what is left, remove the temp dir."""
        pids = self.pids()
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in pids:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                pids = [p for p in pids if _alive(p)]
                if not pids:
                    break
                time.sleep(0.1)
        shutil.rmtree(self.temp_dir, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode(errors="replace")
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] not in "ZX"


def _join(address: str, temp_dir: str, resources: str) -> None:
    """Start a worker node's raylet the way ``ray start --address`` does, on 127.0.0.1."""
    import ray._private.node
    import ray._private.parameter

    params = ray._private.parameter.RayParams(
        node_ip_address="127.0.0.1",
        gcs_address=address,
        temp_dir=temp_dir,
        resources=json.loads(resources),
        num_cpus=1,
        num_gpus=0,
        object_store_memory=OBJECT_STORE_BYTES,
        include_log_monitor=False,  # type: ignore[arg-type]  # as Ray's cluster_utils passes it
        node_manager_port=0,
        min_worker_port=0,
        max_worker_port=0,
    )
    ray._private.node.Node(params, head=False, shutdown_at_exit=False, spawn_reaper=False)


def main(argv: list[str]) -> int:
    if argv and argv[0] == "_join":
        os.environ.update(LOOPBACK_ENV)
        _join(*argv[1:4])
        return 0
    ap = argparse.ArgumentParser(prog="python -m stint.runtime.executor.raycluster")
    sub = ap.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="start a loopback cluster")
    up.add_argument("--nodes", type=int, default=2)
    up.add_argument("--gpus-per-node", type=int, default=2)
    up.add_argument("--temp-dir")
    down = sub.add_parser("down", help="stop the cluster with this temp dir")
    down.add_argument("--temp-dir", required=True)
    up.add_argument("--token", help="cluster auth token (default: a new random one)")
    args = ap.parse_args(argv)
    if args.cmd == "up":
        c = LoopbackRayCluster(args.temp_dir, token=args.token).start(
            args.nodes, args.gpus_per_node
        )
        print(json.dumps({"temp_dir": c.temp_dir, "env": c.client_env()}))
    else:
        LoopbackRayCluster(args.temp_dir).stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
