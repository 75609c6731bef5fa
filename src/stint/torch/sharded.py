"""Sharded state under logical ranks (ZeRO-3 / FSDP style) that gives the same bits on any P.

The model is cut into *units* (its children holding parameters; containers such as
``nn.ModuleList`` are opened). Each unit's parameters form one flat vector, padded and cut into L
equal *logical shards* (a rule that depends on L only, never on P; a shard's length is a multiple
of 64 elements, so an elementwise kernel treats every element alike whatever shards sit beside it).
Worker w stores the block of shards ``[w L/P, (w+1) L/P)`` as one flat parameter: that block is
all it keeps of the unit's parameters, gradients and optimizer state, 1/P of the job's.

- **All-gather before use**: a unit's forward pre-hook gathers its full parameters from every
  worker's block (one ``all_gather_into_tensor``) into a buffer its parameters view; the buffer's
  storage is freed after the forward and gathered again when the gradient of the unit's output
  arrives (backward needs the weights), then freed once the unit's gradients are in. At most a
  unit or two are whole at a time. With P = 1 the block is the whole vector and nothing moves.
- **Reduce-scatter in a fixed logical order**: when a unit's gradients of one micro-batch are in,
  one ``all_to_all`` sends every worker the pieces of its block; it folds them into its block's
  gradient in logical-rank order, ``((g0 + g1) + g2) + ...``, then divides by L, exactly as the
  replicated exchange does (``stint.torch.exchange``). Elementwise additions in one order give the
  same bits for every P.
- **The optimizer** steps on the blocks (its param groups are rebound to them at ``init``): an
  elementwise optimizer (SGD, Adam, AdamW, ...) then computes every element as on one worker.
  :meth:`Sharded.clip_grad_norm_` sums squares per logical shard and folds the L sums in order.
- **Checkpoints** hold every logical shard once (parameter, optimizer state, pending gradient),
  each written by the worker storing it; a resume on another P re-blocks the same shards.

Every forward of the model is collective at P > 1 (all workers run it, e.g. an evaluation).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from stint.torch.exchange import Fold

ALIGN = 64  # elements: a shard's length is a multiple of this
_all_gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_CONTAINERS = (nn.ModuleList, nn.Sequential, nn.ModuleDict)


def units_of(model: nn.Module) -> list[tuple[str, nn.Module, list[nn.Parameter]]]:
    """The units of ``model``: (name, module, its parameters that require grad), in order.

    A child holding parameters is a unit, except a container (ModuleList, Sequential,
    ModuleDict) without parameters of its own, which is opened; the root's own parameters are a
    unit of their own (whole during the whole forward)."""
    out: list[tuple[str, nn.Module, list[nn.Parameter]]] = []

    def walk(prefix: str, m: nn.Module) -> None:
        for name, child in m.named_children():
            full = f"{prefix}{name}"
            params = [p for p in child.parameters() if p.requires_grad]
            if not params:
                continue
            if isinstance(child, _CONTAINERS) and not list(child.parameters(recurse=False)):
                walk(f"{full}.", child)
            else:
                out.append((full, child, params))

    walk("", model)
    own = [p for p in model.parameters(recurse=False) if p.requires_grad]
    if own:
        out.insert(0, ("", model, own))
    return out


@dataclass
class Unit:
    """One unit: its parameters' layout in the flat vector, its block and its gather buffer."""

    name: str
    module: nn.Module
    params: list[nn.Parameter]
    numel: int  # of the parameters, unpadded
    shard: int  # elements per logical shard
    block: nn.Parameter  # this worker's shards, back to back: what the optimizer steps on
    full: torch.Tensor  # the whole padded vector (P > 1: its storage is freed when not in use)
    whole: bool = False  # the full vector is gathered now
    done: int = 0  # parameters whose gradient of this micro-batch is in
    exchanged: bool = False  # this micro-batch's gradients have been sent
    fold: Fold | None = None
    hooks: list[Any] = field(default_factory=list)


