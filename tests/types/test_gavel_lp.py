"""Gavel's LP weighs a job's normalised throughput by its GPUs, as Gavel's own
MaxMinFairnessPolicyWithPerf does (a one-GPU job gets n times the time of an n-GPU one)."""

from __future__ import annotations

import numpy as np
import pytest

from stint.policies.gavel import max_min_shares


def test_a_one_gpu_job_gets_four_times_the_time_of_a_four_gpu_one() -> None:
    T = np.array([[10.0], [10.0]])  # equal throughput on the one type
    X = max_min_shares(T, need=np.array([1.0, 4.0]), gpus=np.array([4.0]), weight=np.ones(2))
    # max-min: 1 * X0 = 4 * X1 with X0 + 4 X1 <= 4 -> X0 = 1, X1 >= 0.25; the second LP then
    # fills the type: X1 = 0.75 (unweighted, both would get 0.8)
    assert X[:, 0] == pytest.approx([1.0, 0.75], abs=1e-6)
