r"""Listwise learning-to-rank losses: ListNet, ListMLE, ApproxNDCG and Smooth-AP, one value per list."""

from __future__ import annotations

import math
from typing import Any

from .._lib._adapters import get_adapter
from .._lib._compat import Array
from .._lib._compat import device as _device
from .._lib._docs import fill_doc
from ..sorting import METHODS, soft_rank
from ._common import in_float32
from ._lists import gains, lists, max_dcg, number, per_list, sigmoid
from ._ranking_docs import EPS, LIST_ARGS, list_returns

__all__ = ["listnet_loss", "binary_listnet_loss", "listmle_loss", "approx_ndcg_loss", "smooth_ap_loss"]


def _over_valid(xp: Any, pair: Any, valid: Any) -> Any:
    """``sum_j pair[..., i, j]`` over the entries j flagged in ``valid``: one matrix-vector product."""
    return xp.matmul(pair, xp.astype(valid, pair.dtype)[..., None])[..., 0]


def _softmax_rows(xp: Any, z: Any) -> Any:
    return get_adapter(xp).softmax(xp, z)


def _softmax(xp: Any, z: Any) -> Any:
    """The softmax of each list, computed from whole lists (on Dask, block by block)."""
    return get_adapter(xp).rows(xp, _softmax_rows, z, dtype=z.dtype)


def _padding(xp: Any, valid: Any, dtype: Any) -> tuple[Any, Any]:
    """``(fill, some)``: what a softmax's logits hold off the valid entries (-inf: no mass; 0 in a list without a valid
    entry, which is NaN later) and the flag of the lists with a valid entry."""
    some = xp.any(valid, axis=-1, keepdims=True)
    zero = xp.zeros(tuple(some.shape), dtype=dtype, device=_device(some))
    return xp.where(some, zero - math.inf, zero), some


def _log_softmax(xp: Any, z: Any, valid: Any) -> Any:
    """``log softmax(z)`` over each list's valid entries (``valid`` 1.0 / 0.0; 0 elsewhere, never -inf: no NaN in a gradient)."""
    ok = valid > 0
    top = xp.max(xp.where(ok, z, -math.inf), axis=-1, keepdims=True)
    top = xp.where(xp.isfinite(top), top, 0.0)
    e = xp.where(ok, xp.exp(z - top), 0.0)
    total = xp.sum(e, axis=-1, keepdims=True)
    out = z - top - xp.log(xp.where(total > 0, total, 1.0))  # a list of padding only: NaN later
    return xp.where(ok, out, 0.0)


def _cross_entropy(xp: Any, q: Any, s: Any, valid: Any, eps: float, padding: tuple[Any, Any]) -> Any:
    """``-sum_i q_i log(softmax(s)_i + eps)`` over the valid entries (allRank's ListNet; eps = 0: the exact log-softmax).

    ``q`` is 0 on the padding, where ``softmax(s) + eps`` is ``eps``: no mask
    needed when eps > 0. NaN for a list of padding only.
    """
    fill, some = padding
    if eps > 0:
        loss = -xp.sum(q * xp.log(_softmax(xp, xp.where(valid, s, fill)) + eps), axis=-1)
        return xp.where(some[..., 0], loss, math.nan)
    log_p = get_adapter(xp).rows(xp, _log_softmax, xp.where(valid, s, 0.0), xp.astype(valid, s.dtype), dtype=s.dtype)
    return per_list(xp, -xp.sum(xp.where(valid, q * log_p, 0.0), axis=-1), valid)


