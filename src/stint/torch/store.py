"""A job's checkpoint directory: checkpoints written by every worker, deduplicated by content.

Layout of ``root`` (``STINT_CKPT_DIR``)::

    step-000000000120.ckpt      one checkpoint, written by worker 0: the bytes of its share of the
                                blobs new in it, back to back, then the manifest (JSON: skeleton,
                                tensor table, where each blob lives, meta, a checksum of itself),
                                then a footer (manifest length, magic)
    step-000000000120.w1.part   worker 1's share of the new blobs (no manifest: only blobs)
    .tmp-step-...               a file being written

Sharing the write. The state is cut into items by a rule that does not depend on the number of
workers P (:meth:`CheckpointStore.cut`): items of about 1/64 of the state's bytes (at least
4 KiB, at most ``PIECE``); a tensor larger than that is cut into equal pieces of one to two
times that size, smaller ones are packed together. The items are dealt out in
order, by bytes, into P contiguous ranges: worker w hashes and writes range w (the state is
replicated, so every worker holds every item; the skeleton and what worker 0 alone holds, such as
the RNG states of every logical rank, are worker 0's). A worker writes its items to a temp file,
fsyncs it, renames it into place and fsyncs the directory, then reports its items' hashes and
places to worker 0, which then (all parts durable) writes the manifest into its own file, fsyncs,
renames it into place and fsyncs the directory: a checkpoint exists only once its manifest is
renamed, so a writer killed at any instant leaves either the old set of checkpoints or the old
set plus one complete new one (part files no manifest names are deleted by the next prune).
Which worker wrote a blob is only a file name in the manifest: a checkpoint written by P workers
loads on any number. With P = 1 a checkpoint is one file and one fsync, what the disk's own
sequential write costs too.

Blobs are named by their SHA-256 (Singularity's per-buffer checksums): a blob an older checkpoint
already holds (frozen layers, constant buffers, tensors shared across logical ranks) is not written
again; the manifest points into the older file, which pruning then keeps. Loading verifies every
blob's hash, so even bit rot is caught: a corrupt checkpoint is skipped for the next older one.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import struct
import sys
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch

from stint.torch import codec

FORMAT = 3  # 3: tensors in pieces, blobs in several files; 2 (one file, whole tensors) still loads
READS = (2, 3)
PIECE = 8 << 20  # the most bytes in one item: large tensors are cut into pieces of this size
ITEMS = 64  # a state is cut into about this many items at least (unless below MIN_ITEM each)
MIN_ITEM = 4 << 10
MAGIC = b"STINTCK2"
HOLDER = b"STINTBH2"  # the footer of a file pruned from the checkpoints but kept for blobs it holds
_FOOTER = struct.Struct("<Q8s")  # manifest length, magic
_GLOB = "step-*.ckpt"
_FILES = "step-*"  # checkpoints and part files
_CHUNK = 8 << 20  # bytes per write: the device starts on each chunk while the next is copied

Member = tuple[int, int, int, int]  # tensor index, offset in the item, bytes, offset in the tensor


class CorruptCheckpoint(Exception):
    """A checkpoint's manifest or blobs do not match their checksums."""


class Peers(Protocol):
    """How the workers that write one checkpoint together talk (a process group of their own)."""

    rank: int
    size: int

    def gather(self, obj: Any) -> list[Any] | None:
        """Every worker's ``obj`` on worker 0 (in rank order); None elsewhere."""

    def broadcast(self, obj: Any) -> Any:
        """Worker 0's ``obj`` on every worker."""


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
        """Names of the files this checkpoint reads blobs from (its own and part files included)."""
        return {loc["file"] for loc in self.manifest["blobs"].values()} | {self.path.name}


@dataclass(frozen=True)
class SaveStats:
    """What one save cost this worker: sizes before and after deduplication, and wall time.
    ``bytes_total``/``blobs_total``: the whole checkpoint's; ``*_written``: this worker's writes."""

    step: int
    bytes_total: int
    bytes_written: int
    blobs_total: int
    blobs_written: int
    seconds: float


