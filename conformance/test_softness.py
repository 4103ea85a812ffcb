"""Softness on every backend: scale and shift invariance (ranks, CDFs, masks) and equivariance (sorts, quantiles).

``softness=s`` sets each method's temperature from the row's own scale and
length (docs/softness.md), so ``op(a x + b)`` is ``op(x)`` (or ``a op(x) +
b`` for values in x's units) for every ``a > 0``, exactly up to rounding; the
defaults are softness too, so they are checked as well. Each case runs on
every backend against the same call on NumPy at the unscaled row.
"""

from __future__ import annotations

import numpy as np
import pytest
from numpy.testing import assert_allclose

import rankops

X = np.random.default_rng(11).standard_normal((3, 7))
A, B = 37.5, -4.25  # x -> a x + b

# name -> (call, equivariant: the value is in x's units)
METHODS = ("sinkhorn", "softsort", "neuralsort", "permutahedron", "lapsum", "diffsort")
CASES = {
    **{f"soft_rank[{m}]": (lambda x, m=m, **kw: rankops.soft_rank(x, method=m, **kw), False) for m in METHODS},
    **{f"soft_sort[{m}]": (lambda x, m=m, **kw: rankops.soft_sort(x, method=m, **kw), True) for m in METHODS},
    "soft_rank[permutahedron, kl]": (lambda x, **kw: rankops.soft_rank(x, method="permutahedron", regularization="kl", **kw), False),
    "soft_sort[permutahedron, kl]": (lambda x, **kw: rankops.soft_sort(x, method="permutahedron", regularization="kl", **kw), True),
    # the p-norm regularizer at its default p (4/3) and at p = 5/4 (q = 5: a table of its own)
    "soft_rank[permutahedron, lp]": (lambda x, **kw: rankops.soft_rank(x, method="permutahedron", regularization="lp", **kw), False),
    "soft_rank[permutahedron, lp 5/4]": (lambda x, **kw: rankops.soft_rank(x, method="permutahedron", regularization="lp", p=1.25, **kw),
                                         False),
    "soft_sort[permutahedron, lp 5/4]": (lambda x, **kw: rankops.soft_sort(x, method="permutahedron", regularization="lp", p=1.25, **kw),
                                         True),
    "soft_topk_mask[permutahedron, lp 5/4]": (lambda x, **kw: rankops.soft_topk_mask(x, 2.5, method="permutahedron", regularization="lp",
                                                                                      p=1.25, **kw), False),
    "soft_rank[softsort, power 2]": (lambda x, **kw: rankops.soft_rank(x, method="softsort", power=2, **kw), False),
    "soft_topk_mask[sinkhorn]": (lambda x, **kw: rankops.soft_topk_mask(x, 2, **kw), False),
    "soft_topk_mask[lapsum]": (lambda x, **kw: rankops.soft_topk_mask(x, 2.5, method="lapsum", **kw), False),
    "soft_cdf": (lambda x, **kw: rankops.soft_cdf(x, **kw), False),
    "soft_quantile": (lambda x, **kw: rankops.soft_quantile(x, 0.3, **kw), True),
    "soft_quantize": (lambda x, **kw: rankops.soft_quantize(x, 3, **kw), True),
    "sort_with": (lambda x, **kw: rankops.sort_with(x[..., None], x, **kw)[..., 0], True),
    "softsort": (lambda x, **kw: rankops.softsort(x, **kw), False),
    "neuralsort": (lambda x, **kw: rankops.neuralsort(x, **kw), False),
    "diffsort": (lambda x, **kw: rankops.diffsort(x, **kw), False),
}
# the p-norm sort is equivariant under scaling only: its regularizer |mu|^p is homogeneous, not shift-invariant
_SCALE_ONLY = {"soft_sort[permutahedron, lp 5/4]"}
# the matrices keep their native defaults (tau=1.0, steepness=10.0): not scale-free unless softness is passed; the
# Sinkhorn operators keep epsilon=0.01, scale-free through their squash (their own conformance checks cover it)
_NATIVE_DEFAULT = {"softsort", "neuralsort", "diffsort", "soft_rank[sinkhorn]", "soft_sort[sinkhorn]", "soft_topk_mask[sinkhorn]",
                   "soft_cdf", "soft_quantile", "soft_quantize", "sort_with"}


def _options(name: str, softness: float | None) -> dict:
    if softness is None:
        return {}
    opts = {"softness": softness}
    if "sinkhorn" in name or name.startswith(("soft_cdf", "soft_quantile", "soft_quantize", "sort_with")) or name == "soft_topk_mask[sinkhorn]":
        opts["tol"] = 1e-10  # both problems solved far below the default tol: they are one problem, rescaled
        opts["max_iter"] = 20_000
    return opts


@pytest.mark.eager_backends  # the knob's scaling is the same array code on every backend
@pytest.mark.parametrize("name", CASES)
def test_scale_and_shift(backend, name):
    _check(backend.to_numpy, backend.asarray, name, 2.0)


@pytest.mark.parametrize("name", [name for name in CASES if name not in _NATIVE_DEFAULT])
def test_defaults_scale_and_shift(name):
    """The defaults are softness 1: the same code path as above on every backend, its value checked once, on NumPy."""
    _check(np.asarray, np.asarray, name, None)


def _check(to_numpy, asarray, name: str, softness: float | None) -> None:
    call, units = CASES[name]
    opts = _options(name, softness)
    shift = 0.0 if name in _SCALE_ONLY else B
    want = np.asarray(call(X, **opts))
    got = to_numpy(call(asarray(A * X + shift), **opts))
    expect = A * want + shift if units else want
    scale = A if units else 1.0
    assert np.all(np.isfinite(got))
    # the rescaled row rounds differently: a few ulps of the values' size, amplified by the method's conditioning
    assert_allclose(got, expect, rtol=1e-7, atol=1e-7 * scale * max(1.0, float(np.abs(want).max())))
