"""Typed clusters, Gavel traces and throughput files for the accelerator-type tests (written here,
with made-up throughputs, in the formats the readers take)."""

from __future__ import annotations

import json
import random
from pathlib import Path

from stint.model.cluster_file import parse_cluster

TWO_TYPES = """\
throughputs = "tput.json"

[[group]]
gpu_type = "v100"
nodes = 2
gpus_per_node = 4

[[group]]
gpu_type = "k80"
nodes = 2
gpus_per_node = 4
speed = 0.5
"""

# steps/s alone per worker type and (job type, scale factor); "B" cannot run on k80 (0).
THROUGHPUTS = {
    "v100": {"('A', 1)": {"null": 10.0}, "('A', 2)": {"null": 18.0}, "('B', 1)": {"null": 4.0},
             "('B', 4)": {"null": 14.0}},
    "k80": {"('A', 1)": {"null": 2.5}, "('A', 2)": {"null": 4.0}, "('B', 1)": {"null": 0.0},
            "('B', 4)": {"null": 0.0}},
}


def two_type_cluster():  # type: ignore[no-untyped-def]
    return parse_cluster(TWO_TYPES.replace('throughputs = "tput.json"\n', ""), "types.toml").cluster()


def write_gavel(tmp: Path, jobs: int = 24, seed: int = 0) -> tuple[Path, Path]:
    """``types.toml`` (naming ``tput.json``) and a Gavel trace of ``jobs`` jobs in ``tmp``."""
    (tmp / "tput.json").write_text(json.dumps(THROUGHPUTS))
    (tmp / "types.toml").write_text(TWO_TYPES)
    rng = random.Random(seed)
    lines = []
    t = 0.0
    for _ in range(jobs):
        kind, scale = rng.choice([("A", 1), ("A", 2), ("B", 1), ("B", 4)])
        steps = rng.randint(2_000, 40_000)
        lines.append("\t".join([kind, "python3 train.py", "wd", "--steps",
                                "1", str(steps), str(scale), "1", "-1.000000", f"{t:g}"]))
        t += rng.expovariate(1 / 300.0)
    trace = tmp / "jobs.trace"
    trace.write_text("\n".join(lines) + "\n")
    return tmp / "types.toml", trace
