"""A job's checkpoint directory: content-addressed blobs and atomic manifests.

Layout of ``root`` (``STINT_CKPT_DIR``)::

    blobs/abcdef...         raw bytes, named by their SHA-256; written to a temp name, fsynced,
                            then renamed, so a blob name always means complete content
    manifests/step-000000000120.json
                            one checkpoint: skeleton and tensor table, meta, and a checksum of
                            itself; written to a temp file, fsynced, renamed, directory fsynced

A checkpoint exists only once its manifest is renamed into place, after every blob it names is
durable, so a writer killed at any instant leaves either the old set of checkpoints or the old
set plus one complete new one. Loading verifies every blob's hash as well, so even bit rot is
caught: a corrupt checkpoint is skipped in favour of the next older one, never loaded.

Identical content is stored once (Singularity's per-buffer checksums): unchanged tensors across
steps (frozen layers, constant buffers) and across logical ranks cost nothing to write again.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from stint.torch import codec

FORMAT = 1
SMALL_TENSOR = 1 << 16  # tensors below 64 KiB are packed into one blob: fewer files, same dedup
_MANIFEST_GLOB = "step-*.json"


class CorruptCheckpoint(Exception):
    """A checkpoint's manifest or blobs do not match their checksums."""


@dataclass(frozen=True)
class Checkpoint:
    """A structurally valid checkpoint: its manifest verifies and every blob it names exists."""

    step: int
    path: Path
    manifest: dict[str, Any]

    @property
    def meta(self) -> dict[str, Any]:
        return dict(self.manifest["meta"])


