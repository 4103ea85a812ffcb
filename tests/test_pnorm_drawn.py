"""The p-norm permutahedron operators on drawn batches against the paper's sequential PAV, in float64.

Sander et al. (2023) compute each operator by pool-adjacent-violators, one
block at a time (``test_pnorm._pav_projection``, ``test_magnitude._reference``).
rankops runs array rounds whose route turns on the row's length (the rounds'
extensions from 64 entries, the one-block guess and the windows from 128, the
blocked loops from 2048) and on its data (long chains, ties, one long block,
rows already in order). The fixed rows of ``test_pnorm.py`` hold each route to
the PAV; here each case draws a batch whose rows are of different kinds, a
length about those thresholds or anywhere up to 2000, p, strength and the
order, so that rows taking different routes share a batch. JAX's ``jit`` is
held to NumPy's fits on drawn batches by ``test_default_compilation.py``.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pytest

import rankops

from .backends import CPU_BACKENDS, on_backend
from .test_magnitude import _reference as _magnitude_reference
from .test_pnorm import _rank_reference, _sort_reference, _topk_reference

CASES = 12  # per shard
SHARDS = 4
LENGTHS = (63, 64, 127, 128, 129, 1023, 1025, 2047, 2049)
KINDS = ("normal", "clusters", "ties", "equal", "trend", "uniform", "cauchy", "sorted", "spikes")


def _row(rng: np.random.Generator, n: int, kind: str) -> np.ndarray:
    """One row of ``kind``, at a drawn scale from 10^-2 to 10^2."""
    if kind == "normal":
        x = rng.normal(size=n)
    elif kind == "clusters":  # blocks that form by long chains
        x = rng.choice([0.0, 3.0, 10.0, 30.0], size=n) + rng.normal(size=n) * rng.choice([0.01, 0.3, 2.0, 10.0])
    elif kind == "ties":
        x = rng.integers(0, max(2, n // 10), size=n).astype(np.float64)
    elif kind == "equal":
        x = np.full(n, rng.normal())
    elif kind == "trend":  # gaps growing geometrically: blocks of every size
        x = rng.permutation(np.cumsum(rng.exponential(size=n) * 1.05 ** rng.integers(0, 40, size=n)))
    elif kind == "uniform":
        x = rng.uniform(-1.0, 1.0, size=n)
    elif kind == "cauchy":
        x = rng.standard_cauchy(size=n)
    elif kind == "sorted":
        x = np.sort(rng.normal(size=n))[:: rng.choice([1, -1])]
    else:  # a few entries far from a tight cloud
        x = rng.normal(size=n) * 0.01
        x[rng.integers(0, n, size=max(1, n // 50))] += rng.normal(size=max(1, n // 50)) * 100.0
    return x * 10.0 ** rng.uniform(-2.0, 2.0)


def _case(rng: np.random.Generator) -> tuple[str, np.ndarray, Any, Callable[..., Any], np.ndarray]:
    """``(label, x, k, operator, reference)`` of one drawn case."""
    op = str(rng.choice(["rank", "sort", "topk_mask", "topk_magnitude"]))
    n = int(rng.choice(LENGTHS)) if rng.random() < 0.5 else int(10 ** rng.uniform(0.3, 3.3))
    if op == "topk_magnitude":  # its reference bisects every pool: rows of at most 1025
        n = min(n, 1025)
    kinds = [str(rng.choice(KINDS)) for _ in range(int(rng.integers(1, 5)))]
    x = np.stack([_row(rng, n, kind) for kind in kinds])
    p, strength = float(rng.choice([1.5, 4.0 / 3.0, 1.4, 1.25])), float(10 ** rng.uniform(-2.0, 1.0))
    opts = dict(regularization="lp", p=p, strength=strength)
    fit = dict(method="permutahedron", **opts)  # the top-k in magnitude has no method
    descending = bool(rng.integers(2))
    k = rng.uniform(0.5, n - 0.5, size=len(kinds)) if n > 1 else np.ones(len(kinds))
    k = np.where(rng.random(len(kinds)) < 0.3, np.maximum(np.round(k), 1.0), k)  # whole k too
    label = f"{op} n={n} p={p:.4g} strength={strength:.3g} descending={descending} rows={kinds}"
    if op == "rank":
        return (label, x, None, lambda a, _: rankops.soft_rank(a, descending=descending, **fit),
                _rank_reference(-x if descending else x, p, strength))
    if op == "sort":
        return (label, x, None, lambda a, _: rankops.soft_sort(a, descending=descending, **fit),
                _sort_reference(x, p, strength, descending=descending))
    if op == "topk_mask":
        return (label, x, k, lambda a, b: rankops.soft_topk_mask(a, b, **fit),
                _topk_reference(x, k, p, strength))
    k = np.round(k * 2.0) / 2.0
    return label, x, k, lambda a, b: rankops.soft_topk_magnitude(a, b, **opts), _magnitude_reference(x, k, strength, p)


@pytest.mark.exhaustive
@pytest.mark.parametrize("shard", range(SHARDS))
@pytest.mark.parametrize("name", [b for b in CPU_BACKENDS if b != "jax"])
def test_drawn_batches_equal_the_papers_pav(name, shard):
    """``CASES`` drawn batches per shard (:func:`_case`), each operator's output against the sequential PAV."""
    to, run = on_backend(name)
    rng = np.random.default_rng([20261207, shard])
    for case in range(CASES):
        label, x, k, fn, want = _case(rng)
        got = np.asarray(run(fn, to(x), None if k is None else to(k)), dtype=np.float64)
        # a row of equal entries is fitted exactly where the reference's roots leave 1e-26: no tolerance below x's rounding
        scale = max(float(np.abs(want).max()), float(np.abs(x).max()), 1e-12)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-9 * scale, err_msg=f"case {case}: {label}")
