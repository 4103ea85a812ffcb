"""Every invalid call in the contract raises the documented error, naming the argument and its range.

One table, ``CASES``: each entry is a call, the exception type and a regex
that the message must match, written to name the argument and what it may
be. ``test_table_is_complete`` keeps the table honest: every public
operator and every option appears in it.
"""

from __future__ import annotations

import dataclasses
import inspect
import re

import numpy as np
import pytest

import rankops
from rankops.sorting import LapsumOptions, PermutahedronOptions
from rankops.permutations import NetworkOptions, PermutationOptions
from rankops.sinkhorn import TransportOptions
from rankops._registry import OPERATORS
from rankops.sinkhorn import SolverOptions

X = np.array([[3.0, 1.0, 2.0], [0.0, -1.0, 4.0]])


def _torch():
    return pytest.importorskip("torch")


def _strict():
    return pytest.importorskip("array_api_strict")


def _dask():
    return pytest.importorskip("dask.array")


# name -> call(x, **options): every operator that takes an array along an axis (or the last axis);
# the matrices name their input s, as in the contract
PERMUTATION = {
    **{f"soft_{kind}[{m}]": (lambda x, f=f, m=m, **kw: f(x, method=m, **kw))
       for kind, f in (("sort", rankops.soft_sort), ("rank", rankops.soft_rank)) for m in ("softsort", "neuralsort")},
    "softsort": rankops.softsort,
    "neuralsort": rankops.neuralsort,
}
SINKHORN = {
    "soft_rank[sinkhorn]": lambda x, **kw: rankops.soft_rank(x, **kw),
    "soft_sort[sinkhorn]": lambda x, **kw: rankops.soft_sort(x, **kw),
    "soft_cdf": lambda x, **kw: rankops.soft_cdf(x, **kw),
    "soft_quantile": lambda x, **kw: rankops.soft_quantile(x, 0.5, **kw),
    "soft_quantile_normalize": lambda x, **kw: rankops.soft_quantile_normalize(x, np.linspace(0.0, 1.0, 3), **kw),
    "soft_topk_mask": lambda x, **kw: rankops.soft_topk_mask(x, 2, **kw),
}
SOLVER = {"sinkhorn": lambda c, **kw: rankops.sinkhorn(c, **{"epsilon": 0.1, **kw})}
SORT_WITH = {"sort_with": lambda x, **kw: rankops.sort_with(x[..., None], x, **kw)}  # vectors and a criterion: rows below
FAST = {
    **{f"soft_{kind}[{m}]": (lambda x, f=f, m=m, **kw: f(x, method=m, **kw))
       for kind, f in (("sort", rankops.soft_sort), ("rank", rankops.soft_rank)) for m in ("permutahedron", "lapsum")},
    "soft_topk_mask[lapsum]": lambda x, **kw: rankops.soft_topk_mask(x, 1.5, method="lapsum", **kw),
}
ISOTONIC = {"isotonic_regression": lambda y, **kw: rankops.isotonic_regression(y, **kw)}
ALONG_AXIS = {**PERMUTATION, **SINKHORN, **FAST, **ISOTONIC}
WITH_AXIS = {k: v for k, v in ALONG_AXIS.items() if k.startswith("soft_")}
EVERYTHING = {**ALONG_AXIS, **SOLVER}

CASES: list = []


def case(id_: str, call, exc: type, match: str) -> None:
    CASES.append(pytest.param(call, exc, match, id=id_))


def each(ops: dict, label: str, exc: type, match: str, x=X, **options) -> None:
    """The same bad call on every operator of ``ops``."""
    for name, op in ops.items():
        case(f"{name}-{label}", lambda op=op, x=x: op(x() if callable(x) else x, **options), exc, match)


# -- the input array --------------------------------------------------------------------------
for bad in ([3.0, 1.0, 2.0], 3.0, "abc", None):
    each(EVERYTHING, f"x={type(bad).__name__}", TypeError, r"must be an array \(NumPy, CuPy, PyTorch, JAX, Dask or array-api-strict\)", x=lambda b=bad: b)
each(ALONG_AXIS, "empty-axis", ValueError, r"[xsy] has an empty axis 1 \(length 0\)", x=np.ones((3, 0)))
each(ALONG_AXIS, "0-d", ValueError, r"[xsy] must have at least one dimension .* 0-d", x=np.asarray(1.0))
each(ALONG_AXIS, "complex", TypeError, r"[xsy] must be real-valued; complex dtype", x=X.astype(np.complex128))
case("sinkhorn-complex", lambda: rankops.sinkhorn(np.ones((3, 2), complex), epsilon=0.1), TypeError, "cost must be real-valued")
case("sinkhorn-empty-axis", lambda: rankops.sinkhorn(np.ones((3, 0)), epsilon=0.1), ValueError, r"cost has an empty axis")
case("sinkhorn-cost-1d", lambda: rankops.sinkhorn(np.ones(3), epsilon=0.1), ValueError, r"cost must have shape \(\.\.\., n, m\)")

# -- axis ---------------------------------------------------------------------------------------
for axis in (2, -3, 10):
    each(WITH_AXIS, f"axis={axis}", ValueError, rf"axis={axis} is out of range \[-2, 1\] for an array with 2 dimension", axis=axis)
for axis in (1.0, None, "0", True, [0, 1]):
    each(WITH_AXIS, f"axis={axis!r}", TypeError, r"axis must be an int", axis=axis)