class Sharded:
    """The sharded engine of one worker: units, blocks, hooks and the gradient fold."""

    def __init__(self, model: nn.Module, placement: Sequence[Sequence[int]], rank: int) -> None:
        self.placement = [tuple(r) for r in placement]
        self.world_size = len(self.placement)
        self.logical_world_size = sum(len(r) for r in self.placement)
        self.rank = rank
        self.per_worker = self.logical_world_size // self.world_size
        self._slot = 0
        self.peak_bytes = 0  # the most parameter + optimizer state bytes held at once
        self._optimizers: list[torch.optim.Optimizer] = []
        self._names = {id(p): n for n, p in model.named_parameters()}
        found = units_of(model)
        if not found:
            raise ValueError("stint: shard=True, but the model has no parameters that require grad")
        dtypes = {p.dtype for _, _, ps in found for p in ps}
        if len(dtypes) > 1:
            raise TypeError(f"stint: shard=True needs parameters of one dtype, got {dtypes}")
        self.units = [self._make_unit(name, m, ps) for name, m, ps in found]

    # ---- layout ---------------------------------------------------------------------------
    def _make_unit(self, name: str, module: nn.Module, params: list[nn.Parameter]) -> Unit:
        numel = sum(p.numel() for p in params)
        lws = self.logical_world_size
        shard = -(-numel // (lws * ALIGN)) * ALIGN
        flat = torch.zeros(shard * lws, dtype=params[0].dtype, device=params[0].device)
        with torch.no_grad():
            offset = 0
            for p in params:
                flat[offset : offset + p.numel()].copy_(p.reshape(-1))
                offset += p.numel()
        if self.world_size > 1:
            dist.broadcast(flat, src=0)  # a fresh start takes worker 0's parameters, as DDP does
        first = self.rank * self.per_worker * shard
        block = nn.Parameter(flat[first : first + self.per_worker * shard].clone())
        full = block.data if self.world_size == 1 else flat
        unit = Unit(name, module, params, numel, shard, block, full, whole=self.world_size == 1)
        self._view(unit)
        if self.world_size > 1:
            self._free(unit)
        unit.hooks.append(module.register_forward_pre_hook(lambda m, args, u=unit: self._gather(u)))
        unit.hooks.append(module.register_forward_hook(lambda m, args, out, u=unit: self._after_forward(u, out)))
        for p in params:
            unit.hooks.append(p.register_post_accumulate_grad_hook(  # type: ignore[no-untyped-call]
                lambda p, u=unit: self._grad_in(u)))
        return unit

    def _view(self, unit: Unit) -> None:
        """The unit's parameters become views of its full vector."""
        offset = 0
        for p in unit.params:
            p.data = unit.full[offset : offset + p.numel()].view_as(p)
            offset += p.numel()

    def _free(self, unit: Unit) -> None:
        if self.world_size > 1:
            unit.full.untyped_storage().resize_(0)
            unit.whole = False

    def _gather(self, unit: Unit) -> None:
        if unit.whole:
            return
        nbytes = unit.full.numel() * unit.full.element_size()
        unit.full.untyped_storage().resize_(nbytes)
        with torch.no_grad():
            _all_gather_single(unit.full, unit.block.detach())
        unit.whole = True
        self._account()

    def _after_forward(self, unit: Unit, out: Any) -> None:
        first = _first_tensor(out)
        if torch.is_grad_enabled() and first is not None and first.requires_grad:
            first.register_hook(lambda g, u=unit: self._before_backward(u, g))  # type: ignore[no-untyped-call]
        self._free(unit)

    def _before_backward(self, unit: Unit, grad: torch.Tensor) -> torch.Tensor:
        self._gather(unit)  # the weights the unit's backward reads
        return grad

    # ---- gradients --------------------------------------------------------------------------
    def start_step(self) -> list[torch.Tensor | None]:
        """A micro-batch loop begins: every block gets a fresh fold; returns the gradients that
        were there (accumulation across steps), to add back at :meth:`reduce`."""
        carry = [u.block.grad for u in self.units]
        self._slot = 0
        for u in self.units:
            u.block.grad = None
            u.fold = Fold(torch.empty_like(u.block.data))
            u.done, u.exchanged = 0, False
        return carry

    def _grad_in(self, unit: Unit) -> None:
        unit.done += 1
        if unit.done == len(unit.params):
            self._exchange(unit)

    def _exchange(self, unit: Unit) -> None:
        """Send this micro-batch's gradients of ``unit``: every worker folds its block's pieces."""
        assert unit.fold is not None
        if unit.exchanged:
            return
        unit.exchanged = True
        flat = torch.zeros(unit.full.numel(), dtype=unit.block.dtype, device=unit.block.device)
        offset = 0
        for p in unit.params:
            if p.grad is not None:
                flat[offset : offset + p.numel()].copy_(p.grad.reshape(-1))
                p.grad = None
            offset += p.numel()
        self._free(unit)
        if self.world_size == 1:
            unit.fold.offer(self.placement[0][self._slot], flat)
            return
        recv = torch.empty_like(flat)
        dist.all_to_all_single(recv, flat)  # block v of every worker's gradients to worker v
        rows = recv.view(self.world_size, -1)
        for w, ranks in enumerate(self.placement):
            unit.fold.offer(ranks[self._slot], rows[w])

    def take(self) -> None:
        """One micro-batch is done: units whose gradients did not all come are sent now (in unit
        order, the same on every worker)."""
        for u in self.units:
            self._exchange(u)
            u.done, u.exchanged = 0, False
        self._slot += 1

    def reduce(self, carry: list[torch.Tensor | None]) -> None:
        """The loop ended: each block's gradient is the mean over the L logical ranks (plus ``carry``)."""
        for u, old in zip(self.units, carry):
            assert u.fold is not None
            if not u.fold.complete(self.logical_world_size):
                raise RuntimeError(f"stint: unit {u.name!r} folded {u.fold.next} of "
                                   f"{self.logical_world_size} logical ranks' gradients")
            mean = u.fold.acc.div_(self.logical_world_size)
            u.block.grad = mean if old is None else old.add_(mean)
            u.fold = None
        self._account()

    def clip_grad_norm_(self, max_norm: float, eps: float = 1e-6) -> torch.Tensor:
        """Scale every block's gradient so that the whole gradient's 2-norm is at most ``max_norm``
        (as ``torch.nn.utils.clip_grad_norm_``); the norm, the same bits on any P: squares summed
        per logical shard (float64), the L sums added in shard order. Collective."""
        sums = torch.zeros(len(self.units), self.per_worker, dtype=torch.float64)
        for i, u in enumerate(self.units):
            g = u.block.grad
            for s in range(self.per_worker if g is not None else 0):  # one 1-D sum per shard: one order
                assert g is not None
                sums[i, s] = g.detach()[s * u.shard : (s + 1) * u.shard].to(torch.float64).square().sum().cpu()
        mine = sums  # [units, my shards]
        if self.world_size > 1:
            every = torch.empty(self.world_size * mine.numel(), dtype=torch.float64)
            _all_gather_single(every, mine.reshape(-1))
            by_shard = every.view(self.world_size, len(self.units), self.per_worker).permute(1, 0, 2)
            mine = by_shard.reshape(len(self.units), self.logical_world_size)
        total = torch.zeros((), dtype=torch.float64)
        for row in mine:
            for value in row:
                total = total + value
        norm = total.sqrt()
        coef = torch.clamp(max_norm / (norm + eps), max=1.0)
        for u in self.units:
            if u.block.grad is not None:
                u.block.grad.mul_(coef.to(u.block.grad.dtype))
        return norm.to(self.units[0].block.dtype)

    # ---- the optimizer and checkpoints ------------------------------------------------------
    def bind(self, optimizer: torch.optim.Optimizer, owned: Callable[[nn.Parameter], bool]) -> None:
        """Rebind ``optimizer`` (not stepped yet, one param group over the model's parameters)
        to this worker's blocks."""
        if optimizer.state:
            raise ValueError("stint: shard=True needs an optimizer that has not stepped yet")
        if len(optimizer.param_groups) != 1:
            raise ValueError(f"stint: shard=True supports one optimizer param group, got "
                             f"{len(optimizer.param_groups)}")
        group = optimizer.param_groups[0]
        mine = {id(p) for u in self.units for p in u.params}
        if {id(p) for p in group["params"]} != mine:
            raise ValueError("stint: shard=True needs the optimizer over exactly the model's parameters "
                             "that require grad")
        group["params"] = [u.block for u in self.units]
        optimizer.state.clear()
        self._optimizers.append(optimizer)

    def blocks(self) -> list[nn.Parameter]:
        return [u.block for u in self.units]

    def shard_writer(self, logical_shard: int) -> int:
        return logical_shard // self.per_worker

    def state(self, optimizer: torch.optim.Optimizer | None,
              grads: bool) -> tuple[dict[str, Any], dict[int, int]]:
        """Every logical shard of every unit (this worker's real, the others ``meta`` stand-ins)
        with its optimizer state and (``grads``: no optimizer stepped on it yet) its gradient;
        the owners for ``CheckpointStore.cut``."""
        owners: dict[int, int] = {}
        units: list[list[dict[str, torch.Tensor]]] = []
        replicated: list[dict[str, Any]] = []
        for u in self.units:
            per: dict[str, torch.Tensor] = {"param": u.block.detach()}
            if grads and u.block.grad is not None:
                per["grad"] = u.block.grad
            held = optimizer.state.get(u.block, {}) if optimizer is not None else {}
            shared = {}
            for k, v in held.items():
                if isinstance(v, torch.Tensor) and v.numel() == u.block.numel():
                    per[f"optimizer.{k}"] = v
                else:
                    shared[k] = v
            replicated.append(shared)
            shards = []
            for lr in range(self.logical_world_size):
                mine = self.shard_writer(lr) == self.rank
                at = (lr - self.rank * self.per_worker) * u.shard
                entry = {k: (v.detach().reshape(-1)[at : at + u.shard] if mine else
                             torch.empty(u.shard, dtype=v.dtype, device="meta")) for k, v in per.items()}
                for t in entry.values():
                    owners[id(t)] = self.shard_writer(lr)
                shards.append(entry)
            units.append(shards)
        groups = optimizer.state_dict()["param_groups"] if optimizer is not None else []
        layout = [[(self._names[id(p)], tuple(p.shape)) for p in u.params] for u in self.units]
        return {"units": [u.name for u in self.units], "layout": layout, "shards": units,
                "optimizer_shared": replicated, "param_groups": groups}, owners

    def load(self, saved: dict[str, Any], optimizer: torch.optim.Optimizer | None) -> None:
        """Take this worker's block of every unit back from a checkpoint (of any P)."""
        names = [u.name for u in self.units]
        if saved["units"] != names:
            raise ValueError(f"stint: the checkpoint's units {saved['units']} are not the model's {names}")
        lo, hi = self.rank * self.per_worker, (self.rank + 1) * self.per_worker
        state: dict[int, dict[str, Any]] = {}
        with torch.no_grad():
            for i, (u, shards) in enumerate(zip(self.units, saved["shards"])):
                mine = shards[lo:hi]
                u.block.data.copy_(torch.cat([s["param"] for s in mine]))
                u.block.grad = torch.cat([s["grad"] for s in mine]).to(u.block.device) if "grad" in mine[0] else None
                held = dict(saved["optimizer_shared"][i])
                for k in mine[0]:
                    if k.startswith("optimizer."):
                        held[k.removeprefix("optimizer.")] = torch.cat([s[k] for s in mine])
                if held:
                    state[i] = held
                if self.world_size == 1:
                    u.full = u.block.data
                    self._view(u)
        if optimizer is not None and saved["param_groups"]:
            optimizer.load_state_dict({"state": state, "param_groups": saved["param_groups"]})

    def _account(self) -> None:
        """Track the peak of parameter + optimizer bytes held: blocks, optimizer state, whole units."""
        held = sum(u.block.numel() * u.block.element_size() for u in self.units)
        held += sum(u.full.numel() * u.full.element_size() for u in self.units
                    if self.world_size > 1 and u.whole)
        for o in self._optimizers:
            for st in o.state.values():
                held += sum(v.numel() * v.element_size() for v in st.values() if isinstance(v, torch.Tensor))
        self.peak_bytes = max(self.peak_bytes, held)

    def unshard(self) -> None:
        """The training loop ended: gather every unit and keep it whole, hooks removed, so the
        script's epilogue uses the model as a plain module (evaluation, saving, a digest)."""
        peak = self.peak_bytes  # training's peak: the epilogue's whole model is not counted
        for u in self.units:
            self._gather(u)
        self.peak_bytes = peak
        self.close()

    def close(self) -> None:
        for u in self.units:
            for h in u.hooks:
                h.remove()
            u.hooks.clear()


def _first_tensor(out: Any) -> torch.Tensor | None:
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, (tuple, list)):
        for o in out:
            if isinstance(o, torch.Tensor):
                return o
    return None


