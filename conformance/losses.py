"""Property specs of the ready losses (``rankops.losses``), one per loss, for conformance/test_properties.py.

The losses are not in ``rankops._registry``, but ``rankops.vjp`` takes them:
their gradient is the backend's own autodiff (torch, JAX) or a tape of their
array operations (every other backend), checked on every backend as the
operators' are. Each loss is one value per row, so the
kinds below are checked against the documented range of that value. The
second argument (targets, relevance, labels) is data built from x's shape
only: the tied pattern 0, 1, 2, 0, ... of ``operators._partner``.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable

import array_api_compat
import numpy as np

import rankops
from rankops import losses

from .calls import as_rows, to_numpy
from .operators import Choices, Spec, _opts, _partner

STRENGTH = [1e-3, 1e-1, 1.0, 1e2]
TAU = [1e-3, 0.1, 1.0, 100.0]
LEVELS = [0.0, 0.1, 0.5, 0.9, 1.0]

# kind -> [low, high] of the loss value (None: not bounded on that side)
RANGES = {
    "loss-spearman": (0.0, 2.0), "loss-soft_spearman": (-1.0, 1.0), "loss-kendall": (0.0, 2.0),
    "loss-topk": (0.0, None), "loss-ndcg": (None, None), "loss-quantile": (0.0, None), "loss-pinball": (0.0, None),
    "loss-permutation": (0.0, None), "loss-topk_cross_entropy": (0.0, None),  # "smce" holds the cross-entropy itself: unbounded
    # learning to rank (labels >= 0: the tied pattern below); the NDCG losses are minus a normalised DCG
    "loss-listnet": (-1e-9, None), "loss-binary_listnet": (-1e-9, None),  # eps: -log(1 + eps) when p = 1
    "loss-listmle": (0.0, None), "loss-ranknet": (0.0, None),
    "loss-lambda": (0.0, None), "loss-approx_ndcg": (None, 0.0), "loss-neural_ndcg": (-1.0, 0.0), "loss-smooth_ap": (0.0, 1.0),
}
# the losses whose value is a Pearson correlation of soft ranks: NaN where one side's ranks are all equal
CORRELATIONS = ("loss-spearman", "loss-soft_spearman")


def _labels(x: Any) -> Any:
    """Label 0 for every row: an integer array of x's batch shape, in x's namespace and device."""
    xp = array_api_compat.array_namespace(x)
    return xp.zeros(tuple(x.shape[:-1]), dtype=xp.int64, device=array_api_compat.device(x))


def _spec(fun: Callable[..., Any], kind: str, params: Callable[[int], Choices], args: Callable[..., tuple]) -> Spec:
    def call(x: Any, p: dict, arr: Callable) -> tuple:
        p = dict(p)
        return fun, args(x, p), p

    return Spec(f"losses.{fun.__name__}", kind, params, call)


def _level(x: Any, p: dict) -> tuple:
    return (_partner(x), p.pop("q"))


def _topk(x: Any, p: dict) -> tuple:
    return (_labels(x), min(p.pop("k"), x.shape[-1]))


LOSS_SPECS = [
    _spec(losses.spearman_loss, "loss-spearman", lambda n: _opts(strength=STRENGTH, regularization=["l2", "kl"]),
          lambda x, p: (_partner(x),)),
    _spec(losses.soft_spearman, "loss-soft_spearman", lambda n: _opts(strength=STRENGTH, regularization=["l2", "kl"]),
          lambda x, p: (_partner(x),)),
    _spec(losses.kendall_loss, "loss-kendall", lambda n: _opts(tau=TAU), lambda x, p: (_partner(x),)),
    _spec(losses.topk_loss, "loss-topk", lambda n: _opts(k=[1, 2, n], strength=STRENGTH), _topk),
    _spec(losses.ndcg_loss, "loss-ndcg", lambda n: _opts(strength=STRENGTH), lambda x, p: (_partner(x),)),  # 0, 1, 2: graded, >= 0
    _spec(losses.quantile_loss, "loss-quantile", lambda n: _opts(q=LEVELS, epsilon=[1e-3, 1e-2, 0.1, 1.0]), _level),
    _spec(losses.pinball_loss, "loss-pinball", lambda n: _opts(q=LEVELS), _level),
    _spec(losses.permutation_loss, "loss-permutation", lambda n: _opts(tau=TAU), lambda x, p: (_partner(x),)),
    # p_k over k = 1 and 2 (P_K = [1] where a row has one class), every top-1 mode and network
    _spec(losses.topk_cross_entropy, "loss-topk_cross_entropy",
          lambda n: _opts(top1_mode=["sm", "smce", "sort"], network=["odd_even", "bitonic"], steepness=[0.1, 10.0, 1e3]),
          lambda x, p: (_labels(x), [0.5, 0.5] if x.shape[-1] > 1 else [1.0])),
    # learning to rank: graded labels 0, 1, 2, 0, ... (ties, and a list of one entry without a relevant item)
    _spec(losses.listnet_loss, "loss-listnet", lambda n: _opts(eps=[1e-10, 0.0]), lambda x, p: (_partner(x),)),
    _spec(losses.binary_listnet_loss, "loss-binary_listnet", lambda n: _opts(eps=[1e-10, 0.0]), lambda x, p: (_partner(x),)),
    _spec(losses.listmle_loss, "loss-listmle", lambda n: _opts(eps=[1e-10, 0.0]), lambda x, p: (_partner(x),)),
    _spec(losses.ranknet_loss, "loss-ranknet", lambda n: _opts(weight_by_diff=[False, True], weight_by_diff_powed=[False, True]),
          lambda x, p: (_partner(x),)),
    _spec(losses.lambda_loss, "loss-lambda", lambda n: _opts(weighing_scheme=list(losses.WEIGHING_SCHEMES), k=[None, 1, 3]),
          lambda x, p: (_partner(x),)),
    _spec(losses.approx_ndcg_loss, "loss-approx_ndcg", lambda n: _opts(alpha=[1e-3, 1.0, 1e3]), lambda x, p: (_partner(x),)),
    _spec(losses.neural_ndcg_loss, "loss-neural_ndcg",
          lambda n: _opts(temperature=TAU, transposed=[False, True], k=[None, 1, 3], powered_relevancies=[True, False]),
          lambda x, p: (_partner(x),)),
    _spec(losses.smooth_ap_loss, "loss-smooth_ap", lambda n: _opts(temperature=[1e-3, 0.01, 1.0]), lambda x, p: (_partner(x),)),
]


def check_loss_row(kind: str, out: np.ndarray, tol: float) -> None:
    """The documented range of one finite row's loss value."""
    low, high = RANGES[kind]
    scale = max(1.0, float(np.max(np.abs(out))))
    if low is not None:
        assert np.all(out >= low - tol * scale), out
    if high is not None:
        assert np.all(out <= high + tol * scale), out


def no_correlation(backend: Any, x: Any, spec: Spec, p: dict) -> np.ndarray:
    """Per row of ``x`` (a backend array): whether one side of a correlation loss has all its ranks equal.

    The oracle of the correlation losses' NaN (documented: "as in SciPy"):
    the soft ranks of the same call, computed on the same backend, are all
    equal within the row (an exactly tied row, or a strength that pools the
    whole row), or the other side's are (its ranks: ``rankdata`` of the
    targets for ``spearman_loss``, their soft ranks for ``soft_spearman``).
    """
    batch = tuple(x.shape[:-1])
    options = {k: v for k, v in p.items() if k in ("strength", "regularization")}
    flat = np.zeros(int(np.prod(batch)), dtype=bool) | (x.shape[-1] == 1)  # one entry: nothing to correlate
    if flat.size == 0:
        return flat
    sides = [x, _partner(x)] if spec.kind == "loss-soft_spearman" else [x]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # NumPy's inf - inf in non-finite rows (not decided here)
        for side in sides:  # read back in here: Dask computes then
            ranks = as_rows(to_numpy(backend, rankops.soft_rank(side, method="permutahedron", **options)), batch)
            flat |= np.ptp(ranks, axis=-1) == 0
    return flat
