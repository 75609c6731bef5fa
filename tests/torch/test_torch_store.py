"""CheckpointStore: round trip, deduplication, pruning, corruption handling (in-process)."""

from __future__ import annotations

import json

import pytest
import torch

from stint.torch.store import SMALL_TENSOR, CheckpointStore


def _state(step: int) -> dict:
    return {
        "big": torch.full((SMALL_TENSOR // 4 + 10,), float(step)),  # its own blob
        "frozen": torch.arange(SMALL_TENSOR, dtype=torch.float32),  # never changes: dedup
        "small": {"bf16": torch.ones(3, dtype=torch.bfloat16) * step, "scalar": torch.tensor(step)},
        "mask": torch.tensor([True, False]),
        "empty": torch.empty(0, 4),
        "view": torch.arange(12.0).reshape(3, 4).t(),  # non-contiguous
        "counters": {"step": step, "name": "x"},
    }


def _assert_same(a, b) -> None:
    assert a.keys() == b.keys()
    for k in a:
        if isinstance(a[k], dict):
            _assert_same(a[k], b[k])
        elif isinstance(a[k], torch.Tensor):
            assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape and torch.equal(a[k], b[k]), k
        else:
            assert a[k] == b[k], k


def test_round_trip_keeps_dtypes_shapes_and_values(tmp_path):
    store = CheckpointStore(tmp_path)
    store.save(7, _state(7), {"logical_world_size": 4})
    ckpt, state = store.load_latest()
    assert ckpt.step == 7 and ckpt.meta == {"logical_world_size": 4}
    _assert_same(state, _state(7))


def test_unchanged_tensors_are_not_written_again(tmp_path):
    store = CheckpointStore(tmp_path, keep=3)
    first = store.save(1, _state(1))
    again = store.save(2, _state(2))
    frozen = SMALL_TENSOR * 4
    # Only "frozen" is identical between steps 1 and 2: it is stored once.
    assert again.bytes_total == first.bytes_total
    assert again.bytes_written == first.bytes_written - frozen
    same = store.save(3, _state(2))  # same content as step 2: only the manifest is new
    assert same.bytes_written == 0 and same.blobs_written == 0


def test_prune_keeps_the_newest_and_removes_orphan_blobs(tmp_path):
    store = CheckpointStore(tmp_path, keep=2)
    for step in range(1, 5):
        store.save(step, _state(step))
    assert [c.step for c in store.checkpoints()] == [4, 3]
    live = {h for c in store.checkpoints() for h in c.manifest["blobs"]}
    on_disk = {p.name for p in (tmp_path / "blobs").rglob("*") if p.is_file()}
    assert on_disk == live


def test_a_corrupt_blob_is_detected_and_the_older_checkpoint_loaded(tmp_path, capsys):
    store = CheckpointStore(tmp_path, keep=2)
    store.save(1, _state(1))
    newest = store.save(2, _state(2))
    assert newest.step == 2
    manifest = json.loads((tmp_path / "manifests" / "step-000000000002.json").read_text())
    big = next(t["blob"] for t in manifest["tensors"] if t["shape"] == [SMALL_TENSOR // 4 + 10])
    path = tmp_path / "blobs" / big
    data = bytearray(path.read_bytes())
    data[100] ^= 0xFF  # same size, different content: only the hash can tell
    path.write_bytes(bytes(data))
    ckpt, state = store.load_latest()
    assert ckpt.step == 1
    _assert_same(state, _state(1))
    assert "skipping corrupt checkpoint" in capsys.readouterr().err


def test_a_damaged_manifest_or_missing_blob_is_not_a_checkpoint(tmp_path):
    store = CheckpointStore(tmp_path, keep=3)
    for step in (1, 2, 3):
        store.save(step, _state(step))
    m3 = tmp_path / "manifests" / "step-000000000003.json"
    m3.write_text(m3.read_text().replace('"step": 3', '"step": 9'))  # checksum no longer matches
    m2 = json.loads((tmp_path / "manifests" / "step-000000000002.json").read_text())
    big = next(t["blob"] for t in m2["tensors"] if t["shape"] == [SMALL_TENSOR // 4 + 10])
    (tmp_path / "blobs" / big).unlink()
    assert [c.step for c in store.checkpoints()] == [1]


def test_saving_an_older_step_forks_history(tmp_path):
    store = CheckpointStore(tmp_path, keep=3)
    for step in (1, 2, 3):
        store.save(step, _state(step))
    store.save(2, _state(2))  # resumed from 2 (say 3 was corrupt): 3 is no longer this job's future
    assert [c.step for c in store.checkpoints()] == [2, 1]


def test_keep_must_be_positive(tmp_path):
    with pytest.raises(ValueError, match="keep=0"):
        CheckpointStore(tmp_path, keep=0)


def test_tensors_written_ahead_of_their_hash_are_committed_or_dropped_correctly(tmp_path):
    """Changed tensors are written while hashed; if the content is an old blob after all, nothing stays."""
    store = CheckpointStore(tmp_path)
    big = torch.arange(SMALL_TENSOR, dtype=torch.float32)
    store.save(1, {"w": big})
    big.add_(0.0)  # bumps the version counter (so the store guesses "changed") but not the content
    again = store.save(2, {"w": big})
    assert again.bytes_written == 0 and again.blobs_written == 0
    big.add_(1.0)  # really changed: written ahead, then committed under its hash
    third = store.save(3, {"w": big})
    assert third.blobs_written == 1 and third.bytes_written == big.numel() * 4
    assert sorted(p.name for p in (tmp_path / "blobs").iterdir() if p.name.startswith(".tmp")) == []
    ckpt, state = store.load_latest()
    assert ckpt.step == 3 and torch.equal(state["w"], big)
    (ckpt2,) = [c for c in store.checkpoints() if c.step == 2]
    assert torch.equal(store.load(ckpt2)["w"], torch.arange(SMALL_TENSOR, dtype=torch.float32))
