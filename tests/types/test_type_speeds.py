"""Throughput per (job, type): the rate follows the type; unknown pairs take the type's default."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typed_helpers import THROUGHPUTS, two_type_cluster  # type: ignore[import-not-found]

from stint.model import Allocation, JobSpec
from stint.perf.scaling import ScalingModel
from stint.perf.types import ThroughputError, TypedPerf, TypeSpeeds, read_gavel_throughputs


def test_rate_is_the_base_rate_times_the_jobs_factor_on_its_type() -> None:
    c = two_type_cluster()  # v100 nodes 0, 1; k80 nodes 2, 3
    perf = TypedPerf(ScalingModel(), c, TypeSpeeds({("cifar10", "k80"): 0.25}, {"k80": 0.5}))
    job = JobSpec("j", 0.0, 100.0, 2, 2, 2, application="cifar10")
    other = JobSpec("o", 0.0, 100.0, 2, 2, 2, application="bert")
    assert perf.rate(job, Allocation.of({0: 2})) == 1.0
    assert perf.rate(job, Allocation.of({2: 2})) == 0.25  # the table's pair
    assert perf.rate(other, Allocation.of({3: 2})) == 0.5  # the type's default speed
    assert TypeSpeeds().factor("bert", "t4") == 1.0  # neither: 1.0


def test_gavel_throughputs_give_speeds_relative_to_the_fastest_type(tmp_path: Path) -> None:
    (tmp_path / "t.json").write_text(json.dumps(THROUGHPUTS))
    tput = read_gavel_throughputs(tmp_path / "t.json")
    assert tput.of("A", 2) == {"v100": 18.0, "k80": 4.0}
    speeds = tput.speeds()
    assert speeds.factor("A x2", "k80") == pytest.approx(4.0 / 18.0)
    assert speeds.factor("A x2", "v100") == 1.0
    assert speeds.factor("B x1", "k80") == 0.0


@pytest.mark.parametrize(("text", "what"), [
    ("[1]", "expected an object of worker types"),
    ('{"v100": {"A": {"null": 1}}}', "job key 'A' is not ('JOB TYPE', SCALE_FACTOR)"),
    ('{"v100": {"(\'A\', 1)": {"null": -1}}}', '"null" must be a number >= 0'),
    ("{", "not JSON"),
])
def test_bad_throughput_files_name_the_entry(tmp_path: Path, text: str, what: str) -> None:
    (tmp_path / "t.json").write_text(text)
    with pytest.raises(ThroughputError) as err:
        read_gavel_throughputs(tmp_path / "t.json")
    assert what in str(err.value) and "t.json" in str(err.value)
