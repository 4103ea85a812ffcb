"""The isotonic fits' last drops solved in windows (``rankops._cores.windows``) against a sequential PAV in float64.

The windows path runs on CPU backends that read values now, for the KL loss
(the permutahedron's ``regularization="kl"``). Here it is forced on short
rows (the pooling rounds stop at once, windows of one block grow
until they hold), for both losses, and compared with pool-adjacent-violators
written out in the test.
"""

from __future__ import annotations

import functools
import itertools
from typing import Any

import numpy as np
import pytest
from numpy.testing import assert_allclose

import rankops
from rankops._cores import isotonic, windows
from rankops._lib._adapters import get_adapter

from .backends import CPU_BACKENDS


def _pav(y: np.ndarray, w: np.ndarray, kind: str) -> np.ndarray:
    """Sequential PAV: blocks pool while one is above its successor; a block's value is ``sum w y / sum w`` (l2) or
    ``LSE(y_B) - LSE(w_B)`` (kl, ``w`` log-weights)."""
    blocks: list[list[float]] = []  # [first, count, a, b]: l2 sums (w y, w); kl log-sums (y, w)

    def value(b: list[float]) -> float:
        return b[2] / b[3] if kind == "l2" else b[2] - b[3]

    for i, (yi, wi) in enumerate(zip(y, w)):
        blocks.append([i, 1, wi * yi, wi] if kind == "l2" else [i, 1, yi, wi])
        while len(blocks) > 1 and value(blocks[-2]) > value(blocks[-1]):
            b = blocks.pop()
            a = blocks[-1]
            a[1] += b[1]
            if kind == "l2":
                a[2] += b[2]
                a[3] += b[3]
            else:
                a[2], a[3] = np.logaddexp(a[2], b[2]), np.logaddexp(a[3], b[3])
    return np.concatenate([np.full(int(b[1]), value(b)) for b in blocks])


