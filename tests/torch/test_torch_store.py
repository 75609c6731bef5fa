"""CheckpointStore: round trip, deduplication, pruning, corruption handling (in-process)."""

from __future__ import annotations

import pytest
import torch

from stint.torch.store import CheckpointStore

SMALL_TENSOR = 1 << 16  # 64 KiB


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


def _unique(step: int) -> dict:
    """A state sharing no content with any other step's (identical content is rightly stored once)."""
    state = _state(step)
    state["frozen"] = state["frozen"] + step
    return state


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


def _blob(store: CheckpointStore, step: int, shape: list[int]) -> dict:
    """Where checkpoint ``step`` keeps (the first piece of) the tensor of ``shape``: file, offset, size."""
    (ckpt,) = [c for c in store.checkpoints() if c.step == step]
    (h, _, _), *_ = next(t["parts"] for t in ckpt.manifest["tensors"] if t["shape"] == shape)
    return ckpt.manifest["blobs"][h]


BIG = [SMALL_TENSOR // 4 + 10]


def test_unchanged_tensors_are_not_written_again(tmp_path):
    store = CheckpointStore(tmp_path, keep=3)
    state = _state(1)  # the same tensor objects across saves, as a model's are
    first = store.save(1, state)
    state["big"].fill_(2.0)  # changed in place; everything else untouched
    again = store.save(2, state)
    assert again.bytes_total == first.bytes_total
    assert again.bytes_written == state["big"].numel() * 4
    assert _blob(store, 2, [SMALL_TENSOR])["file"] == "step-000000000001.ckpt"  # "frozen": shared
    same = store.save(3, state)  # nothing changed: only the manifest is new
    assert same.bytes_written == 0 and same.blobs_written == 0
    for step, value in ((1, 1.0), (2, 2.0), (3, 2.0)):
        (ckpt,) = [c for c in store.checkpoints() if c.step == step]
        assert torch.equal(store.load(ckpt)["big"], torch.full(BIG, value))


def test_prune_keeps_the_newest_and_removes_the_rest(tmp_path):
    store = CheckpointStore(tmp_path, keep=2)
    for step in range(1, 5):
        store.save(step, _unique(step))  # nothing shared between checkpoints
    assert [c.step for c in store.checkpoints()] == [4, 3]
    assert {p.name for p in tmp_path.iterdir()} == {c.path.name for c in store.checkpoints()}


def test_prune_keeps_an_older_file_while_a_kept_checkpoint_reads_from_it(tmp_path):
    store = CheckpointStore(tmp_path, keep=2)
    state = _state(1)
    for step in range(1, 5):
        state["big"].fill_(float(step))
        store.save(step, state)
    # keep=2: two checkpoints. Step 1's file stays only as the holder of "frozen" for 3 and 4:
    # not listed, and its other blobs' disk blocks are freed.
    assert [c.step for c in store.checkpoints()] == [4, 3]
    holder = tmp_path / "step-000000000001.ckpt"
    assert holder.exists()
    frozen = _state(0)["frozen"].numel() * 4
    assert holder.stat().st_blocks * 512 < frozen + 3 * SMALL_TENSOR  # "big" and the rest punched out
    assert torch.equal(store.load_latest()[1]["frozen"], _state(0)["frozen"])
    store.save(5, _unique(5))  # new content throughout: the older files are no longer needed
    store.save(6, _unique(6))
    assert [c.step for c in store.checkpoints()] == [6, 5]
    assert {p.name for p in tmp_path.iterdir()} == {"step-000000000006.ckpt", "step-000000000005.ckpt"}


def test_a_corrupt_blob_is_detected_and_the_older_checkpoint_loaded(tmp_path, capsys):
    store = CheckpointStore(tmp_path, keep=2)
    store.save(1, _state(1))
    newest = store.save(2, _state(2))
    assert newest.step == 2
    loc = _blob(store, 2, BIG)
    path = tmp_path / loc["file"]
    data = bytearray(path.read_bytes())
    data[loc["offset"] + 100] ^= 0xFF  # same size, different content: only the hash can tell
    path.write_bytes(bytes(data))
    ckpt, state = store.load_latest()
    assert ckpt.step == 1
    _assert_same(state, _state(1))
    assert "skipping corrupt checkpoint" in capsys.readouterr().err


def test_a_damaged_manifest_or_cut_file_is_not_a_checkpoint_and_each_skip_is_reported(tmp_path, capsys):
    store = CheckpointStore(tmp_path, keep=3)
    for step in (1, 2, 3):
        store.save(step, _unique(step))
    f3 = tmp_path / "step-000000000003.ckpt"
    f3.write_bytes(f3.read_bytes().replace(b'"step": 3', b'"step": 9'))  # checksum no longer matches
    f2 = tmp_path / "step-000000000002.ckpt"
    f2.write_bytes(f2.read_bytes()[:-1])  # footer cut short
    assert [c.step for c in store.checkpoints()] == [1]
    assert store.load_latest()[0].step == 1
    err = capsys.readouterr().err
    assert f"skipping checkpoint {f2}: cut short or not a checkpoint" in err
    assert f"skipping checkpoint {f3}: its manifest does not match its checksum" in err


def test_a_checkpoint_whose_shared_file_is_gone_is_not_a_checkpoint(tmp_path):
    store = CheckpointStore(tmp_path, keep=3)
    state = _state(1)
    store.save(1, state)
    state["big"].fill_(2.0)
    store.save(2, state)  # reads "frozen" from step 1's file
    store.save(3, _unique(3))  # self-contained
    (tmp_path / "step-000000000001.ckpt").unlink()
    assert [c.step for c in store.checkpoints()] == [3]


def test_saving_an_older_step_forks_history(tmp_path):
    store = CheckpointStore(tmp_path, keep=3)
    for step in (1, 2, 3):
        store.save(step, _state(step))
    store.save(2, _state(2))  # resumed from 2 (say 3 was corrupt): 3 is no longer this job's future
    assert [c.step for c in store.checkpoints()] == [2, 1]


def test_keep_must_be_positive(tmp_path):
    with pytest.raises(ValueError, match="keep=0"):
        CheckpointStore(tmp_path, keep=0)


def test_a_tensor_changed_in_place_is_written_again_and_loads_right(tmp_path):
    """The store guesses "changed" from the version counter and writes ahead of the hash."""
    store = CheckpointStore(tmp_path)
    big = torch.arange(SMALL_TENSOR, dtype=torch.float32)
    store.save(1, {"w": big})
    big.add_(0.0)  # bumps the version counter but not the content: written again, not shared
    again = store.save(2, {"w": big})
    assert again.bytes_written == big.numel() * 4
    assert _blob(store, 2, [SMALL_TENSOR])["file"] == "step-000000000002.ckpt"
    big.add_(1.0)
    third = store.save(3, {"w": big})
    assert third.bytes_written == big.numel() * 4
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp")]
    ckpt, state = store.load_latest()
    assert ckpt.step == 3 and torch.equal(state["w"], big)
    (ckpt2,) = [c for c in store.checkpoints() if c.step == 2]
    assert torch.equal(store.load(ckpt2)["w"], torch.arange(SMALL_TENSOR, dtype=torch.float32))


def test_a_failed_save_leaves_no_file_and_the_older_checkpoints_intact(tmp_path, monkeypatch):
    store = CheckpointStore(tmp_path)
    store.save(1, _unique(1))

    def broken(before):
        raise OSError("disk full")  # after the changed blobs were queued for writing

    monkeypatch.setattr(store, "_known_blobs", broken)
    with pytest.raises(OSError, match="disk full"):
        store.save(2, _unique(2))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-000000000001.ckpt"]
    monkeypatch.undo()
    store.save(3, _unique(3))
    assert [c.step for c in store.checkpoints()] == [3, 1]
    _assert_same(store.load_latest()[1], _unique(3))


def test_sources_must_match_the_state_tensor_for_tensor(tmp_path):
    with pytest.raises(ValueError, match="sources: 1 tensors for a state of 2"):
        CheckpointStore(tmp_path).save(1, {"a": torch.ones(2), "b": torch.ones(3)}, sources=[torch.ones(2)])
    assert not list(tmp_path.iterdir())  # nothing left behind


def _big(step: int) -> dict:
    """Four 256 KiB tensors and a small one, all new content at every step."""
    return {f"t{i}": torch.full((SMALL_TENSOR,), float(10 * step + i)) for i in range(4)} | {
        "small": torch.tensor([step]), "step": step}


def test_every_writer_writes_a_part_keep_n_counts_checkpoints_and_any_count_loads(tmp_path):
    from torch_helpers import write_shared

    for step in range(1, 5):
        stats = write_shared(tmp_path, step, [_big(step)] * 3, private={"rng": torch.tensor([step, 7])})
        assert all(s.bytes_written > 0 for s in stats), stats  # each writer wrote its share
        assert sum(s.bytes_written for s in stats) == stats[0].bytes_total
    store = CheckpointStore(tmp_path, keep=2)
    assert [c.step for c in store.checkpoints()] == [4, 3]  # keep=2: two full checkpoints ...
    names = {f"step-{s:012d}{end}" for s in (3, 4) for end in (".ckpt", ".w1.part", ".w2.part")}
    assert {p.name for p in tmp_path.iterdir()} == names  # ... and nothing else on disk
    newest = store.checkpoints()[0]
    assert newest.manifest["writers"] == 3
    owners = {loc["file"] for loc in newest.manifest["blobs"].values()}
    assert owners == {n for n in names if n.startswith("step-000000000004")}  # blobs in all three files
    _assert_same(store.load(newest), _big(4) | {"rng": torch.tensor([4, 7])})  # one process reads all


def test_a_writer_holding_another_state_fails_the_checkpoint_on_every_writer(tmp_path):
    from torch_helpers import write_shared

    write_shared(tmp_path, 1, [_big(1)] * 2)
    other = _big(2) | {"t3": torch.zeros(SMALL_TENSOR + 1)}
    results = write_shared(tmp_path, 2, [_big(2), other])
    assert all(isinstance(r, RuntimeError) for r in results), results
    assert "worker 1 holds another state than worker 0" in str(results[0])
    assert [c.step for c in CheckpointStore(tmp_path).checkpoints()] == [1]


def test_a_format_2_checkpoint_from_before_the_shared_write_still_loads(tmp_path):
    """The one-writer layout (one blob per whole tensor, ``blob``/``offset``/``nbytes``) a job
    wrote before upgrading: built here byte for byte as that version wrote it."""
    import hashlib
    import json
    import struct

    from stint.torch import codec

    state = {"w": torch.arange(10.0), "n": 3}
    skeleton, (w,) = codec.split(state)
    raw = w.numpy().tobytes()
    h_skel, h_w = hashlib.sha256(skeleton).hexdigest(), hashlib.sha256(raw).hexdigest()
    name = "step-000000000005.ckpt"
    body = {"format": 2, "step": 5, "created": 0.0, "skeleton": h_skel, "meta": {},
            "tensors": [{"blob": h_w, "offset": 0, "nbytes": len(raw), "dtype": "torch.float32", "shape": [10]}],
            "blobs": {h_skel: {"file": name, "offset": 0, "size": len(skeleton)},
                      h_w: {"file": name, "offset": len(skeleton), "size": len(raw)}}}
    body["checksum"] = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
    manifest = json.dumps(body).encode()
    (tmp_path / name).write_bytes(skeleton + raw + manifest + struct.pack("<Q8s", len(manifest), b"STINTCK2"))
    ckpt, loaded = CheckpointStore(tmp_path).load_latest()
    assert ckpt.step == 5 and loaded["n"] == 3 and torch.equal(loaded["w"], state["w"])


def test_tensors_of_equal_content_load_into_memory_of_their_own(tmp_path):
    """Equal blobs are stored once; loaded, each tensor still has its own memory (an optimizer
    stepping on two of them in place must not step both twice)."""
    store = CheckpointStore(tmp_path)
    store.save(1, {"a": torch.zeros(SMALL_TENSOR), "b": torch.zeros(SMALL_TENSOR)})
    _, state = store.load_latest()
    state["a"].add_(1.0)
    assert torch.equal(state["b"], torch.zeros(SMALL_TENSOR))


def test_owned_tensors_are_written_by_their_owner_alone(tmp_path):
    """Sharded state: writer w passes its own shard and a meta stand-in for the other's; the
    checkpoint holds both shards, each from its owner's part, plus the replicated rest."""
    from torch_helpers import ThreadPeers

    shards = [torch.full((5000,), 1.0), torch.full((7000,), 2.0)]
    peers = ThreadPeers.group(2)
    results = [None, None]

    def run(w: int) -> None:
        mine = [s if i == w else torch.empty(s.shape, device="meta") for i, s in enumerate(shards)]
        state = {"shards": mine, "replicated": torch.arange(3000.0)}
        store = CheckpointStore(tmp_path)
        cut = store.cut(state, None, writers=2, owners={id(t): i for i, t in enumerate(mine)})
        results[w] = store.write(4, cut, {}, peers[w])

    import threading
    threads = [threading.Thread(target=run, args=(w,)) for w in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(r is not None for r in results), results
    ckpt = CheckpointStore(tmp_path).checkpoints()[0]
    _, state = CheckpointStore(tmp_path).load_latest()
    assert torch.equal(state["shards"][0], shards[0]) and torch.equal(state["shards"][1], shards[1])
    assert torch.equal(state["replicated"], torch.arange(3000.0))
    by_file = {}
    for entry, shard in zip(ckpt.manifest["tensors"][:2], shards, strict=False):
        by_file[float(shard[0])] = {ckpt.manifest["blobs"][h]["file"] for h, _, _ in entry["parts"]}
    assert by_file == {1.0: {ckpt.path.name}, 2.0: {"step-000000000004.w1.part"}}


def test_every_part_is_fsynced_before_its_rename_and_the_manifest_comes_last(tmp_path, monkeypatch):
    """The write order a crash relies on: each file's data fsynced before it is renamed into
    place, the directory fsynced after each rename, and worker 0's manifest file renamed only
    after every other worker's part is durable."""
    import os
    import threading

    from torch_helpers import write_shared

    lock, events, paths = threading.Lock(), [], {}
    real_open, real_fsync, real_replace, real_close = os.open, os.fsync, os.replace, os.close

    def log(*event):
        with lock:
            events.append((threading.get_ident(), *event))

    def opened(path, *args, **kw):
        fd = real_open(path, *args, **kw)
        with lock:
            paths[fd] = str(path)
        return fd

    def fsynced(fd):
        real_fsync(fd)
        log("fsync", paths.get(fd, "?"))

    def replaced(src, dst):
        real_replace(src, dst)
        log("replace", str(src), str(dst))

    def closed(fd):
        with lock:
            paths.pop(fd, None)
        real_close(fd)

    monkeypatch.setattr(os, "open", opened)
    monkeypatch.setattr(os, "fsync", fsynced)
    monkeypatch.setattr(os, "replace", replaced)
    monkeypatch.setattr(os, "close", closed)
    write_shared(tmp_path, 1, [_big(1)] * 3)
    # Parts are written by several threads at once: order is checked per thread.
    renames = [i for i, e in enumerate(events) if e[1] == "replace"]
    assert len(renames) == 3
    for i in renames:
        thread, _, src, dst = events[i]
        assert (thread, "fsync", src) in events[:i], f"{dst} renamed before its data was fsynced"
        after = [e[1:] for e in events[i + 1:] if e[0] == thread]
        assert after[:1] == [("fsync", str(tmp_path))], \
            f"the directory was not fsynced after {dst}'s rename"
    assert events[renames[-1]][3].endswith(".ckpt")  # the manifest's file: last of all
