"""A job's checkpoint for code that is not a stint job: a plain state dict, or a DCP checkpoint.

    import stint.torch as stint
    state = stint.load_checkpoint("/ckpt/job-7")        # the newest valid one, verified
    model.load_state_dict(state["tracked"]["model"])    # the names given to stint.init()

    stint.export_dcp("/ckpt/job-7", "/export/job-7")    # then, in any PyTorch program:
    state = {"model": model.state_dict(), "optimizer": get_optimizer_state_dict(model, opt)}
    dcp.load(state, checkpoint_id="/export/job-7")
    model.load_state_dict(state["model"])
    set_optimizer_state_dict(model, opt, state["optimizer"])

or from a shell: ``python -m stint.torch.export CKPT_DIR OUT_DIR [--step N]``.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from stint.torch.sharded import unsharded
from stint.torch.store import CheckpointStore


class NoCheckpoint(LookupError):
    """The directory holds no valid checkpoint (of that step)."""


def load_checkpoint(ckpt_dir: str | os.PathLike[str], step: int | None = None,
                    verify: bool = True) -> dict[str, Any]:
    """The state of the newest valid checkpoint in ``ckpt_dir`` (or of ``step``), whatever number
    of workers wrote it: ``{"tracked": {name: state_dict}, "counters": {...}, "rng": {logical
    rank: generator states}}`` (and ``"grads"`` when it was cut between accumulation steps).
    Every blob is verified against its hash unless ``verify`` is False. A ``shard=True`` job's
    checkpoint comes back whole: the model's full state dict and a plain optimizer state dict."""
    store = CheckpointStore(ckpt_dir)
    valid = [c for c in store.checkpoints() if step is None or c.step == step]
    if not valid:
        which = f"step {step}" if step is not None else "any step"
        raise NoCheckpoint(f"{ckpt_dir}: no valid checkpoint of {which}")
    state = store.load(valid[0], verify=verify)
    if not isinstance(state, dict):
        raise NoCheckpoint(f"{valid[0].path}: not a stint.torch job's checkpoint")
    if "sharded" in state:  # a shard=True job's: its logical shards joined into whole tensors
        state = unsharded(state)
    return dict(state, step=valid[0].step)


def export_dcp(ckpt_dir: str | os.PathLike[str], out_dir: str | os.PathLike[str],
               step: int | None = None) -> int:
    """Write the tracked objects' state dicts of a stint checkpoint as a
    ``torch.distributed.checkpoint`` checkpoint in ``out_dir`` (keys: the names given to
    ``stint.init``); return the step exported. Optimizers are keyed by parameter name, as
    ``get_optimizer_state_dict`` keys them, so ``set_optimizer_state_dict`` takes them. Runs in
    one process, no process group needed."""
    from torch.distributed.checkpoint.state_dict_saver import save

    state = load_checkpoint(ckpt_dir, step)
    names = state.get("param_names") or {}
    tracked = {k: by_name(v, names[k]) if k in names else v for k, v in state["tracked"].items()}
    save(tracked, checkpoint_id=os.fspath(out_dir), no_dist=True)
    return int(state["step"])


def by_name(optimizer_state: dict[str, Any], names: list[str]) -> dict[str, Any]:
    """An optimizer's ``state_dict()`` with its parameters' indices replaced by their names
    (``names[i]``: parameter i's), the form of DCP's ``get_optimizer_state_dict``."""
    groups = [dict(g, params=[names[i] for i in g["params"]]) for g in optimizer_state["param_groups"]]
    return {"state": {names[i]: s for i, s in optimizer_state["state"].items()}, "param_groups": groups}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description="Export a stint.torch checkpoint as a torch.distributed.checkpoint one.")
    p.add_argument("ckpt_dir")
    p.add_argument("out_dir")
    p.add_argument("--step", type=int, default=None, help="default: the newest valid checkpoint")
    a = p.parse_args(argv)
    try:
        step = export_dcp(a.ckpt_dir, a.out_dir, a.step)
    except NoCheckpoint as e:
        raise SystemExit(f"stint: {e}") from None
    print(f"exported step {step} of {a.ckpt_dir} to {a.out_dir}")


if __name__ == "__main__":
    main()