@in_float32
@fill_doc(list_args=LIST_ARGS, eps=EPS, returns=list_returns("values >= 0 (for eps = 0)"))
def listnet_loss(pred: Array, target: Array, /, *, eps: float = 1e-10, mask: Array | None = None, axis: int = -1) -> Array:
    r"""ListNet (Cao, Qin, Liu, Tsai & Li 2007): the cross-entropy of the top-one probabilities of labels and scores.

    ``L = -sum_i softmax(t)_i log(softmax(s)_i + eps)`` over the list's
    valid entries: the listwise loss of the Plackett-Luce top-one
    probabilities, with allRank's ``eps`` (``eps = 0``: the exact
    log-softmax, computed stably).

    Parameters
    ----------
    %(list_args)s
    %(eps)s
    %(returns)s
    >>> round(float(rankops.losses.listnet_loss(np.array([1.0, 0.0]), np.array([1.0, 0.0]), eps=0)), 6)
    0.582203
    """
    eps = number("eps", eps)
    xp, s, t, valid = lists("losses.listnet_loss", pred, target, mask, axis, zeroed=False)
    padding = _padding(xp, valid, s.dtype)
    q = _softmax(xp, xp.where(valid, t, padding[0]))  # 0 on the padding
    return _cross_entropy(xp, q, s, valid, eps, padding)


@in_float32
@fill_doc(list_args=LIST_ARGS, eps=EPS, returns=list_returns("values >= 0 (for eps = 0); 0 for a list without a relevant item"))
def binary_listnet_loss(pred: Array, target: Array, /, *, eps: float = 1e-10, mask: Array | None = None, axis: int = -1) -> Array:
    r"""ListNet for binary (or nonnegative) labels: the cross-entropy of ``t / sum(t)`` and ``softmax(s)``.

    ``L = -sum_i (t_i / sum_j t_j) log(softmax(s)_i + eps)`` over the valid
    entries (allRank's ``binary_listNet``); a list whose labels sum to 0 has
    no target distribution: value 0, no gradient.

    Parameters
    ----------
    %(list_args)s
    %(eps)s
    %(returns)s
    >>> round(float(rankops.losses.binary_listnet_loss(np.array([1.0, 0.0]), np.array([1.0, 0.0]), eps=0)), 6)
    0.313262
    """
    eps = number("eps", eps)
    xp, s, t, valid = lists("losses.binary_listnet_loss", pred, target, mask, axis, zeroed=False)
    t = xp.where(valid, t, 0.0)
    total = xp.sum(t, axis=-1, keepdims=True)
    return _cross_entropy(xp, t / xp.where(total == 0, 1.0, total), s, valid, eps, _padding(xp, valid, s.dtype))


def _plackett_luce(eps: float, shuffled: bool) -> Any:
    """The per-position terms of ListMLE on whole rows: ``(s, t, valid[, shuffle])`` -> ``log(sum_{j >= i} e^{z_j} + eps) - z_i``."""

    def terms(xp: Any, s: Any, t: Any, valid: Any, *shuffle: Any) -> Any:
        adapter = get_adapter(xp)
        key = xp.where(valid > 0, t, -math.inf)  # the labels, largest first, padding last
        if shuffled:  # ties in a random order: a random permutation first, then a stable sort
            _, by_shuffle = adapter.sort_order(xp, shuffle[0])
            key, order = adapter.sort_order(xp, adapter.take(xp, key, by_shuffle), descending=True)
            order = adapter.take(xp, by_shuffle, order)
        else:
            key, order = adapter.sort_order(xp, key, descending=True)
        z, ok = adapter.take(xp, s, order), key > -math.inf
        top = xp.max(xp.where(ok, z, -math.inf), axis=-1, keepdims=True)
        if eps > 0:
            # z - top <= 0: a tail sum that underflows to 0 is below any eps a float can add it to, so the plain
            # reversed cumulative sum of exp(z - top) (allRank's) is as exact as the log-domain one, several times
            # cheaper; the padding (last) at -inf adds 0
            z = xp.where(ok, z - top, -math.inf)
            tail = xp.log(adapter.cumulative_sum(xp, xp.exp(z), reverse=True) + eps)
        else:
            # the padding far below the list's own values adds nothing and keeps the log-domain sums and their
            # gradient finite, where -inf would not (a list of padding only: NaN later)
            low = xp.min(xp.where(ok, z, math.inf), axis=-1, keepdims=True)
            z = xp.where(ok, z - top, xp.where(xp.isfinite(low - top), low - top, xp.zeros_like(low)) - 1e3)
            tail = adapter.cumlogsumexp(xp, z, reverse=True)
        return xp.where(ok, tail - z, 0.0)

    return terms


