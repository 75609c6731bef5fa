"""A live fleet: one control plane over two clusters in network namespaces of their own, joined
by a link whose bandwidth the test limits (``tc ... tbf``).

Each cluster is ``stint agent executor`` + ``stint agent storage`` run inside its namespace
(``ip netns exec``), on its namespace's address; one ``stint serve --fleet`` outside drives both.
Two SDK jobs (examples/mlp.py with a 10 MB buffer, so a checkpoint of ~10 MB) are placed on
cluster a (the ``static`` global scheduler: an arrival's data is on the first cluster). One is
moved to b by ``stint migrate --to-cluster``: its checkpoint crosses the limited link, the copy's
measured time matches size / bandwidth within 25 %, and it ends with the digest of an unmoved
run. Then a's executor is stopped (SIGTERM): the other job resumes on b from its last periodic
checkpoint, copied from a's storage, with the same digest.

Needs root and ``ip``/``tc`` (iproute2): skipped otherwise, with the reason, except under
``CI=true``. The namespaces, bridge and links are removed even when the test fails.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from rt_helpers import MLP, STINT, ServeProc, final_digest, wait_for

from stint.runtime import fleet_secret
from stint.runtime.store import write_token_file

STEPS = 40
RATE_MBIT = 50.0
PAD_MB = 10.0
JOB = ["--steps", str(STEPS), "--pad-mb", str(PAD_MB), "--checkpoint-every", "5", "--log-every", "5"]


@dataclass(frozen=True)
class Net:
    names: tuple[str, str]  # namespaces of clusters a and b
    addrs: tuple[str, str]


def _sh(*cmd: str) -> None:
    subprocess.run(cmd, check=True, capture_output=True, timeout=30)


def _unavailable() -> str | None:
    if os.geteuid() != 0:
        return "needs root to create network namespaces"
    if not (shutil.which("ip") and shutil.which("tc")):
        return "needs ip and tc (iproute2; scripts/setup.sh installs it as root)"
    probe = f"stintp{os.getpid() % 100000}"
    r = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True, check=False)
    if r.returncode != 0:
        return f"ip netns add is refused here: {r.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True, check=False)
    return None


@pytest.fixture
def net() -> Iterator[Net]:
    why = _unavailable()
    if why is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"the live fleet test must run in CI: {why}")
        pytest.skip(why)
    tag = os.getpid() % 100000
    subnet = 200 + tag % 50
    bridge, names = f"stbr{tag}", (f"stinta{tag}", f"stintb{tag}")
    addrs = (f"10.231.{subnet}.1", f"10.231.{subnet}.2")
    try:
        _sh("ip", "link", "add", bridge, "type", "bridge")
        _sh("ip", "addr", "add", f"10.231.{subnet}.254/24", "dev", bridge)
        _sh("ip", "link", "set", bridge, "up")
        for i, (ns, addr) in enumerate(zip(names, addrs, strict=True)):
            outer = f"stv{'ab'[i]}{tag}"
            _sh("ip", "netns", "add", ns)
            _sh("ip", "link", "add", outer, "type", "veth", "peer", "name", "eth0", "netns", ns)
            _sh("ip", "link", "set", outer, "master", bridge, "up")
            inside = ("ip", "netns", "exec", ns)
            _sh(*inside, "ip", "addr", "add", f"{addr}/24", "dev", "eth0")
            _sh(*inside, "ip", "link", "set", "eth0", "up")
            _sh(*inside, "ip", "link", "set", "lo", "up")
            # Everything leaving the cluster (to the other cluster, or to the control plane)
            _sh(*inside, "tc", "qdisc", "add", "dev", "eth0", "root", "tbf", "rate",
                f"{RATE_MBIT:g}mbit", "burst", "64kb", "latency", "100ms")
        yield Net(names, addrs)
    finally:
        for ns in names:
            pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True,
                                  check=False).stdout.split()
            for pid in pids:  # the agents' leftover workers, if any (the test's own)
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except ProcessLookupError:
                    pass
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)
        subprocess.run(["ip", "link", "del", bridge], capture_output=True, check=False)


def _agent(ns: str, *args: str, log: Path) -> subprocess.Popen[bytes]:
    # ``ip netns exec`` execs the command: the pid is the agent's own.
    return subprocess.Popen(["ip", "netns", "exec", ns, STINT, "agent", *args],
                            stdout=log.open("ab"), stderr=subprocess.STDOUT)




def _fleet_file(tmp: Path, net: Net) -> Path:
    parts = ["[links]\nregion_gbps = 0.05\n"]
    for name, addr in zip("ab", net.addrs, strict=True):
        parts.append(f'[region.r1.cluster.{name}]\nnodes = 1\ngpus_per_node = 2\n'
                     f'executor = "http://{addr}:7100"\nstorage = "{tmp / (name + "-store")}"\n'
                     f'copy = "{addr}:7101"\n')
    path = tmp / "fleet.toml"
    path.write_text("\n".join(parts))
    return path


@pytest.mark.slow
def test_a_job_moves_between_clusters_over_a_limited_link(net: Net, tmp_path: Path) -> None:
    reference = subprocess.Popen([sys.executable, MLP, *JOB, "--ckpt-dir", str(tmp_path / "ref")],
                                 stdout=subprocess.PIPE, text=True)
    agents: dict[str, subprocess.Popen[bytes]] = {}
    secret = tmp_path / "agents.secret"  # each agent's copy of the control plane's secret
    write_token_file(secret, fleet_secret.ensure(tmp_path / "data" / fleet_secret.FILE_NAME))
    for name, ns, addr in zip("ab", net.names, net.addrs, strict=True):
        log = tmp_path / f"agent-{name}.log"
        agents[name] = _agent(ns, "executor", "--listen", f"{addr}:7100", "--state-dir",
                              str(tmp_path / f"{name}-exec"), "--nodes", "1",
                              "--gpus-per-node", "2", "--secret-file", str(secret), log=log)
        agents[name + "-storage"] = _agent(ns, "storage", "--listen", f"{addr}:7101", "--dir",
                                           str(tmp_path / f"{name}-store"), "--secret-file",
                                           str(secret), log=log)
    serve = ServeProc(tmp_path / "data", f"sqlite:///{tmp_path / 'stint.db'}", "--fleet",
                      str(_fleet_file(tmp_path, net)), "--global", "static")
    try:
        serve.start()
        with serve.client() as c:
            one, two = (int(serve.cli("submit", "--gpus", "1", "--", sys.executable, MLP, *JOB,
                                      "--sleep", "0.2")) for _ in range(2))
            log_a, log_a2 = (tmp_path / "a-store" / str(j) / "log.txt" for j in (one, two))
            wait_for(lambda: log_a.exists() and "step 5 digest" in log_a.read_text(), 60,
                     "job 1 to train on cluster a")
            assert c.show(one)["cluster"] == c.show(two)["cluster"] == "a"
            serve.cli("migrate", str(one), "--to-cluster", "b")
            wait_for(lambda: c.show(one)["cluster"] == "b", 60, "job 1 to arrive on cluster b")
            moved = c.show(one)
            # Job 2 still trains on a, and has checkpointed (every 5 steps).
            wait_for(lambda: "step 10 digest" in log_a2.read_text(), 60, "job 2 to train on a")
            assert f"done step {STEPS}" not in log_a2.read_text()
            nodes = {n["name"]: n for n in c.nodes()}
            assert {(n["cluster"], n["region"]) for n in nodes.values()} == {("a", "r1"), ("b", "r1")}
            agents["a"].send_signal(signal.SIGTERM)  # cluster a's executor stops
            agents["a"].wait(20)
            wait_for(lambda: c.nodes()[0]["state"] == "down", 30, "cluster a's node to be down")
            for job in (one, two):
                wait_for(lambda j=job: c.show(j)["state"] in ("succeeded", "failed"), 90,
                         f"job {job} to end")
            first, second = c.show(one), c.show(two)
    finally:
        serve.stop()
        for p in agents.values():
            if p.poll() is None:
                p.terminate()
                p.wait(20)
        reference_out = reference.communicate(timeout=120)[0]
    want = final_digest(reference_out, STEPS)
    assert first["state"] == "succeeded", first["reason"]
    assert final_digest((tmp_path / "b-store" / str(one) / "log.txt").read_text(), STEPS) == want
    # The copy crossed the limited link: its time is size / bandwidth (within 25 %).
    assert moved["copy_bytes"] > PAD_MB * 1e6
    expected = moved["copy_bytes"] * 8 / (RATE_MBIT * 1e6)
    print(f"copy: {moved['copy_bytes']} bytes in {moved['copy_s']:.2f} s; size / bandwidth {expected:.2f} s")
    assert abs(moved["copy_s"] - expected) <= 0.25 * expected, (moved["copy_s"], expected)
    path = [t["dst"] for t in first["transitions"]]
    assert "migrating" in path and any("verified" in t["reason"] for t in first["transitions"])
    # Cluster a's executor stopped: job 2 resumed on b from its last checkpoint (copied from
    # a's storage, still up), with the same result.
    assert second["state"] == "succeeded", second["reason"]
    assert second["cluster"] == "b" and second["copy_bytes"] > PAD_MB * 1e6
    reasons = " | ".join(t["reason"] for t in second["transitions"])
    print(reasons)
    assert "unreachable" in reasons and "checkpoint copied from a to b" in reasons
    log_b2 = (tmp_path / "b-store" / str(two) / "log.txt").read_text()
    assert final_digest(log_b2, STEPS) == want
    # the log came with the checkpoint: a's attempt, then b's, which resumed from a checkpoint
    attempts = [int(n) for n in re.findall(r"^\[attempt (\d+) ", log_b2, re.MULTILINE)]
    last = max(attempts)
    assert min(attempts) < last, log_b2[-2000:]
    assert not re.search(rf"^\[attempt {last} rank 0\] step 5 digest", log_b2, re.MULTILINE)