@dataclass
class Item:
    """One blob-to-be: bytes of one tensor's piece, or of several small tensors packed."""

    data: memoryview | bytes
    members: list[Member]
    key: tuple[Any, ...]  # where the source lives and its version: equal keys suggest equal bytes
    writer: int
    # A pack not joined yet: its tensors' bytes, joined into ``data`` only when written or hashed
    # (a background snapshot copies them into its buffer directly: one copy, none on the cut).
    views: list[memoryview] | None = None

    @property
    def size(self) -> int:
        return sum(len(v) for v in self.views) if self.views is not None else len(self.data)

    def joined(self) -> memoryview | bytes:
        """The item's bytes in one buffer (a pack is joined once, on first use)."""
        if self.views is not None:
            self.data, self.views = memoryview(b"".join(self.views)), None
        return self.data


@dataclass(frozen=True)
class Cut:
    """A state cut into items, each dealt to its writer: the same on every worker (but worker 0's
    skeleton and private tensors). ``items[0]`` is the skeleton."""

    items: list[Item]
    tensors: list[tuple[str, tuple[int, ...]]]  # dtype and shape of each tensor, in skeleton order
    writers: int
    signature: str  # of the replicated part: workers whose signatures differ hold different states

    def mine(self, writer: int) -> list[int]:
        return [n for n, item in enumerate(self.items) if item.writer == writer]

    def staged(self, writer: int, buffers: dict[int, torch.Tensor]) -> Cut:
        """A copy of this cut whose items of ``writer`` hold copies of their bytes (a snapshot that
        training may run on from), in ``buffers`` (kept by the caller from the last snapshot)."""
        items = list(self.items)
        for n in self.mine(writer):
            item = items[n]
            if not item.members:
                continue  # the skeleton: bytes, a copy already
            old = buffers.get(n)
            dst = old if old is not None and old.numel() == item.size else torch.empty(item.size, dtype=torch.uint8)
            if item.views is not None:  # a pack: its tensors' bytes straight into the buffer
                out, at = dst.numpy().data if item.size else memoryview(bytearray()), 0
                for v in item.views:
                    out[at : at + len(v)] = v
                    at += len(v)
            elif item.size:
                dst.copy_(torch.frombuffer(item.data, dtype=torch.uint8))
            buffers[n] = dst
            items[n] = Item(dst.numpy().data if dst.numel() else memoryview(b""), item.members, item.key,
                            item.writer)
        return Cut(items, self.tensors, self.writers, self.signature)


@dataclass(frozen=True)
class _Part:
    """What one worker wrote: its items' hashes, where the new blobs are, what it cost."""

    writer: int
    signature: str
    hashes: dict[int, str]  # item -> hash
    blobs: dict[str, dict[str, Any]]  # hash -> file, offset, size
    bytes_written: int
    blobs_written: int


def _sync_close(fd: int) -> None:
    os.fsync(fd)
    os.close(fd)


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


