"""Inputs shared by the conformance properties."""

from __future__ import annotations

import numpy as np

# The shape the contract, vjp and autodiff tests share: two batch axes (rows are
# independent problems), and n = 7, where each filler interval of the quantile levels
# (operators.LEVELS) lies inside one order statistic. JAX compiles an operator per
# shape and option set, so one shared shape means one compilation for all of them.
SHAPE = (3, 2, 7)


def well_separated(shape, seed=0):
    """Well-separated values (gaps >= 0.5) in random order, so hard limits are sharp."""
    rng = np.random.default_rng(seed)
    n = shape[-1]
    base = np.arange(n) * 0.7 - n * 0.35
    flat = np.stack([rng.permutation(base) + rng.uniform(-0.1, 0.1, n) for _ in range(int(np.prod(shape[:-1])))])
    return flat.reshape(shape)
