"""Top-k classification: the top-k cross-entropy of Petersen, Borgelt, Kuehne & Deussen (ICML 2022)."""

from __future__ import annotations

import math
import numbers
from typing import Any, Sequence

from .._cores import diffsort as _networks
from .._lib._adapters import get_adapter
from .._lib._calls import Call, prepare
from .._lib._compat import Array, index_dtype, device as _device
from .._lib._docs import fill_doc
from .._lib._numerics import logsumexp, vecmat
from ..permutations import NetworkOptions, diffsort, neuralsort, softsort
from ._common import MASK, _one_hot, at_label, class_labels, in_float32, per_row_returns, row_mask, rows, with_mask
from .ranking import _log_matrix

__all__ = ["topk_cross_entropy", "TOPK_METHODS"]

TOPK_METHODS = ("diffsort", "softsort", "neuralsort", "sinkhorn")
TOP1_MODES = ("sm", "smce", "sort")
# difftopk's clamp of the probability before the log: log(q (1 - 2e-7) + 1e-7)
_FLOOR = 1e-7


def _distribution(p_k: Any, n: int) -> tuple[float, ...]:
    """``P_K`` as a tuple of Python numbers: ``p_k[k - 1] = P(K = k)``, non-negative, summing to 1, at most n of them."""
    if isinstance(p_k, (str, bytes)) or not isinstance(p_k, Sequence) or not p_k:
        raise TypeError(f"p_k must be a non-empty sequence of numbers (P(K = 1), P(K = 2), ...), got {type(p_k).__name__}")
    if any(isinstance(p, bool) or not isinstance(p, numbers.Real) or not (math.isfinite(p) and p >= 0) for p in p_k):
        raise ValueError(f"p_k must hold finite numbers >= 0, got {list(p_k)!r}")
    if abs(math.fsum(p_k) - 1.0) > 1e-4:
        raise ValueError(f"p_k must sum to 1 (a distribution over k), got a sum of {math.fsum(p_k)!r}")
    if len(p_k) > n:
        raise ValueError(f"p_k gives probabilities up to k = {len(p_k)}, more than the n = {n} classes compared")
    return tuple(float(p) for p in p_k)


def _position_weights(p_k: tuple[float, ...], n: int, skip_top1: bool) -> tuple[float, ...]:
    """``w_j = sum_(k > j) p_k`` for the 0-based descending position j: ``sum_k p_k T_k = P^T w`` (``skip_top1``: without k = 1)."""
    p = (0.0,) + p_k[1:] if skip_top1 else p_k
    return tuple(math.fsum(p[j:]) for j in range(len(p))) + (0.0,) * (n - len(p))


def _top_shares(xp: Any, s: Any, w: tuple[float, ...], method: str, options: dict[str, Any], mask: Any = None) -> Any:
    """``P^T w`` for the relaxed permutation matrix of ``s`` (rows: positions, largest first).

    ``mask``: the matrix of each row's n_v valid entries; a sorting network's
    weights then sit on its last n_v places, row by row, read through its
    (masked) matrix rather than carried back with one set of levels.
    """
    if mask is not None:
        if method == "diffsort":
            p = diffsort(s, mask=mask, **options)  # ascending: place j of n_v weighs w[n_v - 1 - j]
            n = s.shape[-1]
            dev = _device(s)
            idx = index_dtype(xp, dev)
            back = xp.sum(xp.astype(mask, idx), axis=-1, keepdims=True) - 1 - xp.arange(n, dtype=idx, device=dev)
            weights = xp.asarray(w, dtype=s.dtype, device=dev)
            # one flat gather from the weights (a row-wise one has no Dask kernel outside whole-row blocks)
            placed = xp.reshape(xp.take(weights, xp.reshape(get_adapter(xp).clip(xp, back, 0, n - 1), (-1,)), axis=0), tuple(s.shape))
            levels = xp.where(back >= 0, placed, 0.0)
            return vecmat(xp, levels, p)
        p = xp.exp(_log_matrix(xp, s, method, options, mask)) if method == "sinkhorn" else \
            (softsort if method == "softsort" else neuralsort)(s, descending=True, mask=mask, **options)
        return vecmat(xp, xp.asarray(w, dtype=p.dtype, device=_device(p)), p)
    if method == "diffsort":
        # the weights carried back through the network (O(n) per layer, no matrix); the ascending network with the
        # weights on its last places, as difftopk: a network does not sort -s into the reverse of s
        opts, _ = NetworkOptions.parse(options, "losses.topk_cross_entropy(method='diffsort')")
        call: Call[Any] = Call(_networks.rank_core, prepare(s, opts=opts), opts, {"descending": False, "levels": w[::-1]})
        return call.finish(call.adapter.run(call))
    if method == "sinkhorn":
        p = xp.exp(_log_matrix(xp, s, method, options))
    else:
        p = (softsort if method == "softsort" else neuralsort)(s, descending=True, **options)
    return vecmat(xp, xp.asarray(w, dtype=p.dtype, device=_device(p)), p)


