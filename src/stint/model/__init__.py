"""Plain typed data: resources, clusters, jobs, utilities, allocations and plans. No I/O."""

from stint.model.allocation import EMPTY, Allocation, Plan
from stint.model.cluster import Cluster, Node
from stint.model.job import JobSpec, Tier
from stint.model.resources import Resources
from stint.model.utility import ConstantUtility, DeadlineUtility, SigmoidUtility, Utility

__all__ = [
    "EMPTY",
    "Allocation",
    "Cluster",
    "ConstantUtility",
    "DeadlineUtility",
    "JobSpec",
    "Node",
    "Plan",
    "Resources",
    "SigmoidUtility",
    "Tier",
    "Utility",
]
