r"""Exact ranking metrics per list: DCG, NDCG, MRR, average precision, precision and recall at k.

Not differentiable (they read the order of the scores): the quantities the
losses of :mod:`rankops.losses` relax, for evaluation. Every metric takes
``(pred, target)`` lists along ``axis`` with ``mask=`` for padding, as the
losses do, and returns one value per list; a list with no valid entry, or a
NaN among its valid scores or labels, is NaN. An item is relevant when its
label is > 0.

**Ties in the scores.** DCG, NDCG, precision and recall are linear in the
positions: a tied group's items share the mean of the positions' weights the
group spans, which is their expected value over the orders of the ties
(``sklearn.metrics.ndcg_score``'s default, McSherry & Najork 2008). MRR and
average precision count a tied group at its last position, as
``sklearn.metrics.average_precision_score`` does (one threshold per distinct
score): a tie never helps.
"""

from __future__ import annotations

import math
from typing import Any

from ._lib._adapters import get_adapter
from ._lib._compat import device as _device, index_dtype
from ._lib._docs import fill_doc
from ._lib._numerics import safe_divide
from .losses._lists import check_cutoff, check_gain, count as check_count, discounts, gains, ideal_dcg, lists, per_list
from .losses._ranking_docs import LIST_ARGS, list_returns

__all__ = ["dcg", "ndcg", "mrr", "average_precision", "precision_at_k", "recall_at_k"]


def _ranked(side: str) -> Any:
    """Row function: ``#{valid j: s_j >= s_i}`` (``side="left"``) or ``#{valid j: s_j > s_i}`` (``"right"``)."""

    def count(xp: Any, s: Any, valid: Any) -> Any:
        ok = valid > 0
        # the valid scores ascending, the padding after them all (+inf never counts as below a score)
        adapter = get_adapter(xp)
        key = adapter.sort(xp, xp.where(ok, s, xp.full_like(s, math.inf)))
        n_valid = xp.sum(valid, axis=-1, keepdims=True)
        below = xp.astype(adapter.searchsorted(xp, key, s, side=side), s.dtype)
        return n_valid - xp.minimum(below, n_valid)

    return count


def _upto(xp: Any, s: Any, valid: Any) -> Any:
    """The valid scores at least as high as each entry's (its own included): a tied group's last position."""
    return get_adapter(xp).rows(xp, _ranked("left"), s, xp.astype(valid, s.dtype), dtype=s.dtype)


def _tied_span(xp: Any, s: Any, valid: Any) -> tuple[Any, Any]:
    """``(ahead, upto)``: the valid scores above each entry's, and those at least as high (its own included)."""
    ahead = get_adapter(xp).rows(xp, _ranked("right"), s, xp.astype(valid, s.dtype), dtype=s.dtype)
    return ahead, _upto(xp, s, valid)


def _cumulative(xp: Any, weight: Any, index: Any) -> Any:
    """``sum_{p <= index} weight_p`` (positions from 1; ``weight`` shape (n,)) at each entry of ``index`` (integral floats)."""
    running = get_adapter(xp).cumulative_sum(xp, weight)
    total = xp.concat([xp.zeros((1,), dtype=weight.dtype, device=_device(weight)), running])
    flat = xp.reshape(xp.astype(index, index_dtype(xp, _device(index))), (-1,))
    return xp.reshape(xp.take(total, flat), tuple(index.shape))


def _spread(xp: Any, weight: Any, ahead: Any, upto: Any) -> Any:
    """Each entry's mean of the position weights its tied group spans: ``(W(upto) - W(ahead)) / (upto - ahead)``."""
    span = xp.maximum(upto - ahead, xp.ones_like(upto))
    return (_cumulative(xp, weight, upto) - _cumulative(xp, weight, ahead)) / span


def _within(xp: Any, n: int, k: int, like: Any) -> Any:
    """1 at the first k of n positions, 0 after: precision's and recall's position weights."""
    return xp.astype(xp.arange(n, device=_device(like)) < k, like.dtype)


def _dcg(xp: Any, s: Any, t: Any, valid: Any, k: int | None, powered: bool) -> Any:
    ahead, upto = _tied_span(xp, s, valid)
    g = xp.where(valid, gains(xp, t, powered), xp.zeros_like(t))
    return xp.sum(g * _spread(xp, discounts(xp, s.shape[-1], k, s), ahead, upto), axis=-1)