# a tuple of axes (the vector operators); X is 2-D
each(WITH_AXIS, "axis=()", ValueError, r"axis=\(\) is an empty tuple: give at least one axis", axis=())
each(WITH_AXIS, "axis=(1, -1)", ValueError, r"axis=\(1, -1\) names axis 1 twice", axis=(1, -1))
each(WITH_AXIS, "axis=(0, 2)", ValueError, r"axis=\(0, 2\): 2 is out of range \[-2, 1\] for an array with 2 dimension", axis=(0, 2))
each(WITH_AXIS, "axis=(0, 1.0)", TypeError, r"axis must be an int or a tuple of ints, got an entry of type float", axis=(0, 1.0))
each(WITH_AXIS, "axis=(0, True)", TypeError, r"axis must be an int or a tuple of ints, got an entry of type bool", axis=(0, True))
each(WITH_AXIS, "empty-axis-in-tuple", ValueError, r"x has an empty axis 1 \(length 0\)", x=np.ones((3, 0)), axis=(0, 1))
ONE_AXIS = {
    "isotonic_regression": lambda **kw: rankops.isotonic_regression(X, **kw),
    "kendall_kernel": lambda **kw: rankops.kendall_kernel(X, **kw),
    "mallows_kernel": lambda **kw: rankops.mallows_kernel(X, **kw),
    "sort_with": lambda **kw: rankops.sort_with(X[..., None], X, **kw),
    **{f"losses.{f}": (lambda f=f, **kw: getattr(rankops.losses, f)(X, X, **kw))
       for f in ("spearman_loss", "soft_spearman", "kendall_loss", "ndcg_loss", "permutation_loss")},
    "losses.topk_loss": lambda **kw: rankops.losses.topk_loss(X, np.array([0, 1]), 1, **kw),
    "losses.topk_cross_entropy": lambda **kw: rankops.losses.topk_cross_entropy(X, np.array([0, 1]), [1.0], **kw),
    "losses.quantile_loss": lambda **kw: rankops.losses.quantile_loss(X, X, 0.5, **kw),
    "losses.pinball_loss": lambda **kw: rankops.losses.pinball_loss(X, X, 0.5, **kw),
}
for name, call in ONE_AXIS.items():
    case(f"{name}-axis-tuple", lambda call=call: call(axis=(0, 1)), TypeError,
         rf"{name} works along one axis: axis must be an int, got the tuple \(0, 1\)")

# -- softness (every method, the Sinkhorn operators, the matrices; docs/softness.md) ----------------
SOFTENED = {
    **{f"soft_{kind}[{m}]": (lambda x, f=f, m=m, **kw: f(x, method=m, **kw))
       for kind, f in (("rank", rankops.soft_rank), ("sort", rankops.soft_sort))
       for m in ("sinkhorn", "softsort", "neuralsort", "permutahedron", "lapsum", "diffsort")},
    "soft_topk_mask[sinkhorn]": lambda x, **kw: rankops.soft_topk_mask(x, 1, **kw),
    "soft_topk_mask[lapsum]": lambda x, **kw: rankops.soft_topk_mask(x, 1.5, method="lapsum", **kw),
    "soft_cdf": rankops.soft_cdf,
    "soft_quantile": lambda x, **kw: rankops.soft_quantile(x, 0.5, **kw),
    "soft_quantile_normalize": lambda x, **kw: rankops.soft_quantile_normalize(x, np.linspace(0.0, 1.0, 4), **kw),
    "soft_quantize": lambda x, **kw: rankops.soft_quantize(x, 2, **kw),
    "sort_with": lambda x, **kw: rankops.sort_with(x[..., None], x, **kw),
    "softsort": rankops.softsort,
    "neuralsort": rankops.neuralsort,
    "diffsort": rankops.diffsort,
}
_NATIVE = {"sinkhorn": "epsilon", "softsort": "tau", "neuralsort": "tau", "permutahedron": "strength", "lapsum": "alpha",
           "diffsort": "steepness"}
for value in (0.0, -1.0, float("nan"), float("inf")):
    each(SOFTENED, f"softness={value}", ValueError, r"softness must be a finite number > 0", softness=value)
each(SOFTENED, "softness-str", TypeError, r"softness must be a positive real number", softness="1")
each(SOFTENED, "softness-shape", ValueError, r"softness must be a scalar or a 0-d array, got shape \(2,\)", softness=np.ones(2))
for name in SOFTENED:
    native = next((t for m, t in _NATIVE.items() if m in name), "epsilon")
    case(f"{name}-softness-and-{native}", lambda op=SOFTENED[name], t=native: op(X, softness=1.0, **{t: 0.5}), ValueError,
         rf"pass softness= or {native}=, not both")
case("softsort-softness-power", lambda: rankops.softsort(X, softness=1.0, power=1.5), ValueError,
     r"softness is calibrated for SoftSort's power 1 and 2 \(numbers\), got power=1.5; pass tau= instead")
case("soft_rank[softsort]-softness-array-power", lambda: rankops.soft_rank(X, method="softsort", softness=1.0, power=np.asarray(2.0)),
     ValueError, r"softness is calibrated for SoftSort's power 1 and 2")
# a peer's option name suggests rankops' (torchsort, OTT-JAX, SoftJAX, diffsort, NumPy)
for peer, hint in (("regularization_strength", r"method='permutahedron', strength="), ("temperature", r"softness="),
                   ("threshold", r"tol="), ("dim", r"axis="), ("max_iterations", r"max_iter=")):
    case(f"soft_rank-peer-{peer}", lambda p=peer: rankops.soft_rank(X, **{p: 1}), TypeError, rf"for '{peer}' pass {hint}")

# -- tau, power, descending, hard, block (SoftSort / NeuralSort) ----------------------------------
for tau in (0.0, -1.0, float("nan"), float("inf")):
    each(PERMUTATION, f"tau={tau}", ValueError, r"tau must be a finite number > 0", tau=tau)
for tau in ("1", True, [1.0]):  # None: not given (the matrices' signature default)
    each(PERMUTATION, f"tau={tau!r}", TypeError, r"tau must be a positive real number", tau=tau)
