"""``GET /v1/jobs`` as the dashboard pages it: filters by state, user, tier and array, a page
at an offset in either order, the total in ``X-Total-Count``; bad values are 422s naming the
parameter; a user pages through their own jobs only."""

from __future__ import annotations

import time
from pathlib import Path

from fastapi.testclient import TestClient
from sqlalchemy import update

from stint.runtime.api import ApiSettings, create_app
from stint.runtime.store import Store
from stint.runtime.tables import Job


def _h(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_the_job_list_filters_pages_and_counts(store: Store, tmp_path: Path) -> None:
    store.set_nodes([("node-0", 2)])
    admin = store.ensure_admin_token(tmp_path / "admin.token", time.time())
    assert admin is not None
    api = TestClient(create_app(store, ApiSettings(jobs_dir=tmp_path / "jobs")))
    alice = api.post("/v1/tokens", json={"user": "alice"}, headers=_h(admin)).json()["token"]
    arr = api.post("/v1/arrays", json={"command": ["x"], "array": "0-29", "tier": "basic"},
                   headers=_h(alice)).json()
    for _ in range(5):
        api.post("/v1/jobs", json={"command": ["x"], "tier": "premium"}, headers=_h(admin))
    with store.session() as s:  # ten of alice's tasks finished, as the controller would
        s.execute(update(Job).where(Job.id.in_(arr["job_ids"][:10])).values(state="succeeded"))

    r = api.get("/v1/jobs?limit=7&offset=0&order=desc", headers=_h(admin))
    assert r.headers["X-Total-Count"] == "35" and len(r.json()) == 7
    assert [j["tier"] for j in r.json()][:5] == ["premium"] * 5  # newest first
    r = api.get("/v1/jobs?state=succeeded&limit=4&offset=8", headers=_h(admin))
    assert r.headers["X-Total-Count"] == "10"
    assert [j["id"] for j in r.json()] == arr["job_ids"][8:10]  # the last page is short
    r = api.get(f"/v1/jobs?array={arr['array_id']}&state=queued&limit=5", headers=_h(admin))
    assert r.headers["X-Total-Count"] == "20" and {j["array_id"] for j in r.json()} == {
        arr["array_id"]}
    r = api.get("/v1/jobs?tier=premium&user=admin", headers=_h(admin))
    assert r.headers["X-Total-Count"] == "5" and {j["user"] for j in r.json()} == {"admin"}
    r = api.get("/v1/jobs?tier=premium", headers=_h(alice))  # not alice's: none
    assert r.headers["X-Total-Count"] == "0" and r.json() == []
    r = api.get("/v1/jobs?limit=3", headers=_h(alice))
    assert r.headers["X-Total-Count"] == "30" and {j["user"] for j in r.json()} == {"alice"}
    for bad, name in (("tier=gold", "tier"), ("state=done", "state"), ("limit=0", "limit"),
                      ("offset=-1", "offset"), ("array=x", "array"), ("order=up", "order"),
                      ("limit=10001", "limit")):
        r = api.get(f"/v1/jobs?{bad}", headers=_h(admin))
        assert r.status_code == 422 and r.json()["detail"][0]["loc"][:2] == ["query", name], bad


def test_the_queue_order_pages_by_position_with_unplaced_jobs_last(store: Store,
                                                                  tmp_path: Path) -> None:
    store.set_nodes([("node-0", 2)])
    admin = store.ensure_admin_token(tmp_path / "admin.token", time.time())
    assert admin is not None
    api = TestClient(create_app(store, ApiSettings(jobs_dir=tmp_path / "jobs")))
    ids = [api.post("/v1/jobs", json={"command": ["x"]}, headers=_h(admin)).json()["id"]
           for _ in range(6)]
    positions = {ids[0]: 3, ids[1]: None, ids[2]: 1, ids[3]: 2, ids[4]: None, ids[5]: 4}
    with store.session() as s:  # the forecast's places, as the controller writes them
        for job_id, place in positions.items():
            s.execute(update(Job).where(Job.id == job_id).values(queue_position=place))

    r = api.get("/v1/jobs?state=queued&order=queue&limit=5", headers=_h(admin))
    assert [j["id"] for j in r.json()] == [ids[2], ids[3], ids[0], ids[5], ids[1]]
    assert r.headers["X-Total-Count"] == "6"