GAIN = """
gain : {"exp", "linear"}, default "exp"
    Gains ``2^t - 1`` (allRank's) or ``t`` (scikit-learn's).
"""
CUTOFF = """
k : int, optional
    The cut-off: the first k positions (None: the whole list).
"""


@fill_doc(list_args=LIST_ARGS, gain=GAIN, cutoff=CUTOFF, returns=list_returns("values >= 0 for labels >= 0", "rankops.metrics"))
def dcg(pred: Any, target: Any, /, k: int | None = None, *, gain: str = "exp", mask: Any = None, axis: int = -1) -> Any:
    r"""Discounted cumulative gain at k: ``sum_{i <= k} g(t_(i)) / log2(1 + i)``, items in decreasing ``pred``.

    Parameters
    ----------
    %(list_args)s
    %(cutoff)s
    %(gain)s
    %(returns)s
    >>> round(float(rankops.metrics.dcg(np.array([0.9, 0.1, 0.5]), np.array([1.0, 0.0, 2.0]))), 6)   # 1 + 3 / log2(3)
    2.892789
    """
    powered = check_gain(gain)
    xp, s, t, valid = lists("metrics.dcg", pred, target, mask, axis, finite="labels")
    return per_list(xp, _dcg(xp, s, t, valid, check_cutoff(s.shape[-1], k), powered), valid)


@fill_doc(list_args=LIST_ARGS, gain=GAIN, cutoff=CUTOFF, returns=list_returns("values in [0, 1] for labels >= 0", "rankops.metrics"))
def ndcg(pred: Any, target: Any, /, k: int | None = None, *, gain: str = "exp", filler_value: float = 0.0, mask: Any = None,
         axis: int = -1) -> Any:
    r"""Normalised DCG at k: ``DCG@k / IDCG@k``, IDCG the DCG of the labels in their best order (Jarvelin & Kekalainen 2002).

    With ``gain="linear"`` it equals ``sklearn.metrics.ndcg_score`` per
    list (ties included); with the default powered gains, allRank's
    ``ndcg`` on lists without tied scores.

    Parameters
    ----------
    %(list_args)s
    %(cutoff)s
    %(gain)s
    filler_value : float, default 0.0
        The value of a list without a relevant item (IDCG = 0): 0 as
        scikit-learn, 1 as allRank.
    %(returns)s
    >>> round(float(rankops.metrics.ndcg(np.array([0.9, 0.1, 0.5]), np.array([1.0, 0.0, 2.0]))), 6)
    0.796708
    """
    powered = check_gain(gain)
    xp, s, t, valid = lists("metrics.ndcg", pred, target, mask, axis, finite="labels")
    k = check_cutoff(s.shape[-1], k)
    idcg = ideal_dcg(xp, xp.where(valid, gains(xp, t, powered), xp.zeros_like(t)), valid, k)
    value = safe_divide(xp, _dcg(xp, s, t, valid, k, powered), idcg, float(filler_value))
    return per_list(xp, value, valid)


def _hits(where: str, pred: Any, target: Any, mask: Any, axis: int) -> tuple[Any, Any, Any, Any, Any]:
    xp, s, t, valid = lists(where, pred, target, mask, axis, finite="labels")
    return xp, s, t, valid, valid & (t > 0)


def _top(xp: Any, s: Any, relevant: Any, valid: Any, k: int) -> Any:
    """The expected number of relevant items among the first k positions (ties spread evenly)."""
    ahead, upto = _tied_span(xp, s, valid)
    inside = _spread(xp, _within(xp, s.shape[-1], k, s), ahead, upto)
    return xp.sum(xp.where(relevant, inside, xp.zeros_like(inside)), axis=-1)