each(PERMUTATION, "tau-shape", ValueError, r"tau must be a scalar or a 0-d array, got shape \(2,\)", tau=np.array([0.5, 0.5]))
for power in (0, -2.0, float("nan")):
    for name in ("softsort", "soft_rank[softsort]", "soft_sort[softsort]"):
        case(f"{name}-power={power}", lambda op=PERMUTATION[name], p=power: op(X, power=p), ValueError, r"power must be a finite number > 0")
each(PERMUTATION, "descending", TypeError, r"descending must be True or False", descending="yes")
each(PERMUTATION, "hard", TypeError, r"hard must be True or False", hard=1)
for block, exc, match in ((0, ValueError, r"block must be >= 1"), (-3, ValueError, r"block must be >= 1"),
                          (1.5, TypeError, r"block must be an int >= 1"), (True, TypeError, r"block must be an int >= 1"),
                          ("full", ValueError, r"block must be 'auto', None or an int >= 1")):
    each({k: v for k, v in PERMUTATION.items() if k.startswith("soft_")}, f"block={block!r}", exc, match, block=block)
for fn in ("soft_sort", "soft_rank"):
    case(f"{fn}-method", lambda f=getattr(rankops, fn): f(X, method="bitonic"), ValueError,
         r"method must be one of 'sinkhorn', 'softsort', 'neuralsort', 'permutahedron', 'lapsum', 'diffsort', got 'bitonic'")
    case(f"{fn}[softsort]-epsilon", lambda f=getattr(rankops, fn): f(X, method="softsort", epsilon=0.1), TypeError,
         r"unexpected option\(s\) 'epsilon'; it accepts 'block', 'hard', 'power', 'softness', 'tau'")
    case(f"{fn}[neuralsort]-power", lambda f=getattr(rankops, fn): f(X, method="neuralsort", power=2), TypeError,
         r"unexpected option\(s\) 'power'; it accepts 'block', 'hard', 'softness', 'tau'")
    for method in ("softsort", "neuralsort"):
        case(f"{fn}[{method}]-return_info", lambda f=getattr(rankops, fn), m=method: f(X, method=m, return_info=True),
             TypeError, r"unexpected option\(s\) 'return_info'")
    case(f"{fn}[sinkhorn]-block", lambda f=getattr(rankops, fn): f(X, block=2), TypeError, r"unexpected option\(s\) 'block'")

# -- permutahedron, LapSum, isotonic regression ------------------------------------------------------
PERMUTAHEDRON = {k: v for k, v in FAST.items() if "permutahedron" in k}
LAPSUM = {k: v for k, v in FAST.items() if "lapsum" in k}
for value in (0.0, -1.0, float("nan"), float("inf")):
    each(PERMUTAHEDRON, f"strength={value}", ValueError, r"strength must be a finite number > 0", strength=value)
    each(LAPSUM, f"alpha={value}", ValueError, r"alpha must be a finite number > 0", alpha=value)
each(PERMUTAHEDRON, "strength-shape", ValueError, r"strength must be a scalar or a 0-d array, got shape \(2,\)", strength=np.ones(2))
each(LAPSUM, "alpha-shape", ValueError, r"alpha must be a scalar or a 0-d array, got shape \(2,\)", alpha=np.ones(2))
for ops, name in ((PERMUTAHEDRON, "strength"), (LAPSUM, "alpha")):
    for label, op in ops.items():
        case(f"{label}-{name}-dask-array", lambda op=op, name=name: op(_dask().from_array(X), **{name: _dask().from_array(np.asarray(0.5))}),
             TypeError, rf"{name} must be Python numbers for Dask inputs, not arrays")
each(LAPSUM, "alpha-str", TypeError, r"alpha must be a positive real number", alpha="1")
each(PERMUTAHEDRON, "regularization", ValueError, r"regularization must be one of 'l2', 'kl', 'lp', got 'entropy'", regularization="entropy")
each(PERMUTAHEDRON, "tau", TypeError, r"unexpected option\(s\) 'tau'; it accepts 'p', 'regularization', 'softness', 'strength'", tau=0.1)
# the p-norm regularizer (Sander et al. 2023): p in (1, 2], only with regularization="lp", strength not softness
_LP = {**PERMUTAHEDRON,
       "soft_topk_mask[permutahedron]": lambda x, **kw: rankops.soft_topk_mask(x, 2, method="permutahedron", **kw)}
for value in (1.0, 0.5, 2.5, float("nan")):
    each(_LP, f"p={value}", ValueError, r"p must lie in \(1, 2\]", regularization="lp", p=value)
each(_LP, "p-str", TypeError, r"p must be a real number in \(1, 2\]", regularization="lp", p="4/3")
each(_LP, "p-without-lp", ValueError, r"p is the exponent of regularization='lp', got regularization='l2'", p=1.5)
each(_LP, "lp-softness", ValueError, r"softness is calibrated for regularization='lp' with p in \[6/5, 2\], got p=1.1: pass strength=",
     regularization="lp", p=1.1, softness=1.0)
for k in (0.0, 3.5, -1.0, float("nan")):
    case(f"soft_topk_mask[permutahedron]-k={k}", lambda k=k: rankops.soft_topk_mask(X, k, method="permutahedron"), ValueError,
         r"soft_topk_mask\(method='permutahedron'\): k must lie in the interval \(0, n\] = \(0, 3\]")
each(LAPSUM, "epsilon", TypeError, r"unexpected option\(s\) 'epsilon'; it accepts 'alpha', 'softness'", epsilon=0.1)
each({k: v for k, v in FAST.items() if k.startswith("soft_sort") or k.startswith("soft_rank")}, "descending", TypeError,
     r"descending must be True or False", descending="yes")
for k in (0.0, 3.0, -1.0, float("nan"), float("inf")):
    case(f"soft_topk_mask[lapsum]-k={k}", lambda k=k: rankops.soft_topk_mask(X, k, method="lapsum"), ValueError,
         r"soft_topk_mask\(method='lapsum'\): k must lie in the interval \(0, n\) = \(0, 3\)")
