"""An eager batch of transport problems on a CPU runs in blocks that fit a core's cache: the batch's numbers.

The solver's iterations and the implicit backward's conjugate gradient pass
over each problem's (n, m) matrices several times per iteration (and the
implicit rule's forward builds the cost block by block with them, and its
backward takes its products with the plan block by block); a batch
whose matrices outgrow the cache ran 2-5x the time of its rows one by one
(``benchmarks/batch_blocks.py``). Each problem's result is its own
(frozen once within ``tol``), so a block of problems gives what the batch
gives, up to the order in which a matrix product sums (a BLAS may pick
its kernel by the batch's size: torch's float64 products of rows of 300
differed by 5e-11 between a batch of 8 and of 1, and gradients of
``soft_rank`` by 5e-9); on the small problems here they are equal. The
tests set one problem per block and compare values and gradients, and
count the blocks run, so that a route that stopped blocking fails them.
Devices other than a CPU, and traced loops (JAX), run the batch whole.
"""

from __future__ import annotations

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal

import rankops
from rankops._lib import _loops
from rankops._lib._adapters import _generic
from rankops._solvers import implicit, line, sinkhorn

OPS = {
    "soft_rank": (rankops.soft_rank, (), {"method": "sinkhorn"}),
    "soft_sort": (rankops.soft_sort, (), {"method": "sinkhorn"}),
    "soft_quantile": (rankops.soft_quantile, (0.3,), {}),
    "soft_topk_mask": (rankops.soft_topk_mask, (3,), {"method": "sinkhorn"}),
    "soft_cdf": (rankops.soft_cdf, (), {}),
}
SHAPE = (3, 4, 12)  # twelve problems over two batch axes


class Counted:
    """Calls of the solver's one-block iterations and of the backward's one-block solve."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.solves, self.plans, self.backward_solves, self.backward_blocks, self.in_backward = 0, 0, 0, 0, False
        forward, plan, backward = sinkhorn._fixed_point, line._block_plan, implicit._schur_solve
        backward_block = line._block_backward

        def counted_forward(*args, **kwargs):
            self.solves += 1
            return forward(*args, **kwargs)

        def counted_plan(*args, **kwargs):
            self.plans += 1
            return plan(*args, **kwargs)

        def counted_backward(*args, **kwargs):
            self.backward_solves += self.in_backward
            return backward(*args, **kwargs)

        def counted_backward_block(*args, **kwargs):
            self.backward_blocks += 1
            return backward_block(*args, **kwargs)

        monkeypatch.setattr(sinkhorn, "_fixed_point", counted_forward)
        monkeypatch.setattr(line, "_block_backward", counted_backward_block)
        monkeypatch.setattr(line, "_block_plan", counted_plan)
        monkeypatch.setattr(implicit, "_schur_solve", counted_backward)


def _every_problem_a_block(monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocks of one problem, whatever the batch's and the problems' sizes."""
    monkeypatch.setattr(_generic, "CACHE_BYTES", 1)
    monkeypatch.setattr(_generic, "WHOLE_BYTES", 0)
    monkeypatch.setattr(_generic, "SMALL_PROBLEM_BYTES", 0)


def _blocked(backend, device) -> bool:
    """Whether this backend and device run an eager batch in blocks: a CPU's memory, a loop that is not traced."""
    return backend.name != "jax" and "cpu" in str(device).lower()


def _counts(backend) -> bool:
    """Whether the calls counted are the blocks': Dask runs the cores on its chunks (and once per output it computes)."""
    return backend.name != "dask"


def _value_and_gradient(backend, device, fn, args, kw, x, counted: Counted):
    """``fn``'s value and the gradient of its sum of squares, in NumPy (the gradient None where the backend has none)."""
    if backend.name == "torch":
        import torch

        t = torch.asarray(x, device=device).requires_grad_(True)
        y = fn(t, *args, **kw)
        counted.in_backward = True
        (g,) = torch.autograd.grad((y ** 2).sum(), t)
        counted.in_backward = False
        return y.detach().cpu().numpy(), g.cpu().numpy()
    if backend.name == "numpy":
        y, pull = rankops.vjp(fn, x, *args, **kw)
        counted.in_backward = True
        (g,) = pull(2 * y)[:1]
        counted.in_backward = False
        return y, g
    return backend.to_numpy(fn(backend.asarray(x, device=device), *args, **kw)), None


