"""Timing helpers shared by the benchmark scripts."""

from __future__ import annotations

import statistics
import time
from typing import Callable


def interleaved_medians(fns: dict[str, Callable[[], object]], repeats: int, warmup: int = 1) -> dict[str, float]:
    """Median wall time (s) of each callable, alternating between them.

    Alternating A, B, A, B... spreads slow drifts of the machine (thermal,
    other processes) over every contender instead of biasing one of them.
    """
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    samples: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            samples[name].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in samples.items()}