for k in ("2", None, True):
    case(f"soft_topk_mask[lapsum]-k={k!r}", lambda k=k: rankops.soft_topk_mask(X, k, method="lapsum"), TypeError,
         r"k must be a real number or an array")
case("soft_topk_mask[lapsum]-k-shape", lambda: rankops.soft_topk_mask(X, np.ones(3), method="lapsum"), ValueError,
     r"k must be a number or an array of the batch shape \(2,\) \(x without axis\), got shape \(3,\)")
case("soft_topk_mask[lapsum]-k-namespace", lambda: rankops.soft_topk_mask(X, _torch().ones(2), method="lapsum"), TypeError,
     r"arrays from different namespaces cannot be mixed \(x: .*, k: ")
for k in (0.0, 3.5, float("nan")):
    case(f"soft_topk_magnitude-k={k}", lambda k=k: rankops.soft_topk_magnitude(X, k), ValueError,
         r"soft_topk_magnitude: k must lie in the interval \(0, n\] = \(0, 3\]")
case("soft_topk_magnitude-p-without-lp", lambda: rankops.soft_topk_magnitude(X, 2, p=1.5), ValueError,
     r"soft_topk_magnitude: p is the exponent of regularization='lp', got regularization='l2'")
case("soft_topk_magnitude-kl", lambda: rankops.soft_topk_magnitude(X, 2, regularization="kl"), ValueError,
     r"regularization must be one of 'l2', 'lp', got 'kl'")
case("soft_topk_magnitude-array-strength", lambda: rankops.soft_topk_magnitude(X, 2, strength=np.asarray(0.5)), TypeError,
     r"strength must be a Python number \(it sets the width of the blending band\), not an array")
case("soft_topk_magnitude-softness", lambda: rankops.soft_topk_magnitude(X, 2, softness=1.0), TypeError,
     r"soft_topk_magnitude got unexpected option\(s\) 'softness'; it accepts 'p', 'regularization', 'strength'")
case("soft_topk_mask-method", lambda: rankops.soft_topk_mask(X, 2, method="softsort"), ValueError,
     r"method must be one of 'sinkhorn', 'permutahedron', 'lapsum' for soft_topk_mask, got 'softsort'")
case("soft_topk_mask[lapsum]-return_info", lambda: rankops.soft_topk_mask(X, 1.5, method="lapsum", return_info=True), TypeError,
     r"unexpected option\(s\) 'return_info'")
# -- sorting networks ------------------------------------------------------------------------------------
NETWORKS = {**{f"soft_{kind}[diffsort]": (lambda x, f=f, **kw: f(x, method="diffsort", **kw))
               for kind, f in (("sort", rankops.soft_sort), ("rank", rankops.soft_rank))},
            "diffsort": rankops.diffsort}
each(NETWORKS, "network", ValueError, r"network must be one of 'odd_even', 'bitonic', got 'bubble'", network="bubble")
each(NETWORKS, "distribution", ValueError, r"distribution must be one of 'cauchy', 'reciprocal', 'optimal', 'logistic', 'logistic_phi', "
     r"'gaussian', got 'laplace'", distribution="laplace")
for value in (0.0, -1.0, float("nan"), float("inf")):
    each(NETWORKS, f"steepness={value}", ValueError, r"steepness must be a finite number > 0", steepness=value)
each(NETWORKS, "steepness-shape", ValueError, r"steepness must be a scalar or a 0-d array, got shape \(2,\)", steepness=np.ones(2))
each(NETWORKS, "steepness-logistic_phi-array", TypeError, r"steepness must be a Python number with distribution='logistic_phi', not an array",
     distribution="logistic_phi", steepness=np.asarray(1.0))
for label, op in NETWORKS.items():
    case(f"{label}-steepness-dask-array", lambda op=op: op(_dask().from_array(X), steepness=_dask().from_array(np.asarray(2.0))),
         TypeError, r"steepness must be Python numbers for Dask inputs, not arrays")
for value in (-0.5, float("nan"), float("inf")):
    each(NETWORKS, f"art_lambda={value}", ValueError, r"art_lambda must be a finite number >= 0", art_lambda=value)
each(NETWORKS, "art_lambda-str", TypeError, r"art_lambda must be a real number >= 0", art_lambda="0.25")
each(NETWORKS, "descending", TypeError, r"descending must be True or False", descending=1)
each({k: v for k, v in NETWORKS.items() if k.startswith("soft_")}, "tau", TypeError,
     r"unexpected option\(s\) 'tau'; it accepts 'art_lambda', 'distribution', 'network', 'softness', 'steepness'", tau=0.1)
case("diffsort-axis", lambda: rankops.diffsort(X, axis=0), TypeError, r"unexpected keyword argument 'axis'")

ISO = rankops.isotonic_regression
case("isotonic_regression-increasing", lambda: ISO(X, increasing=1), TypeError, r"increasing must be True or False")
case("isotonic_regression-weights-shape", lambda: ISO(X, weights=np.ones(2)), ValueError,
     r"weights must have the shape of y \(2, 3\) or \(3,\), got \(2,\)")
case("isotonic_regression-weights-list", lambda: ISO(X, weights=[1.0, 1.0, 1.0]), TypeError, r"weights must be an array")
case("isotonic_regression-weights-namespace", lambda: ISO(X, weights=_torch().ones(3)), TypeError,
     r"arrays from different namespaces cannot be mixed \(y: .*, weights: ")
case("isotonic_regression-weights-complex", lambda: ISO(X, weights=np.ones(3, complex)), TypeError, r"weights must be a real array")
case("isotonic_regression-options", lambda: ISO(X, tau=0.1), TypeError, r"unexpected keyword argument 'tau'")

