"""A job's checkpoint directory: one self-describing file per checkpoint, deduplicated by content.

Layout of ``root`` (``STINT_CKPT_DIR``)::

    step-000000000120.ckpt   one checkpoint: the bytes of every blob new in it, back to back, then
                             its manifest (JSON: skeleton, tensor table, where each blob lives, meta,
                             a checksum of itself), then a footer (manifest length, magic)
    .tmp-step-...            a checkpoint being written

A checkpoint is written to a temp file, fsynced once, renamed into place and the directory
fsynced: it exists only once renamed, so a writer killed at any instant leaves either the old set
of checkpoints or the old set plus one complete new one. One file and one fsync per checkpoint
is what the disk's own sequential write costs too; a file per blob plus a manifest cost up to
half the throughput of a 10 MB checkpoint in fixed per-file costs.

Blobs are named by their SHA-256 (Singularity's per-buffer checksums): a blob an older checkpoint
already holds (frozen layers, constant buffers, tensors shared across logical ranks) is not written
again; the manifest points into the older file, which pruning then keeps. Loading verifies every
blob's hash, so even bit rot is caught: a corrupt checkpoint is skipped for the next older one.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import struct
import sys
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from stint.torch import codec

FORMAT = 2
SMALL_TENSOR = 1 << 16  # tensors below 64 KiB are packed into one blob: fewer hashes, same dedup
MAGIC = b"STINTCK2"
HOLDER = b"STINTBH2"  # the footer of a file pruned from the checkpoints but kept for blobs it holds
_FOOTER = struct.Struct("<Q8s")  # manifest length, magic
_GLOB = "step-*.ckpt"
_CHUNK = 8 << 20  # bytes per write: the device starts on each chunk while the next is copied


class CorruptCheckpoint(Exception):
    """A checkpoint's manifest or blobs do not match their checksums."""


@dataclass(frozen=True)
class Checkpoint:
    """A structurally valid checkpoint: its manifest verifies and every file it names is there."""

    step: int
    path: Path
    manifest: dict[str, Any]

    @property
    def meta(self) -> dict[str, Any]:
        return dict(self.manifest["meta"])

    @property
    def files(self) -> set[str]:
        """Names of the checkpoint files this one reads blobs from (its own included)."""
        return {loc["file"] for loc in self.manifest["blobs"].values()} | {self.path.name}


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


_PUNCH_HOLE = 0x02 | 0x01  # FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE (Linux)


def _punch(fd: int, offset: int, length: int) -> bool:
    """Free the disk blocks of [offset, offset + length) of a file (reads then give zeros)."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        fallocate = libc.fallocate
    except (OSError, AttributeError):
        return False
    fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    return int(fallocate(fd, _PUNCH_HOLE, offset, length)) == 0


def _sha256(data: memoryview | bytearray) -> str:
    return hashlib.sha256(data).hexdigest()


def _checksum(body: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True)
class _Written:
    """What :meth:`CheckpointStore._write_blobs` stored: the manifest's parts and the items appended."""

    skeleton: str
    blobs: dict[str, Any]
    metas: list[codec.TensorMeta]
    appended: list[int]


class _Appender:
    """Appends blobs to one open file on the store's I/O thread; each append returns its offset."""

    def __init__(self, fd: int, thread: ThreadPoolExecutor) -> None:
        self.fd, self._io, self.end = fd, thread, 0

    def submit(self, data: memoryview | bytes) -> Future[int]:
        return self._io.submit(self._append, data)

    def flush(self) -> Future[None]:
        """Make what was appended so far durable, on the I/O thread after those appends."""
        return self._io.submit(os.fdatasync, self.fd)

    def _append(self, data: memoryview | bytes) -> int:
        offset = self.end
        view = memoryview(data).cast("B")
        while view:
            n = os.write(self.fd, view[:_CHUNK])
            # Start the device on these pages now (Linux writes dirty pages back asynchronously
            # on this hint), so the final fsync waits for the last chunk only, not for the file.
            os.posix_fadvise(self.fd, self.end, n, os.POSIX_FADV_DONTNEED)
            self.end += n
            view = view[n:]
        return offset