@pytest.mark.parametrize("implicit_", [False, True], ids=["unrolled", "implicit"])
@pytest.mark.parametrize("name", list(OPS))
def test_one_problem_per_block_gives_the_batch_numbers(backend, device, monkeypatch, name, implicit_):
    fn, args, kw = OPS[name]
    kw = {**kw, "implicit": implicit_}
    x = np.random.default_rng(0).normal(size=SHAPE)
    counted = Counted(monkeypatch)
    whole = _value_and_gradient(backend, device, fn, args, kw, x, counted)
    # a batch of 1.8 KiB runs whole (JAX's compiled program may not trace again: 0)
    assert counted.solves <= 1 or not _counts(backend)
    _every_problem_a_block(monkeypatch)
    counted.solves = counted.plans = counted.backward_solves = counted.backward_blocks = 0
    blocked = _value_and_gradient(backend, device, fn, args, kw, x, counted)
    problems = int(np.prod(SHAPE[:-1]))
    if _counts(backend) and _blocked(backend, device):
        assert counted.solves == problems
        # implicit: the cost is built block by block too (the line solver's forward), and the backward's passes
        # over the plan run by block; unrolled, the solver's caller forms the cost for the backend's autodiff
        assert counted.plans == (problems if implicit_ else 0)
        if implicit_ and whole[1] is not None:
            assert counted.backward_solves == counted.backward_blocks == problems
    elif _counts(backend):
        assert counted.solves <= 1
    assert_allclose(blocked[0], whole[0], rtol=1e-12, atol=1e-12)
    if whole[1] is not None:
        assert_allclose(blocked[1], whole[1], rtol=1e-10, atol=1e-10)


def test_sinkhorn_blocks_over_broadcast_marginals_report_the_batch(backend, device, monkeypatch):
    """``rankops.sinkhorn`` with marginals broadcast against the cost: plan, potentials, errors and ``n_iter`` as whole."""
    rng = np.random.default_rng(1)
    cost, a = rng.random((2, 3, 5, 4)), rng.random((3, 5)) + 0.1
    a /= a.sum(-1, keepdims=True)

    def solve():
        res = rankops.sinkhorn(backend.asarray(cost, device=device), backend.asarray(a, device=device), epsilon=0.02, tol=1e-6)
        return [backend.to_numpy(v) for v in (res.plan, res.f, res.g, res.error, res.converged)], int(res.n_iter)

    counted = Counted(monkeypatch)
    whole, whole_iter = solve()
    _every_problem_a_block(monkeypatch)
    monkeypatch.setattr(_generic, "CACHE_BYTES", 4 * 5 * 8 * 4)  # four problems a block in float64: 4 + 2 problems
    counted.solves = 0
    blocked, blocked_iter = solve()
    if _counts(backend):
        assert counted.solves == (2 if _blocked(backend, device) else min(counted.solves, 1))
    assert whole_iter > 10 and blocked_iter == whole_iter  # the slowest problem's rounds, whichever block holds it
    for w, b in zip(whole, blocked):
        assert_allclose(b, w, rtol=1e-12, atol=1e-14)


def test_torch_func_gradient_over_blocks_equals_eager_autograd(monkeypatch):
    torch = pytest.importorskip("torch")
    from torch.func import grad

    _every_problem_a_block(monkeypatch)
    counted = Counted(monkeypatch)
    x = torch.asarray(np.random.default_rng(2).normal(size=(5, 9)))

    def loss(t):
        return (rankops.soft_rank(t, method="sinkhorn") ** 2).sum()

    g = grad(loss)(x)
    assert counted.solves == 5
    t = x.clone().requires_grad_(True)
    (eager,) = torch.autograd.grad(loss(t), t)
    assert_allclose(g.numpy(), eager.numpy(), rtol=1e-12, atol=1e-12)


def test_in_blocks_broadcasts_splits_and_joins():
    rng = np.random.default_rng(3)
    a, b = rng.random((2, 1, 4, 3)), rng.random((3, 4))  # batch (2, 3): six problems of (4, 3) and (4,)
    seen = []

    def fn(p, q):
        seen.append(p.shape[0])
        return p.sum(-1) * q, p.shape[0] + 10

    out, count = _loops.in_blocks(np, fn, (a, b), (2, 1), 4)
    assert seen == [4, 2]
    assert count == 14  # numbers: the largest of the blocks'
    assert_array_equal(out, a.sum(-1) * b)
    assert out.shape == (2, 3, 4)
    seen.clear()
    _loops.in_blocks(np, fn, (a, b), (2, 1), None)
    assert seen == [2]  # None: the arrays as they are, unbroadcast


