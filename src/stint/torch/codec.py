"""Split any picklable state into a small pickled skeleton and its tensors' raw bytes.

Tensors are cut out with pickle's persistent-id hook, so they may sit anywhere (state dicts,
optimizer state, user counters) and are stored as raw bytes that can be hashed, deduplicated and
written without a copy.
"""

from __future__ import annotations

import io
import pickle
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch


@dataclass(frozen=True)
class TensorMeta:
    """Where one tensor's bytes are stored and how to rebuild it."""

    blob: str
    offset: int
    nbytes: int
    dtype: str
    shape: tuple[int, ...]


class _Pickler(pickle.Pickler):
    def __init__(self, buf: io.BytesIO, tensors: list[torch.Tensor]) -> None:
        super().__init__(buf, protocol=5)
        self._tensors = tensors

    def persistent_id(self, obj: Any) -> Any:
        if isinstance(obj, torch.Tensor):
            self._tensors.append(obj)
            return ("tensor", len(self._tensors) - 1)
        return None


class _Unpickler(pickle.Unpickler):
    def __init__(self, buf: io.BytesIO, tensors: list[torch.Tensor]) -> None:
        super().__init__(buf)
        self._tensors = tensors

    def persistent_load(self, pid: Any) -> Any:
        kind, index = pid
        if kind != "tensor":
            raise pickle.UnpicklingError(f"unknown persistent id {pid!r} in checkpoint skeleton")
        return self._tensors[index]


def split(state: Any) -> tuple[bytes, list[torch.Tensor]]:
    """Pickle ``state`` with every tensor replaced by a reference; return (skeleton, tensors)."""
    tensors: list[torch.Tensor] = []
    buf = io.BytesIO()
    _Pickler(buf, tensors).dump(state)
    return buf.getvalue(), tensors


def join(skeleton: bytes, tensors: list[torch.Tensor]) -> Any:
    """Inverse of :func:`split`."""
    return _Unpickler(io.BytesIO(skeleton), tensors).load()


@dataclass(frozen=True)
class Split:
    """:func:`split_pair`'s result: one skeleton for two objects, and where the first one ends."""

    skeleton: bytes
    tensors: list[torch.Tensor]
    first_tensors: int  # tensors[:first_tensors] are the first object's
    first_bytes: int  # skeleton[:first_bytes] is the first object's pickle


def split_pair(first: Any, second: Any) -> Split:
    """Pickle ``first`` then ``second`` into one skeleton (one memo: ``second`` may refer to what
    ``first`` holds). ``first``'s part of the skeleton and its tensors do not depend on ``second``."""
    tensors: list[torch.Tensor] = []
    buf = io.BytesIO()
    pickler = _Pickler(buf, tensors)
    pickler.dump(first)
    count, mark = len(tensors), buf.tell()
    pickler.dump(second)
    return Split(buf.getvalue(), tensors, count, mark)


def join_pair(skeleton: bytes, tensors: list[torch.Tensor]) -> tuple[Any, Any]:
    """Inverse of :func:`split_pair`."""
    unpickler = _Unpickler(io.BytesIO(skeleton), tensors)
    first = unpickler.load()
    return first, unpickler.load()


def tensor_bytes(t: torch.Tensor) -> memoryview:
    """The raw bytes of ``t`` (moved to CPU, made contiguous), without a copy when possible."""
    if t.is_sparse or t.is_quantized:
        raise TypeError(f"stint checkpoints hold dense tensors only, got layout {t.layout}")
    flat = t.detach().cpu().contiguous().reshape(-1)
    return flat.view(torch.uint8).numpy().data if flat.numel() else memoryview(b"")


def tensor_from(buf: memoryview, meta: TensorMeta) -> torch.Tensor:
    """Rebuild a tensor from its bytes (``buf`` must be writable and stay alive with it)."""
    dtype = getattr(torch, meta.dtype.removeprefix("torch."))
    if meta.nbytes == 0:
        return torch.empty(meta.shape, dtype=dtype)
    raw = torch.from_numpy(np.frombuffer(buf, dtype=np.uint8, count=meta.nbytes, offset=meta.offset))
    return raw.view(dtype).reshape(meta.shape)
