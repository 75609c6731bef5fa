"""API fuzzing: schemathesis generates requests (valid and invalid) for every operation of the
OpenAPI schema; no request may cause a 5xx, and every accepted job must be stored (none lost)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, assume, given, settings

from stint.runtime.api import ApiSettings, create_app
from stint.runtime.store import Caller, Store

# Examples per operation, with and without a token; bounded to keep the suite fast.
EXAMPLES = {True: 8, False: 2}


@pytest.mark.slow
def test_fuzzed_requests_cause_no_server_error_and_lose_no_job(store: Store, tmp_path: Path) -> None:
    store.set_nodes([("node-0", 2), ("node-1", 2)])
    token = store.ensure_admin_token(tmp_path / "admin.token", time.time())
    app = create_app(store, ApiSettings(jobs_dir=tmp_path / "jobs"))
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    accepted: set[int] = set()
    operations = [op.ok() for op in schema.get_all_operations()]
    assert len(operations) >= 10

    for op in operations:
        for headers in ({"Authorization": f"Bearer {token}"}, {}):
            _fuzz(op, headers, accepted)

    stored = {j.id for j in store.list_jobs(Caller(0, "test", True), limit=100_000)}
    assert accepted <= stored  # every 201 is a stored job
    assert store.count_jobs() == len(stored)
    for job_id in accepted:
        assert store.transitions(job_id)[0].dst == "queued"


def _fuzz(op: schemathesis.APIOperation, headers: dict[str, str], accepted: set[int]) -> None:
    @settings(max_examples=EXAMPLES[bool(headers)], deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(case=op.as_strategy())
    def run(case: schemathesis.Case) -> None:
        if op.path == "/v1/tokens" and isinstance(case.body, dict):
            assume(case.body.get("user") != "admin")  # would revoke the token the fuzzer uses
        r = case.call(headers=headers)
        where = f"{case.method} {case.formatted_path} {case.body!r}"
        assert r.status_code < 500, f"{where} -> {r.status_code} {r.text}"
        if not headers and op.path != "/v1/health":
            assert r.status_code in (401, 404, 405, 422), where
        if op.method == "post" and op.path == "/v1/jobs" and r.status_code == 201:
            accepted.add(r.json()["id"])

    run()