def _preselect(xp: Any, s: Any, hit: Any, m: int) -> Any:
    """The label's score first, then the ``m - 1`` largest of the others, largest first (difftopk's order)."""
    others = xp.where(hit, -math.inf, s)
    order = xp.argsort(others, axis=-1, descending=True, stable=True)[..., : m - 1]
    return xp.concat([at_label(xp, hit, s)[..., None], get_adapter(xp).take(xp, s, order)], axis=-1)


def _log_softmax(xp: Any, s: Any) -> Any:
    return s - logsumexp(xp, s, -1)[..., None]


def _masked_log_softmax(xp: Any, s: Any, mask: Any) -> Any:
    """The log-softmax over each row's valid entries (-inf elsewhere; a row without one: 0 there, NaN later)."""
    kept = mask | ~xp.any(mask, axis=-1, keepdims=True)
    return _log_softmax(xp, xp.where(kept, s, -math.inf))


def _neg_log(xp: Any, q: Any) -> Any:
    return -xp.log(q * (1.0 - 2.0 * _FLOOR) + _FLOOR)


@in_float32
@fill_doc(returns=per_row_returns("``scores``'", ", values >= 0"), mask=MASK)
def topk_cross_entropy(scores: Array, labels: Array, p_k: Sequence[float], /, *, mask: Array | None = None, axis: int = -1,
                       method: str = "diffsort", top1_mode: str = "sm", m: int | None = None, **options: Any) -> Array:
    r"""The top-k cross-entropy of Petersen et al. (ICML 2022, "Differentiable Top-k Classification Learning").

    With ``P`` the relaxed permutation matrix of the scores (row j: the
    distribution of the item at the j-th largest place) and ``T_k(y) =
    sum_(j < k) P[j, y]`` the relaxed probability that class y is among the
    k largest, the loss of a row with label y is

    - ``top1_mode="sort"``: ``-log q``, ``q = sum_k p_k T_k(y)`` (``p_k`` the
      distribution P_K of k, Eq. 5 of the paper);
    - ``"sm"`` (default): the same with the top-1 term taken from the
      softmax, ``q = p_1 softmax(s)_y + sum_(k >= 2) p_k T_k(y)``;
    - ``"smce"``: ``p_1 CE(s, y) + (sum_(k >= 2) p_k) (-log sum_(k >= 2) p_k T_k(y))``;

    with the ``log(q (1 - 2e-7) + 1e-7)`` clamp of the ``difftopk`` package,
    whose ``TopKCrossEntropyLoss`` this equals row by row (it takes the
    batch mean). ``sum_k p_k T_k = P^T w`` with ``w_j = sum_(k > j) p_k``:
    with ``method="diffsort"`` the weights are carried back through the
    network, O(n) per layer, with no n x n matrix; as in the package, the
    network sorts ascending and the top k are its last k places (a network
    does not sort ``-s`` into the reverse of ``s``).

    Parameters
    ----------
    scores : array
        Class scores along ``axis`` (n classes); differentiable.
    labels : array
        Integer class indices in [0, n), ``scores``' shape without ``axis``.
    p_k : sequence of float
        ``P(K = 1), P(K = 2), ...``: non-negative, summing to 1, at most n
        (or m) of them; ``[1.0]`` is a relaxed top-1 loss.
    %(mask)s
        A row of fewer valid classes than ``len(p_k)`` (or ``m``) is NaN.
    axis : int, default -1
        The class axis.
    method : {"diffsort", "softsort", "neuralsort", "sinkhorn"}, default "diffsort"
        The relaxation, with its ``**options``: :func:`rankops.diffsort`'s
        (``network``, ``distribution``, ``steepness``, ``art_lambda``),
        ``tau`` for SoftSort / NeuralSort (the package's ``1 /
        inverse_temperature``), the Sinkhorn options (as
        :func:`rankops.losses.permutation_loss`).
    top1_mode : {"sm", "smce", "sort"}, default "sm"
    m : int, optional
        Rank the label's score and the ``m - 1`` largest others only (the
        paper's top-m pre-selection for many classes, len(p_k) <= m <= n), in
        the package's order: the label first, the others largest first.

    %(returns)s
    >>> scores = np.array([[0.1, 2.0, 1.0, -1.0], [3.0, 0.0, 1.0, 2.0]])
    >>> np.round(rankops.losses.topk_cross_entropy(scores, np.array([2, 1]), [0.5, 0.5], steepness=30.0), 2)  # label 2: second
    array([0.5 , 4.03])
    """
    xp, axis, (s,) = rows("losses.topk_cross_entropy", axis, {"scores": scores}, also={"labels": labels, **with_mask(mask)})
    n = s.shape[-1]
    valid = row_mask(xp, mask, scores, axis)
    # a row with an infinite or NaN valid score is NaN: it enters as zeros (no inf - inf, no NumPy warning, gradient 0)
    finite = xp.abs(s) < math.inf
    broken = xp.any(~finite if valid is None else valid & ~finite, axis=-1)
    if valid is not None:  # padding (NaN, say) reaches no arithmetic: 0 * NaN would be NaN in any gradient
        s = xp.where(valid, s, xp.zeros_like(s))
    s = xp.where(broken[..., None], xp.zeros_like(s), s)
    if method not in TOPK_METHODS:
        raise ValueError(f"topk_cross_entropy needs a relaxed permutation matrix: method must be one of {TOPK_METHODS}, got {method!r}")
    if top1_mode not in TOP1_MODES:
        raise ValueError(f"top1_mode must be one of {TOP1_MODES}, got {top1_mode!r}")
    class_labels(xp, scores, labels, axis)
    p = _distribution(p_k, n)
    hit = _one_hot(xp, labels, n)
    needed = len(p)  # a masked row of fewer valid classes than this is NaN (outside p_k's or m's domain)
    if m is not None:
        if isinstance(m, bool) or not isinstance(m, numbers.Integral) or not len(p) <= m <= n:
            raise ValueError(f"m must be an int in [len(p_k), n] = [{len(p)}, {n}], got {m!r}")
        if valid is not None:  # the label and the largest valid others: padding ranks below them all
            low = xp.min(xp.where(valid, s, xp.full_like(s, math.inf)), axis=-1, keepdims=True)
            s = xp.where(valid, s, xp.where(xp.isfinite(low), low - 1.0, xp.zeros_like(low)))
        s = _preselect(xp, s, hit, int(m))
        n, needed, short = int(m), int(m), valid
        valid = None  # a row of at least m valid classes selects valid ones only
        hit = _one_hot(xp, xp.zeros(s.shape[:-1], dtype=labels.dtype, device=_device(s)), n)
    else:
        short = valid

    shares = at_label(xp, hit, _top_shares(xp, s, _position_weights(p, n, skip_top1=top1_mode != "sort"), method, options, valid))
    if top1_mode == "sort":
        loss = _neg_log(xp, shares)
    else:
        # whole rows (a lazy backend maps them over its blocks: a reduction of an empty Dask batch has no identity)
        if valid is None:
            log_softmax = get_adapter(xp).rows(xp, _log_softmax, s, dtype=s.dtype)
        else:
            log_softmax = _masked_log_softmax(xp, s, valid)
        log_softmax = at_label(xp, hit, log_softmax)
        if top1_mode == "sm":
            loss = _neg_log(xp, p[0] * xp.exp(log_softmax) + shares)
        else:
            loss = p[0] * -log_softmax + math.fsum(p[1:]) * _neg_log(xp, shares)
    if short is not None:
        loss = xp.where(xp.sum(xp.astype(short, s.dtype), axis=-1) >= needed, loss, math.nan)
    return xp.where(broken, math.nan, loss)