@fill_doc(list_args=LIST_ARGS, returns=list_returns("values in [0, 1]", "rankops.metrics"))
def precision_at_k(pred: Any, target: Any, /, k: int, *, mask: Any = None, axis: int = -1) -> Any:
    r"""The share of relevant items among the first k: ``#{relevant in the top k} / k``.

    Parameters
    ----------
    %(list_args)s
    k : int
        The cut-off, >= 1 (a list shorter than k still divides by k).
    %(returns)s
    >>> float(rankops.metrics.precision_at_k(np.array([0.9, 0.1, 0.5]), np.array([1.0, 0.0, 2.0]), 2))
    1.0
    """
    xp, s, t, valid, relevant = _hits("metrics.precision_at_k", pred, target, mask, axis)
    k = check_count("k", k)
    return per_list(xp, _top(xp, s, relevant, valid, k) / k, valid)


@fill_doc(list_args=LIST_ARGS, returns=list_returns("values in [0, 1]; 0 for a list without a relevant item", "rankops.metrics"))
def recall_at_k(pred: Any, target: Any, /, k: int, *, mask: Any = None, axis: int = -1) -> Any:
    r"""The share of the relevant items found among the first k: ``#{relevant in the top k} / #{relevant}``.

    Parameters
    ----------
    %(list_args)s
    k : int
        The cut-off, >= 1.
    %(returns)s
    >>> float(rankops.metrics.recall_at_k(np.array([0.9, 0.1, 0.5]), np.array([1.0, 0.0, 2.0]), 1))
    0.5
    """
    xp, s, t, valid, relevant = _hits("metrics.recall_at_k", pred, target, mask, axis)
    k = check_count("k", k)
    count = xp.sum(xp.astype(relevant, s.dtype), axis=-1)
    value = safe_divide(xp, _top(xp, s, relevant, valid, k), count)
    return per_list(xp, value, valid)


@fill_doc(list_args=LIST_ARGS, cutoff=CUTOFF, returns=list_returns("values in [0, 1]; 0 for a list without a relevant item", "rankops.metrics"))
def mrr(pred: Any, target: Any, /, k: int | None = None, *, mask: Any = None, axis: int = -1) -> Any:
    r"""Reciprocal rank of the first relevant item: ``1 / rank`` when that rank is at most k, else 0.

    A tied group counts at its last position. Averaged over lists, the mean
    reciprocal rank (Voorhees 1999).

    Parameters
    ----------
    %(list_args)s
    %(cutoff)s
    %(returns)s
    >>> float(rankops.metrics.mrr(np.array([0.9, 0.1, 0.5]), np.array([0.0, 0.0, 2.0])))
    0.5
    """
    xp, s, t, valid, relevant = _hits("metrics.mrr", pred, target, mask, axis)
    n = s.shape[-1]
    k = check_cutoff(n, k)
    upto = _upto(xp, s, valid)
    first = xp.min(xp.where(relevant, upto, xp.full_like(upto, math.inf)), axis=-1)
    hit = xp.isfinite(first) if k is None else first <= k
    value = xp.where(hit, 1 / xp.where(xp.isfinite(first), first, xp.ones_like(first)), xp.zeros_like(first))
    return per_list(xp, value, valid)


@fill_doc(list_args=LIST_ARGS, returns=list_returns("values in [0, 1]; 0 for a list without a relevant item", "rankops.metrics"))
def average_precision(pred: Any, target: Any, /, *, mask: Any = None, axis: int = -1) -> Any:
    r"""Average precision: the mean over the relevant items of the precision at each one's rank.

    ``AP = (1 / |P|) sum_{i in P} #{j in P: s_j >= s_i} / #{j: s_j >= s_i}``
    (a tied group at its last position): ``sklearn.metrics.average_precision_score``
    with ``target > 0`` as the binary labels. Averaged over lists, MAP.

    Parameters
    ----------
    %(list_args)s
    %(returns)s
    >>> round(float(rankops.metrics.average_precision(np.array([0.9, 0.1, 0.5]), np.array([0.0, 1.0, 2.0]))), 6)   # (1/2 + 2/3) / 2
    0.583333
    """
    xp, s, t, valid, relevant = _hits("metrics.average_precision", pred, target, mask, axis)
    upto, upto_relevant = _upto(xp, s, valid), _upto(xp, s, relevant)
    count = xp.sum(xp.astype(relevant, s.dtype), axis=-1)
    total = xp.sum(xp.where(relevant, upto_relevant / xp.maximum(upto, xp.ones_like(upto)), xp.zeros_like(upto)), axis=-1)
    value = safe_divide(xp, total, count)
    return per_list(xp, value, valid)
