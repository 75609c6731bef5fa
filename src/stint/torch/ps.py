"""Parameter-server training: PS processes hold shards of the parameters; workers pull them,
compute gradients on their data chunks and push (OASiS's job model, Bao et al. §III).

A job has W workers and P parameter servers, W + P processes in one gloo group (workers are
global ranks 0..W-1, PS k is rank W + k). The flat parameter vector is cut into P contiguous,
near-equal shards; PS k holds shard k and its optimiser state (SGD with momentum, elementwise).
Each round, every worker computes one gradient per logical rank it hosts (L logical ranks, worker
w hosts ``w, w + W, ...``; the chunk of round s and logical rank l is ``Sampler.shard(s, l, L)``,
so no chunk is trained twice) and sends each PS its slice:

- ``sync``: a PS waits for every worker's slices, folds the L gradients in logical-rank order and
  divides by L, then updates and replies to all. The update's bits depend on neither W nor P
  (each element's arithmetic is the same; the fold order is fixed), as in all-reduce mode;
- ``async`` (the paper's): a PS applies each worker's push as it arrives (that worker's ranks
  folded, divided by L) and replies to that worker only, which goes on with whatever the other
  workers have pushed so far.

Stop (SIGUSR1/SIGTERM to the workers, or ``STINT_STOP_FILE`` appearing): PS 0 fixes the round after
which every worker stops (the round after the latest it has seen: sync, the current one); each PS
then writes its shard, and PS 0 a manifest once all are written. A job resumes from the newest
complete checkpoint with any W and P: the shards are joined and cut again for the new P (shard
reassignment).

Environment (set by the control plane or :func:`launch_local`): the SDK's ``STINT_*`` variables
(``STINT_WORLD_SIZE`` is W, ``STINT_RANK`` a worker's rank) plus ``STINT_ROLE`` (``worker`` or
``ps``), ``STINT_PS_COUNT`` (P, default 1) and, on a PS, ``STINT_PS_RANK``. Under an executor
that starts workers only (no ``STINT_ROLE``), worker 0 starts the P parameter servers as its
children. Run by hand without any of them, a script re-runs itself as one worker and one PS.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from stint.torch import signals
from stint.torch.env import JobEnvError, round_robin
from stint.torch.launch import free_port
from stint.torch.sampler import Sampler

PREEMPTED_EXIT_CODE = 75
MODES = ("sync", "async")
HELLO, PUSH, DONE = 0, 1, 2  # message kinds, worker -> PS
_HDR = 4  # header: kind, round, flags, worker (to a PS); start round, stop round, 0, 0 (back)
KEEP = 2  # complete PS checkpoints kept on disk
STOP_FLAG = 1  # a worker was asked to stop
FINISHED_FLAG = 2  # (on DONE) the worker ran every round


@dataclass(frozen=True, slots=True)
class PSEnv:
    """Who this process is in a parameter-server job."""

    role: str  # "worker" or "ps"
    rank: int  # the worker's rank, or the PS's index k
    workers: int  # W
    servers: int  # P
    logical: int  # L
    ckpt_dir: Path | None
    master_addr: str
    master_port: int
    status_file: Path | None = None  # worker 0 reports its round there (the SDK's format)
    stop_file: Path | None = None  # appears when a stop was requested (``STINT_STOP_FILE``)

    def stop_asked(self) -> bool:
        """A stop was requested: by signal, or by the stop file (a request made while the
        process was still starting, before its supervisor could signal it)."""
        return signals.requested() or (self.stop_file is not None and self.stop_file.exists())

    @property
    def global_rank(self) -> int:
        return self.rank if self.role == "worker" else self.workers + self.rank

    @property
    def hosted(self) -> tuple[int, ...]:
        """The logical ranks a worker hosts (``w, w + W, ...``)."""
        return round_robin(self.rank, self.workers, self.logical)


def _int(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name, "")
    try:
        return int(raw) if raw else default
    except ValueError:
        raise JobEnvError(f"environment variable {name}={raw!r} is not an integer") from None


def read_ps_env(env: Mapping[str, str], logical: int | None, ckpt_dir: str | None) -> PSEnv:
    """The PS job's environment (``STINT_ROLE``, ``STINT_PS_COUNT``, ``STINT_PS_RANK`` and the
    SDK's variables), checked."""
    role = env.get("STINT_ROLE", "worker")
    if role not in ("worker", "ps"):
        raise JobEnvError(f"STINT_ROLE={role!r} must be 'worker' or 'ps'")
    w, p = _int(env, "STINT_WORLD_SIZE", 1), _int(env, "STINT_PS_COUNT", 1)
    lws = _int(env, "STINT_LOGICAL_WORLD_SIZE", logical or w)
    rank = _int(env, "STINT_PS_RANK" if role == "ps" else "STINT_RANK", 0)
    if w < 1 or p < 1 or lws % w:
        raise JobEnvError(f"need W >= 1 workers dividing L = {lws} logical ranks and P >= 1 "
                          f"parameter servers (got W = {w}, P = {p})")
    if not 0 <= rank < (p if role == "ps" else w):
        raise JobEnvError(f"{role} rank {rank} is outside [0, {p if role == 'ps' else w})")
    ck = env.get("STINT_CKPT_DIR") or ckpt_dir
    return PSEnv(role, rank, w, p, lws, Path(ck) if ck else None,
                 env.get("STINT_MASTER_ADDR") or env.get("MASTER_ADDR") or "127.0.0.1",
                 _int(env, "STINT_MASTER_PORT", _int(env, "MASTER_PORT", 29500)),
                 Path(env["STINT_STATUS_FILE"]) if env.get("STINT_STATUS_FILE") else None,
                 Path(env["STINT_STOP_FILE"]) if env.get("STINT_STOP_FILE") else None)


