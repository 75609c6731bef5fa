"""Surviving a SIGKILLed controller (both backends), a dead supervisor and recycled pids."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from exec_helpers import (
    TRAP_USR1,
    MakeExecutor,
    gang,
    wait_exit,
    wait_for,
    wait_ready,
    worker_of,
)

from stint.runtime.executor import Outcome
from stint.runtime.executor.shim import proc_start_ticks


def test_a_new_executor_adopts_workers_of_a_sigkilled_controller(
    make_ex: MakeExecutor, tmp_path: Path, backend: str, request: pytest.FixtureRequest
):
    # A real controller process launches two jobs and is SIGKILLed; this process takes over.
    state = str(tmp_path / "state")
    if backend == "ray":
        address = request.getfixturevalue("ray_cluster").address
        new_executor = f"RayExecutor({state!r}, {address!r})"
    else:
        new_executor = f"LocalExecutor({state!r}, nodes=2, gpus_per_node=2)"
    controller = textwrap.dedent(
        f"""
        import sys, time
        sys.path[:0] = [{str(Path(__file__).parent)!r}, {str(Path(__file__).parents[1])!r}]
        from exec_helpers import TRAP_USR1, gang
        from pathlib import Path
        from stint.runtime.executor.local import LocalExecutor
        from stint.runtime.executor.ray import RayExecutor
        ex = {new_executor}
        tmp = Path({str(tmp_path)!r})
        ex.launch(gang(tmp, "long", TRAP_USR1, n=2, nodes=("node-0", "node-1")))
        ex.launch(gang(tmp, "short", "import time; time.sleep(0.5)", slot0=1))
        print("launched", flush=True)
        time.sleep(600)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", controller], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "launched\n"
        wait_ready(tmp_path, "long", 2)
    finally:
        proc.kill()
        proc.wait()
    ex = make_ex()
    assert ex.running().get("long") == 0
    assert wait_exit(ex, "short").outcome is Outcome.SUCCEEDED  # ended after the controller died
    ex.request_stop("long")
    e = wait_exit(ex, "long")
    assert (e.outcome, dict(e.exit_codes)) == (Outcome.CHECKPOINTED, {0: 75, 1: 75})
    assert make_ex().poll() == []


@pytest.mark.parametrize("backend", ["local"])
def test_a_dead_supervisor_fails_the_attempt_and_a_recycled_pid_is_not_mistaken_for_it(
    make_ex: MakeExecutor, tmp_path: Path
):
    ex = make_ex()
    ex.launch(gang(tmp_path, "lost", TRAP_USR1))
    wait_ready(tmp_path, "lost")
    d = tmp_path / "state/jobs/lost/0"
    shim = json.loads((d / "rank-0.pid").read_text())
    worker = worker_of(d, 0)
    os.kill(shim["pid"], signal.SIGKILL)
    # The worker dies with its supervisor (PR_SET_PDEATHSIG) rather than running on unwatched.
    wait_for(lambda: proc_start_ticks(worker["pid"]) is None, what="the worker to die")
    # Pretend the kernel recycled the supervisor's pid for an unrelated live process (this one).
    (d / "rank-0.pid").write_text(json.dumps({"pid": os.getpid(), "start": shim["start"]}))
    assert ex.running() == {}
    e = wait_exit(ex, "lost")
    assert e.outcome is Outcome.FAILED
    assert e.reason == "rank 0: its supervisor died without recording the worker's exit"


@pytest.mark.parametrize("backend", ["local"])
def test_relaunch_adopts_a_supervisor_whose_pid_file_was_never_written(
    make_ex: MakeExecutor, tmp_path: Path
):
    # The controller died between starting a supervisor and recording its pid: a relaunch must
    # find it (by the token in its environment) instead of starting a second copy.
    ex = make_ex()
    count = "import os\nopen(os.environ['STINT_CKPT_DIR'] + '/runs', 'a').write('x')\n"
    (tmp_path / "ckpt/gap").mkdir(parents=True)
    ws = gang(tmp_path, "gap", count + TRAP_USR1)
    ex.launch(ws)
    wait_ready(tmp_path, "gap")
    pid_file = tmp_path / "state/jobs/gap/0/rank-0.pid"
    shim = json.loads(pid_file.read_text())
    pid_file.unlink()
    make_ex().launch(ws)
    assert json.loads(pid_file.read_text()) == shim
    ex.request_stop("gap")
    assert wait_exit(ex, "gap").outcome is Outcome.CHECKPOINTED
    assert (tmp_path / "ckpt/gap/runs").read_text() == "x"


@pytest.mark.slow
@pytest.mark.ray
@pytest.mark.parametrize("backend", ["ray"])
def test_a_ray_actor_that_dies_fails_its_attempt_and_takes_its_worker_along(
    make_ex: MakeExecutor, tmp_path: Path
):
    import ray

    ex = make_ex()
    ex.launch(gang(tmp_path, "doomed", TRAP_USR1, n=2, nodes=("node-0", "node-1")))
    wait_ready(tmp_path, "doomed", 2)
    d = tmp_path / "state/jobs/doomed/0"
    worker = worker_of(d, 1)
    actor = ray.get_actor(f"stint/{ex.sid}/doomed/0/1", namespace="stint")
    ray.kill(actor, no_restart=True)  # as if its node had died
    e = wait_exit(ex, "doomed")
    assert e.outcome is Outcome.FAILED
    assert e.reason == "rank 1: its supervisor died without recording the worker's exit"
    assert e.exit_codes[0] == -signal.SIGKILL  # the rest of the gang was stopped
    wait_for(lambda: proc_start_ticks(worker["pid"]) is None, what="the orphaned worker to die")
