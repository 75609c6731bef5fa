"""stint.torch: the training SDK (resumable state, consistent checkpoints, elastic ranks).

See docs/torch-sdk.md. Inside this package ``import torch`` is PyTorch (absolute imports).
"""

import os

from stint.torch import signals
from stint.torch.env import JobEnv, JobEnvError, read_env
from stint.torch.interval import Interval, daly_interval, young_interval
from stint.torch.job import PREEMPTED_EXIT_CODE, Job, init
from stint.torch.sampler import Sampler
from stint.torch.store import Checkpoint, CheckpointStore, CorruptCheckpoint, SaveStats

if os.environ.get("STINT_CKPT_DIR"):
    signals.arm()  # under the control plane: a preemption request during start-up is kept

__all__ = [
    "PREEMPTED_EXIT_CODE",
    "Checkpoint",
    "CheckpointStore",
    "CorruptCheckpoint",
    "Interval",
    "Job",
    "JobEnv",
    "JobEnvError",
    "Sampler",
    "SaveStats",
    "daly_interval",
    "init",
    "read_env",
    "young_interval",
]