def shard_bounds(numel: int, servers: int) -> list[tuple[int, int]]:
    """PS k's slice ``[lo, hi)`` of the flat parameters: contiguous, near-equal."""
    cuts = [k * numel // servers for k in range(servers + 1)]
    return [(cuts[k], cuts[k + 1]) for k in range(servers)]


def sgd_momentum(params: torch.Tensor, buf: torch.Tensor, grad: torch.Tensor, lr: float,
                 momentum: float) -> None:
    """``buf = momentum·buf + grad; params -= lr·buf``, one correctly rounded operation at a time
    (no fused multiply-add), so each element's bits do not depend on the shard it is in."""
    buf.mul_(momentum)
    buf.add_(grad)
    params.sub_(torch.mul(buf, lr))


def fold(rows: torch.Tensor, logical: int) -> torch.Tensor:
    """The left fold of gradient rows in order, divided by L: ``((g0 + g1) + g2 ...) / L``."""
    acc = rows[0].clone()
    for i in range(1, rows.shape[0]):
        acc.add_(rows[i])
    return acc.div_(logical)


# -- checkpoints ----------------------------------------------------------------------------------
def _round_dir(root: Path, rnd: int) -> Path:
    return root / "ps" / f"round-{rnd:08d}"


def newest_checkpoint(root: Path | None) -> dict[str, int] | None:
    """The manifest of the newest complete PS checkpoint (round, servers, numel), or None."""
    if root is None or not (root / "ps").is_dir():
        return None
    for d in sorted((root / "ps").glob("round-*"), reverse=True):
        m = d / "manifest.json"
        if m.exists():
            out: dict[str, int] = json.loads(m.read_text())
            return out
    return None


def _prune(root: Path, keep: int) -> None:
    """Remove all but the newest ``keep`` complete rounds (and incomplete ones older than them)."""
    rounds = sorted((root / "ps").glob("round-*"), reverse=True)
    complete = [d for d in rounds if (d / "manifest.json").exists()]
    if len(complete) <= keep:
        return
    oldest_kept = complete[keep - 1].name
    for d in rounds:
        if d.name < oldest_kept:
            for f in d.iterdir():
                f.unlink()
            d.rmdir()


def load_shard(root: Path, manifest: Mapping[str, int], lo: int, hi: int
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """Parameters and momentum ``[lo, hi)`` of a checkpoint written by any number of PSs."""
    d = _round_dir(root, manifest["round"])
    parts = [torch.load(d / f"shard-{k}.pt") for k in range(manifest["servers"])]
    params = torch.cat([p["params"] for p in parts])
    buf = torch.cat([p["momentum"] for p in parts])
    if params.numel() != manifest["numel"]:
        raise ValueError(f"PS checkpoint {d} holds {params.numel()} parameters, its manifest "
                         f"says {manifest['numel']}")
    return params[lo:hi].clone(), buf[lo:hi].clone()


# -- the parameter server -------------------------------------------------------------------------
class Server:
    """PS k: serve pushes and pulls until every worker is done, then checkpoint and exit."""

    def __init__(self, env: PSEnv, init_params: torch.Tensor, lr: float, momentum: float,
                 mode: str, group: dist.ProcessGroup | None) -> None:
        self.env, self.lr, self.momentum, self.mode, self.group = env, lr, momentum, mode, group
        numel = init_params.numel()
        self.numel = numel
        self.lo, self.hi = shard_bounds(numel, env.servers)[env.rank]
        self.params = init_params[self.lo:self.hi].clone()
        self.buf = torch.zeros_like(self.params)
        self.start = 0
        m = newest_checkpoint(env.ckpt_dir)
        if m is not None:
            assert env.ckpt_dir is not None
            if m["numel"] != numel:
                raise ValueError(f"the PS checkpoint has {m['numel']} parameters, the model "
                                 f"{numel}")
            self.params, self.buf = load_shard(env.ckpt_dir, m, self.lo, self.hi)
            self.start = m["round"]
        self.per = env.logical // env.workers
        self.stop_at = -1
        self._sends: list[dist.Work] = []
        self._keep: list[torch.Tensor] = []  # tensors in flight

    def serve(self) -> int:
        w, n = self.env.workers, self.hi - self.lo
        pending: dict[int, torch.Tensor] = {}
        done: dict[int, tuple[int, int]] = {}  # worker -> (next round, flags)
        seen = self.start
        hdr = torch.zeros(_HDR, dtype=torch.int64)
        while len(done) < w:
            src = dist.recv(hdr)
            kind, rnd, flags, wk = (int(x) for x in hdr.tolist())
            if kind == HELLO:
                self._reply(src)
                continue
            if kind == DONE:
                done[wk] = (rnd, flags)
                continue
            rows = torch.empty(self.per, n)
            dist.recv(rows, src=src)
            seen = max(seen, rnd)
            if self.stop_at < 0 and (flags & STOP_FLAG or (self.env.rank == 0
                                                          and self.env.stop_asked())):
                self.stop_at = seen + 1  # sync: every worker is at this round
            if self.mode == "async":
                sgd_momentum(self.params, self.buf, fold(rows, self.env.logical), self.lr,
                             self.momentum)
                self._reply(src)
                continue
            pending[wk] = rows
            if len(pending) == w:
                self._sync_update(pending)
                for r in sorted(pending):
                    self._reply(r)
                pending.clear()
        final = max(r for r, _ in done.values())
        self._checkpoint(final)
        for r in range(w):  # the final parameters, once the checkpoint is complete
            self._reply(r)
        self._drain()
        return 0 if all(f & FINISHED_FLAG for _, f in done.values()) else PREEMPTED_EXIT_CODE

    def _sync_update(self, pending: Mapping[int, torch.Tensor]) -> None:
        """Every logical rank's slice, in logical-rank order, folded; then one update."""
        rows = torch.empty(self.env.logical, self.hi - self.lo)
        for wk, got in pending.items():
            for i, lrank in enumerate(round_robin(wk, self.env.workers, self.env.logical)):
                rows[lrank] = got[i]
        sgd_momentum(self.params, self.buf, fold(rows, self.env.logical), self.lr, self.momentum)

    def _reply(self, dst: int) -> None:
        """The header and a copy of the shard to ``dst``, sent in the background (a blocking
        send could wait on a worker that is itself sending to another PS)."""
        self._sends = [s for s in self._sends if not s.is_completed()]
        hdr = torch.tensor([self.start, self.stop_at, 0, 0], dtype=torch.int64)
        for t in (hdr, self.params.clone()):
            work = dist.isend(t, dst)
            assert work is not None
            self._sends.append(work)
            self._keep.append(t)
        if len(self._keep) > 4 * self.env.workers:
            self._drain()

    def _drain(self) -> None:
        for work in self._sends:
            work.wait()
        self._sends, self._keep = [], []

    def _checkpoint(self, rnd: int) -> None:
        root = self.env.ckpt_dir
        if root is None:
            return
        d = _round_dir(root, rnd)
        d.mkdir(parents=True, exist_ok=True)
        tmp = d / f"shard-{self.env.rank}.pt.tmp"
        torch.save({"params": self.params, "momentum": self.buf, "lo": self.lo}, tmp)
        os.replace(tmp, d / f"shard-{self.env.rank}.pt")
        dist.barrier(group=self.group)  # every shard is written
        if self.env.rank == 0:
            (d / "manifest.json.tmp").write_text(json.dumps(
                {"round": rnd, "servers": self.env.servers, "numel": self.numel}))
            os.replace(d / "manifest.json.tmp", d / "manifest.json")
            _prune(root, KEEP)
        dist.barrier(group=self.group)


# -- the worker -----------------------------------------------------------------------------------
class PSJob:
    """A worker's handle on its parameter-server job. Build it with :func:`init`."""

    def __init__(self, env: PSEnv, model: torch.nn.Module, mode: str,
                 servers: Sequence[subprocess.Popen[bytes]] = ()) -> None:
        self.env, self.model, self.mode = env, model, mode
        self.servers = list(servers)  # the PS processes this worker started (see init)
        self.params = [p for p in model.parameters() if p.requires_grad]
        numel = sum(p.numel() for p in self.params)
        self.bounds = shard_bounds(numel, env.servers)
        self.grads = torch.zeros(len(env.hosted), numel)
        self._slot = 0
        self.step = 0
        self.stopped = False
        self.start_round = 0
        self._stop_at = -1
        self.total = 0
        self._status_at = -1e9

    # the loop
    def steps(self, total: int) -> Iterator[int]:
        """Rounds from the checkpoint's to ``total``; pulls before each, pushes after each."""
        self._send_all(HELLO, 0)
        self._receive()
        rnd = self.start_round
        self.total = total
        while rnd < total:
            self.step, self._slot = rnd, 0
            self._status("running")
            yield rnd
            if self._slot != len(self.env.hosted):
                raise RuntimeError(f"round {rnd}: {self._slot} of the {len(self.env.hosted)} "
                                   "hosted logical ranks computed a gradient (iterate batches())")
            self._send_all(PUSH, rnd, push=True)
            self._receive()
            rnd += 1
            if self._stop_at >= 0 and rnd >= self._stop_at:
                self.stopped = rnd < total
                break
        self.step = rnd
        self._status("finished" if rnd >= total else "preempted", force=True)
        self._send_all(DONE, rnd, flags=FINISHED_FLAG if rnd >= total else 0)
        self._receive()  # the final parameters
        dist.destroy_process_group()
        codes = [p.wait() for p in self.servers]
        if any(c not in (0, PREEMPTED_EXIT_CODE) for c in codes):
            raise RuntimeError(f"stint.torch.ps: a parameter server failed (exit codes {codes})")
        signals.finished(self.env.rank == 0)
        if self.stopped:
            sys.stdout.flush()
            sys.exit(PREEMPTED_EXIT_CODE)

    def batches(self, sampler: Sampler) -> Iterator[torch.Tensor]:
        """This round's chunk for each hosted logical rank; after each, its gradient is kept."""
        for i, lrank in enumerate(self.env.hosted):
            for p in self.params:
                p.grad = None
            yield sampler.shard(self.step, lrank, self.env.logical)
            flat = [p.grad.reshape(-1) if p.grad is not None else torch.zeros(p.numel())
                    for p in self.params]
            self.grads[i] = torch.cat(flat)
            self._slot = i + 1

    def _status(self, state: str, force: bool = False) -> None:
        """Worker 0's progress report in the SDK's status format (``step`` of ``total_steps``)
        at most once a second (``force``: now)."""
        path = self.env.status_file
        now = time.monotonic()
        if path is None or self.env.rank != 0 or (not force and now - self._status_at < 1.0):
            return
        self._status_at = now
        body = {"state": state, "step": self.step, "total_steps": self.total,
                "rank": 0, "world_size": self.env.workers, "ps": self.env.servers,
                "logical_world_size": self.env.logical}
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(body))
        os.replace(tmp, path)

    # messages
    def _send_all(self, kind: int, rnd: int, push: bool = False, flags: int = 0) -> None:
        """Send every PS a header (and its slice of the gradients); waits for the sends."""
        flags |= STOP_FLAG if self.env.stop_asked() else 0
        hdr = torch.tensor([kind, rnd, flags, self.env.rank], dtype=torch.int64)
        works = []
        for k, (lo, hi) in enumerate(self.bounds):
            dst = self.env.workers + k
            works.append(dist.isend(hdr, dst))
            if push:
                part = self.grads[:, lo:hi].contiguous()
                works.append(dist.isend(part, dst))
        for work in works:
            assert work is not None
            work.wait()

    def _receive(self) -> None:
        hdr = torch.zeros(_HDR, dtype=torch.int64)
        flat = torch.empty(self.bounds[-1][1])
        for k, (lo, hi) in enumerate(self.bounds):
            src = self.env.workers + k
            dist.recv(hdr, src)
            if k == 0:
                self.start_round, self._stop_at = int(hdr[0]), int(hdr[1])
            part = torch.empty(hi - lo)
            dist.recv(part, src)
            flat[lo:hi] = part
        with torch.no_grad():
            torch.nn.utils.vector_to_parameters(flat, self.params)


def init(model: torch.nn.Module, *, lr: float, momentum: float = 0.0, mode: str = "sync",
         logical_world_size: int | None = None, ckpt_dir: str | None = None,
         timeout: float = 300.0) -> PSJob:
    """Join the PS job. On a worker, returns its :class:`PSJob`; on a PS, serves and exits (code
    0, or 75 when stopped for a checkpoint). Without ``STINT_ROLE`` in the environment (run by
    hand), re-runs the script as one worker and one PS and exits with their code."""
    if mode not in MODES:
        raise ValueError(f"stint.torch.ps: mode must be one of {MODES} (got {mode!r})")
    if any(b.is_floating_point() for b in model.buffers()):
        raise ValueError("stint.torch.ps: the parameter servers hold parameters only; a model "
                         "with floating-point buffers (BatchNorm's running statistics) would "
                         "keep them per worker: use a model without them")
    if "STINT_ROLE" not in os.environ and "STINT_RANK" not in os.environ:
        sys.exit(run_local([sys.executable, *sys.argv], 1, 1, logical_world_size or 1, ckpt_dir))
    env = read_ps_env(os.environ, logical_world_size, ckpt_dir)
    servers: list[subprocess.Popen[bytes]] = []
    if "STINT_ROLE" not in os.environ and env.rank == 0:
        servers = _start_servers(env)  # under an executor that launches workers only
    signals.arm()
    dist.init_process_group("gloo", init_method=f"tcp://{env.master_addr}:{env.master_port}",
                            rank=env.global_rank, world_size=env.workers + env.servers,
                            timeout=timedelta(seconds=timeout))
    group = dist.new_group(list(range(env.workers, env.workers + env.servers)))
    if env.role == "ps":
        flat = torch.nn.utils.parameters_to_vector(
            [p for p in model.parameters() if p.requires_grad]).detach()
        code = Server(env, flat, lr, momentum, mode, group).serve()
        dist.destroy_process_group()
        sys.stdout.flush()
        os._exit(code)  # a PS runs none of the worker's script
    return PSJob(env, model, mode, servers)


def _start_servers(env: PSEnv) -> list[subprocess.Popen[bytes]]:
    """Worker 0 of a job whose executor starts workers only: the P parameter servers, as its
    children on its node (their output is its own)."""
    cmd = [sys.executable, *sys.argv]
    out = []
    for k in range(env.servers):
        child = dict(os.environ, STINT_ROLE="ps", STINT_PS_RANK=str(k),
                     STINT_PS_COUNT=str(env.servers))
        out.append(subprocess.Popen(cmd, env=child))
    return out


# -- a local launcher -----------------------------------------------------------------------------
def ps_env(role: str, rank: int, workers: int, servers: int, logical: int,
           ckpt_dir: str | os.PathLike[str] | None, port: int,
           base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of worker ``rank`` or PS ``rank`` of a local PS job."""
    env = dict(os.environ if base is None else base)
    env.update(STINT_ROLE=role, STINT_WORLD_SIZE=str(workers), STINT_PS_COUNT=str(servers),
               STINT_LOGICAL_WORLD_SIZE=str(logical), STINT_MASTER_ADDR="127.0.0.1",
               STINT_MASTER_PORT=str(port), STINT_JOB_ID=env.get("STINT_JOB_ID", "local"))
    env["STINT_PS_RANK" if role == "ps" else "STINT_RANK"] = str(rank)
    if ckpt_dir is not None:
        env["STINT_CKPT_DIR"] = os.fspath(ckpt_dir)
    return env


def start_local(cmd: Sequence[str], workers: int, servers: int, logical: int,
                ckpt_dir: str | os.PathLike[str] | None,
                stdout: int | None = None) -> list[subprocess.Popen[bytes]]:
    """Start W workers and P parameter servers of ``cmd`` on 127.0.0.1 (workers first)."""
    port = free_port()
    roles = [("worker", r) for r in range(workers)] + [("ps", k) for k in range(servers)]
    return [subprocess.Popen(list(cmd), env=ps_env(role, r, workers, servers, logical, ckpt_dir, port),
                             stdout=stdout if role == "worker" and r == 0 else subprocess.DEVNULL)
            for role, r in roles]


def run_local(cmd: Sequence[str], workers: int, servers: int, logical: int,
              ckpt_dir: str | os.PathLike[str] | None) -> int:
    """Run a PS job locally, forwarding SIGUSR1/SIGTERM to the workers; 0 if every process
    ended 0, 75 if the job stopped at a checkpoint, else the first other code."""
    procs = start_local(cmd, workers, servers, logical, ckpt_dir)

    def forward(signum: int, _frame: object) -> None:
        for p in procs[:workers]:
            if p.poll() is None:
                p.send_signal(signum)

    for s in (signal.SIGUSR1, signal.SIGTERM):
        signal.signal(s, forward)
    codes = [p.wait() for p in procs]
    bad = [c for c in codes if c not in (0, PREEMPTED_EXIT_CODE)]
    return bad[0] if bad else PREEMPTED_EXIT_CODE if PREEMPTED_EXIT_CODE in codes else 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m stint.torch.ps --workers W --ps P [--logical L] [--ckpt-dir D] script args``."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m stint.torch.ps", description=main.__doc__)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--ps", type=int, default=1)
    p.add_argument("--logical", type=int, default=None)
    p.add_argument("--ckpt-dir", default=None)
    p.add_argument("script")
    p.add_argument("args", nargs=argparse.REMAINDER)
    a = p.parse_args(argv)
    return run_local([sys.executable, a.script, *a.args], a.workers, a.ps,
                     a.logical or a.workers, a.ckpt_dir)


if __name__ == "__main__":
    sys.exit(main())