# -- kernels on permutations, the smooth Kendall tau, losses -----------------------------------------
SKT = rankops.soft_kendall_tau
case("soft_kendall_tau-tau", lambda: SKT(X, X, tau=0.0), ValueError, r"tau must be")
case("soft_kendall_tau-tau-array", lambda: SKT(X, X, tau=np.asarray(0.1)), TypeError, r"tau must be a Python number")
case("soft_kendall_tau-shapes", lambda: SKT(X, np.ones((2, 4))), ValueError, r"x \(2, 3\) and y \(2, 4\) must have broadcastable shapes")
case("soft_kendall_tau-namespace", lambda: SKT(X, _torch().ones(2, 3)), TypeError, r"arrays from different namespaces cannot be mixed")
case("soft_kendall_tau-list", lambda: SKT(X, [[1.0, 2.0, 3.0]] * 2), TypeError, r"y")
case("soft_kendall_tau-axis", lambda: SKT(X, X, axis=2), ValueError, r"axis")
case("kendall_kernel-1d", lambda: rankops.kendall_kernel(np.ones(3)), ValueError, r"x must have at least 2 dimensions")
case("kendall_kernel-entries", lambda: rankops.kendall_kernel(X, np.ones((2, 4))), ValueError, r"x and y must have as many entries")
case("kendall_kernel-algorithm", lambda: rankops.kendall_kernel(X, algorithm="quick"), ValueError, r"algorithm must be one of")
case("mallows_kernel-lam", lambda: rankops.mallows_kernel(X, lam=-0.5), ValueError, r"lam must be a finite number >= 0")
case("suquan_targets-range", lambda: rankops.suquan_targets(np.zeros(3), low=1.0, high=0.0), ValueError, r"low < high")
case("suquan_targets-int", lambda: rankops.suquan_targets(np.zeros(3, dtype=int)), TypeError, r"h must be a real floating array")
case("spearman_loss-shapes", lambda: rankops.losses.spearman_loss(X, X[:, :2]), ValueError, r"must have the same shape")
case("topk_loss-k", lambda: rankops.losses.topk_loss(X, np.array([0, 1]), 4), ValueError, r"k must be an int in \[1, n = 3\]")
case("topk_loss-labels", lambda: rankops.losses.topk_loss(X, np.array([0.0, 1.0]), 1), TypeError, r"labels must be an integer array")
LS = rankops.losses
case("soft_spearman-shapes", lambda: LS.soft_spearman(X, X[:1]), ValueError, r"x \(2, 3\) and y \(1, 3\) must have the same shape")
case("kendall_loss-list", lambda: LS.kendall_loss(X, [[1.0, 2.0, 3.0]] * 2), TypeError, r"target must be an array")
case("kendall_loss-namespace", lambda: LS.kendall_loss(X, _torch().ones(2, 3)), TypeError, r"arrays from different namespaces")
case("ndcg_loss-k", lambda: LS.ndcg_loss(X, X, 0), ValueError, r"k must be an int in \[1, n = 3\]")
case("ndcg_loss-gain", lambda: LS.ndcg_loss(X, X, gain="log"), ValueError, r"gain must be 'exp' or 'linear'")
case("ndcg_loss-mask-dtype", lambda: LS.ndcg_loss(X, X, mask=np.ones((2, 3))), TypeError, r"mask must be a bool array")
case("ndcg_loss-mask-shape", lambda: LS.ndcg_loss(X, X, mask=np.ones(2, bool)), ValueError, r"mask of shape \(2,\) does not broadcast to \(2, 3\)")
case("permutation_loss-method", lambda: LS.permutation_loss(X, X, method="lapsum"), ValueError, r"needs a relaxed permutation matrix")
case("permutation_loss-squash", lambda: LS.permutation_loss(X, X, method="sinkhorn", squash="erf"), ValueError, r"squash must be one of")
case("quantile_loss-q", lambda: LS.quantile_loss(X, X, 1.5), ValueError, r"q must be a number in \[0, 1\]")
case("quantile_loss-method", lambda: LS.quantile_loss(X, X, 0.5, method="bogus"), ValueError, r"method")
case("pinball_loss-q", lambda: LS.pinball_loss(X, X, -0.1), ValueError, r"q must be a number in \[0, 1\]")

# -- stochastic relaxations -------------------------------------------------------------------------
for name in ("softsort", "neuralsort"):
    fn = PERMUTATION[name]
    case(f"{name}-key-without-stochastic", lambda fn=fn: fn(X, key=0), ValueError, r"key .*stochastic=True")
    case(f"{name}-n_samples-without-stochastic", lambda fn=fn: fn(X, n_samples=3), ValueError, r"n_samples .*stochastic=True")
    case(f"{name}-n_samples=0", lambda fn=fn: fn(X, stochastic=True, n_samples=0), ValueError, r"n_samples must be >= 1")
    case(f"{name}-n_samples=2.0", lambda fn=fn: fn(X, stochastic=True, n_samples=2.0), TypeError, r"n_samples must be an int >= 1")
    case(f"{name}-stochastic", lambda fn=fn: fn(X, stochastic=1), TypeError, r"stochastic must be True or False")
    case(f"{name}-key-type", lambda fn=fn: fn(X, stochastic=True, key="seed"), TypeError,
         r"key must be None, an int seed or a numpy.random.Generator")
case("softsort-jax-no-key", lambda: rankops.softsort(pytest.importorskip("jax.numpy").asarray(X), stochastic=True),
     ValueError, r"key is required for JAX arrays")
case("softsort-torch-key", lambda: rankops.softsort(_torch().asarray(X), stochastic=True, key=np.random.default_rng(0)),
     TypeError, r"key must be None, an int seed or a torch.Generator")

# -- Sinkhorn options ---------------------------------------------------------------------------------
SOLVING = {**SINKHORN, **SORT_WITH, **SOLVER}
for eps in (0.0, -0.1, float("nan"), float("inf")):
    each(SOLVING, f"epsilon={eps}", ValueError, r"epsilon must be a finite number > 0", epsilon=eps)