@in_float32
@fill_doc(list_args=LIST_ARGS, returns=list_returns("values >= 0 (for eps = 0)"))
def listmle_loss(pred: Array, target: Array, /, *, eps: float = 1e-10, key: Any = None, mask: Array | None = None, axis: int = -1) -> Array:
    r"""ListMLE (Xia, Liu, Wang, Zhang & Li 2008): the negative Plackett-Luce log-likelihood of the labels' order.

    With ``pi`` the order of the labels (largest first) and ``z = s - max(s)``::

        L = sum_i [ log(sum_{j >= i} exp(z_{pi(j)}) + eps) - z_{pi(i)} ]

    The inner sums are one reversed cumulative sum per list, stable at any
    scale: with ``eps = 0`` (the exact likelihood) in the log domain (a
    reversed log-cumsum-exp), with ``eps > 0`` (allRank's) of ``exp(z)``,
    ``z <= 0``, whose sums only underflow where ``eps`` dominates them. Tied labels
    have no order of their own: with ``key=None`` they keep their order in
    the list; with a ``key`` they are shuffled, as allRank shuffles them at
    every call, so that the loss averages over their orders in expectation.

    Parameters
    ----------
    %(list_args)s
    eps : float, default 1e-10
        Added inside the log, as in allRank.
    key : None, int or generator, optional
        Shuffle tied labels with this seed or generator (``torch.Generator``,
        a ``jax.random`` key, a ``numpy.random.Generator``); None: no shuffle.
    %(returns)s
    >>> round(float(rankops.losses.listmle_loss(np.array([1.0, 0.0]), np.array([1.0, 0.0]), eps=0)), 6)   # log(1 + e^-1)
    0.313262
    """
    eps = number("eps", eps)
    xp, s, t, valid = lists("losses.listmle_loss", pred, target, mask, axis)
    adapter = get_adapter(xp)
    shuffle = () if key is None else (adapter.gumbel(xp, key, tuple(s.shape), s.dtype, _device(s)),)
    terms = adapter.rows(xp, _plackett_luce(eps, key is not None), s, t, xp.astype(valid, s.dtype), *shuffle, dtype=s.dtype)
    return per_list(xp, xp.sum(terms, axis=-1), valid)


@in_float32
@fill_doc(list_args=LIST_ARGS, returns=list_returns("values in [-1, 0]; 0 for a list without a relevant item"))
def approx_ndcg_loss(pred: Array, target: Array, /, *, alpha: float = 1.0, eps: float = 1e-10, method: str = "sigmoid",
                     mask: Array | None = None, axis: int = -1, **options: Any) -> Array:
    r"""ApproxNDCG (Qin, Liu & Li 2010): minus NDCG with each item's position replaced by a smooth approximate rank.

    ``L = -sum_i G_i / log2(1 + r_i)``, ``G_i = (2^{t_i} - 1) / maxDCG``
    (labels below 0 count as 0; ``maxDCG`` at least ``eps``), with the
    logistic approximate rank of the paper (Eqs. 19-20; ``method="sigmoid"``,
    allRank's ``approxNDCGLoss``)::

        r_i = 1 + sum_{j != i} max(sigmoid(alpha (s_j - s_i)), eps)

    or the descending soft rank of any :func:`rankops.soft_rank` method
    (``method="lapsum"``, ``"permutahedron"``, ..., with ``**options``;
    ``softness=`` sets any of them, docs/softness.md): the O(n log n)
    relaxations in place of the O(n^2) pairs. No cut-off: the whole list
    counts, as in the paper and allRank.

    Parameters
    ----------
    %(list_args)s
    alpha : float, default 1.0
        The sigmoid's slope (``method="sigmoid"`` only: LapSum's own
        ``alpha`` is reached through ``softness``).
    eps : float, default 1e-10
    method : str, default "sigmoid"
        ``"sigmoid"`` or a method of :func:`rankops.soft_rank`.
    %(returns)s
    >>> pred, target = np.array([2.0, 0.0, 1.0]), np.array([1.0, 0.0, 2.0])
    >>> round(float(rankops.losses.approx_ndcg_loss(pred, target, alpha=100.0)), 6)   # -NDCG of the hard order
    -0.796708
    """
    if method != "sigmoid" and method not in METHODS:
        raise ValueError(f"method must be 'sigmoid' or one of {tuple(METHODS)}, got {method!r}")
    if method == "sigmoid" and options:
        raise TypeError(f"approx_ndcg_loss(method='sigmoid') takes no options {sorted(options)}: they are a soft_rank method's")
    if method != "sigmoid" and alpha != 1.0:
        raise ValueError(f"alpha is the slope of method='sigmoid'; with method={method!r} set the relaxation with softness= "
                         "(or the method's own options other than alpha)")
    alpha, eps = number("alpha", alpha, positive=True), number("eps", eps)
    xp, s, t, valid = lists("losses.approx_ndcg_loss", pred, target, mask, axis)
    g = gains(xp, xp.maximum(t, xp.zeros_like(t)), True)
    normaliser = max_dcg(xp, g, valid, None, eps)
    if method == "sigmoid":
        p = xp.clip(sigmoid(xp, alpha * (s[..., None, :] - s[..., :, None])), min=eps)  # [i, j]: sigmoid(alpha (s_j - s_i))
        # the sum over the valid j, less j = i (whose term is max(sigmoid(0), eps))
        r = 1 + _over_valid(xp, p, valid) - max(0.5, eps)
    else:
        r = soft_rank(s, descending=True, method=method, mask=None if mask is None else valid, **options)
        r = xp.where(valid, r, xp.ones_like(r))
    ndcg = xp.sum(xp.where(valid, g / xp.log2(1 + r), xp.zeros_like(r)), axis=-1) / normaliser
    return per_list(xp, -ndcg, valid)


