"""Under ``torch.func`` transforms the operators do the work that eager code does.

``grad``, ``vjp`` and ``jvp`` wrap tensors whose values can be read: the fits take their eager routes, sized by the
data, and not the fixed schedules of traced code (every pooling round, every Newton step). ``torch.func`` runs every
backward with gradients on, a second derivative or not: a rule rebuilds its residuals under autograd (its forward
again, recorded) only where one can follow. Under ``vmap`` values cannot be read per mapped slice, but a loop's
stopping test can be read under the map: it stops once every mapped problem settled, as a batch's loop does. The work
is counted in dispatched operations (a ``TorchDispatchMode``), which a fixed schedule or a second forward
multiplies; the values are conformance's (``conformance/test_autodiff.py``).
"""

from __future__ import annotations

import weakref

import numpy as np
import pytest
from numpy.testing import assert_allclose

import rankops

torch = pytest.importorskip("torch")
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves


class _Counted(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        self.count += 1
        return func(*args, **(kwargs or {}))


def _dispatched(run) -> int:  # type: ignore[no-untyped-def]
    with _Counted() as counted:
        run()
    return counted.count


class _Held(TorchDispatchMode):
    """The most bytes that the dispatched operations' new storages hold at once. An output that shares an input's
    storage (a slice, an in-place result: the dispatcher does not flag them as views) is not new."""

    def __init__(self) -> None:
        super().__init__()
        self.live = self.peak = 0
        self.storages: set[int] = set()

    def _freed(self, ptr: int, nbytes: int) -> None:
        self.storages.discard(ptr)
        self.live -= nbytes

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        out = func(*args, **(kwargs or {}))
        given = {a.untyped_storage().data_ptr() for a in tree_leaves((args, kwargs)) if isinstance(a, torch.Tensor)}
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in self.storages | given:
                ptr, nbytes = t.untyped_storage().data_ptr(), t.untyped_storage().nbytes()
                self.storages.add(ptr)
                self.live += nbytes
                self.peak = max(self.peak, self.live)
                weakref.finalize(t, self._freed, ptr, nbytes)
        return out


def _peak_bytes(run) -> int:  # type: ignore[no-untyped-def]
    with _Held() as held:
        run()
    return held.peak


FITS = {
    "p-norm rank, p = 1.35": lambda a: rankops.soft_rank(a, method="permutahedron", regularization="lp", p=1.35),
    "p-norm sort, p = 4/3": lambda a: rankops.soft_sort(a, method="permutahedron", regularization="lp", p=4 / 3),
    "KL rank": lambda a: rankops.soft_rank(a, method="permutahedron", regularization="kl"),
    "l2 sort": lambda a: rankops.soft_sort(a, method="permutahedron"),
}


@pytest.mark.parametrize("op", FITS.values(), ids=FITS.keys())
def test_torch_func_grad_takes_the_eager_routes(op):
    """``torch.func.grad`` dispatches as many operations as eager autograd, where the traced routes and the rebuilt
    residuals took 3.6x (the l2 sort), 5.3x (KL) and 38x (p = 1.35) on these rows of 400; the gradients are equal."""
    x = torch.asarray(np.random.default_rng(0).normal(size=(3, 400)))
    w = torch.asarray(np.random.default_rng(1).normal(size=(3, 400)))

    def loss(a):  # type: ignore[no-untyped-def]
        return (op(a) * w).sum() + (op(a) ** 2).sum() / 400

    def eager():  # type: ignore[no-untyped-def]
        xr = x.clone().requires_grad_(True)
        return torch.autograd.grad(loss(xr), xr)[0]

    transformed = torch.func.grad(loss)
    assert_allclose(transformed(x).numpy(), eager().numpy(), rtol=1e-12, atol=1e-12)
    assert _dispatched(lambda: transformed(x)) <= 1.1 * _dispatched(eager)


def test_torch_func_first_derivatives_hold_what_eager_autograd_holds():
    """Where no second derivative follows, the backward runs unrecorded under ``torch.func.grad``: a sorting network's
    rank at n = 200 peaks at eager autograd's bytes (4.5 MB), where recording its backward (each block of columns
    carried through every layer again) held 1.7x them; at n = 2,100 that ran out of 16 GB, against eager's 2.1 GB."""
    x = torch.asarray(np.random.default_rng(6).normal(size=(2, 200)))

    def loss(a):  # type: ignore[no-untyped-def]
        return (rankops.soft_rank(a, method="diffsort") ** 2).sum()

    def eager():  # type: ignore[no-untyped-def]
        xr = x.clone().requires_grad_(True)
        return torch.autograd.grad(loss(xr), xr)[0]

    assert_allclose(torch.func.grad(loss)(x).numpy(), eager().numpy(), rtol=1e-12, atol=1e-12)
    assert _peak_bytes(lambda: torch.func.grad(loss)(x)) <= 1.25 * _peak_bytes(eager)


def test_torch_func_vmap_of_an_unrolled_solve_stops_once_every_mapped_problem_settled():
    """``rankops.sinkhorn`` (``implicit=False``: its iterations differentiated) under ``torch.func.vmap`` runs the
    iterations its batch runs, where it ran all ``max_iter`` (94x the operations here; under ``vmap`` of ``grad``
    autograd kept every one: 10.9 GB at n = 200). Values and per-row gradients equal the batch's."""
    x = torch.asarray(np.random.default_rng(2).normal(size=(3, 40)))

    def plan(a):  # type: ignore[no-untyped-def]
        return rankops.sinkhorn((a[..., :, None] - a[..., None, :]) ** 2, epsilon=0.5, max_iter=5000).plan

    assert_allclose(torch.func.vmap(plan)(x).numpy(), plan(x).numpy(), rtol=1e-13, atol=1e-15)
    assert _dispatched(lambda: torch.func.vmap(plan)(x)) <= 1.5 * _dispatched(lambda: plan(x))

    w = torch.asarray(np.random.default_rng(3).normal(size=(40, 40)))
    xr = x.clone().requires_grad_(True)
    (plan(xr) * w).sum().backward()
    per_row = torch.func.vmap(torch.func.grad(lambda a: (plan(a) * w).sum()))(x)
    assert_allclose(per_row.numpy(), xr.grad.numpy(), rtol=1e-10, atol=1e-12)


SECOND = {**FITS, "LapSum rank": lambda a: rankops.soft_rank(a, method="lapsum", alpha=0.5),
          "diffsort rank": lambda a: rankops.soft_rank(a, method="diffsort", steepness=3.0)}


@pytest.mark.parametrize("op", SECOND.values(), ids=SECOND.keys())
def test_torch_func_second_derivatives_rebuild_what_the_first_skip(op):
    """Where a second derivative follows (``grad`` of ``grad``, ``jacfwd`` of ``jacrev``, ``jvp`` of ``grad``, or
    autograd recording the input of ``torch.func.grad``) the rule's residuals are rebuilt: each equals autograd's
    ``create_graph=True`` Hessian-vector product."""
    from torch.func import grad, jacfwd, jacrev, jvp

    rng = np.random.default_rng(4)
    x, v, w = (torch.asarray(rng.normal(size=(2, 12))) for _ in range(3))

    def loss(a):  # type: ignore[no-untyped-def]
        return (op(a) * w).sum() + (op(a) ** 2).sum()

    xr = x.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(loss(xr), xr, create_graph=True)
    (expected,) = torch.autograd.grad((g * v).sum(), xr)
    hv = expected.numpy()
    assert np.abs(hv).max() > 0.1  # curvature: blocks of several entries
    assert_allclose(grad(lambda a: (grad(loss)(a) * v).sum())(x).numpy(), hv, rtol=1e-10, atol=1e-12)
    assert_allclose(jvp(grad(loss), (x,), (v,))[1].numpy(), hv, rtol=1e-10, atol=1e-12)
    hessian = jacfwd(jacrev(loss))(x).reshape(24, 24)
    assert_allclose((hessian @ v.reshape(24)).reshape(2, 12).numpy(), hv, rtol=1e-10, atol=1e-12)
    xr = x.clone().requires_grad_(True)
    (outer,) = torch.autograd.grad((grad(loss)(xr) * v).sum(), xr)
    assert_allclose(outer.numpy(), hv, rtol=1e-10, atol=1e-12)
