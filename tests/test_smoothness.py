"""Values smooth enough to differentiate numerically, at the default options (issue 33, item 5).

OTT-JAX's Jacobian check, run many times: b = 10 rows of n = 40 uniform
entries, a random direction ``d`` of unit norm, and the central difference
``(L(z + h d) - L(z - h d)) / 2h`` at h = 1e-3 of a loss ``L`` (a random
mix of one output per row) against ``<d, grad L>``. The iterations stop
at ``tol``, so a value computed where they stopped one check later or
earlier jumps by about ``tol``; the implicit forward's Newton polish
(``rankops._solvers.sinkhorn._polish``) makes those jumps about ``tol**2``.
Without it the difference missed the gradient by more than 10% for 1 in
50 seeds (soft_rank), 7 (soft_sort) and 26 (soft_quantile).

Unrolled (``implicit=False``), as in OTT-JAX's own test: float32 on torch,
the gradient of the iterations and of the polish's Newton steps. Without
the polish there, 3, 2 and 22 of 100 seeds missed by more than 10% (up to
a factor 4 on the quantile; ``python -m benchmarks.smoothness``); with it,
0, 0 and 1, which float32's rounding of the two losses explains.
"""

from __future__ import annotations

import numpy as np
import pytest

import rankops

H = 1e-3
OPS = {
    "soft_rank": (rankops.soft_rank, (), {"num_targets": 20}, lambda v: v[:, 5]),
    "soft_sort": (rankops.soft_sort, (), {"num_targets": 20}, lambda v: v[:, 5]),
    "soft_quantile": (rankops.soft_quantile, (0.3,), {}, lambda v: v),
}


def _agreement(name: str, seed: int) -> tuple[float, float, float]:
    """``(central difference, gradient, 0)`` along a random direction, float64 NumPy, default options."""
    fn, args, options, pick = OPS[name]
    rng = np.random.default_rng(seed)
    z = rng.uniform(size=(10, 40))
    mix = rng.normal(size=10) / 10
    d = rng.uniform(size=z.shape) - 0.5
    d /= np.linalg.norm(d)

    def loss(v: np.ndarray) -> float:
        return float(np.sum(pick(fn(v, *args, **options)) * mix))

    value, vjp_fn = rankops.vjp(fn, z, *args, **options)
    ct = np.zeros_like(value)
    if ct.ndim == 1:
        ct = mix
    else:
        ct[:, 5] = mix
    grad = vjp_fn(ct)[0]
    return (loss(z + H * d) - loss(z - H * d)) / (2 * H), float(np.sum(d * grad)), 0.0


def _unrolled_agreement(name: str, seed: int) -> tuple[float, float, float]:
    """``(central difference, gradient, rounding)`` as :func:`_agreement`, unrolled (``implicit=False``), float32 on
    torch; ``rounding`` bounds what float32's rounding of the two losses puts into the difference."""
    torch = pytest.importorskip("torch")
    fn, args, options, pick = OPS[name]
    rng = np.random.default_rng(seed)
    z, mix, d = rng.uniform(size=(10, 40)), rng.normal(size=10) / 10, rng.uniform(size=(10, 40)) - 0.5
    z, mix, d = (torch.tensor(a, dtype=torch.float32) for a in (z, mix, d / np.linalg.norm(d)))

    def loss(v):
        return (pick(fn(v, *args, implicit=False, **options)) * mix).sum()

    v = z.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(loss(v), v)
    with torch.no_grad():
        fd = float(loss(z + H * d) - loss(z - H * d)) / (2 * H)
        size = float((pick(fn(z, *args, implicit=False, **options)).abs() * mix.abs()).sum())
    return fd, float((d * grad).sum()), 4 * float(np.finfo(np.float32).eps) * size / (2 * H)


def _check(name: str, seeds: range, agreement=_agreement) -> None:
    misses = []
    for seed in seeds:
        fd, exact, rounding = agreement(name, seed)
        if not abs(fd - exact) <= 0.1 * abs(exact) + rounding:
            misses.append((seed, fd, exact))
    assert not misses, f"{name}: central differences off by > 10% at (seed, difference, gradient) {misses}"


@pytest.mark.parametrize("name", list(OPS))
def test_central_differences_agree_with_the_gradient_at_the_defaults(name):
    _check(name, range(12))


@pytest.mark.parametrize("name", list(OPS))
def test_unrolled_central_differences_agree_with_the_gradient_in_float32(name):
    _check(name, range(12), _unrolled_agreement)


@pytest.mark.exhaustive
@pytest.mark.parametrize("name", list(OPS))
def test_central_differences_agree_over_many_seeds(name):
    _check(name, range(12, 312))
    _check(name, range(12, 112), _unrolled_agreement)
