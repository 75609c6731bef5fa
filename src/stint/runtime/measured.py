"""What a live store measured: each attempt's costs, the steps' speed, the policy it ran.

The controller writes an ``Attempt`` row per launch (launched, first step of its own, stop
request, exit, the SDK's steps then) and names its policy in ``store_meta``; this module reads
them back as plain data for the simulator: ``samples`` (``sim.costs.AttemptSample``, what
``sim.costs.fit`` fits the live cost model from), ``step_times`` (seconds a step per job and
worker count) and ``policy_of``. ``open_store`` opens a data directory or a database URL as
``stint sim --costs-from`` and ``stint replay`` take them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.exc import SQLAlchemyError

from stint.runtime.store import Store, sqlite_url
from stint.runtime.tables import Attempt, StoreMeta
from stint.sim.costs import AttemptSample, FittedCosts, fit

POLICY_KEY = "policy"  # store_meta: {"name": ..., "options": [...]} of the live policy


class StoreNotFound(ValueError):
    """``--data-dir``/``--db`` names no store."""


def open_store(where: str) -> Store:
    """A store from a database URL (``sqlite:///...``, ``postgresql://...``) or a data
    directory holding ``stint.db``, migrated to this version's schema."""
    if "://" not in where:
        path = Path(where).expanduser()
        if not (path / "stint.db").is_file():
            raise StoreNotFound(f"{where}: no stint.db here (give a data directory of stint "
                                "serve, or a database URL)")
        where = sqlite_url(path)
    store = Store(where)
    try:
        store.migrate()
    except SQLAlchemyError as exc:  # a URL that does not answer, or not a database
        store.close()
        raise StoreNotFound(f"{where}: cannot open the store: {exc}") from None
    return store


def record_policy(store: Store, name: str, options: Sequence[str]) -> None:
    """Name the policy (and its options) that this store's controller runs."""
    value = json.dumps({"name": name, "options": list(options)})
    with store.session() as s:
        row = s.get(StoreMeta, POLICY_KEY)
        if row is None:
            s.add(StoreMeta(key=POLICY_KEY, value=value))
        elif row.value != value:
            row.value = value


def policy_of(store: Store) -> tuple[str, tuple[str, ...]] | None:
    """The policy name and options the store's controller last ran (None: never recorded)."""
    with store.read() as r:
        row = r.get(StoreMeta, POLICY_KEY)
    if row is None:
        return None
    got = json.loads(row.value)
    return str(got["name"]), tuple(str(o) for o in got.get("options", []))


@dataclass(frozen=True, slots=True)
class AttemptTimes:
    """One ``Attempt`` row as plain data (wall seconds)."""

    job_id: int
    attempt: int
    workers: int
    resumed: bool
    launched_at: float
    first_step_at: float | None
    first_step: int | None
    stop_at: float | None
    ended_at: float | None
    end_step: int | None
    outcome: str | None

    def step_s(self) -> float | None:
        """Seconds a step, from the first report to the request to stop or else the exit
        (None: too few steps between them). A finished attempt's time to exit after its last
        step is spread over its steps, so its run time is reproduced whole."""
        end = self.stop_at if self.stop_at is not None else self.ended_at
        if self.first_step_at is None or end is None or self.first_step is None \
                or self.end_step is None or self.end_step - self.first_step < 1:
            return None
        return max(0.0, end - self.first_step_at) / (self.end_step - self.first_step)


def attempts(store: Store, limit: int | None = None) -> list[AttemptTimes]:
    """Every attempt (the last ``limit`` launched, if given), in launch order."""
    q = select(Attempt).order_by(Attempt.id.desc() if limit else Attempt.id)
    if limit:
        q = q.limit(limit)
    with store.read() as r:
        rows = list(r.scalars(q))
    if limit:
        rows.reverse()
    return [AttemptTimes(a.job_id, a.attempt, a.workers, a.resumed, a.launched_at,
                         a.first_step_at, a.first_step, a.stop_at, a.ended_at, a.end_step,
                         a.outcome) for a in rows]


def samples(rows: Sequence[AttemptTimes]) -> list[AttemptSample]:
    """Each attempt's costs: launch to its first step (less the steps it made by then, at its
    own step time; a resumed attempt starts from the step its predecessor ended at), and its
    checkpoint-and-stop (stop request to exit, for one that checkpointed or stopped)."""
    last_end: dict[int, int] = {}
    out = []
    for a in rows:
        step_s = a.step_s()
        launch = None
        if a.first_step_at is not None and a.first_step is not None:
            own = a.first_step - (last_end.get(a.job_id, 0) if a.resumed else 0)
            launch = max(0.0, a.first_step_at - a.launched_at - max(own, 0) * (step_s or 0.0))
        stop = None
        if a.stop_at is not None and a.ended_at is not None and a.outcome in (
                "checkpointed", "stopped"):
            stop = max(0.0, a.ended_at - a.stop_at)
        if a.end_step is not None:
            last_end[a.job_id] = a.end_step
        out.append(AttemptSample(a.workers, a.resumed, launch, stop, step_s))
    return out


def fitted_costs(store: Store, limit: int | None = None) -> FittedCosts:
    """The live cost model fitted from the store's attempts (the last ``limit`` of them)."""
    return fit(samples(attempts(store, limit)))


def step_times(rows: Sequence[AttemptTimes]) -> dict[int, dict[int, float]]:
    """Per job, seconds a step at each worker count it ran at (the median over its attempts
    there; an attempt without a measured step time does not count)."""
    by: dict[int, dict[int, list[float]]] = {}
    for a in rows:
        s = a.step_s()
        if s is not None:
            by.setdefault(a.job_id, {}).setdefault(a.workers, []).append(s)
    return {j: {w: sorted(v)[len(v) // 2] for w, v in per.items()} for j, per in by.items()}
