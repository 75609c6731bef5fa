"""Random-number generator states of one logical rank: Python, NumPy and torch (and CUDA if present).

Every logical rank owns its own streams, so dropout masks and augmentations of logical rank l are
the same whichever physical worker hosts it, and a resize does not change them. Outside the
micro-batch loop the live generators are the job's *outside* stream, reseeded from (seed, step)
at every step boundary (:func:`seed_outside`) and after every micro-batch loop
(:func:`seed_after_loop`): draws there (a DataLoader iterator's base seed, an
eval loop, user code) can neither shift a logical rank's stream nor depend on P or on a resume.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch


def seed_states(seed: int, logical_rank: int) -> dict[str, Any]:
    """Fresh states for ``logical_rank``, derived from the job seed; leaves the live generators as found."""
    saved = capture()
    s = seed * 1_000_003 + logical_rank
    random.seed(s)
    np.random.seed(s % 2**32)
    torch.manual_seed(s)
    fresh = capture()
    restore(saved)
    return fresh


_MASK64 = (1 << 64) - 1


def mix(*values: int) -> int:
    """A 63-bit seed from integers (SplitMix64 over each in turn): cheap and well spread."""
    h = 0x9E3779B97F4A7C15
    for v in values:
        h = (h ^ (v & _MASK64)) * 0xBF58476D1CE4E5B9 & _MASK64
        h = (h ^ (h >> 27)) * 0x94D049BB133111EB & _MASK64
        h ^= h >> 31
    return h >> 1


def seed_all(s: int) -> None:
    """Seed the live Python, NumPy and torch (and the current CUDA device's) generators from ``s``.

    ``torch.default_generator.manual_seed`` rather than ``torch.manual_seed``: the latter also
    visits every other device type's generators, 130 us against 1 us here.
    """
    random.seed(s)
    np.random.seed(s % 2**32)
    torch.default_generator.manual_seed(s)
    if _cuda_live():
        torch.cuda.manual_seed(s)


def seed_outside(seed: int, step: int) -> None:
    """The outside stream of the boundary before ``step``: a pure function of (seed, step)."""
    seed_all(mix(seed, step, 0x0475))


def seed_after_loop(seed: int, step: int) -> None:
    """The outside stream after step ``step``'s micro-batch loop: a pure function of (seed, step),
    so that draws there do not come from the last hosted logical rank's stream (which depends on P)."""
    seed_all(mix(seed, step, 0x0476))


def _cuda_live() -> bool:
    return torch.cuda.is_available() and torch.cuda.is_initialized()  # type: ignore[no-untyped-call]


def capture() -> dict[str, Any]:
    """The live generators' states (CUDA: the current device's, when CUDA is initialised)."""
    states: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if _cuda_live():
        states["cuda"] = torch.cuda.get_rng_state()
    return states


def restore(states: dict[str, Any]) -> None:
    """Make ``states`` the live generators' states."""
    random.setstate(states["python"])
    np.random.set_state(states["numpy"])
    torch.set_rng_state(states["torch"])
    if "cuda" in states and _cuda_live():
        torch.cuda.set_rng_state(states["cuda"])


_MT_WORDS = 624  # NumPy's mt19937_state: uint32 key[624]; int pos


class _NumpyLegacy:
    """Fast access to NumPy's global (legacy) RandomState for swapping between logical ranks.

    ``np.random.get_state``/``set_state`` copy the 624 key words one by one (~30-100 us each); the
    MT19937 words are read and written here in one memmove through the bit generator's ctypes
    address instead. The legacy Gaussian cache (has_gauss, gauss) is not reachable that way, so
    the slow calls are still used whenever it may be set. Falls back to the slow calls entirely
    if the memory layout does not match what get_state reports.
    """

    def __init__(self) -> None:
        import ctypes

        self._ctypes = ctypes
        self._size = _MT_WORDS * 4 + 4
        try:
            self._addr = np.random.mtrand._rand._bit_generator.ctypes.state_address
            state: Any = np.random.get_state()
            _, key, pos, _, _ = state
            raw = self.raw()
            self.fast = raw == key.astype(np.uint32).tobytes() + np.int32(pos).tobytes()
        except (AttributeError, TypeError, ValueError):
            self.fast = False

    def raw(self) -> bytes:
        return self._ctypes.string_at(self._addr, self._size)

    def write(self, raw: bytes) -> None:
        self._ctypes.memmove(self._addr, raw, self._size)

    @staticmethod
    def to_raw(state: Any) -> tuple[bytes, int, float]:
        _, key, pos, has_gauss, gauss = state
        return key.astype(np.uint32).tobytes() + np.int32(pos).tobytes(), int(has_gauss), float(gauss)

    @staticmethod
    def from_raw(raw: bytes, has_gauss: int, gauss: float) -> Any:
        key = np.frombuffer(raw[: _MT_WORDS * 4], dtype=np.uint32).copy()
        pos = int(np.frombuffer(raw[_MT_WORDS * 4 :], dtype=np.int32)[0])
        return ("MT19937", key, pos, has_gauss, gauss)


class Swapper:
    """Keeps each hosted logical rank's generator states and swaps them in around its micro-batch.

    ``enter(lr)`` before logical rank ``lr``'s micro-batch, ``leave(lr)`` after it; ``states()``
    gives every hosted rank's states in the form of :func:`capture` (for checkpoints).
    """

    def __init__(self, states: dict[int, dict[str, Any]]) -> None:
        self._np = _NumpyLegacy()
        self._states = {lr: dict(s) for lr, s in states.items()}
        self._np_raw = {lr: _NumpyLegacy.to_raw(s["numpy"]) for lr, s in states.items()}
        self._live_gauss = True  # unknown until the first full set: take the safe path
        self._entered = b""
        self._reseeded = b""

    def reseeded(self) -> None:
        """The live generators were just reseeded (empty Gaussian cache): remember NumPy's words,
        so that the next :meth:`enter` knows whether code outside the loop drew from it since."""
        self._live_gauss = False
        self._reseeded = self._np.raw() if self._np.fast else b""

    def enter(self, lr: int) -> None:
        s = self._states[lr]
        random.setstate(s["python"])
        torch.set_rng_state(s["torch"])
        if "cuda" in s:
            torch.cuda.set_rng_state(s["cuda"])
        raw, has_gauss, gauss = self._np_raw[lr]
        if self._reseeded:  # first rank of a step: did outside code draw (and maybe cache) since?
            self._live_gauss = self._np.raw() != self._reseeded
            self._reseeded = b""
        if self._np.fast and not has_gauss and not self._live_gauss:
            self._np.write(raw)  # only the MT words differ: both Gaussian caches are empty
        else:
            np.random.set_state(_NumpyLegacy.from_raw(raw, has_gauss, gauss))
            self._live_gauss = bool(has_gauss)
        self._entered = raw

    def leave(self, lr: int) -> None:
        s = self._states[lr]
        s["python"] = random.getstate()
        s["torch"] = torch.get_rng_state()
        if "cuda" in s:
            s["cuda"] = torch.cuda.get_rng_state()
        if self._np.fast and not self._live_gauss and self._np.raw() == self._entered:
            return  # NumPy untouched in this micro-batch (its cache cannot fill without drawing words)
        state: Any = np.random.get_state()
        self._np_raw[lr] = _NumpyLegacy.to_raw(state)
        self._live_gauss = bool(state[3])

    def states(self) -> dict[int, dict[str, Any]]:
        return {lr: dict(s, numpy=_NumpyLegacy.from_raw(*self._np_raw[lr])) for lr, s in self._states.items()}