each(SOLVING, "max_iter=0", ValueError, r"max_iter must be >= 1", max_iter=0)
each(SOLVING, "max_iter=10.0", TypeError, r"max_iter must be an int >= 1", max_iter=10.0)
each(SOLVING, "tol=0", ValueError, r"tol must be a finite number > 0", tol=0.0)
each(SOLVING, "tol-array", TypeError, r"tol must be a Python number, not an array", tol=np.asarray(1e-3))
each(SOLVING, "implicit", TypeError, r"implicit must be True or False", implicit="yes")
case("sinkhorn-no-epsilon", lambda: rankops.sinkhorn(np.ones((2, 3, 4))), TypeError, "epsilon")
TRANSPORT = {**SINKHORN, **SORT_WITH}
each(TRANSPORT, "squash", ValueError, r"squash must be one of 'sigmoid', 'arctan', 'minmax', None, got 'tanh'", squash="tanh")
each(TRANSPORT, "power=0", ValueError, r"power must be a finite number > 0", power=0)
each(TRANSPORT, "power-array", TypeError, r"power must be a Python number for the Sinkhorn operators", power=np.asarray(2.0))
each(TRANSPORT, "tau", TypeError, r"unexpected option\(s\) 'tau'", tau=0.1)
each(TRANSPORT, "return_info", TypeError, r"return_info must be True or False", return_info=1)
for name in ("soft_rank[sinkhorn]", "soft_sort[sinkhorn]", "soft_cdf", "sort_with"):
    op = TRANSPORT[name]
    case(f"{name}-num_targets=0", lambda op=op: op(X, num_targets=0), ValueError, r"num_targets must be >= 1")
    case(f"{name}-target_weights-2d", lambda op=op: op(X, target_weights=np.ones((2, 2)) / 4), ValueError,
         r"target_weights must be a 1-D array, got shape \(2, 2\)")
    case(f"{name}-target_weights-length", lambda op=op: op(X, num_targets=4, target_weights=np.ones(3) / 3), ValueError,
         r"target_weights has length 3 but 4 targets are used")
    case(f"{name}-target_weights-namespace", lambda op=op: op(X, target_weights=_torch().ones(3) / 3), TypeError,
         r"arrays from different namespaces cannot be mixed \(x: .*, target_weights: ")
for q in (-0.1, 1.5, float("nan")):
    case(f"soft_quantile-q={q}", lambda q=q: rankops.soft_quantile(X, q), ValueError, r"q must lie in \[0, 1\]")
for q in ("0.5", [0.5], None, True):
    case(f"soft_quantile-q={q!r}", lambda q=q: rankops.soft_quantile(X, q), TypeError,
         r"q must be a Python float or a 1-D array of levels")
case("soft_quantile-q-2d", lambda: rankops.soft_quantile(X, np.ones((2, 2)) / 2), ValueError, r"q must be a 1-D array, got shape \(2, 2\)")
case("soft_quantile-q-namespace", lambda: rankops.soft_quantile(X, _torch().asarray([0.5])), TypeError,
     r"arrays from different namespaces cannot be mixed \(x: .*, q: ")
for filler in (0.0, 1.0, 2.0):
    case(f"soft_quantile-filler={filler}", lambda f=filler: rankops.soft_quantile(X, 0.5, filler=f), ValueError,
         r"filler must be a (finite )?number (in \(0, 1\)|> 0)")
for k, error, message in ((0, ValueError, r"topk must be >= 1, got 0"), (4, ValueError, r"topk must lie in \[1, n\] = \[1, 3\], got 4"),
                          (1.5, TypeError, r"topk must be an int >= 1, got float"), ("2", TypeError, r"topk must be an int >= 1, got str")):
    case(f"soft_sort-topk={k!r}", lambda k=k: rankops.soft_sort(X, topk=k), error, message)
# input weights: the Sinkhorn ranks, sorts, CDF, quantiles and quantile normalization
WEIGHTED = {k: v for k, v in SINKHORN.items() if k != "soft_topk_mask"}
each(WEIGHTED, "weights-shape", ValueError, r"weights must have the shape of x \(2, 3\) or \(3,\), got \(2,\)", weights=np.ones(2))
each(WEIGHTED, "weights-complex", TypeError, r"weights must be a real array, got dtype complex128", weights=np.ones(3, complex))
for name, op in WEIGHTED.items():
    case(f"{name}-weights-namespace", lambda op=op: op(X, weights=_torch().ones(3)), TypeError,
         r"arrays from different namespaces cannot be mixed \(x: .*, weights: ")
for name in ("soft_topk_mask", "soft_rank[softsort]", "soft_sort[permutahedron]", "soft_quantize"):
    op = {**SINKHORN, **PERMUTATION, **FAST, "soft_quantize": lambda x, **kw: rankops.soft_quantize(x, 2, **kw)}[name]
    case(f"{name}-weights", lambda op=op: op(X, weights=np.ones(3)), TypeError, r"unexpected option\(s\) 'weights'")
for name, value in (("num_targets", 2), ("target_weights", np.ones(2) / 2), ("weights", np.ones(3))):
    case(f"soft_sort-topk-{name}", lambda name=name, value=value: rankops.soft_sort(X, topk=2, **{name: value}), ValueError,
         rf"topk fixes the targets \(k values and one filler\); do not pass {name} with it")
