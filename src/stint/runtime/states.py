"""The job lifecycle as an explicit state machine: states, the allowed transitions, and why.

```
queued ──► admitted ──► starting ──► running ──► checkpointing ──► preempted ──► resumed  ──┐
  │                        ▲  │         │              │               │ ├─────► migrating ─┤
  │                        │  │         │              │               │ └─────► resizing  ─┤
  │                        └──┼─────────┼──────────────┼───────────────┼────────────────────┘
  ▼                           ▼         ▼              ▼               ▼
rejected            succeeded | failed | cancelled (from every live state)
```

The controller is the only writer of ``Job.state`` and writes every transition (with its reason) to
the store *before* it acts on it, so a restarted controller knows what it was doing.
"""

from __future__ import annotations

from enum import StrEnum


class JobState(StrEnum):
    QUEUED = "queued"  # accepted by the API, never run
    ADMITTED = "admitted"  # the policy gave it an allocation
    STARTING = "starting"  # launch intent written for attempt N; processes may or may not exist
    RUNNING = "running"  # the executor launched (or re-adopted) attempt N
    CHECKPOINTING = "checkpointing"  # asked to checkpoint and stop; still holds its GPUs
    PREEMPTED = "preempted"  # stopped (checkpoint taken, or worker died); holds nothing
    RESUMED = "resumed"  # given an allocation again after a preemption
    MIGRATING = "migrating"  # same worker count, other nodes, after a checkpoint
    RESIZING = "resizing"  # other worker count, after a checkpoint
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    REJECTED = "rejected"


S = JobState
SUBMITTED = "submitted"  # a new job's reason, until the policy has seen it
TERMINAL = frozenset({S.SUCCEEDED, S.FAILED, S.CANCELLED, S.REJECTED})
# States whose job holds GPUs on the cluster (its ``allocation`` column is meaningful).
HOLDING = frozenset({S.STARTING, S.RUNNING, S.CHECKPOINTING})
# States a job passes through on its way back to STARTING after a preemption.
RELAUNCHING = frozenset({S.RESUMED, S.MIGRATING, S.RESIZING})

_ALLOWED: dict[JobState, frozenset[JobState]] = {
    S.QUEUED: frozenset({S.ADMITTED, S.REJECTED, S.CANCELLED}),
    S.ADMITTED: frozenset({S.STARTING, S.QUEUED, S.CANCELLED}),
    # A worker that dies while starting is a preemption (retry), or a failure once retries run out.
    S.STARTING: frozenset({S.RUNNING, S.CHECKPOINTING, S.PREEMPTED, S.SUCCEEDED, S.FAILED, S.CANCELLED}),
    S.RUNNING: frozenset({S.CHECKPOINTING, S.PREEMPTED, S.SUCCEEDED, S.FAILED, S.CANCELLED}),
    # A job may finish (or die) before it reaches the step boundary where it would checkpoint.
    # The policy may reject a job that already ran (OASiS, when its schedule ran out).
    S.CHECKPOINTING: frozenset({S.PREEMPTED, S.SUCCEEDED, S.FAILED, S.CANCELLED, S.REJECTED}),
    S.PREEMPTED: frozenset({S.RESUMED, S.MIGRATING, S.RESIZING, S.FAILED, S.CANCELLED, S.REJECTED}),
    S.RESUMED: frozenset({S.STARTING, S.PREEMPTED, S.CANCELLED}),
    S.MIGRATING: frozenset({S.STARTING, S.PREEMPTED, S.CANCELLED}),
    S.RESIZING: frozenset({S.STARTING, S.PREEMPTED, S.CANCELLED}),
}


class IllegalTransition(RuntimeError):
    """A transition the lifecycle does not allow: a controller bug, never a user error."""


def check_transition(job_id: str, src: JobState, dst: JobState) -> None:
    """Raise ``IllegalTransition`` unless ``src -> dst`` is an edge of the lifecycle."""
    if dst not in _ALLOWED.get(src, frozenset()):
        raise IllegalTransition(f"job {job_id}: {src} -> {dst} is not a lifecycle transition")


def allowed(src: JobState) -> frozenset[JobState]:
    return _ALLOWED.get(src, frozenset())


class StopPurpose(StrEnum):
    """Why the controller stopped a job's attempt (the ``stop_purpose`` column)."""

    RESIZE = "resize"  # the plan changes its worker count: it resumes at the new size
    MIGRATE = "migrate"  # the plan moves it to other nodes: it resumes there
    RETRY = "retry"  # it failed and waits out its backoff
    PREEMPT = "preempt"  # the plan took its GPUs
    OPERATOR = "operator"  # an operator asked (``stint preempt``): news to the policy
    MOVE = "move"  # the fleet moves it to another cluster
    REJECT = "reject"  # the plan turned it away
    TIME = "time"  # its time limit
    HUNG = "hung"  # no heartbeat for its hang timeout
    CANCEL = "cancel"  # its user cancelled it


# A stop in progress keeps its purpose unless a stronger one comes: a preempt that the policy
# follows with a new placement stays a preempt, a move stays a move unless the attempt must end.
STOP_STRENGTH = {StopPurpose.RESIZE: 1, StopPurpose.MIGRATE: 1, StopPurpose.RETRY: 1,
                 StopPurpose.PREEMPT: 2, StopPurpose.OPERATOR: 2, StopPurpose.MOVE: 3,
                 StopPurpose.REJECT: 4, StopPurpose.TIME: 4, StopPurpose.HUNG: 4,
                 StopPurpose.CANCEL: 5}
# Stops whose attempt ends the job's stay, whatever the plan wanted next (the policy drops it).
ENDING_STOPS = frozenset({StopPurpose.CANCEL, StopPurpose.REJECT, StopPurpose.TIME, StopPurpose.HUNG})