class CheckpointStore:
    """Save, list, load and prune the checkpoints of one job. One writer at a time."""

    def __init__(self, root: str | os.PathLike[str], keep: int = 2) -> None:
        if keep < 1:
            raise ValueError(f"keep={keep}: at least one checkpoint must be kept")
        self.root = Path(root)
        self.keep = keep
        self._io = ThreadPoolExecutor(max_workers=1, thread_name_prefix="stint-ckpt")
        # SHA-256 is the CPU cost of a checkpoint; hashlib drops the GIL, so two threads use two cores.
        self._hasher = ThreadPoolExecutor(max_workers=2, thread_name_prefix="stint-hash")
        self._last_keys: set[tuple[tuple[int, int, int], ...]] = set()

    # ---- writing -------------------------------------------------------------------------
    def save(self, step: int, state: Any, meta: dict[str, Any] | None = None,
             sources: list[torch.Tensor] | None = None) -> SaveStats:
        """Write ``state`` (anything picklable; tensors stored raw) as the checkpoint of ``step``.

        ``sources``: when ``state`` is a snapshot (copies), the tensors it was copied from, in the
        order :func:`codec.split` finds them. They, not the fresh copies, tell which tensors
        changed since the last save, so unchanged ones (frozen layers) are deduplicated, not
        written again. Only a write-ahead guess rests on them; content is always hashed.
        """
        t0 = time.perf_counter()
        self.root.mkdir(parents=True, exist_ok=True)
        skeleton, tensors = codec.split(state)
        items: list[tuple[memoryview, list[tuple[int, int, int]]]] = [(memoryview(skeleton), [])]
        items += self._group(tensors)
        path = self._path(step)
        tmp = self.root / f".tmp-{path.name}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            out = _Appender(fd, self._io)
            done = self._write_blobs(items, tensors, sources or tensors, out, path.name, step)
            body = {
                "format": FORMAT,
                "step": step,
                "created": time.time(),
                "skeleton": done.skeleton,
                "tensors": [asdict(m) for m in done.metas],
                "blobs": done.blobs,
                "meta": meta or {},
            }
            manifest = json.dumps(dict(body, checksum=_checksum(body))).encode()
            out.submit(manifest + _FOOTER.pack(len(manifest), MAGIC)).result()
            os.fsync(fd)
        except BaseException:
            # Appends may still be queued on the I/O thread: let them finish before the fd number
            # is freed, or a reused number could send them into another file.
            self._io.submit(lambda: None).result()
            os.close(fd)
            tmp.unlink(missing_ok=True)
            raise
        os.close(fd)
        os.replace(tmp, path)
        _fsync_dir(self.root)
        self.prune(newest=step)
        total = sum(loc["size"] for loc in done.blobs.values())
        written = sum(len(items[n][0]) for n in done.appended)
        return SaveStats(step, total, written, len(done.blobs), len(done.appended), time.perf_counter() - t0)

    def _write_blobs(self, items: list[tuple[memoryview, list[tuple[int, int, int]]]],
                     tensors: list[torch.Tensor], sources: list[torch.Tensor], out: _Appender,
                     name: str, step: int) -> _Written:
        """Append to ``out`` the blobs that no checkpoint older than ``step`` holds.

        Blobs whose tensors changed since this store's last save (data pointer or in-place version
        counter) are appended at once, while they are being hashed: the hash only goes into the
        manifest. Unchanged ones are hashed first, so a blob an older checkpoint holds costs no
        write. A wrong guess costs one redundant copy in this file, never a wrong blob.
        """
        if len(sources) != len(tensors):
            raise ValueError(f"sources: {len(sources)} tensors for a state of {len(tensors)}")
        keys = [tuple(self._key(sources[i]) for i, _, _ in members) for _, members in items]
        early = {n: out.submit(data) for n, ((data, members), key) in enumerate(zip(items, keys))
                 if members and key not in self._last_keys}
        self._last_keys = set(keys)
        # The disk writes the changed blobs out while the hashes finish; the final fsync is then short.
        flushed = out.flush() if early else None
        hashes = [self._hasher.submit(_sha256, data) for data, _ in items]  # in order, 2 at a time
        known = self._known_blobs(before=step)
        blobs: dict[str, Any] = {}  # hash -> where an older file holds it
        own: dict[str, int] = {}  # hash -> the item this file holds it as
        metas: list[codec.TensorMeta | None] = [None] * len(tensors)
        appended: dict[int, Future[int]] = dict(early)
        for n, ((data, members), hashed) in enumerate(zip(items, hashes)):
            h = hashed.result()  # blob n is hashed while the I/O thread writes the ones before it
            for index, offset, nbytes in members:
                t = tensors[index]
                metas[index] = codec.TensorMeta(h, offset, nbytes, str(t.dtype), tuple(t.shape))
            if h in blobs or h in own:
                continue
            if n not in early and h in known:
                blobs[h] = known[h]
                continue
            if n not in early:
                appended[n] = out.submit(data)
            own[h] = n
        for h, n in own.items():
            blobs[h] = {"file": name, "offset": appended[n].result(), "size": len(items[n][0])}
        for f in appended.values():
            f.result()  # surface write errors; early copies that went unused still count as written
        if flushed is not None:
            flushed.result()
        return _Written(hashes[0].result(), blobs, [m for m in metas if m is not None], sorted(appended))

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

    def _known_blobs(self, before: int) -> dict[str, dict[str, Any]]:
        """Where each blob of the valid checkpoints older than ``before`` lives."""
        known: dict[str, dict[str, Any]] = {}
        for ckpt in self.checkpoints():
            if ckpt.step < before:
                for h, loc in ckpt.manifest["blobs"].items():
                    known.setdefault(h, loc)
        return known

    # ---- reading -------------------------------------------------------------------------
    def checkpoints(self) -> list[Checkpoint]:
        """Structurally valid checkpoints, newest first (blob contents are checked by load)."""
        return self.scan()[0]

    def scan(self) -> tuple[list[Checkpoint], list[tuple[Path, str]]]:
        """The valid checkpoints, newest first, and every other checkpoint file with the reason it
        is not one (cut short, damaged manifest, a file it reads from missing or too short)."""
        paths = list(self.root.glob(_GLOB)) if self.root.is_dir() else []
        skipped: list[tuple[Path, str]] = []
        found = []
        for path in paths:
            ckpt, why = self._read_manifest(path)
            if ckpt is not None:
                found.append(ckpt)
            elif why not in ("gone", "holder"):
                skipped.append((path, why))
        sizes = {}
        for p in paths:
            try:
                sizes[p.name] = p.stat().st_size
            except OSError:  # pruned by the writer since the listing: as if never there
                pass
        whole = []
        for c in found:
            missing = self._blobs_missing(c, sizes)
            if missing is None:
                whole.append(c)
            elif c.path.name in sizes:
                skipped.append((c.path, missing))
        return sorted(whole, key=lambda c: c.step, reverse=True), sorted(skipped)

    def load(self, ckpt: Checkpoint, verify: bool = True) -> Any:
        """The state saved in ``ckpt``; raises CorruptCheckpoint if any blob fails its hash."""
        blobs = list(ckpt.manifest["blobs"].items())
        files: dict[str, io.FileIO] = {}
        # Read on the I/O thread while two threads verify what was read (all drop the GIL).
        reads = [self._io.submit(self._read_blob, files, h, loc) for h, loc in blobs]
        try:
            checks = [self._hasher.submit(lambda r: _sha256(r.result()), r) if verify else r for r in reads]
            buffers: dict[str, memoryview] = {}
            for (h, loc), read, check in zip(blobs, reads, checks):
                buf = read.result()
                if verify and check.result() != h:
                    raise CorruptCheckpoint(f"{self.root / loc['file']}: blob at offset {loc['offset']} "
                                            "does not match its hash")
                buffers[h] = memoryview(buf)
        finally:
            wait(reads)  # the I/O thread may still be reading when a hash fails
            for f in files.values():
                f.close()
        tensors = [
            codec.tensor_from(buffers[m["blob"]], codec.TensorMeta(**dict(m, shape=tuple(m["shape"]))))
            for m in ckpt.manifest["tensors"]
        ]
        return codec.join(bytes(buffers[ckpt.manifest["skeleton"]]), tensors)

    def _read_blob(self, files: dict[str, io.FileIO], h: str, loc: dict[str, Any]) -> bytearray:
        if loc["file"] not in files:
            files[loc["file"]] = io.FileIO(self.root / loc["file"], "rb")
        f = files[loc["file"]]
        buf = bytearray(loc["size"])
        f.seek(loc["offset"])
        if f.readinto(buf) != loc["size"]:
            raise CorruptCheckpoint(f"{self.root / loc['file']}: blob {h[:12]} is cut short")
        return buf

    def load_latest(self, verify: bool = True, report: bool = True) -> tuple[Checkpoint, Any] | None:
        """The newest checkpoint that loads cleanly. With ``report``, every checkpoint file passed
        over on the way (corrupt, cut short, incomplete) is named on stderr with the reason."""
        valid, skipped = self.scan()
        for path, why in skipped if report else []:
            print(f"stint: skipping checkpoint {path}: {why}", file=sys.stderr)
        for ckpt in valid:
            try:
                return ckpt, self.load(ckpt, verify=verify)
            except (CorruptCheckpoint, OSError) as e:
                if report:
                    print(f"stint: skipping corrupt checkpoint {ckpt.path}: {e}", file=sys.stderr)
        return None

    def _read_manifest(self, path: Path) -> tuple[Checkpoint | None, str]:
        """The checkpoint in ``path`` if its footer and manifest checksum hold, else why not."""
        try:
            with open(path, "rb") as f:
                size = f.seek(0, os.SEEK_END)
                if size < _FOOTER.size:
                    return None, f"cut short ({size} bytes, no footer)"
                f.seek(size - _FOOTER.size)
                length, magic = _FOOTER.unpack(f.read(_FOOTER.size))
                if magic == HOLDER:
                    return None, "holder"
                if magic != MAGIC or length > size - _FOOTER.size:
                    return None, "cut short or not a checkpoint (no valid footer)"
                f.seek(size - _FOOTER.size - length)
                manifest = json.loads(f.read(length))
            body = {k: v for k, v in manifest.items() if k != "checksum"}
            if manifest.get("checksum") != _checksum(body):
                return None, "its manifest does not match its checksum"
            if manifest["format"] != FORMAT:
                return None, f"format {manifest['format']}, this version reads format {FORMAT}"
            if path.name != self._path(int(manifest["step"])).name:
                return None, f"renamed (it holds step {manifest['step']})"  # blob self-references break
            return Checkpoint(int(manifest["step"]), path, manifest), ""
        except FileNotFoundError:
            return None, "gone"  # pruned by the writer since the listing
        except (OSError, ValueError, KeyError, TypeError, struct.error) as e:
            return None, f"unreadable manifest ({type(e).__name__}: {e})"

    @staticmethod
    def _blobs_missing(ckpt: Checkpoint, sizes: dict[str, int]) -> str | None:
        """Why not every file ``ckpt`` reads from exists and is long enough (None: all are)."""
        for loc in ckpt.manifest["blobs"].values():
            if loc["file"] not in sizes:
                return f"it reads blobs from {loc['file']}, which is gone"
            if loc["offset"] + loc["size"] > sizes[loc["file"]]:
                return f"{loc['file']} is too short for the blobs it holds"
        return None

    # ---- pruning -------------------------------------------------------------------------
    def prune(self, newest: int | None = None) -> None:
        """Keep the ``keep`` newest valid checkpoints and the older files they read blobs from;
        delete every other checkpoint file and leftover temp files.

        ``newest``: the step just saved. Checkpoints after it belong to a history this job forked
        away from (it resumed from an older one because they were corrupt) and are deleted.
        """
        valid = [c for c in self.checkpoints() if newest is None or c.step <= newest]
        kept = valid[: self.keep]
        needed = {name for c in kept for name in c.files}
        for path in self.root.iterdir():
            if path.name.startswith(".tmp-") or (path.match(_GLOB) and path.name not in needed):
                path.unlink(missing_ok=True)
        for name in sorted(needed - {c.path.name for c in kept}):
            self._make_holder(self.root / name, kept)

    @staticmethod
    def _make_holder(path: Path, kept: list[Checkpoint]) -> None:
        """``path`` is no checkpoint any more, only the keeper of blobs that ``kept`` read from it:
        mark its footer so (then it is not listed, so ``keep`` checkpoints are what is listed) and
        free the disk blocks of every other blob in it (hole punching, where the filesystem can)."""
        used = sorted((loc["offset"], loc["size"]) for c in kept for loc in c.manifest["blobs"].values()
                      if loc["file"] == path.name)
        with open(path, "r+b") as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(size - _FOOTER.size)
            length, magic = _FOOTER.unpack(f.read(_FOOTER.size))
            if magic == MAGIC:
                f.seek(size - _FOOTER.size)
                f.write(_FOOTER.pack(length, HOLDER))
                f.flush()
                os.fsync(f.fileno())
            start = 0
            for offset, nbytes in [*used, (size - _FOOTER.size - length, 0)]:
                if offset > start:
                    _punch(f.fileno(), start, offset - start)
                start = max(start, offset + nbytes)

    def _path(self, step: int) -> Path:
        return self.root / f"step-{step:012d}.ckpt"
