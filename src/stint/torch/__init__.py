"""stint.torch: the training SDK (resumable state, consistent checkpoints, elastic ranks).

See docs/torch-sdk.md. Inside this package ``import torch`` is PyTorch (absolute imports).
"""

import os

from stint.torch import signals

# Under the control plane, arm the SIGUSR1/SIGTERM handlers before torch's slow import (seconds):
# a preemption request during start-up is then kept, not fatal. Import stint.torch first to profit.
if os.environ.get("STINT_CKPT_DIR"):
    signals.arm()

from stint.torch.env import JobEnv, JobEnvError, read_env
from stint.torch.export import NoCheckpoint, export_dcp, load_checkpoint
from stint.torch.guards import DivergenceError
from stint.torch.interval import Interval, daly_interval, young_interval
from stint.torch.job import PREEMPTED_EXIT_CODE, Job, init
from stint.torch.loader import Loader, StepBatch
from stint.torch.options import JobOptions
from stint.torch.sampler import Sampler
from stint.torch.store import Checkpoint, CheckpointStore, CorruptCheckpoint, SaveStats

__all__ = [
    "PREEMPTED_EXIT_CODE",
    "Checkpoint",
    "CheckpointStore",
    "CorruptCheckpoint",
    "DivergenceError",
    "Interval",
    "Job",
    "JobEnv",
    "JobEnvError",
    "JobOptions",
    "Loader",
    "NoCheckpoint",
    "Sampler",
    "SaveStats",
    "StepBatch",
    "daly_interval",
    "export_dcp",
    "init",
    "load_checkpoint",
    "read_env",
    "young_interval",
]