def _rows(kind: str, shape: tuple[int, int], seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    # a random walk with noise: long decreasing runs, chains that snowball
    y = np.cumsum(rng.normal(size=shape), axis=-1) * rng.choice([-1.0, 1.0], size=(shape[0], 1)) + rng.normal(size=shape)
    w = rng.uniform(0.3, 3.0, size=shape) if kind == "l2" else rng.normal(size=shape)
    return y, w


@pytest.fixture
def forced(monkeypatch):
    """Windows on every row of two entries or more, from the first round, one block wide, doubling; both losses."""
    monkeypatch.setattr(windows, "SHORTEST", 2)
    monkeypatch.setattr(windows, "FEWEST", 10**6)
    monkeypatch.setattr(windows, "RADIUS", 1)
    monkeypatch.setattr(windows, "GROWTH", 2)
    monkeypatch.setattr(windows, "CHAIN", 1)
    monkeypatch.setattr(isotonic._L2, "shortest", 2)
    monkeypatch.setattr(isotonic._L2, "patient", False)
    calls = []
    finished = windows._finished  # every windows' fit ends there (finish, pool_and_finish)

    def counted(*args):
        calls.append(1)
        return finished(*args)

    monkeypatch.setattr(windows, "_finished", counted)
    return calls


# JAX runs every operator traced (jit): its fits pool to the end, and eager JAX would only compile op by op here
@pytest.mark.parametrize("backend_name", [b for b in CPU_BACKENDS if b != "jax"])
@pytest.mark.parametrize("kind", ["l2", "kl"])
@pytest.mark.parametrize("shape", [(1, 60), (5, 9), (40, 3)])
def test_windows_fit_equals_sequential_pav(forced, backend_name, kind, shape):
    """Rows of 3 entries put windows side by side in consecutive rows: a window that crossed a row's end fails here."""
    from rankops._lib._backends import get_backend

    backend = get_backend(backend_name)
    y, w = _rows(kind, shape, seed=shape[1])
    xp = backend.namespace()
    got = isotonic.fit(xp, get_adapter(xp), backend.asarray(y), backend.asarray(w), kind)
    expected = np.stack([_pav(r, s, kind) for r, s in zip(y, w)])
    assert forced, "the windows were not taken"
    assert_allclose(backend.to_numpy(got), expected, rtol=1e-12, atol=1e-12)


def test_windows_stay_in_their_row(forced):
    """Rows that end on a chain, each lower than the last: their windows touch across the rows' ends and must not join."""
    y = np.array([[5.0, 0.0, 1.0, 2.0]]) - 10.0 * np.arange(6.0)[:, None]
    got = isotonic.fit(np, get_adapter(np), y, np.ones_like(y), "l2")
    assert forced, "the windows were not taken"
    assert_allclose(got, np.stack([_pav(r, np.ones(4), "l2") for r in y]), rtol=1e-13)


def test_windows_grow_until_they_hold(forced, monkeypatch):
    """A chain of 19 entries: windows one block wide fail the neighbours' test and grow (radius 1, 2, 4, ...)."""
    sizes = []
    solve_calls = windows.finish

    def spied(xp, adapter, rules, v, w, solve, *rest):
        return solve_calls(xp, adapter, rules, v, w, lambda a, b: sizes.append(a.shape[-1]) or solve(a, b), *rest)

    monkeypatch.setattr(windows, "finish", spied)
    y = np.concatenate([[200.0], np.arange(60.0)])  # the first entry pools with the next 18, one a round
    got = isotonic.fit(np, get_adapter(np), y[None, :], np.ones((1, y.size)), "l2")
    assert_allclose(got[0], _pav(y, np.ones(y.size), "l2"), rtol=1e-13)
    assert sizes[0] < sizes[-1] and len(sizes) > 2, sizes


@pytest.mark.parametrize("backend_name", ["numpy", "torch"])
@pytest.mark.parametrize(("regularization", "output"), [("kl", "rank"), ("kl", "sort"), ("kl", "masked rank"), ("l2", "sort"),
                                                         ("l2", "masked sort")])
def test_permutahedron_with_and_without_windows(backend_name, regularization, output, monkeypatch):
    """Values and gradients on the default path (windows on a CPU) against the pooling rounds alone (and the merge
    rounds where those leave a row), float64: KL on 8 normal rows of 1000; l2, whose windows take rows of 4096 or
    more after log2 n rounds, the sort of 2 rows of 6000 at the default softness, which pooled for 4 log2 n rounds
    and went on to the merge rounds (a third of each row masked out)."""
    from rankops._lib._backends import get_backend

    backend = get_backend(backend_name)
    if backend.unavailable_reason():
        pytest.skip(backend.unavailable_reason())
    rng = np.random.default_rng(0)
    shape = (8, 1000) if regularization == "kl" else (2, 6000)
    x = backend.asarray(rng.normal(size=shape))
    kwargs = dict(method="permutahedron", regularization=regularization)
    if output.startswith("masked"):
        kwargs["mask"] = backend.asarray(rng.uniform(size=shape) > 1 / 3)
    op = rankops.soft_sort if output.endswith("sort") else rankops.soft_rank
    calls = []
    finish = windows.finish
    monkeypatch.setattr(windows, "finish", lambda *a: calls.append(1) or finish(*a))
    ct = backend.asarray(rng.normal(size=shape))

    def value_and_gradient():
        value, pullback = rankops.vjp(op, x, **kwargs)
        return backend.to_numpy(value), backend.to_numpy(pullback(ct)[0])

    with_windows = value_and_gradient()
    assert calls, "the windows were not taken"
    monkeypatch.setattr(windows, "pays", lambda v: False)
    rounds_only = value_and_gradient()
    assert len(calls) == 1
    assert_allclose(with_windows[0], rounds_only[0], rtol=1e-10, atol=1e-9)
    if regularization == "l2" or not output.endswith("sort"):
        # the same blocks: the same Jacobian. (The KL sort's rows here end in merge rounds on both paths, whose
        # roundings split a near-tie, two blocks 1e-13 apart in value, on one path and not the other: the
        # derivative's two sides at that tie.)
        assert_allclose(with_windows[1], rounds_only[1], rtol=1e-9, atol=1e-9)


def _pnorm_rows(kind: str) -> np.ndarray:
    """The windows' test rows: spread over 10^-1..10^1 with a tie, forming long chains, or pairs."""
    from .test_pnorm import _chained_rows, _rows

    if kind == "spread":
        return _rows(0, (4, 11))
    return _chained_rows(8, 23) if kind == "chained" else np.random.default_rng(1).normal(size=(3, 2))


@functools.lru_cache(maxsize=None)
def _pnorm_reference(rows: str, output: str, p: float, strength: float) -> np.ndarray:
    """The sequential PAV's result (Python loops) on one of the row sets, computed once for both paths."""
    from .test_pnorm import _rank_reference, _sort_reference

    x = _pnorm_rows(rows)
    if output == "rank":
        return _rank_reference(x, p, strength)
    return _sort_reference(x, p, strength, descending=output == "descending sort")


# the p-norm fits' windows: blocks carried as their moments, fitted by the merge rounds (p = 2 through "lp" is the
# same path at q = 2); at p = 3/2 (q = 3) the blocks are pooled by the passes and by pooling rounds: the rank's, whose
# entries lie above their pools' values, and the sort's, whose ranks step evenly (power_sums.SteppedSignedSums)
@pytest.mark.parametrize("backend_name", [b for b in CPU_BACKENDS if b != "jax"])
@pytest.mark.parametrize(("p", "output"), [(p, o) for p in (4.0 / 3.0, 2.0, 1.5) for o in ("rank", "sort", "descending sort")]
                         + [(1.25, "rank"), (1.2, "rank")])
def test_pnorm_windows_equal_the_papers_pav(forced, backend_name, p, output, monkeypatch):
    """Windows from the first stalled round, one block wide and doubling: on NumPy against the sequential PAV of
    Sander et al. (tests/test_pnorm.py's reference, float64), on the other backends against NumPy; rows of 2 to 23
    entries, spread over 10^-1..10^1 with a tie or forming long chains. On NumPy both with the runs of drops pooled
    first (``windows._pool_runs_of_drops``, the default: the min-max passes, then runs extended block by block, cut
    short at one block per run, ``CHAIN``) and with the windows alone."""
    from rankops._lib._backends import get_backend

    backend = get_backend(backend_name)
    descending = output == "descending sort"

    # strength 3: rank and sort rows both end in windows; at 0.7 the sort's at p = 2 (at 30 the sort's only)
    def run(x: Any, strength: float) -> Any:
        opts = {"method": "permutahedron", "regularization": "lp", "p": p, "strength": strength}
        return rankops.soft_rank(x, **opts) if output == "rank" else rankops.soft_sort(x, descending=descending, **opts)

    if backend_name == "numpy":
        extensions = windows.EXTENSIONS
        # the rank pools over its entries, or over blocks after the first round (windows.pool_and_finish)
        few = windows.few_blocks
        routes = {"as measured": few, "blocks": lambda *a: True, "entries": lambda *a: False}
        for passes, strength, rows, route in itertools.product((windows.PASSES, 0), (0.7, 3.0), ("spread", "chained", "pairs"),
                                                               routes if output == "rank" else ["as measured"]):
            monkeypatch.setattr(windows, "PASSES", passes)
            monkeypatch.setattr(windows, "EXTENSIONS", extensions if passes else 0)
            monkeypatch.setattr(windows, "few_blocks", routes[route])
            want = _pnorm_reference(rows, output, p, strength)
            assert_allclose(run(_pnorm_rows(rows), strength), want, rtol=1e-10, atol=1e-10,
                            err_msg=f"{passes} passes, strength {strength}, {rows} rows, route {route}")
    else:  # the reference is Python loops: once, on NumPy
        strength = 0.7 if (p, output) in ((1.5, "rank"), (1.25, "rank"), (1.2, "rank")) else 3.0  # these ranks' rows stall there
        for x in (_pnorm_rows("spread"), _pnorm_rows("chained")[:3], _pnorm_rows("pairs")):
            assert_allclose(backend.to_numpy(run(backend.asarray(x), strength)), np.asarray(run(x, strength)), rtol=1e-12,
                            atol=1e-12)
    assert forced, "the windows were not taken"


@pytest.mark.parametrize(("p", "output"), [(4.0 / 3.0, "rank"), (4.0 / 3.0, "sort"), (4.0 / 3.0, "masked rank"),
                                           (1.5, "rank"), (1.5, "masked rank"), (1.25, "rank"), (1.2, "rank")])
def test_pnorm_permutahedron_with_and_without_windows(p, output, monkeypatch):
    """p = 4/3 and 3/2 at the default softness (rows of 1000 end on about one drop each at p = 4/3) and at strength
    0.1 (at p = 3/2, runs of drops that chains extend over hundreds of blocks), p = 5/4 and 6/5
    at strength 1 (rows of a block of 500-700 and 200 more: the min-max passes finish them, at p = 6/5 the extensions
    and the windows, with no min-max pass: its ranges' roots are not bracketed) and 0.1, torch float64: values and
    gradients with the windows against the merge rounds over every block (p = 4/3) or every entry."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    x = torch.asarray(rng.normal(size=(8, 1000)))
    ct = torch.asarray(rng.normal(size=(8, 1000)))
    calls, passes = [], []
    finished, min_max = windows._finished, windows._pool_each_run
    monkeypatch.setattr(windows, "_finished", lambda *a: calls.append(1) or finished(*a))
    monkeypatch.setattr(windows, "_pool_each_run", lambda *a: passes.append(1) or min_max(*a))
    for extra in ({"strength": 1.0} if p < 4.0 / 3.0 else {}, {"strength": 0.1}):
        kwargs = dict(method="permutahedron", regularization="lp", p=p, **extra)
        if output == "masked rank":
            kwargs["mask"] = torch.asarray(rng.uniform(size=(8, 1000)) > 1 / 3)

        def value_and_gradient():
            xr = x.clone().requires_grad_(True)
            value = (rankops.soft_sort if output == "sort" else rankops.soft_rank)(xr, **kwargs)
            (grad,) = torch.autograd.grad((value * ct).sum(), xr)
            return value.detach().numpy(), grad.numpy()

        with monkeypatch.context() as off:
            off.setattr(windows, "pays", lambda v: False)
            rounds_only = value_and_gradient()
        # the rank pools over its entries, or over blocks after the first round (both routes, whatever the share)
        for few in (lambda *a: True, lambda *a: False) if output != "sort" else (windows.few_blocks,):
            with monkeypatch.context() as pooled:
                pooled.setattr(windows, "few_blocks", few)
                with_windows = value_and_gradient()
            assert_allclose(with_windows[0], rounds_only[0], rtol=1e-10, atol=1e-10)
            assert_allclose(with_windows[1], rounds_only[1], rtol=1e-9, atol=1e-9)
    assert calls, "the windows were not taken"
    assert bool(passes) == (p != 1.2), f"{len(passes)} min-max passes at p = {p}"


@pytest.mark.parametrize("passes", [windows.PASSES, 0], ids=["runs pooled first", "windows only"])
def test_pnorm_batch_of_rows_equals_the_papers_pav(passes, monkeypatch):
    """p = 4/3 at the default softness, 16 normal rows of 200 (NumPy, float64): each row's projection, as
    ``pnorm.project`` computes it in the batch, against the sequential PAV on that row (rows 9-11). A window shorter than the
    batch's longest is padded on its left; padding at its first block's value stood above that block once the block
    pooled with a lower neighbour, and the merge rounds pooled a block too many (row 10: 0.82 off)."""
    from rankops._cores import pnorm

    from .test_pnorm import _pav_projection

    monkeypatch.setattr(windows, "PASSES", passes)
    monkeypatch.setattr(windows, "EXTENSIONS", windows.EXTENSIONS if passes else 0)
    seen = []
    project = pnorm.project

    def recorded(xp, adapter, z, w, q, valid=None, signed=False):
        out = project(xp, adapter, z, w, q, valid, signed)
        seen.append((*np.broadcast_arrays(np.asarray(z), np.asarray(w)), np.asarray(out[0])))
        return out

    monkeypatch.setattr(pnorm, "project", recorded)
    calls = []
    finished = windows._finished
    monkeypatch.setattr(windows, "_finished", lambda *a: calls.append(1) or finished(*a))
    x = np.random.default_rng(0).normal(size=(16, 200))
    rankops.soft_rank(x, method="permutahedron", regularization="lp", p=4.0 / 3.0)
    assert calls, "the windows were not taken"
    (z, w, mu), = seen
    want = np.stack([_pav_projection(z[i], w[i], 4.0 / 3.0) for i in (9, 10, 11)])
    assert_allclose(mu[9:12], want, rtol=1e-10, atol=1e-10 * np.abs(want).max())


def test_windows_only_on_a_cpu():
    """array-api-strict's second device stands in for a GPU: there the rounds run to the end."""
    strict = pytest.importorskip("array_api_strict")
    assert windows.pays(np.zeros(3))
    assert windows.pays(strict.asarray([1.0]))
    assert not windows.pays(strict.asarray([1.0], device=strict.Device("device1")))


def test_permutahedron_sort_keeps_a_block_its_fit_split_one_ulp_apart(monkeypatch):
    """A two-entry block whose fitted values come out 1 ulp apart (the merge rounds' or the windows' roundings at a
    tie) is two one-entry blocks to ``block_starts``; the sort keeps its soft values (it once gave both their hard
    values, 0.004 away, on 8 x 1000 normal rows with the windows on)."""
    x = np.random.default_rng(2).normal(size=(1, 40))
    exact = np.asarray(rankops.soft_sort(x, method="permutahedron", strength=3.0))
    decreasing = isotonic.decreasing
    split = []

    def nudged(*args, **kwargs):
        sol = np.array(decreasing(*args, **kwargs))
        starts = np.concatenate([[True], sol[0, 1:] != sol[0, :-1], [True]])
        pairs = [j for j in range(sol.shape[1] - 1) if starts[j] and not starts[j + 1] and starts[j + 2]]
        j = pairs[0]
        sol[0, j] = np.nextafter(sol[0, j], np.inf)  # still decreasing, now two blocks
        split.append(j)
        return sol

    monkeypatch.setattr(isotonic, "decreasing", nudged)
    got = np.asarray(rankops.soft_sort(x, method="permutahedron", strength=3.0))
    assert split
    assert_allclose(got, exact, rtol=0, atol=1e-12)


def _greedy_pass(y: np.ndarray, w: np.ndarray, value: np.ndarray, rightward: bool) -> tuple[np.ndarray, int]:
    """One pass of :func:`rankops._cores.windows._extend_each_run` over one row of one-entry blocks, sequentially: each
    run of drops pooled, then extended one block at a time while it violates its next block (true q = 3 roots,
    :func:`tests.test_pnorm._root`); a run whose first block (last, leftward) another run's pool holds is left out.
    Returns the values and how many runs were left out."""
    from .test_pnorm import _root

    n = value.size
    down = value[:-1] > value[1:]
    runs, i = [], 0
    while i < n - 1:
        if down[i]:
            j = i
            while j < n - 1 and down[j]:
                j += 1
            runs.append((i, j))
            i = j
        else:
            i += 1
    ranges = []
    for s, e in runs:
        a, b = s, e
        while True:
            level = _root(y[a:b + 1], w[a:b + 1], 3.0)
            if rightward and b + 1 < n and level > value[b + 1]:
                b += 1
            elif not rightward and a > 0 and level < value[a - 1]:
                a -= 1
            else:
                break
        ranges.append((a, b, level, s if rightward else e))
    out = value.copy()
    left_out = 0
    for a, b, level, base in ranges:
        if sum(a2 <= base <= b2 for a2, b2, _, _ in ranges) == 1:
            out[a:b + 1] = level
        else:
            left_out += 1
    return out, left_out


def _one_pass(value: np.ndarray, n: int, rightward: bool) -> tuple[np.ndarray, np.ndarray, int]:
    """``(got, want, runs left out)``: one extension pass over rows of ``n`` one-entry blocks at ``value`` (y = 10, 11,
    ...; weights ``(y - value)^2``), by ``_extend_each_run`` in one call and by :func:`_greedy_pass` row by row."""
    import array_api_compat.numpy as xp

    from rankops._cores.power_sums import PowerSums

    rows = value.size // n
    y = np.tile(np.arange(10.0, 10.0 + n), rows)
    w = (y - value) ** 2
    first = np.repeat(np.arange(rows) * n, n)
    down = (value[:-1] > value[1:]) & (first[:-1] == first[1:])
    data = (y, w, np.ones_like(y), np.zeros_like(y), np.zeros_like(y))
    got = windows._extend_each_run(xp, get_adapter(xp), PowerSums(3.0), value, data, first, first + n - 1, down,
                                   np.int64, rightward=rightward)
    want, left_out = zip(*(_greedy_pass(y[:n], w[i:i + n], value[i:i + n], rightward) for i in range(0, rows * n, n)))
    return got, np.concatenate(want), sum(left_out)


@pytest.mark.parametrize("rightward", [True, False], ids=["rightward", "leftward"])
def test_extension_pass_equals_the_sequential_steps(rightward):
    """One pass of runs of drops extended block by block (the p = 3/2 rank's, ``_extend_each_run``) on 80 rows of 10
    one-entry blocks (y ascending, random values, half the rows ending on a deep drop), against the same steps taken
    one at a time with the true q = 3 roots (bisection); among them, runs whose first block (leftward: last) another
    run's pool takes, which then sit the pass out. Then three rows alone whose last run's leftward pool passes over a
    shorter run's pool to take an earlier run's last block: the pools begin out of their runs' order, and counting
    the pools that hold a block by a search over their unsorted begins took that earlier run too."""
    rows, n = 80, 10
    y = np.tile(np.arange(10.0, 10.0 + n), rows)
    rng = np.random.default_rng(5)
    value = y - rng.uniform(0.0, 6.0, size=rows * n)
    value[n - 1::2 * n] = y[n - 1::2 * n] - rng.uniform(8.0, 20.0, size=rows // 2)  # the deep drops
    got, want, left_out = _one_pass(value, n, rightward)
    assert left_out >= 1, "no run's first block was taken by another's pool"
    assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    for seed in (66, 161, 186):
        rng = np.random.default_rng(seed)
        value = np.arange(10.0, 10.0 + n) - rng.uniform(0.0, 6.0, size=n)
        value[-1] = 10.0 + n - 1 - rng.uniform(8.0, 20.0)
        got, want, _ = _one_pass(value, n, rightward)
        assert_allclose(got, want, rtol=1e-12, atol=1e-12, err_msg=f"row {seed}")


@pytest.mark.parametrize("rightward", [True, False], ids=["rightward", "leftward"])
@pytest.mark.parametrize(("radius", "growth"), [(windows.RADIUS, windows.GROWTH), (1, 2)], ids=["defaults", "tried again"])
def test_extension_pass_tries_a_short_window_first(rightward, radius, growth, monkeypatch):
    """An extension pass over one row of 4000 one-entry blocks (values rising by 0.01 a block) with three runs of
    drops whose pools take 2 to about 50 blocks, where the row would let each take thousands: the runs are tried in a
    window of their own blocks and ``RADIUS`` more, and only those whose pool filled it are tried again, ``GROWTH``
    times wider (with a radius of 1 and a growth of 2, several times). Its values equal the sequential steps' (true
    q = 3 roots), and the tries take fewer than 1,200 steps in all, where one window as wide as the row's reach took
    about 8,000 (at n = 10^5 and the default softness 31 runs by 23,837 steps, over 80% of that pass's time)."""
    monkeypatch.setattr(windows, "RADIUS", radius)
    monkeypatch.setattr(windows, "GROWTH", growth)
    tries = []  # (runs, width) of each try
    extension = windows._extension

    def spied(*args):
        tries.append((args[5].shape[0], args[-3]))
        return extension(*args)

    monkeypatch.setattr(windows, "_extension", spied)
    n = 4000
    value = 10.0 + 0.01 * np.arange(n)
    value[[900, 2000, 3100]] += [2.0, -10.0, 10.0]  # pools that sink rightward over 20 and 45 blocks, one leftward
    got, want, _ = _one_pass(value, n, rightward)
    assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    assert np.count_nonzero(got != value) >= (60 if rightward else 20), "the pools did not reach past a few blocks"
    assert len(tries) >= (2 if growth == windows.GROWTH else 4), tries
    assert all(runs < tries[0][0] for runs, _ in tries[1:]), f"a run tried again whose pool had stopped: {tries}"
    assert sum(runs * width for runs, width in tries) < 1200, tries


@pytest.mark.parametrize("q", [2.0, 3.0, 4.0, 5.0, 6.0])
def test_pooling_rounds_over_blocks_equal_the_rounds_over_entries(q):
    """``blocks.pool_rounds`` (the p-norm rank's pooling rounds over blocks whose arrays shrink each round) against
    ``isotonic.pool_runs`` over the entries (each segment solved from its entries, ``pnorm._Rules``), after each of the
    first rounds and to the end: 12 rows of 300 (sorted normal scores at strengths 0.05 to 2, rank weights; each row's
    values above the next row's, which must never pool across), float64, the same blocks and values to 1e-12; and the
    rounds over the entries resumed after the first from its blocks' starts."""
    import array_api_compat.numpy as xp

    from rankops._cores import pnorm
    from rankops._cores.blocks import Blocks, pool_rounds
    from rankops._cores.power_sums import PowerSums

    rng = np.random.default_rng(11)
    rows, n = 12, 300
    z = -np.sort(-rng.normal(size=(rows, n)), axis=-1) / np.geomspace(0.05, 2.0, rows)[:, None]
    z = z + 1e4 * np.arange(rows, 0, -1)[:, None]  # row i above row i + 1 everywhere: a drop at every row's end
    y, w = z[:, ::-1], np.broadcast_to(np.arange(1.0, n + 1.0), (rows, n))
    yw = np.stack([y, w])
    v0 = y - w ** (1.0 / (q - 1.0))
    adapter, rules = get_adapter(xp), pnorm._Rules(q)
    sums = PowerSums(q)
    blocks = Blocks.of(xp, adapter, rules, v0, yw)  # every entry a block of its own
    for rounds in (1, 2, 3, 5, 8, 4 * n):
        want, _, _ = isotonic.pool_runs(xp, adapter, rules, v0, yw, rounds)
        got = pool_rounds(xp, adapter, sums, blocks, 0, rounds)
        got = np.reshape(np.take(got.value, got.of_entries(xp)), v0.shape)
        np.testing.assert_array_equal(isotonic.block_starts(xp, got), isotonic.block_starts(xp, want), err_msg=f"{rounds}")
        assert_allclose(got, want, rtol=1e-12, atol=0, err_msg=f"{rounds} rounds")
    assert not np.any(got[:, :-1] > got[:, 1:]), "not settled"
    # the rounds over the entries, resumed from pooled values with their blocks' starts (pool_then_merge's route
    # where few_blocks says no), end where one call does; without the starts each entry would be solved alone again
    once, _, _ = isotonic.pool_runs(xp, adapter, rules, v0, yw, 1)
    for rounds in (2, 4 * n):
        want, _, _ = isotonic.pool_runs(xp, adapter, rules, v0, yw, 1 + rounds)
        resumed, _, _ = isotonic.pool_runs(xp, adapter, rules, once, yw, rounds, starts=isotonic.block_starts(xp, once))
        np.testing.assert_array_equal(isotonic.block_starts(xp, resumed), isotonic.block_starts(xp, want))
        assert_allclose(resumed, want, rtol=1e-12, atol=0, err_msg=f"resumed for {rounds} rounds")


def test_regroup_with_every_group_one_block_keeps_the_table():
    """``blocks.regroup`` where ``starts`` begins a group at every block (nothing to combine: the arrays of the groups
    of several are empty) returns the blocks' columns as they were, on NumPy and torch."""
    from rankops._cores.blocks import regroup
    from rankops._cores.power_sums import PowerSums
    from rankops._lib._backends import get_backend

    table = np.random.default_rng(4).normal(size=(6, 5))
    table[3], table[4:] = 1.0, 0.0  # one entry each: size 1, no moments
    for name in ("numpy", "torch"):
        backend = get_backend(name)
        if backend.unavailable_reason():
            continue
        xp = backend.namespace()
        got, heads, group = regroup(xp, get_adapter(xp), PowerSums(3.0), backend.asarray(table),
                                    backend.asarray(np.ones(5, dtype=bool)))
        np.testing.assert_array_equal(backend.to_numpy(got), table)
        np.testing.assert_array_equal(backend.to_numpy(heads), np.arange(5))
        np.testing.assert_array_equal(backend.to_numpy(group), np.arange(5))


def test_rounds_over_blocks_gather_with_one_kernel_on_torch(monkeypatch):
    """The rounds over blocks and the windows gather by indices in range (:func:`.blocks.take_in_range`): on torch one
    ``index_select`` a gather, not array-api-compat's ``take``, which wraps negative indices first (three kernels
    more). The p = 3/2 rank at strength 0.1, B = 20, n = 1000, whose rows finish over their blocks: 1,453 kernels
    forward+backward with ``xp.take``, 1,051 with the gathers; 1,054 since the final solve centres each block on its
    first entry (a float32 accuracy fix, :func:`.power_sums.centred`); 1,060 since each extension pass reads whether
    a run filled its window (``windows._extend_each_run``, one read a pass); 1,069 since a rank at a strength other than 1
    takes the row from its exact midrange before the division (a float32 accuracy fix, ``permutahedron._Projection``;
    nine kernels on (B, 1) arrays); 1,077 since a batch whose one-entry values mostly drop is guessed as one block a row
    (``one_block.guessed_fit``, whose gate, the share of drops, is eight kernels where it is not taken, as here); 1,079
    since the rounds' first pass starts from the blocks the values already hold (two kernels: a guess's pooled block
    had been split into its entries again); 1,087 since the final solve's block sums are precise (float64 on a CPU,
    casts either side: a float32 accuracy fix for long tied blocks, :meth:`.PortableAdapter.segment_sum`). The ceiling is today's count: a change that adds
    kernels to these eager CPU paths fails here and says why (or lowers it)."""
    torch = pytest.importorskip("torch")
    from benchmarks.gpu import _count

    calls = []
    pool_and_finish = windows.pool_and_finish
    monkeypatch.setattr(windows, "pool_and_finish", lambda *a: calls.append(1) or pool_and_finish(*a))
    x = torch.randn(20, 1000, generator=torch.Generator().manual_seed(0)).requires_grad_()

    def both() -> None:
        y = rankops.soft_rank(x, method="permutahedron", regularization="lp", p=1.5, strength=0.1)
        torch.autograd.grad(y, x, torch.ones_like(y))

    kernels, _, _ = _count(torch, both)
    assert calls, "the rounds over blocks were not taken"
    assert kernels <= 1087, f"{kernels} kernels per call (ceiling 1087)"


def _runs_after_one_round(rng: np.random.Generator, rows: int, q: float) -> list[tuple[np.ndarray, np.ndarray, list]]:
    """Rows of the p-norm rank's increasing fit (y: sorted normal scores over a strength of 0.01 to 3, some tied;
    w: ranks 1..n) after one pooling round: each row's blocks as ``(first entry, end, value)``, true roots at q."""
    from .test_pnorm import _root

    out = []
    for _ in range(rows):
        n = int(rng.integers(20, 60))
        x = rng.normal(size=n)
        if rng.random() < 0.3:
            x = np.round(x * 3.0) / 3.0
        y = np.sort(x) / rng.choice([0.01, 0.1, 0.3, 1.0, 3.0])
        w = np.arange(1.0, n + 1.0)
        v0 = y - w ** (1.0 / (q - 1.0))
        parts, i = [], 0
        while i < n:  # one round: every run of one-entry values each above the next pools
            j = i
            while j < n - 1 and v0[j] > v0[j + 1]:
                j += 1
            parts.append((i, j + 1, _root(y[i:j + 1], w[i:j + 1], q)))
            i = j + 1
        out.append((y, w, parts))
    return out


def _window_fit(y: np.ndarray, w: np.ndarray, parts: list, q: float) -> list:
    """Sequential pool-adjacent-violators from the blocks ``parts`` (true roots at q), as ``(first, end, value)``."""
    from .test_pnorm import _root

    fit: list = []
    for a, b, v in parts:
        while fit and fit[-1][2] > v:
            a = fit.pop()[0]
            v = _root(y[a:b], w[a:b], q)
        fit.append((a, b, v))
    return fit


@pytest.mark.parametrize("q", [3.0, 5.0])
def test_min_max_pass_at_even_degrees_equals_the_fit_of_each_runs_window(monkeypatch, q):
    """One min-max pass (``windows._pool_each_run``) at q = 3 and 5, the p = 3/2 and 5/4 ranks', over 150 rows after
    one pooling round, one call for the batch (NumPy, float64): every run of drops that the pass pools ends as the
    block that sequential pool-adjacent-violators (true roots) fits over the blocks between its neighbouring runs, at
    that block's value to 1e-12, and most runs are pooled. Each range's value there is its moments' root (at q = 5,
    Newton's steps on its quartic) bounded by its first datum (``Blocks.low``); the moments' root alone, which stands
    above a range's value where some of its data lie below it, sets a wrong level in some of these runs."""
    import array_api_compat.numpy as xp

    from rankops._cores.blocks import Blocks
    from rankops._cores.power_sums import PowerSums

    monkeypatch.setattr(windows, "RADIUS", 64)  # every run's window reaches its neighbouring runs (rows of < 60)
    rng = np.random.default_rng(7)
    rows = _runs_after_one_round(rng, 150, q)
    blocks = [(r, a, b, v) for r, (_, _, parts) in enumerate(rows) for a, b, v in parts]
    value = np.array([v for _, _, _, v in blocks])
    data = []
    for r, a, b, _ in blocks:
        y, w = rows[r][0][a:b], rows[r][1][a:b]
        d = y - y.mean()
        data.append((y.mean(), w.sum(), float(b - a), *(np.sum(d ** k) for k in range(2, max(3, int(q) - 1) + 1))))
    data = tuple(np.array(c) for c in zip(*data))
    low = np.array([rows[r][0][a] for r, a, _, _ in blocks])
    row = np.array([r for r, _, _, _ in blocks])
    first = np.searchsorted(row, row, side="left")
    last = np.searchsorted(row, row, side="right") - 1
    down = (value[:-1] > value[1:]) & (row[:-1] == row[1:])

    def one_pass(low: Any) -> tuple[int, int, int]:
        """(runs pooled, of them at the window fit's block and value, runs)"""
        got = windows._pool_each_run(xp, get_adapter(xp), PowerSums(q), Blocks(value, data, first, last, None, np.int64, low), down)
        start, end, lo, hi = (np.asarray(a) for a in windows._runs(xp, down, first, last))
        pooled = right = 0
        for s, e, a, b in zip(start, end, lo, hi):
            if np.array_equal(got[s:e + 1], value[s:e + 1]):
                continue  # left out of this pass: its pool met another run's
            pooled += 1
            r = row[s]
            y, w = rows[r][0], rows[r][1]
            window = [blk[1:] for blk in blocks[a:b + 1]]
            fit = _window_fit(y, w, window, q)
            at = blocks[s][1]
            fa, fb, level = next(f for f in fit if f[0] <= at < f[1])
            inside = [i for i in range(a, b + 1) if fa <= blocks[i][1] < fb]
            begin, stop = s, e  # the pool: the blocks around the run at its level (a neighbouring run's pool may
            while begin > a and got[begin - 1] == got[s]:  # reach into the window)
                begin -= 1
            while stop < b and got[stop + 1] == got[s]:
                stop += 1
            right += inside == list(range(begin, stop + 1)) and bool(np.isclose(got[s], level, rtol=1e-12, atol=1e-12))
        return pooled, right, start.size

    pooled, right, runs = one_pass(low)
    assert right == pooled and pooled >= runs // 2, (pooled, right, runs)
    pooled, right, _ = one_pass(None)
    assert right < pooled, "the moments' root alone set every level right: the bound was not tried"