case("soft_sort[softsort]-topk", lambda: rankops.soft_sort(X, topk=2, method="softsort"), TypeError, r"unexpected option\(s\) 'topk'")
case("soft_rank-topk", lambda: rankops.soft_rank(X, topk=2), TypeError, r"unexpected option\(s\) 'topk'")
case("soft_quantize-num_levels=0", lambda: rankops.soft_quantize(X, 0), ValueError, r"num_levels must be >= 1, got 0")
case("soft_quantize-num_levels=2.0", lambda: rankops.soft_quantize(X, 2.0), TypeError, r"num_levels must be an int >= 1, got float")
case("soft_quantize-tau", lambda: rankops.soft_quantize(X, 2, tau=0.1), TypeError, r"unexpected option\(s\) 'tau'")
case("soft_quantile-centered", lambda: rankops.soft_quantile(X, 0.5, centered="yes"), TypeError, r"centered must be True or False")
case("soft_quantile-num_targets", lambda: rankops.soft_quantile(X, 0.5, num_targets=3), TypeError, r"unexpected option\(s\) 'num_targets'")
for k in (0, 4, -1):
    case(f"soft_topk_mask-k={k}", lambda k=k: rankops.soft_topk_mask(X, k), ValueError, r"k must (lie in \[1, n\] = \[1, 3\]|be >= 1)")
for k in (1.0, "2", None):
    case(f"soft_topk_mask-k={k!r}", lambda k=k: rankops.soft_topk_mask(X, k), TypeError, r"k must be an int >= 1")
QN = rankops.soft_quantile_normalize
case("soft_quantile_normalize-targets-2d", lambda: QN(X, np.ones((2, 3))), ValueError, r"targets must be a 1-D array, got shape \(2, 3\)")
case("soft_quantile_normalize-targets-list", lambda: QN(X, [0.0, 1.0]), TypeError, r"targets must be a 1-D array, got list")
case("soft_quantile_normalize-targets-namespace", lambda: QN(X, _torch().ones(3)), TypeError,
     r"arrays from different namespaces cannot be mixed \(x: .*, targets: ")
case("soft_quantile_normalize-targets-empty", lambda: QN(X, np.ones(0)), ValueError, r"targets must not be empty")
case("soft_quantile_normalize-target_weights-length", lambda: QN(X, np.ones(3), target_weights=np.ones(2) / 2), ValueError,
     r"target_weights has length 2 but 3 targets are used")
case("soft_quantile_normalize-num_targets", lambda: QN(X, np.ones(3), num_targets=3), TypeError, r"unexpected option\(s\) 'num_targets'")
COST = np.ones((2, 3, 4))
case("sinkhorn-a-shape", lambda: rankops.sinkhorn(COST, np.ones(4) / 4, epsilon=0.1), ValueError, r"a must have shape \(\.\.\., 3\)")
case("sinkhorn-b-shape", lambda: rankops.sinkhorn(COST, None, np.ones(3) / 3, epsilon=0.1), ValueError, r"b must have shape \(\.\.\., 4\)")
case("sinkhorn-a-namespace", lambda: rankops.sinkhorn(COST, _torch().ones(3) / 3, epsilon=0.1), TypeError,
     r"arrays from different namespaces cannot be mixed \(cost: .*, a: ")

# -- sort_with: the vectors x, then the criterion they are sorted by ---------------------------------------
SW = rankops.sort_with
V = X[..., None]  # one feature per entry of X
case("sort_with-x-list", lambda: SW([[1.0], [2.0]], X), TypeError, r"x must be an array")
case("sort_with-criterion-list", lambda: SW(V, [3.0, 1.0, 2.0]), TypeError, r"criterion must be an array")
for label, x in (("no-features", X), ("shape", np.ones((2, 4, 1))), ("broadcast", np.ones((1, 3, 2))), ("1-d", np.ones(3))):
    case(f"sort_with-x-{label}", lambda x=x: SW(x, X), ValueError,
         rf"x must have criterion's shape \(2, 3\) followed by one or more feature axes, got shape {re.escape(str(x.shape))}")
case("sort_with-namespace", lambda: SW(_torch().asarray(V), X), TypeError, r"arrays from different namespaces cannot be mixed \(x: .*, criterion: ")
case("sort_with-device", lambda: SW(_strict().asarray(V), _strict().asarray(X, device=_strict().Device("device1"))), ValueError,
     r"criterion is on device .* but x is on .*; move them to one device")
case("sort_with-x-complex", lambda: SW(V.astype(np.complex128), X), TypeError, r"x must be real-valued; complex dtype")
case("sort_with-criterion-complex", lambda: SW(V, X.astype(np.complex128)), TypeError, r"criterion must be real-valued; complex dtype")
case("sort_with-criterion-0-d", lambda: SW(np.ones(2), np.asarray(1.0)), ValueError, r"criterion must have at least one dimension .* 0-d")
case("sort_with-empty-axis", lambda: SW(np.ones((3, 0, 2)), np.ones((3, 0))), ValueError, r"criterion has an empty axis 1 \(length 0\)")
for axis in (2, -3):
    case(f"sort_with-axis={axis}", lambda axis=axis: SW(V, X, axis=axis), ValueError,
         rf"axis={axis} is out of range \[-2, 1\] for an array with 2 dimension")
case("sort_with-axis=1.0", lambda: SW(V, X, axis=1.0), TypeError, r"axis must be an int")
case("sort_with-descending", lambda: SW(V, X, descending="yes"), TypeError, r"descending must be True or False")
for k, error, message in ((0, ValueError, r"topk must be >= 1, got 0"), (4, ValueError, r"topk must lie in \[1, n\] = \[1, 3\], got 4"),
                          (1.5, TypeError, r"topk must be an int >= 1, got float")):
    case(f"sort_with-topk={k!r}", lambda k=k: SW(V, X, topk=k), error, message)
for name, value in (("num_targets", 2), ("target_weights", np.ones(2) / 2)):
    case(f"sort_with-topk-{name}", lambda name=name, value=value: SW(V, X, topk=2, **{name: value}), ValueError,
         rf"topk fixes the targets \(k values and one filler\); do not pass {name} with it")
