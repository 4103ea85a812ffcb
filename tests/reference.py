"""Independent float64 NumPy references: the papers' formulas, written literally.

Nothing here calls rankops. NeuralSort is the original O(n^3) matrix product
of Grover et al. (SoftSort paper, appendix Fig. 5); ascending orders are
obtained by reversing rows rather than by the sign trick the library uses.
"""

from __future__ import annotations

import numpy as np
from scipy.special import softmax


# The Sinkhorn marginal tolerance a float32 test asks for: about 80 float32 ulps (1.2e-7 each). A float32
# marginal error cannot be relied on below a few ulps, and its last bits differ between CPUs.
FLOAT32_TOL = 1e-5

def softsort(s, tau, power=1.0, descending=True):
    """SoftSort, Prillo & Eisenschlos 2020, Eq. 4."""
    s = np.asarray(s, dtype=np.float64)
    s_sorted = np.sort(s, axis=-1)
    if descending:
        s_sorted = s_sorted[..., ::-1]
    logits = -np.abs(s_sorted[..., :, None] - s[..., None, :]) ** power / tau
    return softmax(logits, axis=-1)


def neuralsort_logits(s, tau):
    """NeuralSort's logits, rows the positions (largest first), Grover et al. 2019 (Prillo & Eisenschlos Eq. 3), O(n^3) as published."""
    s = np.asarray(s, dtype=np.float64)
    n = s.shape[-1]
    one = np.ones((n, 1))
    a_s = np.abs(s[..., :, None] - s[..., None, :])
    b = a_s @ (one @ one.T)  # the O(n^3) association of the original code
    scaling = n + 1 - 2 * (np.arange(n) + 1.0)
    c = s[..., :, None] * scaling[None, :]
    return np.swapaxes(c - b, -1, -2) / tau


def neuralsort(s, tau, descending=True):
    """NeuralSort's relaxed permutation matrix: the softmax of :func:`neuralsort_logits` by row."""
    p = softmax(neuralsort_logits(s, tau), axis=-1)
    return p if descending else p[..., ::-1, :]


def sort_from(p, x):
    return np.einsum("...ij,...j->...i", p, np.asarray(x, dtype=np.float64))


def rank_from(p):
    n = p.shape[-1]
    return np.einsum("...ij,i->...j", p, np.arange(1, n + 1, dtype=np.float64))


def permutation_matrix(s, descending=True):
    """Exact P: row i is one-hot at the item in position i."""
    s = np.asarray(s)
    order = np.argsort(-s if descending else s, axis=-1, kind="stable")
    n = s.shape[-1]
    return (order[..., :, None] == np.arange(n)).astype(np.float64)


def bisection(past, lo, hi):
    """The point of ``[lo, hi]`` where a test ``past(v)`` that is False at ``lo`` and True from some point on turns
    True, halving the bracket until ``lo`` and ``hi`` are neighbouring floats (the root to the last bit)."""
    mid = 0.5 * (lo + hi)
    while lo < mid < hi:
        lo, hi = (lo, mid) if past(mid) else (mid, hi)
        mid = 0.5 * (lo + hi)
    return mid


def dykstra_decreasing(s, weights, steps=2000):
    """``argmin over v_1 >= ... >= v_n of sum_i weights_i (s_i - v_i)^2`` per row, by Dykstra's alternating projections
    (Boyle & Dykstra 1986), the GPU route of Sander et al. 2023: the order constraints split into those of the pairs
    (1, 2), (3, 4), ... and of (2, 3), (4, 5), ...; a projection onto either set averages (weighted) each pair that
    violates its constraint, and each set keeps the correction Dykstra's method adds back before projecting onto it
    again. ``steps``: projections onto both sets; their iterates converge to the projection onto the intersection."""
    v = np.array(s, dtype=np.float64)
    u = np.broadcast_to(np.asarray(weights, dtype=np.float64), v.shape)
    n = v.shape[-1]
    corrections = [np.zeros_like(v), np.zeros_like(v)]
    for _ in range(steps):
        for first in (0, 1):
            moved = v + corrections[first]
            i = np.arange(first, n - 1, 2)
            left, right, wl, wr = moved[..., i], moved[..., i + 1], u[..., i], u[..., i + 1]
            pooled = (wl * left + wr * right) / (wl + wr)
            v = moved.copy()
            v[..., i] = np.where(left < right, pooled, left)
            v[..., i + 1] = np.where(left < right, pooled, right)
            corrections[first] = moved - v
    return v


