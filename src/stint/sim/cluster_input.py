"""Reading ``--cluster FILE`` (``model.cluster_file``) for the simulator and the control plane: the
file, the throughput file it names, and the per-type speeds a run's performance model uses."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from stint.model.cluster import Cluster
from stint.model.cluster_file import ClusterFile, ClusterFileError, parse_cluster
from stint.perf.types import GavelThroughputs, ThroughputError, TypeSpeeds, read_gavel_throughputs


@dataclass(frozen=True, slots=True)
class TypedCluster:
    """A cluster file read: the cluster, its speeds, and the Gavel throughputs it names (or None)."""

    cluster: Cluster
    speeds: TypeSpeeds
    throughputs: GavelThroughputs | None
    source: str


def read_cluster(path: Path) -> TypedCluster:
    """Read and check ``path``; every problem is a ``ClusterFileError`` naming the file (and line)."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise ClusterFileError(f"{path}: cannot read the cluster file ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise ClusterFileError(f"{path}: not UTF-8 text") from None
    cf = parse_cluster(text, str(path))
    return TypedCluster(cf.cluster(), speeds_of(cf), _throughputs(cf, path), str(path))


def speeds_of(cf: ClusterFile) -> TypeSpeeds:
    return TypeSpeeds(dict(cf.speeds), cf.type_speeds)


def _throughputs(cf: ClusterFile, path: Path) -> GavelThroughputs | None:
    if not cf.throughputs:
        return None
    target = Path(cf.throughputs)
    if not target.is_absolute():
        target = path.parent / target
    try:
        return read_gavel_throughputs(target)
    except ThroughputError as exc:
        raise ClusterFileError(f"{path}: throughputs: {exc}") from None