def unsharded(state: dict[str, Any]) -> dict[str, Any]:
    """A loaded checkpoint of a shard=True job as a replicated job's: the model's state dict whole
    (parameters rebuilt from the logical shards, its buffers) and the optimizer's plain state
    dict (parameters numbered in the model's order), for ``load_checkpoint`` and ``export_dcp``."""
    sharded = state["sharded"]
    tracked = dict(state["tracked"])
    model: dict[str, Any] = dict(tracked[sharded["model"]])
    opt_state: dict[int, dict[str, Any]] = {}
    names: list[str] = []
    for i, (layout, shards) in enumerate(zip(sharded["layout"], sharded["shards"])):
        whole = {k: torch.cat([s[k] for s in shards]) for k in shards[0]}
        offset = 0
        for name, shape in layout:
            numel = math.prod(shape)
            model[name] = whole["param"][offset : offset + numel].view(shape).clone()
            elementwise = {k.removeprefix("optimizer."): v[offset : offset + numel].view(shape).clone()
                           for k, v in whole.items() if k.startswith("optimizer.")}
            if elementwise:  # each parameter its own copy of the unit's shared values (e.g. "step")
                shared = sharded["optimizer_shared"][i].items()
                opt_state[len(names)] = {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in shared}
                opt_state[len(names)].update(elementwise)
            names.append(name)
            offset += numel
    tracked[sharded["model"]] = model
    if sharded.get("optimizer") is not None:
        groups = [dict(g, params=list(range(len(names)))) for g in sharded["param_groups"]]
        tracked[sharded["optimizer"]] = {"state": opt_state, "param_groups": groups}
    out = {k: v for k, v in state.items() if k != "sharded"}
    out["tracked"] = tracked
    if sharded.get("optimizer") is not None:
        out["param_names"] = {sharded["optimizer"]: names}
    return out
