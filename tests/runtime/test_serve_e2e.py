"""End to end with real processes: ``stint serve`` + the ``stint`` CLI + the local executor.

Three jobs on a 2-node x 2-slot cluster; one is preempted, one resized, one migrated by operator
commands; all finish with the right outputs and the store shows each transition in order.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rt_helpers import ServeProc, counter_cmd, wait_for

STEPS = 60
TOTAL = STEPS * (STEPS + 1) // 2
HEAD = ["queued", "admitted", "starting", "running", "checkpointing", "preempted"]
TAIL = ["starting", "running", "succeeded"]




def started(serve: ServeProc, job: int, attempt: int) -> bool:
    """The attempt runs and has installed its SIGUSR1 handler (so a preemption checkpoints)."""
    log = serve.jobs_dir / str(job) / "log.txt"
    return log.exists() and f"attempt {attempt} starts" in log.read_text()


def show(serve: ServeProc, job: int) -> dict:
    with serve.client() as c:  # polling through the API directly: a CLI call costs 0.5 s
        return c.show(job)


@pytest.mark.slow
def test_preempt_resize_migrate_three_jobs_to_completion(serve: ServeProc, tmp_path: Path) -> None:
    outs = {k: tmp_path / k for k in "abc"}
    a = int(serve.cli("submit", "--name", "a", "--", *counter_cmd(STEPS, outs["a"], "--hold")))
    b = int(serve.cli("submit", "--name", "b", "--gpus", "2", "--min-gpus", "1", "--",
                      *counter_cmd(STEPS, outs["b"], "--hold")))
    c = int(serve.cli("submit", "--name", "c", "--", *counter_cmd(STEPS, outs["c"], "--hold")))
    for job in (a, b, c):
        wait_for(lambda job=job: started(serve, job, 1), 60, f"job {job} to start")
    listing = json.loads(serve.cli("jobs", "--json"))
    assert [(j["id"], j["state"]) for j in listing] == [(a, "running"), (b, "running"),
                                                        (c, "running")]
    # FIFO packs b's two workers on one node; a and c share the other.
    b_node = next(iter(show(serve, b)["allocation"]))
    assert show(serve, b)["allocation"] == {b_node: 2}

    serve.cli("preempt", str(a))
    wait_for(lambda: started(serve, a, 2), 60, "job a to resume")
    serve.cli("resize", str(b), "1")
    wait_for(lambda: started(serve, b, 2), 60, "job b to restart with 1 worker")
    assert show(serve, b)["allocation"] == {b_node: 1}
    serve.cli("migrate", str(c), "--to", b_node)  # onto the slot b gave up
    wait_for(lambda: started(serve, c, 2), 60, "job c to restart on the other node")
    assert show(serve, c)["allocation"] == {b_node: 1}
    nodes = json.loads(serve.cli("nodes", "--json"))
    assert {n["name"]: n["used"] for n in nodes}[b_node] == 2

    for out in outs.values():
        (out / "release").touch()
    for job in (a, b, c):
        wait_for(lambda job=job: show(serve, job)["state"] == "succeeded", 60, f"job {job} done")

    for name, job, via in (("a", a, "resumed"), ("b", b, "resizing"), ("c", c, "migrating")):
        detail = json.loads(serve.cli("show", str(job), "--json"))
        assert [t["dst"] for t in detail["transitions"]] == HEAD + [via] + TAIL, name
        times = [t["at"] for t in detail["transitions"]]
        assert times == sorted(times)
        state = json.loads((outs[name] / "result.json").read_text())
        assert state["total"] == TOTAL, name  # the right output despite the interruption
        assert state["resumes"][1][1] > 0, name  # attempt 2 resumed from a checkpoint, not 0
        assert (outs[name] / "completions").read_text().splitlines() == ["2"]
    b_resumes = json.loads((outs["b"] / "result.json").read_text())["resumes"]
    assert [(r[2], r[3]) for r in b_resumes] == [(2, 2), (1, 2)]  # world 2 -> 1, logical 2
    assert "done: total" in serve.cli("logs", str(a), "-f")  # -f ends with the job
    bob = serve.cli("token", "create", "bob").strip()
    assert json.loads(serve.cli("jobs", "--json", token=bob)) == []  # bob sees only his jobs


@pytest.mark.slow
def test_token_lifecycle_through_the_cli(serve: ServeProc) -> None:
    """whoami, --token, role change both ways, revoke, list; the admin token file kept in step."""
    bob = serve.cli("token", "create", "bob").strip()
    assert serve.cli("whoami", "--token", bob).startswith("bob (user;")
    assert serve.cli("whoami").startswith("admin (admin;")
    old = (serve.data_dir / "admin.token").read_text()
    serve.cli("token", "create", "admin")  # replaces the admin's token ...
    assert (serve.data_dir / "admin.token").read_text() != old
    assert serve.cli("whoami").startswith("admin (admin;")  # ... and the file follows
    bob = serve.cli("token", "create", "bob", "--admin").strip()
    assert serve.cli("whoami", "--token", bob).startswith("bob (admin;")
    bob = serve.cli("token", "create", "bob", "--no-admin").strip()
    assert serve.cli("whoami", "--token", bob).startswith("bob (user;")
    users = {u["user"]: u for u in json.loads(serve.cli("user", "list", "--json"))}
    assert users["bob"]["admin"] is False and users["admin"]["admin"] is True
    serve.cli("token", "revoke", "bob")
    c = serve.client()
    r = c.http.get("/v1/whoami", headers={"Authorization": f"Bearer {bob}"})
    assert r.status_code == 401
    assert c.http.get("/v1/users").json()[-1]["token_created_at"] is None
    r = c.http.post("/v1/tokens", json={"user": "admin", "admin": False})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "admin"]
    assert c.http.delete("/v1/tokens/admin").status_code == 409
    assert c.http.delete("/v1/tokens/nobody-here").status_code == 404