def _sha256(data: memoryview | bytearray | bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _checksum(body: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


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
    """Save, list, load and prune the checkpoints of one job. One writer at a time (a group of
    workers sharing one checkpoint's write counts as one: worker 0 alone prunes)."""

    def __init__(self, root: str | os.PathLike[str], keep: int = 2) -> None:
        if keep < 1:
            raise ValueError(f"keep={keep}: at least one checkpoint must be kept")
        self.root = Path(root)
        self.keep = keep
        self._io = ThreadPoolExecutor(max_workers=1, thread_name_prefix="stint-ckpt")
        # SHA-256 is the CPU cost of a checkpoint; hashlib drops the GIL, so two threads use two cores.
        self._hasher = ThreadPoolExecutor(max_workers=2, thread_name_prefix="stint-hash")
        self._last_keys: set[tuple[Any, ...]] = set()

    # ---- writing -------------------------------------------------------------------------
    def save(self, step: int, state: Any, meta: dict[str, Any] | None = None,
             sources: list[torch.Tensor] | None = None) -> SaveStats:
        """Write ``state`` (anything picklable; tensors stored raw) as the checkpoint of ``step``,
        alone. ``sources``: see :meth:`cut`."""
        return self.write(step, self.cut(state, sources=sources), meta)

    def cut(self, state: Any, private: dict[str, Any] | None = None, writers: int = 1,
            sources: list[torch.Tensor] | None = None, owners: dict[int, int] | None = None) -> Cut:
        """Cut ``state`` (the same on every writer) and ``private`` (worker 0's alone; a checkpoint
        holds ``state`` updated with it, so both are dicts then) into items for ``writers``.

        No bytes are copied. ``sources``: when ``state`` is a snapshot (copies), the tensors it
        was copied from, in the order its tensors are pickled. They, not the copies, tell which
        tensors changed since the last save, so unchanged ones (frozen layers) are deduplicated,
        not written again. Only a write-ahead guess rests on them; content is always hashed.

        ``owners``: tensors of ``state`` that one writer alone holds (sharded state), by ``id()``,
        to that writer. Each is cut into items of its own, written by its owner; the other
        writers pass a stand-in of the same dtype and shape (a ``meta`` tensor: no bytes), whose
        items they never read.
        """
        if writers < 1:
            raise ValueError(f"writers={writers}: at least one")
        parts = codec.split_pair(state, private)
        shared = parts.tensors[: parts.first_tensors]
        keys = sources if sources is not None else shared
        if len(keys) != len(shared):
            raise ValueError(f"sources: {len(keys)} tensors for a state of {len(shared)}")
        owners = owners or {}
        owned = {i: owners[id(t)] for i, t in enumerate(shared) if id(t) in owners}
        items = [Item(parts.skeleton, [], (), 0)]
        rest = [i for i in range(len(shared)) if i not in owned]  # replicated: dealt by bytes
        items += self._items([shared[i] for i in rest], [keys[i] for i in rest], 0, rest)
        dealt = sum(item.size for item in items[1:])
        start = 0
        for item in items[1:]:  # contiguous ranges by bytes: item -> the range holding its middle
            item.writer = min(writers - 1, (start + item.size // 2) * writers // max(dealt, 1))
            start += item.size
        for i, writer in owned.items():
            items += self._owned_items(shared[i], keys[i], i, writer)
        private_tensors = parts.tensors[parts.first_tensors :]
        items += self._items(private_tensors, private_tensors, len(shared))  # worker 0's
        signature = hashlib.sha256(parts.skeleton[: parts.first_bytes])
        signature.update(repr([(str(t.dtype), tuple(t.shape)) for t in shared]).encode())
        return Cut(items, [(str(t.dtype), tuple(t.shape)) for t in parts.tensors], writers,
                   signature.hexdigest())

    def _items(self, tensors: list[torch.Tensor], sources: list[torch.Tensor], first: int,
               indices: list[int] | None = None) -> list[Item]:
        """Pieces of the large tensors, packs of the small ones, in order (worker 0's until dealt).
        Tensor i is the state's tensor ``first + i`` (or ``indices[i]``)."""
        items: list[Item] = []
        views = [codec.tensor_bytes(t) for t in tensors]
        size = min(PIECE, max(MIN_ITEM, sum(len(v) for v in views) // ITEMS))  # the same for any P
        pack: list[memoryview] = []
        packed: list[Member] = []
        pack_keys: list[Any] = []
        filled = 0
        for i, (data, src) in enumerate(zip(views, sources)):
            index = first + i if indices is None else indices[i]
            if len(data) >= size:
                step = -(-len(data) // max(1, len(data) // size))  # pieces of size .. 2 * size bytes
                for at in range(0, len(data), step):
                    piece = data[at : at + step]
                    items.append(Item(piece, [(index, 0, len(piece), at)], (self._key(src), at), 0))
                continue
            packed.append((index, filled, len(data), 0))
            pack_keys.append(self._key(src))
            pack.append(data)
            filled += len(data)
            if filled >= size:
                items.append(Item(memoryview(b""), packed, tuple(pack_keys), 0, pack))
                pack, packed, pack_keys, filled = [], [], [], 0
        if packed:
            items.append(Item(memoryview(b""), packed, tuple(pack_keys), 0, pack))
        return items

    @staticmethod
    def _owned_items(t: torch.Tensor, key: torch.Tensor, index: int, writer: int) -> list[Item]:
        """Tensor ``index`` in pieces of at most PIECE bytes, for ``writer``; a stand-in (``meta``)
        gives the same pieces with no bytes."""
        nbytes = t.numel() * t.element_size()
        data = memoryview(b"") if t.is_meta else codec.tensor_bytes(t)
        count = max(1, -(-nbytes // PIECE))
        step = max(1, -(-nbytes // count))
        pieces = [(at, min(step, nbytes - at)) for at in range(0, nbytes, step)] or [(0, 0)]
        key_of = (lambda at: ()) if t.is_meta else (lambda at: (CheckpointStore._key(key), at))
        return [Item(data[at : at + n] if not t.is_meta else memoryview(b""), [(index, 0, n, at)], key_of(at),
                     writer) for at, n in pieces]

    @staticmethod
    def _key(t: torch.Tensor) -> tuple[int, int, int]:
        """Where ``t`` lives and its in-place version counter: equal keys suggest equal content."""
        return (t.data_ptr(), t._version, t.numel() * t.element_size())

    def write(self, step: int, cut: Cut, meta: dict[str, Any] | None = None,
              peers: Peers | None = None) -> SaveStats:
        """Write this worker's items of ``cut`` as its part of the checkpoint of ``step``; worker 0
        then commits the checkpoint once every worker's part is durable. Collective over
        ``peers`` (None: one writer); raises on every worker if any worker's part failed."""
        t0 = time.perf_counter()
        rank, size = (peers.rank, peers.size) if peers is not None else (0, 1)
        if size != cut.writers:
            raise ValueError(f"a cut for {cut.writers} writers written by {size}")
        self.root.mkdir(parents=True, exist_ok=True)
        path = self._path(step) if rank == 0 else self.root / f"{self._path(step).stem}.w{rank}.part"
        tmp = self.root / f".tmp-{path.name}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        part: _Part | None = None
        failure, error = "", None  # error: this worker's own, raised as it is
        try:
            out = _Appender(fd, self._io)
            part = self._write_part(step, cut, rank, out, path.name)
            if rank != 0:
                _sync_close(fd)
                fd = -1
                self._publish(tmp, path)
        except Exception as e:  # noqa: BLE001 - every worker must still reach the gather
            failure, error = f"worker {rank}: {type(e).__name__}: {e}", e
        try:
            parts = peers.gather(part or failure) if peers is not None else [part or failure]
            outcome = failure
            if rank == 0 and not failure:
                try:
                    assert parts is not None
                    manifest = self._manifest(step, cut, parts, meta or {})
                    out.submit(manifest + _FOOTER.pack(len(manifest), MAGIC)).result()
                    _sync_close(fd)
                    fd = -1
                    self._publish(tmp, path)
                    self.prune(newest=step)
                except Exception as e:  # noqa: BLE001 - told to every worker below
                    outcome, error = f"worker 0: {type(e).__name__}: {e}", e
            if peers is not None:
                outcome = peers.broadcast(outcome)
        finally:
            if fd >= 0:
                # Appends may still be queued on the I/O thread: let them finish before the fd
                # number is freed, or a reused number could send them into another file.
                self._io.submit(lambda: None).result()
                os.close(fd)
                tmp.unlink(missing_ok=True)
        if error is not None:
            raise error
        if outcome:
            raise RuntimeError(f"checkpoint of step {step} not written: {outcome}")
        assert part is not None
        total = len(cut.items[0].data) + sum(m[2] for item in cut.items for m in item.members)
        return SaveStats(step, total, part.bytes_written, len(cut.items), part.blobs_written,
                         time.perf_counter() - t0)

    def _publish(self, tmp: Path, path: Path) -> None:
        """A durable file under its name: renamed into place, the directory fsynced."""
        os.replace(tmp, path)
        _fsync_dir(self.root)

    @staticmethod
    def _manifest(step: int, cut: Cut, parts: list[Any], meta: dict[str, Any]) -> bytes:
        """Worker 0, every part durable: the manifest of the checkpoint (checked: no part failed,
        every worker cut the same state)."""
        failed = [p for p in parts if isinstance(p, str)]
        if failed:
            raise RuntimeError(failed[0])
        for p in parts:
            if p.signature != cut.signature:
                raise RuntimeError(f"worker {p.writer} holds another state than worker 0 (its tensors' "
                                   "shapes or its non-tensor values differ): the replicas diverged")
        hashes: dict[int, str] = {}
        blobs: dict[str, dict[str, Any]] = {}
        for p in parts:
            hashes.update(p.hashes)
            for h, loc in p.blobs.items():
                blobs.setdefault(h, loc)
        tensors: list[dict[str, Any]] = [
            {"parts": [], "dtype": dtype, "shape": list(shape)} for dtype, shape in cut.tensors]
        for n, item in enumerate(cut.items):
            for index, offset, nbytes, _ in sorted(item.members, key=lambda m: (m[0], m[3])):
                tensors[index]["parts"].append([hashes[n], offset, nbytes])
        body = {
            "format": FORMAT,
            "step": step,
            "created": time.time(),
            "skeleton": hashes[0],
            "tensors": tensors,
            "blobs": blobs,
            "writers": cut.writers,
            "meta": meta,
        }
        return json.dumps(dict(body, checksum=_checksum(body))).encode()

    def _write_part(self, step: int, cut: Cut, rank: int, out: _Appender, name: str) -> _Part:
        """Append to ``out`` this worker's items that no checkpoint older than ``step`` holds.

        Items whose tensors changed since this store's last save (data pointer or in-place version
        counter) are appended at once, while they are being hashed: the hash only goes into the
        manifest. Unchanged ones are hashed first, so a blob an older checkpoint holds costs no
        write. A wrong guess costs one redundant copy in this file, never a wrong blob.
        """
        mine = cut.mine(rank)
        items = [cut.items[n] for n in mine]
        early = {n: out.submit(item.joined()) for n, item in zip(mine, items)
                 if item.members and item.key not in self._last_keys}
        self._last_keys = {item.key for item in items}
        # The disk writes the changed blobs out while the hashes finish; the final fsync is then short.
        flushed = out.flush() if early else None
        hashing = [self._hasher.submit(_sha256, item.joined()) for item in items]  # in order, 2 at a time
        known = self._known_blobs(before=step)
        own: dict[str, int] = {}  # hash -> the item this file holds it as
        blobs: dict[str, dict[str, Any]] = {}  # hash -> where an older file holds it
        hashes: dict[int, str] = {}
        appended: dict[int, Future[int]] = dict(early)
        for n, item, hashed in zip(mine, items, hashing):
            h = hashes[n] = hashed.result()  # item n is hashed while the I/O thread writes earlier ones
            if h in blobs or h in own:
                continue
            if n not in early and h in known:
                blobs[h] = known[h]
                continue
            if n not in early:
                appended[n] = out.submit(item.joined())
            own[h] = n
        for h, n in own.items():
            blobs[h] = {"file": name, "offset": appended[n].result(), "size": cut.items[n].size}
        for f in appended.values():
            f.result()  # surface write errors; early copies that went unused still count as written
        if flushed is not None:
            flushed.result()
        written = sum(cut.items[n].size for n in appended)
        return _Part(rank, cut.signature, hashes, blobs, written, len(appended))

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
        files = list(self.root.glob(_FILES)) if self.root.is_dir() else []
        paths = [p for p in files if p.match(_GLOB)]
        skipped: list[tuple[Path, str]] = []
        found = []
        for path in paths:
            ckpt, why = self._read_manifest(path)
            if ckpt is not None:
                found.append(ckpt)
            elif why not in ("gone", "holder"):
                skipped.append((path, why))
        sizes = {}
        for p in files:
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
        viewed: set[tuple[str, int]] = set()
        tensors = [_tensor(m, buffers, viewed) for m in ckpt.manifest["tensors"]]
        skeleton = bytes(buffers[ckpt.manifest["skeleton"]])
        if ckpt.manifest["format"] == 2:
            return codec.join(skeleton, tensors)
        state, private = codec.join_pair(skeleton, tensors)
        return state if private is None else {**state, **private}

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
            if manifest["format"] not in READS:
                return None, f"format {manifest['format']}, this version reads formats {READS}"
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
            if path.name.startswith(".tmp-") or (path.match(_FILES) and path.name not in needed):
                path.unlink(missing_ok=True)
        for name in sorted(needed - {c.path.name for c in kept}):
            self._make_holder(self.root / name, kept)

    @staticmethod
    def _make_holder(path: Path, kept: list[Checkpoint]) -> None:
        """``path`` is no checkpoint any more, only the keeper of blobs that ``kept`` read from it:
        mark its footer so (then it is not listed, so ``keep`` checkpoints are what is listed) and
        free the disk blocks of every other blob in it (hole punching, where the filesystem can).
        A part file has no footer: its unused blobs are freed alike."""
        used = sorted((loc["offset"], loc["size"]) for c in kept for loc in c.manifest["blobs"].values()
                      if loc["file"] == path.name)
        with open(path, "r+b") as f:
            size = end = f.seek(0, os.SEEK_END)
            if path.match(_GLOB):
                f.seek(size - _FOOTER.size)
                length, magic = _FOOTER.unpack(f.read(_FOOTER.size))
                end = size - _FOOTER.size - length
                if magic == MAGIC:
                    f.seek(size - _FOOTER.size)
                    f.write(_FOOTER.pack(length, HOLDER))
                    f.flush()
                    os.fsync(f.fileno())
            start = 0
            for offset, nbytes in [*used, (end, 0)]:
                if offset > start:
                    _punch(f.fileno(), start, offset - start)
                start = max(start, offset + nbytes)

    def _path(self, step: int) -> Path:
        return self.root / f"step-{step:012d}.ckpt"


def _tensor(entry: dict[str, Any], buffers: dict[str, memoryview], viewed: set[tuple[str, int]]) -> torch.Tensor:
    """One tensor of a manifest's table from the blobs read: a view of its blob when it lies in
    one, else its pieces joined (format 2: ``blob``, ``offset``, ``nbytes``; 3: ``parts``).
    Tensors of equal content share one blob: a place already viewed by a tensor (``viewed``) is
    copied, so no two loaded tensors share memory (an optimizer would step them twice)."""
    parts = entry["parts"] if "parts" in entry else [[entry["blob"], entry["offset"], entry["nbytes"]]]
    nbytes = sum(n for _, _, n in parts)
    meta = codec.TensorMeta("", 0, nbytes, entry["dtype"], tuple(entry["shape"]))
    if len(parts) == 1 and (parts[0][0], parts[0][1]) not in viewed:
        h, offset, _ = parts[0]
        viewed.add((h, offset))
        return codec.tensor_from(buffers[h], dataclasses.replace(meta, blob=h, offset=offset))
    joined = bytearray(nbytes)
    at = 0
    for h, offset, n in parts:
        joined[at : at + n] = buffers[h][offset : offset + n]
        at += n
    return codec.tensor_from(memoryview(joined), meta)