@in_float32
@fill_doc(list_args=LIST_ARGS, returns=list_returns("values in [0, 1]; 0 for a list without a relevant item"))
def smooth_ap_loss(pred: Array, target: Array, /, *, temperature: float = 0.01, mask: Array | None = None, axis: int = -1) -> Array:
    r"""Smooth-AP (Brown, Xie, Kalogeiton & Zisserman 2020): one minus average precision with sigmoid ranks.

    With ``P`` the relevant entries (``target > 0``) and
    ``S(d) = sigmoid(d / temperature)`` (the paper's Eq. 8)::

        AP = (1 / |P|) sum_{i in P} (1 + sum_{j in P, j != i} S(s_j - s_i))
                                    / (1 + sum_{j != i} S(s_j - s_i))

    and ``L = 1 - AP``, which tends to one minus the exact average precision
    (:func:`rankops.metrics.average_precision`) as ``temperature -> 0``
    (0.01, the paper's, by default). A list without a relevant item has no
    average precision: value 0, no gradient.

    Parameters
    ----------
    %(list_args)s
    temperature : float, default 0.01
    %(returns)s
    >>> pred, target = np.array([2.0, 0.0, 1.0]), np.array([1.0, 0.0, 1.0])
    >>> round(float(rankops.losses.smooth_ap_loss(pred, target)), 6)   # both relevant items on top
    0.0
    """
    temperature = number("temperature", temperature, positive=True)
    xp, s, t, valid = lists("losses.smooth_ap_loss", pred, target, mask, axis)
    relevant = valid & (t > 0)
    above = sigmoid(xp, (s[..., None, :] - s[..., :, None]) / temperature)  # [i, j]: S(s_j - s_i)
    # sums over j != i: over every valid (relevant) j, less the diagonal's S(0) = 1/2
    rank_all = 0.5 + _over_valid(xp, above, valid)
    rank_relevant = 0.5 + _over_valid(xp, above, relevant)
    count = xp.sum(xp.astype(relevant, s.dtype), axis=-1)
    ap = xp.sum(xp.where(relevant, rank_relevant / rank_all, xp.zeros_like(s)), axis=-1)
    some = count > 0
    return per_list(xp, xp.where(some, 1 - ap / xp.where(some, count, xp.ones_like(count)), xp.zeros_like(count)), valid)