@dataclass(frozen=True)
class SaveStats:
    """What one save cost: sizes before and after deduplication, and wall time."""

    step: int
    bytes_total: int
    bytes_written: int
    blobs_total: int
    blobs_written: int
    seconds: float


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_tmp(path: Path, data: memoryview | bytes) -> tuple[int, Path]:
    """Write ``data`` to a fresh temp file next to ``path``; return its still open fd and name."""
    tmp = path.with_name(f".tmp-{path.name}-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        view = memoryview(data).cast("B")
        while view:
            view = view[os.write(fd, view) :]
    except BaseException:
        os.close(fd)
        tmp.unlink(missing_ok=True)
        raise
    return fd, tmp


def _commit(fd: int, tmp: Path, path: Path) -> None:
    """fsync and close a file written by :func:`_write_tmp`, then rename it into place."""
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def _commit_written(written: Future[tuple[int, Path]], path: Path) -> None:
    """Commit a file written ahead of knowing its name, once its write is done."""
    _commit(*written.result(), path)


def _discard(written: Future[tuple[int, Path]]) -> None:
    """Drop a file written ahead that turned out to duplicate a durable blob (never fsynced)."""
    fd, tmp = written.result()
    os.close(fd)
    tmp.unlink(missing_ok=True)


def _write_durably(path: Path, data: memoryview | bytes) -> None:
    """Write ``data`` to a fresh temp file next to ``path``, fsync it, and rename it to ``path``."""
    _commit(*_write_tmp(path, data), path)


def _sha256(data: memoryview | bytearray) -> str:
    return hashlib.sha256(data).hexdigest()


def _checksum(body: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


class CheckpointStore:
    """Save, list, load and prune the checkpoints of one job. One writer at a time."""

    def __init__(self, root: str | os.PathLike[str], keep: int = 2) -> None:
        if keep < 1:
            raise ValueError(f"keep={keep}: at least one checkpoint must be kept")
        self.root = Path(root)
        self.keep = keep
        self._blobs = self.root / "blobs"
        self._manifests = self.root / "manifests"
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="stint-ckpt")
        # fsync waits for the device, not the CPU: on its own threads it overlaps the next write.
        self._syncer = ThreadPoolExecutor(max_workers=2, thread_name_prefix="stint-fsync")
        self._last_keys: set[tuple[tuple[int, int, int], ...]] = set()
        # SHA-256 is the CPU cost of a checkpoint; hashlib drops the GIL, so two threads use two cores.
        self._hasher = ThreadPoolExecutor(max_workers=2, thread_name_prefix="stint-hash")

    # ---- writing -------------------------------------------------------------------------
    def save(self, step: int, state: Any, meta: dict[str, Any] | None = None) -> SaveStats:
        """Write ``state`` (anything picklable; tensors stored raw) as the checkpoint of ``step``."""
        t0 = time.perf_counter()
        self._blobs.mkdir(parents=True, exist_ok=True)
        self._manifests.mkdir(parents=True, exist_ok=True)
        skeleton, tensors = codec.split(state)
        groups = self._group(tensors)
        blob_sizes: dict[str, int] = {}
        metas: list[codec.TensorMeta | None] = [None] * len(tensors)
        pending: list[Future[Any]] = []
        written = blobs_written = 0
        items: list[tuple[memoryview, list[tuple[int, int, int]]]] = [(memoryview(skeleton), [])] + groups
        hashes = [self._hasher.submit(_sha256, data) for data, _ in items]  # in order, 2 at a time
        # Blobs whose tensors changed since this store's last save are written while they are
        # hashed (the hash only names the file); unchanged ones are hashed first, so a dedup hit
        # costs no write. A wrong guess costs one unneeded copy into the page cache, never a bad blob.
        keys = [tuple(self._key(tensors[i]) for i, _, _ in members) for _, members in items]
        early = {
            n: self._writer.submit(_write_tmp, self._blobs / f"new-{n}", data)
            for n, ((data, members), key) in enumerate(zip(items, keys))
            if members and key not in self._last_keys
        }
        self._last_keys = set(keys)
        for n, ((data, members), hashed) in enumerate(zip(items, hashes)):
            h = hashed.result()  # blob i is written while blobs i+1, i+2 are hashed
            for index, offset, nbytes in members:
                t = tensors[index]
                metas[index] = codec.TensorMeta(h, offset, nbytes, str(t.dtype), tuple(t.shape))
            path = self._blob_path(h)
            if h in blob_sizes or (path.exists() and path.stat().st_size == len(data)):
                blob_sizes[h] = len(data)  # deduplicated: identical content is already durable
                if n in early:
                    pending.append(self._syncer.submit(_discard, early[n]))
                continue
            blob_sizes[h] = len(data)
            if n in early:
                pending.append(self._syncer.submit(_commit_written, early[n], path))
            else:
                pending.append(self._writer.submit(self._write_blob, path, data))
            written += len(data)
            blobs_written += 1
        for f in pending:
            r = f.result()
            if isinstance(r, Future):
                r.result()  # written, then fsynced and renamed
        if pending:
            _fsync_dir(self._blobs)  # the renames are durable too
        body = {
            "format": FORMAT,
            "step": step,
            "created": time.time(),
            "skeleton": hashlib.sha256(skeleton).hexdigest(),
            "tensors": [asdict(m) for m in metas if m is not None],
            "blobs": blob_sizes,
            "meta": meta or {},
        }
        manifest = dict(body, checksum=_checksum(body))
        _write_durably(self._manifest_path(step), json.dumps(manifest, indent=1).encode())
        _fsync_dir(self._manifests)
        total = sum(blob_sizes.values())
        stats = SaveStats(step, total, written, len(blob_sizes), blobs_written, 0.0)
        self.prune(newest=step)
        return SaveStats(**dict(asdict(stats), seconds=time.perf_counter() - t0))

    def _write_blob(self, path: Path, data: memoryview) -> Future[None]:
        """Write one blob on the writer thread; its fsync and rename run on a sync thread."""
        fd, tmp = _write_tmp(path, data)
        return self._syncer.submit(_commit, fd, tmp, path)

    @staticmethod
    def _key(t: torch.Tensor) -> tuple[int, int, int]:
        """Where ``t`` lives and its in-place version counter: equal keys suggest equal content."""
        return (t.data_ptr(), t._version, t.numel() * t.element_size())

    def _group(self, tensors: list[torch.Tensor]) -> list[tuple[memoryview, list[tuple[int, int, int]]]]:
        """One blob per large tensor; all small tensors packed, in order, into one more blob."""
        groups: list[tuple[memoryview, list[tuple[int, int, int]]]] = []
        pack = bytearray()
        packed: list[tuple[int, int, int]] = []
        for i, t in enumerate(tensors):
            data = codec.tensor_bytes(t)
            if len(data) >= SMALL_TENSOR:
                groups.append((data, [(i, 0, len(data))]))
            else:
                packed.append((i, len(pack), len(data)))
                pack += data
        if packed:
            groups.append((memoryview(pack), packed))
        return groups

    # ---- reading -------------------------------------------------------------------------
    def checkpoints(self) -> list[Checkpoint]:
        """Structurally valid checkpoints, newest first (blob contents are checked by load)."""
        found = []
        for path in self._manifests.glob(_MANIFEST_GLOB) if self._manifests.is_dir() else []:
            ckpt = self._read_manifest(path)
            if ckpt is not None:
                found.append(ckpt)
        return sorted(found, key=lambda c: c.step, reverse=True)

    def load(self, ckpt: Checkpoint, verify: bool = True) -> Any:
        """The state saved in ``ckpt``; raises CorruptCheckpoint if any blob fails its hash."""
        buffers: dict[str, memoryview] = {}
        blobs = list(ckpt.manifest["blobs"].items())
        # Read on the I/O thread while two threads verify what was read (all drop the GIL).
        reads = [self._writer.submit(self._read_blob, h, size) for h, size in blobs]
        checks = [self._hasher.submit(lambda r: _sha256(r.result()), r) if verify else r for r in reads]
        for (h, _), read, check in zip(blobs, reads, checks):
            buf = read.result()
            if verify and check.result() != h:
                raise CorruptCheckpoint(f"{self._blob_path(h)}: content does not match its hash")
            buffers[h] = memoryview(buf)
        tensors = [
            codec.tensor_from(buffers[m["blob"]], codec.TensorMeta(**dict(m, shape=tuple(m["shape"]))))
            for m in ckpt.manifest["tensors"]
        ]
        return codec.join(bytes(buffers[ckpt.manifest["skeleton"]]), tensors)

    def _read_blob(self, h: str, size: int) -> bytearray:
        buf = bytearray(size)
        with open(self._blob_path(h), "rb", buffering=0) as f:
            if f.readinto(buf) != size or f.read(1):
                raise CorruptCheckpoint(f"{self._blob_path(h)}: size differs from its manifest")
        return buf

    def load_latest(self, verify: bool = True) -> tuple[Checkpoint, Any] | None:
        """The newest checkpoint that loads cleanly, skipping (and reporting) corrupt ones."""
        for ckpt in self.checkpoints():
            try:
                return ckpt, self.load(ckpt, verify=verify)
            except (CorruptCheckpoint, OSError) as e:
                print(f"stint: skipping corrupt checkpoint {ckpt.path}: {e}", file=sys.stderr)
        return None

    def _read_manifest(self, path: Path) -> Checkpoint | None:
        try:
            manifest = json.loads(path.read_text())
            body = {k: v for k, v in manifest.items() if k != "checksum"}
            if manifest.get("checksum") != _checksum(body) or manifest["format"] != FORMAT:
                return None
            for h, size in manifest["blobs"].items():
                if self._blob_path(h).stat().st_size != size:
                    return None
            return Checkpoint(int(manifest["step"]), path, manifest)
        except (OSError, ValueError, KeyError, TypeError):
            return None

    # ---- pruning -------------------------------------------------------------------------
    def prune(self, newest: int | None = None) -> None:
        """Keep the ``keep`` newest valid checkpoints; delete the rest, temp files, and orphan blobs.

        ``newest``: the step just saved. Checkpoints after it belong to a history this job forked
        away from (it resumed from an older one because they were corrupt) and are deleted.
        """
        valid = [c for c in self.checkpoints() if newest is None or c.step <= newest]
        keep = valid[: self.keep]
        kept_paths = {c.path for c in keep}
        for path in self._manifests.iterdir():
            if path not in kept_paths:
                path.unlink(missing_ok=True)
        live = {h for c in keep for h in c.manifest["blobs"]}
        for blob in self._blobs.iterdir():
            if blob.name not in live:
                blob.unlink(missing_ok=True)

    def _blob_path(self, h: str) -> Path:
        return self._blobs / h

    def _manifest_path(self, step: int) -> Path:
        return self._manifests / f"step-{step:012d}.json"
