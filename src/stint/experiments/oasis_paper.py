"""The paper's numbers (read off its figures, ±2% of the axis; summary §3), for the reports."""

from __future__ import annotations

# Fig. 3: total utility, T = 300, by number of jobs.
FIG3 = {
    "oasis": {100: 2966, 200: 5152, 300: 6682, 400: 7539},
    "fifo-fixed": {100: 889, 200: 1108, 300: 413, 400: 902},
    "drf-ps": {100: 2314, 200: 1386, 300: 888, 400: 994},
    "rrh": {100: 681, 200: 1511, 300: 1856, 400: 1914},
    "dorm": {100: 2687, 200: 3355, 300: 3939, 400: 3697},
}

# Fig. 4: median of (actual - target) completion, in slots, per class (T = 100).
FIG4 = {
    "oasis": {"critical": -2, "sensitive": 0},
    "fifo-fixed": {"critical": 50, "sensitive": 63},
    "drf-ps": {"critical": 49, "sensitive": 43},
    "rrh": {"critical": 98, "sensitive": 55},
    "dorm": {"critical": 48, "sensitive": 50},
}

# Fig. 5: OPT/OASiS, 10 jobs, T = 10, by gamma1 range and total servers (row mapping uncertain).
FIG5 = {
    (50, 100): {3: 1.27, 6: 1.47, 9: 1.17, 12: 1.21},
    (75, 100): {3: 1.31, 6: 1.25, 9: 1.19, 12: 1.26},
    (1, 100): {3: 1.26, 6: 1.50, 9: 1.43, 12: 1.11},
    (25, 100): {3: 1.23, 6: 1.14, 9: 1.27, 12: 1.22},
}

# Fig. 6: OASiS total utility when the estimated U and L are a given % of the actual values.
FIG6 = {
    20: {100: 2605, 200: 4585, 300: 6567, 400: 7139},
    50: {100: 2941, 200: 5202, 300: 6823, 400: 8134},
    100: {100: 2966, 200: 5151, 300: 6705, 400: 7539},
    300: {100: 3004, 200: 5023, 300: 5955, 400: 6331},
    500: {100: 2996, 200: 4642, 300: 5637, 400: 6155},
    1000: {100: 2946, 200: 4201, 300: 4997, 400: 5386},
}
