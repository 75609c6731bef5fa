"""The HTTP API in-process: authentication, ownership, validation (422 naming the field)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from stint.runtime.api import ApiSettings, create_app
from stint.runtime.store import Store
from stint.runtime.tables import Token


@pytest.fixture
def api(store: Store, tmp_path: Path) -> TestClient:
    store.set_nodes([("node-0", 2), ("node-1", 2)])
    return TestClient(create_app(store, ApiSettings(jobs_dir=tmp_path / "jobs")))


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def admin(store: Store, tmp_path: Path) -> str:
    token = store.ensure_admin_token(tmp_path / "admin.token", time.time())
    assert token is not None
    return token


def test_requests_without_a_valid_token_are_refused(api: TestClient, admin: str) -> None:
    assert api.get("/v1/health").status_code == 200  # the only open route
    for headers in ({}, auth("not-a-token"), {"Authorization": "Basic eDp5"}):
        assert api.get("/v1/jobs", headers=headers).status_code == 401
        assert api.post("/v1/jobs", json={"command": ["true"]}, headers=headers).status_code == 401
    assert api.get("/v1/jobs", headers=auth(admin)).status_code == 200


def test_admin_token_file_is_private_and_written_once(store: Store, tmp_path: Path) -> None:
    path = tmp_path / "admin.token"
    token = store.ensure_admin_token(path, 1.0)
    assert path.read_text().strip() == token
    assert path.stat().st_mode & 0o777 == 0o600
    assert store.ensure_admin_token(path, 2.0) is None  # the store is no longer empty
    with store.session() as s:  # stored hashed, never in clear
        hashes = list(s.scalars(select(Token.token_hash)))
    assert token not in hashes and len(hashes) == 1 and len(hashes[0]) == 64


def test_users_see_and_act_on_their_own_jobs_only(api: TestClient, admin: str) -> None:
    r = api.post("/v1/tokens", json={"user": "alice"}, headers=auth(admin))
    assert r.status_code == 201
    alice = r.json()["token"]
    bob = api.post("/v1/tokens", json={"user": "bob"}, headers=auth(admin)).json()["token"]
    assert api.post("/v1/tokens", json={"user": "eve"}, headers=auth(alice)).status_code == 403
    job = api.post("/v1/jobs", json={"command": ["true"]}, headers=auth(alice)).json()
    assert job["user"] == "alice" and job["state"] == "queued"
    assert [j["id"] for j in api.get("/v1/jobs", headers=auth(bob)).json()] == []
    assert [j["id"] for j in api.get("/v1/jobs", headers=auth(alice)).json()] == [job["id"]]
    assert [j["id"] for j in api.get("/v1/jobs", headers=auth(admin)).json()] == [job["id"]]
    for verb in ("cancel", "preempt"):
        assert api.post(f"/v1/jobs/{job['id']}/{verb}", headers=auth(bob)).status_code == 404
    assert api.get(f"/v1/jobs/{job['id']}", headers=auth(bob)).status_code == 404
    assert api.post(f"/v1/jobs/{job['id']}/cancel", headers=auth(alice)).status_code == 202
    # A new token for alice replaces the old one.
    api.post("/v1/tokens", json={"user": "alice"}, headers=auth(admin))
    assert api.get("/v1/jobs", headers=auth(alice)).status_code == 401


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"command": []}, "command"),  # empty command
        ({"command": [""]}, "command"),
        ({}, "command"),
        ({"command": ["x"], "gpus": 5}, "gpus"),  # the cluster has 2 x 2 = 4 GPUs
        ({"command": ["x"], "gpus": 1, "max_gpus": 9}, "max_gpus"),
        ({"command": ["x"], "min_gpus": 3, "max_gpus": 2}, "min_gpus"),  # min > max
        ({"command": ["x"], "gpus": 3, "max_gpus": 2}, "gpus"),
        ({"command": ["x"], "tier": "gold"}, "tier"),  # unknown tier
        ({"command": ["x"], "gpus": 0}, "gpus"),
        ({"command": ["x"], "priority": -1}, "priority"),
        ({"command": ["x"], "deadline_s": 0}, "deadline_s"),
        ({"command": ["x"], "colour": "red"}, "colour"),
        ({"command": ["x\u0000"]}, "command"),
    ],
)
def test_bad_specs_are_refused_naming_the_field(
    api: TestClient, admin: str, store: Store, body: dict, field: str
) -> None:
    r = api.post("/v1/jobs", json=body, headers=auth(admin))
    assert r.status_code == 422, r.text
    fields = [d["loc"][1] for d in r.json()["detail"] if len(d["loc"]) > 1]
    assert field in fields, r.json()
    assert store.count_jobs() == 0  # nothing else changed


def test_defaults_and_elastic_bounds(api: TestClient, admin: str) -> None:
    post = lambda body: api.post("/v1/jobs", json=body, headers=auth(admin)).json()
    j = post({"command": ["x"]})
    assert (j["gpus"], j["min_gpus"], j["max_gpus"], j["tier"]) == (1, 1, 1, "standard")
    j = post({"command": ["x"], "min_gpus": 1, "max_gpus": 4})
    assert (j["gpus"], j["min_gpus"], j["max_gpus"]) == (4, 1, 4)  # gpus defaults to max
    j = post({"command": ["x"], "gpus": 2, "tier": "premium", "deadline_s": 60})
    assert (j["gpus"], j["min_gpus"], j["max_gpus"], j["tier"]) == (2, 2, 2, "premium")


def test_operator_requests_are_checked(api: TestClient, admin: str) -> None:
    h = auth(admin)
    jid = api.post("/v1/jobs", json={"command": ["x"], "min_gpus": 1, "max_gpus": 2},
                   headers=h).json()["id"]
    r = api.post(f"/v1/jobs/{jid}/resize", json={"workers": 3}, headers=h)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "workers"]
    r = api.post(f"/v1/jobs/{jid}/migrate", json={"node": "node-9"}, headers=h)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "node"]
    r = api.post(f"/v1/jobs/{jid}/migrate", json={"to_cluster": "b"}, headers=h)  # not a fleet
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "to_cluster"]
    r = api.post(f"/v1/jobs/{jid}/migrate", json={"node": "node-1", "to_cluster": "b"}, headers=h)
    assert r.status_code == 422 and "exactly one" in r.text
    assert api.post(f"/v1/jobs/{jid}/preempt", headers=h).status_code == 409  # not running
    r = api.post(f"/v1/jobs/{jid}/resize", json={"workers": 1}, headers=h)
    assert r.status_code == 202 and r.json()["pin_workers"] == 1
    r = api.post(f"/v1/jobs/{jid}/migrate", json={"node": "node-1"}, headers=h)
    assert r.status_code == 202 and r.json()["pin_node"] == "node-1"
    assert api.post(f"/v1/jobs/{jid}/cancel", headers=h).status_code == 202
    assert api.get("/v1/jobs/99999", headers=h).status_code == 404
    assert api.get("/v1/jobs/0", headers=h).status_code == 422
    kinds = [t["dst"] for t in api.get(f"/v1/jobs/{jid}", headers=h).json()["transitions"]]
    assert kinds == ["queued"]  # requests are carried out by the controller, not the API


def test_nodes_logs_and_openapi(api: TestClient, admin: str, tmp_path: Path) -> None:
    h = auth(admin)
    nodes = api.get("/v1/nodes", headers=h).json()
    assert [(n["name"], n["gpus"], n["free"]) for n in nodes] == [("node-0", 2, 2), ("node-1", 2, 2)]
    jid = api.post("/v1/jobs", json={"command": ["x"]}, headers=h).json()["id"]
    (tmp_path / "jobs" / str(jid)).mkdir(parents=True)
    (tmp_path / "jobs" / str(jid) / "log.txt").write_text("hello\nworld\n")
    first = api.get(f"/v1/jobs/{jid}/logs", headers=h).json()
    assert first == {"text": "hello\nworld\n", "next_offset": 12, "finished": False}
    assert api.get(f"/v1/jobs/{jid}/logs?offset=6", headers=h).json()["text"] == "world\n"
    schema = api.get("/openapi.json").json()
    assert "/v1/jobs" in schema["paths"] and "/v1/jobs/{job_id}/migrate" in schema["paths"]


def test_pins_are_an_admins_and_respect_the_jobs_worker_counts(api: TestClient, admin: str) -> None:
    alice = api.post("/v1/tokens", json={"user": "alice"}, headers=auth(admin)).json()["token"]
    body = {"command": ["x"], "gpus": 1, "min_gpus": 1, "max_gpus": 3, "logical_ranks": 4}
    job = api.post("/v1/jobs", json=body, headers=auth(alice)).json()
    assert job["worker_counts"] == [1, 2]  # divisors of 4 within 1..3
    jid = job["id"]
    r = api.post(f"/v1/jobs/{jid}/resize", json={"workers": 2}, headers=auth(alice))
    assert r.status_code == 403  # the owner may not jump the policy
    r = api.post(f"/v1/jobs/{jid}/resize", json={"workers": 3}, headers=auth(admin))
    assert r.status_code == 422 and "runs on [1, 2] workers" in r.json()["detail"][0]["msg"]
    r = api.post(f"/v1/jobs/{jid}/resize", json={"workers": 2}, headers=auth(admin))
    assert r.status_code == 202 and r.json()["pin_workers"] == 2 and r.json()["state"] == "queued"
    r = api.post(f"/v1/jobs/{jid}/unpin", headers=auth(admin))
    assert r.status_code == 202 and r.json()["pin_workers"] is None


def test_a_size_that_does_not_divide_the_logical_ranks_is_refused(api: TestClient,
                                                                   admin: str) -> None:
    h = auth(admin)
    r = api.post("/v1/jobs", json={"command": ["x"], "gpus": 3, "min_gpus": 1, "max_gpus": 4},
                 headers=h)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "gpus"]
    r = api.post("/v1/jobs", json={"command": ["x"], "max_gpus": 4, "logical_ranks": 2},
                 headers=h)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "logical_ranks"]
    r = api.post("/v1/jobs", json={"command": ["x"], "est_s": -1}, headers=h)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "est_s"]


def test_a_parameter_server_job_keeps_its_server_count(api: TestClient, store: Store,
                                                       admin: str) -> None:
    from stint.runtime.controller import _task_env

    h = auth(admin)
    job = api.post("/v1/jobs", json={"command": ["x"], "gpus": 2, "ps": 3}, headers=h).json()
    assert job["ps"] == 3 and api.get(f"/v1/jobs/{job['id']}", headers=h).json()["ps"] == 3
    row = store.get_job(job["id"])
    assert row is not None and _task_env(row, 2, 0)["STINT_PS_COUNT"] == "3"  # worker 0 starts them
    placed = _task_env(row, 2, 1)  # the plan placed one PS: the counts are the plan's
    assert (placed["STINT_PS_COUNT"], placed["STINT_WORLD_SIZE"]) == ("1", "2")
    plain = api.post("/v1/jobs", json={"command": ["x"]}, headers=h).json()
    assert plain["ps"] is None
    r = api.post("/v1/jobs", json={"command": ["x"], "ps": 0}, headers=h)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "ps"]


@pytest.mark.parametrize("extra,field,what", [
    ({"ps": 2, "min_ps": 3, "max_ps": 2}, "min_ps", "min_ps (3) must be <= max_ps (2)"),
    ({"ps": 3, "max_ps": 2}, "ps", "ps (3) must lie in min_ps..max_ps"),
    ({"min_ps": 1}, "min_ps", "give ps too"),
    ({"ps": 1, "ps_cpus": 64}, "ps_cpus", "no node that hosts parameter servers has 64 cores"),
    ({"ps": 1, "ps_mem_gb": 512}, "ps_mem_gb", "the most: 16 cores, 128 GiB"),
])
def test_bad_parameter_server_fields_are_refused_naming_the_field(
        store: Store, tmp_path: Path, admin: str, extra: dict[str, object], field: str,
        what: str) -> None:
    store.set_nodes([("node-0", 2), ("node-1", 2)], hosts=[("any", 16.0, 128.0)] * 2)
    api = TestClient(create_app(store, ApiSettings(jobs_dir=tmp_path / "jobs")))
    r = api.post("/v1/jobs", json={"command": ["x"], "gpus": 2, **extra}, headers=auth(admin))
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", field], r.text
    assert what in r.json()["detail"][0]["msg"]


def test_a_ps_job_on_a_cluster_without_ps_hosts_is_refused(store: Store, admin: str,
                                                           tmp_path: Path) -> None:
    store.set_nodes([("node-0", 2)], hosts=[("worker", 16.0, 128.0)])
    api = TestClient(create_app(store, ApiSettings(jobs_dir=tmp_path / "jobs")))
    r = api.post("/v1/jobs", json={"command": ["x"], "ps": 1}, headers=auth(admin))
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "ps"]
    assert "no node that hosts parameter servers" in r.text
    assert api.post("/v1/jobs", json={"command": ["x"]}, headers=auth(admin)).status_code == 201


def test_nodes_and_jobs_show_where_parameter_servers_are(store: Store, admin: str,
                                                         tmp_path: Path) -> None:
    from sqlalchemy import update

    from stint.model.allocation import Allocation
    from stint.runtime.store import dump_alloc, load_alloc
    from stint.runtime.tables import Job

    store.set_nodes([("node-0", 2), ("ps-0", 0)], hosts=[("worker", 16.0, 128.0), ("ps", 4.0, 8.0)])
    api = TestClient(create_app(store, ApiSettings(jobs_dir=tmp_path / "jobs")))
    h = auth(admin)
    job = api.post("/v1/jobs", json={"command": ["x"], "gpus": 2, "ps": 2, "min_ps": 1,
                                     "ps_cpus": 2, "ps_mem_gb": 4}, headers=h).json()
    assert (job["ps"], job["min_ps"], job["max_ps"], job["ps_cpus"]) == (2, 1, None, 2.0)
    alloc = Allocation.of({0: 2}, {1: 2})
    assert load_alloc(dump_alloc(alloc)) == alloc and load_alloc("[[0, 2]]") == Allocation.of({0: 2})
    with store.session() as s:  # as the controller writes it
        s.execute(update(Job).values(state="running", allocation=dump_alloc(alloc)))
    nodes = api.get("/v1/nodes", headers=h).json()
    assert [(n["role"], n["cpus"], n["used"], n["ps"], n["jobs"]) for n in nodes] == [
        ("worker", 16.0, 2, 0, [job["id"]]), ("ps", 4.0, 0, 2, [job["id"]])]
    shown = api.get(f"/v1/jobs/{job['id']}", headers=h).json()
    assert shown["allocation"] == {"node-0": 2} and shown["ps_allocation"] == {"ps-0": 2}


def test_nodes_show_a_user_only_their_own_jobs(api: TestClient, store: Store, admin: str) -> None:
    from sqlalchemy import update

    from stint.runtime.tables import Job

    alice = api.post("/v1/tokens", json={"user": "alice"}, headers=auth(admin)).json()["token"]
    mine = api.post("/v1/jobs", json={"command": ["x"]}, headers=auth(alice)).json()["id"]
    other = api.post("/v1/jobs", json={"command": ["x"]}, headers=auth(admin)).json()["id"]
    with store.session() as s:  # as the controller would: both hold a GPU of node-0
        s.execute(update(Job).values(state="running", allocation="[[0, 1]]"))
    seen = api.get("/v1/nodes", headers=auth(alice)).json()[0]
    assert seen["jobs"] == [mine] and seen["used"] == 2  # the GPUs, not whose they are
    assert api.get("/v1/nodes", headers=auth(admin)).json()[0]["jobs"] == [mine, other]


def test_log_chunks_end_on_whole_characters(api: TestClient, admin: str, tmp_path: Path) -> None:
    from stint.runtime.api import LOG_CHUNK

    jid = api.post("/v1/jobs", json={"command": ["x"]}, headers=auth(admin)).json()["id"]
    (tmp_path / "jobs" / str(jid)).mkdir(parents=True)
    text = "a" * (LOG_CHUNK - 1) + "é" * 10  # the first chunk would split the first "é"
    (tmp_path / "jobs" / str(jid) / "log.txt").write_text(text)
    got, offset = "", 0
    while True:
        chunk = api.get(f"/v1/jobs/{jid}/logs?offset={offset}", headers=auth(admin)).json()
        if not chunk["text"]:
            break
        got, offset = got + chunk["text"], chunk["next_offset"]
    assert got == text and "\ufffd" not in got


def test_per_user_limits(store: Store, admin: str, tmp_path: Path) -> None:
    from stint.config import Limits, UserLimits
    from stint.model.job import Tier

    store.set_nodes([("node-0", 4)])
    limits = Limits(UserLimits(max_jobs=2, max_gpus=3, max_command_bytes=100,
                               tiers=(Tier.STANDARD, Tier.BASIC)),
                    {"alice": UserLimits(tiers=tuple(Tier))})
    api = TestClient(create_app(store, ApiSettings(jobs_dir=tmp_path / "jobs", limits=limits)))
    h = auth(admin)
    r = api.post("/v1/jobs", json={"command": ["x"], "tier": "premium"}, headers=h)
    assert r.status_code == 403 and "tier premium" in r.json()["detail"]
    assert "limits.tiers" in r.json()["detail"] and "standard, basic" in r.json()["detail"]
    alice = api.post("/v1/tokens", json={"user": "alice"}, headers=h).json()["token"]
    r = api.post("/v1/jobs", json={"command": ["x"], "tier": "premium"}, headers=auth(alice))
    assert r.status_code == 201  # her own limits allow every tier
    assert api.post("/v1/jobs", json={"command": ["x"], "gpus": 2}, headers=h).status_code == 201
    r = api.post("/v1/jobs", json={"command": ["x"], "gpus": 2}, headers=h)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "max_gpus"]
    r = api.post("/v1/jobs", json={"command": ["x" * 100]}, headers=h)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "command"]
    assert api.post("/v1/jobs", json={"command": ["x"]}, headers=h).status_code == 201
    r = api.post("/v1/jobs", json={"command": ["x"]}, headers=h)
    assert r.status_code == 429 and "unfinished jobs" in r.json()["detail"]


def test_jobs_of_one_user_and_the_sdks_progress(api: TestClient, store: Store, admin: str,
                                                tmp_path: Path) -> None:
    from sqlalchemy import update

    from stint.runtime.tables import Job

    alice = api.post("/v1/tokens", json={"user": "alice"}, headers=auth(admin)).json()["token"]
    mine = api.post("/v1/jobs", json={"command": ["x"], "total_steps": 300},
                    headers=auth(alice)).json()["id"]
    api.post("/v1/jobs", json={"command": ["x"]}, headers=auth(admin))
    listed = api.get("/v1/jobs?user=alice", headers=auth(admin)).json()
    assert [j["id"] for j in listed] == [mine] and listed[0]["progress"] is None
    r = api.get("/v1/jobs?user=admin", headers=auth(alice))
    assert r.status_code == 403 and "only an admin" in r.json()["detail"]
    assert len(api.get("/v1/jobs?user=alice", headers=auth(alice)).json()) == 1
    assert api.get("/v1/jobs?user=nobody", headers=auth(admin)).status_code == 404
    (tmp_path / "jobs" / str(mine)).mkdir(parents=True)
    (tmp_path / "jobs" / str(mine) / "status.json").write_text(
        '{"state": "running", "step": 120, "checkpoint_step": 100, "rank": 0}')
    with store.session() as s:  # as the controller would once it ran
        s.execute(update(Job).where(Job.id == mine).values(state="running", first_start_at=1.0))
    got = api.get(f"/v1/jobs/{mine}", headers=auth(alice)).json()
    assert {k: got["progress"][k] for k in ("step", "checkpoint_step")} == {
        "step": 120, "checkpoint_step": 100}


def test_a_log_read_past_its_end_after_a_cap_starts_anew(tmp_path: Path) -> None:
    """A follower's offset beyond a log that was cut to its cap reads the log from its start
    (the note at its top says what was dropped) instead of waiting for it to grow back."""
    from stint.runtime.api import _read_log

    log = tmp_path / "log.txt"
    log.write_text("[stint] this log reached its cap\nnew line\n")
    text, nxt = _read_log(log, 10_000)
    assert text.startswith("[stint] this log reached its cap") and nxt == log.stat().st_size
    assert _read_log(log, nxt) == ("", nxt)