def central_difference(f, x, direction, h=1e-6):
    """Directional derivative of scalar ``f`` at ``x`` along ``direction``."""
    return (f(x + h * direction) - f(x - h * direction)) / (2 * h)


def central_vjp(f, x, ct, h=1e-6):
    """The gradient of ``sum(f(x) * ct)`` entry by entry: what a vector-Jacobian product with ``ct`` must give."""
    g = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[idx] = 1
        g[idx] = central_difference(lambda z: np.sum(f(z) * ct), x, e, h)
    return g


# -- optimal transport (Cuturi, Teboul & Vert 2019; Cuturi et al. 2019) ------------------


def squash_sigmoid(x):
    """g~ of Cuturi et al. 2019: sigmoid of the row standardized by its population std."""
    from scipy.special import expit

    x = np.asarray(x, dtype=np.float64)
    z = x - x.mean(axis=-1, keepdims=True)
    std = np.sqrt((z**2).mean(axis=-1, keepdims=True))
    return expit(z / np.where(std > 0, std, 1.0))


def sinkhorn_plan(cost, a, b, eps, iters=100_000, tol=1e-14, f0=None):
    """Plain float64 log-domain Sinkhorn on one (n, m) problem, to full convergence, from ``f = f0`` (default 0)."""
    from scipy.special import logsumexp

    cost, a, b = (np.asarray(v, dtype=np.float64) for v in (cost, a, b))
    f = np.zeros(cost.shape[0]) if f0 is None else np.asarray(f0, dtype=np.float64)
    g = np.zeros(cost.shape[1])
    with np.errstate(divide="ignore"):
        la, lb = np.log(a), np.log(b)
    for _ in range(iters):
        g = eps * lb - eps * logsumexp((f[:, None] - cost) / eps, axis=0)
        f = eps * la - eps * logsumexp((g[None, :] - cost) / eps, axis=1)
        plan = np.exp((f[:, None] + g[None, :] - cost) / eps)
        if np.abs(plan.sum(axis=0) - b).sum() < tol:
            break
    return plan


def ot_plan_1d(x, y, b, eps, power=2.0):
    """Plan between a = 1/n on the squashed row x and (b, y)."""
    z = squash_sigmoid(x)
    cost = np.abs(np.asarray(y)[None, :] - z[:, None]) ** power
    return sinkhorn_plan(cost, np.full(len(x), 1.0 / len(x)), b, eps)


def grid(m):
    return np.arange(m) / max(m - 1, 1)


def north_west_corner(a, b):
    """Exact optimal plan between sorted supports (Prop. 1 of Cuturi, Teboul & Vert 2019)."""
    a, b = np.array(a, dtype=np.float64), np.array(b, dtype=np.float64)
    plan = np.zeros((len(a), len(b)))
    i = j = 0
    while i < len(a) and j < len(b):
        mass = min(a[i], b[j])
        plan[i, j] = mass
        a[i] -= mass
        b[j] -= mass
        if a[i] <= 1e-15:
            i += 1
        else:
            j += 1
    return plan


def kantorovich_operators(x, b):
    """K-CDF and K-sort of a row x onto m targets weighted b (epsilon = 0 limits)."""
    x = np.asarray(x, dtype=np.float64)
    n = len(x)
    order = np.argsort(x, kind="stable")
    plan_sorted = north_west_corner(np.full(n, 1.0 / n), b)
    plan = np.empty_like(plan_sorted)
    plan[order] = plan_sorted  # rows back in the original order
    cdf = n * plan @ np.cumsum(b)
    sort = (plan.T @ x) / b
    return cdf, sort