@pytest.mark.parametrize("implicit_", [False, True], ids=["unrolled", "implicit"])
def test_gradient_of_a_marginal_shared_by_the_blocks_sums_over_them(monkeypatch, implicit_):
    """A learnable ``b`` shared by the batch is broadcast to each block: its gradient is the sum over all of them."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(4)
    cost, b = torch.asarray(rng.random((6, 5, 4))), torch.asarray(rng.random(4) + 0.1)
    b = b / b.sum()

    def gradients():
        c, w = cost.clone().requires_grad_(True), b.clone().requires_grad_(True)
        res = rankops.sinkhorn(c, None, w, epsilon=0.05, implicit=implicit_)
        return [g.numpy() for g in torch.autograd.grad((res.plan ** 2).sum() + res.f.sum(), (c, w))]

    counted = Counted(monkeypatch)
    whole = gradients()
    _every_problem_a_block(monkeypatch)
    counted.solves = 0
    blocked = gradients()
    assert counted.solves == 6
    assert np.abs(whole[1]).max() > 1e-3  # b moves the loss
    for w, g in zip(whole, blocked):
        assert_allclose(g, w, rtol=1e-12, atol=1e-13)


def test_backward_blocks_sum_a_row_and_its_weights_over_the_problems_they_enter(monkeypatch):
    """Quantiles at three levels are three problems per row (the row broadcast over the levels), and weights shared by
    the rows enter every problem: blocks of one problem in the implicit backward give the whole batch's gradients of
    both (the sums over the problems taken after the blocks, each problem's cotangent scaled by its own magnitude),
    and those gradients equal central differences of the loss along random directions."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    x, w = torch.asarray(rng.normal(size=(4, 12))), torch.asarray(rng.uniform(0.5, 2.0, size=12))
    levels = torch.asarray([0.2, 0.5, 0.85], dtype=torch.float64)

    def loss(t, v):
        q = rankops.soft_quantile(t, levels, weights=v, tol=1e-10)
        return (q * torch.arange(1.0, 4.0, dtype=torch.float64)).sum() ** 2

    def gradients():
        t, v = x.clone().requires_grad_(True), w.clone().requires_grad_(True)
        return [g.numpy() for g in torch.autograd.grad(loss(t, v), (t, v))]

    step, directions = 1e-5, [(torch.asarray(rng.normal(size=(4, 12))), torch.asarray(rng.normal(size=12))) for _ in range(3)]
    central = [(loss(x + step * dx, w + step * dw) - loss(x - step * dx, w - step * dw)).item() / (2 * step)
               for dx, dw in directions]  # the forward, whole
    counted = Counted(monkeypatch)
    whole = gradients()
    assert counted.backward_blocks == 1
    _every_problem_a_block(monkeypatch)
    counted.backward_blocks = 0
    blocked = gradients()
    assert counted.backward_blocks == 12
    assert min(np.abs(g).max() for g in whole) > 1e-3  # both move the loss
    for g, h in zip(blocked, whole):
        assert_allclose(g, h, rtol=1e-11, atol=1e-13)
    for (dx, dw), difference in zip(directions, central):
        # the forward solved to 1e-10: its differences hold about 6 digits (a block's wrong sum over problems is 1e-1 off)
        assert_allclose((blocked[0] * dx.numpy()).sum() + (blocked[1] * dw.numpy()).sum(), difference, rtol=1e-5)


def test_the_rule_keeps_small_batches_and_small_problems_whole():
    """``cache_block``: None for a batch of at most 2 MiB and for problems under 128 KiB (under 1 MiB for a loop of few
    passes, the implicit backward); otherwise blocks of about 1 MiB of (n, m) arrays."""
    import array_api_compat.numpy as xp

    rule = _generic.PortableAdapter().cache_block

    def array(*shape, dtype="float64"):
        return np.zeros(shape, dtype=dtype)

    assert rule(xp, array(2, 300, 300), 2) is None  # 1.4 MiB in all
    assert rule(xp, array(64, 100, 100), 2) is None  # 78 KiB a problem
    assert rule(xp, array(64, 200, 200), 2) == 3  # 312 KiB a problem
    assert rule(xp, array(64, 200, 200), 2, few_passes=True) is None
    assert rule(xp, array(32, 362, 362), 2, few_passes=True) is None  # 1,023.8 KiB
    for few in (False, True):
        assert rule(xp, array(16, 512, 512, dtype="float32"), 2, few_passes=few) == 1  # 1 MiB
        assert rule(xp, array(16, 600, 600, dtype="float32"), 2, few_passes=few) == 1
    assert rule(xp, array(16, 300), 1, width=300) == 1  # a (300, 300) float64 cost built in the loop: 703 KiB
    assert rule(xp, array(16, 300, dtype="float32"), 1, width=300) == 2
