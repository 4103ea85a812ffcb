"""The exact 1-D dual potentials that warm-start the Sinkhorn operators (rankops._solvers.line).

Checked against the definition of optimality: dual feasibility f_i + g_j <= C_ij,
and a dual value equal to the primal cost of the north-west-corner plan on the
sorted points (Cuturi, Teboul & Vert 2019, Prop. 1) and to SciPy's linear
program; ties, empty targets and non-uniform weights included.
"""

from __future__ import annotations

import numpy as np
import pytest
from numpy.testing import assert_allclose

from rankops._solvers.line import grid_potentials
from rankops.sinkhorn import SolverOptions
from tests import reference as ref


def _cost(power):
    return lambda d: np.abs(d) ** power


def _problem(seed, n, m, ties=False, empty=False):
    rng = np.random.default_rng(seed)
    s = rng.random(n)
    if ties:
        s[: n // 2] = s[0]
    a = rng.random(n) + 0.1
    a /= a.sum()
    b = rng.random(m) + 0.1
    if empty:
        b[m // 2] = 0.0
    b /= b.sum()
    return s, a, b


def _lp_cost(c, a, b):
    from scipy.optimize import linprog

    n, m = c.shape
    eq = np.zeros((n + m, n * m))
    for i in range(n):
        eq[i, i * m : (i + 1) * m] = 1
    for j in range(m):
        eq[n + j, j::m] = 1
    return linprog(c.ravel(), A_eq=eq, b_eq=np.concatenate([a, b]), bounds=(0, None), method="highs").fun


@pytest.mark.parametrize("power", [1.0, 1.5, 2.0, 3.0])
@pytest.mark.parametrize("case", [dict(), dict(ties=True), dict(empty=True)], ids=["plain", "ties", "empty-target"])
def test_potentials_are_optimal_duals(power, case):
    s, a, b = _problem(7, 9, 6, **case)
    y = ref.grid(6)
    c = np.abs(y[None, :] - s[:, None]) ** power
    with np.errstate(divide="ignore"):
        f, g = grid_potentials(np, s, np.log(a), np.log(b), _cost(power))
    assert np.all(f[:, None] + g[None, :] <= c + 1e-12)
    order = np.argsort(s, kind="stable")
    plan = np.empty((9, 6))
    plan[order] = ref.north_west_corner(a[order], b)
    primal = float(np.sum(plan * c))
    assert_allclose(a @ f + b @ g, primal, rtol=1e-10, atol=1e-12)
    assert_allclose(primal, _lp_cost(c, a, b), rtol=1e-7, atol=1e-10)


def test_uniform_equal_sizes_tie_every_breakpoint():
    """n = m with uniform weights: every cumulative sum is a shared breakpoint; both telescopes must walk one staircase."""
    n = 12
    s = np.random.default_rng(3).random((4, n))
    y = ref.grid(n)
    log_w = np.full(n, -np.log(n))
    f, g = grid_potentials(np, s, log_w, log_w, _cost(2.0))
    c = (y[None, None, :] - s[..., :, None]) ** 2
    assert np.all(f[..., :, None] + g[..., None, :] <= c + 1e-12)
    # the plan is the sorting permutation: each entry meets its own rank's target
    ranks = np.argsort(np.argsort(s, axis=-1), axis=-1)
    assert_allclose(np.take_along_axis(f, np.arange(n)[None].repeat(4, 0), -1)
                    + np.take_along_axis(g, ranks, -1), np.take_along_axis(c, ranks[..., None], -1)[..., 0], atol=1e-12)


def test_warm_start_changes_iterations_not_results():
    """The operators' values are the same fixed point, reached in fewer iterations than from zero potentials."""
    import rankops
    from rankops._solvers import sinkhorn as solver

    x = np.random.default_rng(5).normal(size=(3, 200))
    y = ref.grid(200)
    s = ref.squash_sigmoid(x)
    cost = (y[None, None, :] - s[..., :, None]) ** 2
    log_w = np.full(200, -np.log(200))
    opts = SolverOptions.parse({"epsilon": 1e-2, "tol": 1e-9, "max_iter": 10_000}, "test")[0]
    cold, _ = solver.solve_vjp(np, cost, log_w, log_w, opts)
    warm, _ = solver.solve_vjp(np, cost, log_w, log_w, opts, init=grid_potentials(np, s, log_w, log_w, _cost(2.0)))
    assert_allclose(warm.plan, cold.plan, atol=1e-10)
    assert warm.n_iter < cold.n_iter
    rank = 200 * 200 * cold.plan @ np.cumsum(np.exp(log_w))  # n a^-1 P b_bar
    assert_allclose(rankops.soft_rank(x, epsilon=1e-2, tol=1e-9), rank, atol=1e-6)


def test_shared_breakpoints_survive_rounding():
    """Equal cumulative sums that differ by rounding (how a backend adds them) give the same potentials.

    Weights perturbed by a few ulps (renormalised) must not flip any shared breakpoint's step; without the
    tolerance, eager NumPy and XLA under jit started Sinkhorn from different duals.
    """
    n = 12
    s = np.random.default_rng(8).random((3, n))
    w = np.full(n, 1.0 / n)
    noisy = w * (1 + 4e-16 * np.random.default_rng(9).choice([-1.0, 1.0], size=n))
    exact = grid_potentials(np, s, np.log(w), np.log(w), _cost(2.0))
    assert not np.array_equal(np.cumsum(noisy), np.cumsum(w))
    for a, b in ((noisy, w), (w, noisy)):
        got = grid_potentials(np, s, np.log(a), np.log(b), _cost(2.0))
        for g, e in zip(got, exact):
            assert_allclose(g, e, atol=1e-12)


def test_tied_breakpoints_take_the_mean_of_both_extreme_duals():
    """n = m uniform: every step tied; the start is the mean of the step-right-first and step-down-first duals.

    The extremes come from weights nudged by 1e-6 each way (no ties left, a unique NW staircase each); the mean
    must also start Sinkhorn closer to the entropic solution than either extreme.
    """
    from rankops._solvers import sinkhorn as solver

    n = 30
    s = np.sort(np.random.default_rng(10).random(n))
    w = np.full(n, 1.0 / n)
    nudge = 1e-6 * (np.arange(n) - (n - 1) / 2)  # sums to 0: a_cum shifted up in the first half, down after
    extremes = [grid_potentials(np, s, np.log(w + sign * nudge), np.log(w), _cost(2.0)) for sign in (1.0, -1.0)]
    mean = grid_potentials(np, s, np.log(w), np.log(w), _cost(2.0))
    for got, right, down in zip(mean, *extremes):
        assert not np.allclose(right, down)
        assert_allclose(got, (right + down) / 2, atol=1e-12)  # the potentials depend on the staircase alone
    cost = (ref.grid(n)[None, :] - s[:, None]) ** 2
    opts = SolverOptions.parse({"epsilon": 1e-3, "tol": 1e-12, "max_iter": 1}, "test")[0]

    def first_error(start):
        return float(solver.solve_vjp(np, cost, np.log(w), np.log(w), opts, init=start)[0].error)

    assert first_error(mean) < min(first_error(e) for e in extremes)
