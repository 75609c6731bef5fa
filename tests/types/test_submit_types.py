"""A submission is checked against the cluster's accelerator types: a type no node has, or more
GPUs than any type the job may run on holds, is a 422 naming the type and the known types."""

from __future__ import annotations

import time
from pathlib import Path

from fastapi.testclient import TestClient

from stint.runtime.api import ApiSettings, create_app
from stint.runtime.schemas import type_refusal
from stint.runtime.store import Store


def test_a_type_no_node_has_or_too_many_gpus_of_one_type_is_refused(store: Store, tmp_path: Path) -> None:
    store.set_nodes([("v100-0", 4), ("v100-1", 4), ("k80-0", 2)], types=["v100", "v100", "k80"])
    token = store.ensure_admin_token(tmp_path / "admin.token", time.time())
    api = TestClient(create_app(store, ApiSettings(jobs_dir=tmp_path / "jobs")))
    h = {"Authorization": f"Bearer {token}"}

    def post(**body: object) -> tuple[int, str, list[str]]:
        r = api.post("/v1/jobs", json={"command": ["x"], **body}, headers=h)
        if r.status_code != 422:
            return r.status_code, "", []
        err = r.json()["detail"][0]
        return 422, err["msg"], err["loc"]

    code, msg, loc = post(gpu_types=["a100"])
    assert code == 422 and loc == ["body", "gpu_types"]
    assert msg == "no node has accelerator type a100 (known types: k80, v100)"
    code, msg, _ = post(gpus=4, gpu_types=["k80"])  # k80 has 2 GPUs in all
    assert code == 422 and msg.startswith("4 GPUs is more than any type it may run on has (k80: 2)")
    code, msg, _ = post(gpus=9)  # 10 GPUs in all, but a job runs on one type: at most 8
    assert code == 422 and "(k80: 2, v100: 8)" in msg
    assert post(gpus=8)[0] == 201
    assert post(gpus=2, gpu_types=["k80", "v100"])[0] == 201
    assert post(min_gpus=1, max_gpus=4, gpus=1, gpu_types=["k80"])[0] == 422  # it may grow to 4


def test_on_an_untyped_cluster_only_naming_a_type_is_refused() -> None:
    assert type_refusal(["a100"], 1, {"": 8}) == \
        "no node has accelerator type a100 (known types: none: the nodes are untyped)"
    assert type_refusal([], 8, {"": 8}) is None


def test_a_ray_nodes_type_is_read_from_its_resources() -> None:
    from stint.runtime.executor.ray import node_gpu_type

    # as ray.nodes() reports them: our custom resource wins over Ray's own accelerator_type
    assert node_gpu_type({"stint_node_n0": 1.0, "stint_slot": 4.0, "stint_gpu_type_v100": 1.0,
                          "accelerator_type:A100": 1.0}) == "v100"
    assert node_gpu_type({"stint_node_n1": 1.0, "GPU": 8.0, "accelerator_type:A100": 1.0}) == "a100"
    assert node_gpu_type({"stint_node_n2": 1.0, "stint_slot": 2.0}) == ""