case("sort_with-filler", lambda: SW(V, X, filler=0.1), TypeError, r"unexpected option\(s\) 'filler'")
case("sort_with-epsilon-dask", lambda: SW(_dask().from_array(V), _dask().from_array(X), epsilon=_dask().from_array(np.asarray(0.1))),
     TypeError, r"epsilon must be Python numbers for Dask inputs, not arrays")

# -- namespaces and devices of array hyper-parameters ---------------------------------------------------
for name, op in PERMUTATION.items():
    case(f"{name}-tau-namespace", lambda op=op: op(X, tau=_torch().asarray(0.5)), TypeError,
         r"arrays from different namespaces cannot be mixed \([xs]: .*, tau: ")
    case(f"{name}-tau-device", lambda op=op: op(_strict().asarray(X), tau=_strict().asarray(0.5, device=_strict().Device("device1"))),
         ValueError, r"tau is on device .* but [xs] is on .*; move them to one device")
    case(f"{name}-tau-dask-array", lambda op=op: op(_dask().from_array(X), tau=_dask().from_array(np.asarray(0.5))), TypeError,
         r"tau must be Python numbers for Dask inputs, not arrays")

# -- rankops.vjp ------------------------------------------------------------------------------------------
case("vjp-not-an-operator", lambda: rankops.vjp(np.sort, X), TypeError, r"fun must be a rankops operator \(rankops.soft_rank, ")
case("vjp-a-loss-return_info", lambda: rankops.vjp(rankops.losses.spearman_loss, X, X, return_info=True), TypeError,
     r"spearman_loss takes no return_info")
case("vjp-a-loss-positionals", lambda: rankops.vjp(rankops.losses.listnet_loss, X, X, None, -1, 1e-10, 1), TypeError,
     r"listnet_loss takes at most \d positional arguments, got 6")
case("vjp-positionals", lambda: rankops.vjp(rankops.soft_rank, X, 1, 2), TypeError, r"soft_rank takes at most 1 positional arguments, got 3")
case("vjp-x-list", lambda: rankops.vjp(rankops.soft_rank, [1.0, 2.0]), TypeError, r"x must be an array")
case("vjp-operator-checks", lambda: rankops.vjp(rankops.soft_rank, X, tau=0.1), TypeError, r"unexpected option\(s\) 'tau'")
case("vjp-return_info", lambda: rankops.vjp(rankops.soft_rank, X, return_info=True), TypeError, r"rankops.vjp does not take return_info")
case("vjp-cotangent-shape", lambda: rankops.vjp(rankops.soft_rank, X)[1](np.ones((1, 2))), ValueError,
     r"cotangent for the output has shape \(1, 2\), expected \(2, 3\)")
case("vjp-cotangent-type", lambda: rankops.vjp(rankops.soft_rank, X)[1](None), TypeError,
     r"the cotangent must be an array shaped like the value, got NoneType")
case("vjp-sinkhorn-cotangent", lambda: rankops.vjp(rankops.sinkhorn, np.ones((3, 2)), epsilon=0.1)[1]({"plan": np.ones((3, 2))}),
     TypeError, r"the cotangent of sinkhorn must be an array \(for the plan\) or a SinkhornResult / tuple \(plan, f, g\)")


@pytest.mark.parametrize("call, exc, match", CASES)
def test_invalid_call(call, exc, match):
    with pytest.raises(exc, match=match) as info:
        call()
    assert info.type is exc  # the documented class itself, not a subclass


def _option_names() -> set[str]:
    """Every keyword an operator takes: its keyword-only parameters and the fields of the option objects."""
    names = {"return_info", "target_weights"}  # read before the option objects: a flag and an array
    for fun in OPERATORS:
        names |= {p.name for p in inspect.signature(fun).parameters.values() if p.kind is p.KEYWORD_ONLY}
    for options in (TransportOptions, PermutationOptions, SolverOptions, PermutahedronOptions, LapsumOptions, NetworkOptions):
        names |= {f.name for f in dataclasses.fields(options)}
    return names


OPTIONS = sorted(_option_names())


def test_table_is_complete():
    ids = " ".join(p.id for p in CASES)
    for fun in OPERATORS:
        assert fun.__name__ in ids, fun.__name__
    for option in OPTIONS:
        assert option in ids, option


def test_checks_do_not_read_values_under_jit():
    """Validation happens at trace time on shapes and Python values only: traced hyper-parameters pass."""
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    x = jnp.asarray(X)
    calls = {
        "softsort": lambda x, t: rankops.soft_rank(x, method="softsort", tau=t, power=t),
        "neuralsort": lambda x, t: rankops.soft_sort(x, method="neuralsort", tau=t),
        "matrices": lambda x, t: rankops.softsort(x, tau=t) + rankops.neuralsort(x, tau=t),
        "sinkhorn": lambda x, t: rankops.soft_rank(x, epsilon=t) + rankops.soft_topk_mask(x, 2, epsilon=t),
        "quantiles": lambda x, t: rankops.soft_quantile(x, jnp.asarray([0.2, t]), epsilon=t),
        "solver": lambda x, t: rankops.sinkhorn(x[:, :, None] * x[:, None, :], epsilon=t).plan,
        "sort_with": lambda x, t: rankops.sort_with(x[..., None], x, topk=2, epsilon=t)[..., 0],
        "temperatures": lambda x, t: (rankops.soft_rank(x, method="permutahedron", strength=t)
                                      + rankops.soft_sort(x, method="lapsum", alpha=t)
                                      + rankops.soft_rank(x, method="diffsort", steepness=t)),
    }
    for name, f in calls.items():
        # reading a traced value raises as the call is traced: no program to compile (the values under array
        # hyper-parameters are checked by tests/test_temperatures.py, test_transport.py and test_forward_mode.py)
        out = jax.make_jaxpr(f)(x, jnp.asarray(0.5)).out_avals[0]
        assert out.shape[0] == x.shape[0] and jnp.issubdtype(out.dtype, jnp.floating), name
