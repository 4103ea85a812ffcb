"""Same input, same bits: repeated calls and concurrent threads on every CPU backend.

``rankops.vjp`` keeps nothing outside the call and JAX calls share a compile
cache; eight threads calling at once must get exactly what serial calls get.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
from numpy.testing import assert_array_equal

import rankops

X = np.random.default_rng(31).normal(size=(4, 9))
CT = np.random.default_rng(32).normal(size=(4, 9))
CALLS = [
    lambda x: rankops.soft_rank(x, epsilon=0.05),
    lambda x: rankops.soft_sort(x, method="neuralsort", tau=0.3),
    lambda x: rankops.soft_topk_mask(x, 3, epsilon=0.05),
]


def _results(backend, device):
    x = backend.asarray(X, device=device)
    out = [backend.to_numpy(call(x)) for call in CALLS]
    value, vjp_fn = rankops.vjp(rankops.soft_rank, x, epsilon=0.05)
    out.append(backend.to_numpy(vjp_fn(backend.asarray(CT, device=device))[0]))
    return out


def test_bitwise_deterministic_and_thread_safe(backend, device):
    serial = _results(backend, device)
    again = _results(backend, device)
    for a, b in zip(serial, again):
        assert_array_equal(a, b)
    with ThreadPoolExecutor(max_workers=8) as pool:
        concurrent = list(pool.map(lambda _: _results(backend, device), range(8)))
    for results in concurrent:
        for a, b in zip(serial, results):
            assert_array_equal(a, b)
