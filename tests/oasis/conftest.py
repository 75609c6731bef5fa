import pytest

from stint.experiments.workload import Workload, make_workload


@pytest.fixture(scope="session")
def small_workload() -> Workload:
    """30 jobs on 6 worker + 6 PS hosts over 40 slots: contended, fast."""
    return make_workload(3, 30, horizon=40, workers=6, ps=6, scale=0.4)
