"""Losses on the order of a list: top-k classification, NDCG@k, and learning to sort with a permutation matrix."""

from __future__ import annotations

import math
from typing import Any

from .._lib._compat import Array
from .._lib._compat import device as _device
from .._cores import masked
from .._cores.squash import squash_parts, squash_vjp
from .._cores.entries import Entries
from .._cores.transport import grid
from .._lib._numerics import safe_divide
from .._solvers.line import cost_fns
from ..permutations import diffsort, log_matrix, neuralsort, softsort
from ..sinkhorn import SOLVER_OPTIONS, TransportOptions, sinkhorn, with_epsilon
from ..sorting import soft_rank
from .._lib._docs import fill_doc
from ._lists import check_gain, gains, ideal_dcg
from ._common import MASK, RANK_METHOD, per_row_returns, DEFAULT_METHOD, _one_hot, _row_count, at_label, class_labels, in_float32, without_nan, row_mask, rows, with_mask

__all__ = ["topk_loss", "ndcg_loss", "permutation_loss", "MATRIX_METHODS"]

MATRIX_METHODS = ("neuralsort", "softsort", "sinkhorn", "diffsort")


@in_float32
@fill_doc(returns=per_row_returns("``scores``'", ", values >= 0"), rank_method=RANK_METHOD, mask=MASK)
def topk_loss(scores: Array, labels: Array, k: int, /, *, mask: Array | None = None, axis: int = -1, method: str = DEFAULT_METHOD,
              **options: Any) -> Array:
    r"""The top-k loss of Cuturi et al. (2019, paper 002): ``relu(n - k + 1 - soft_rank(scores)[label])``.

    With ascending 1-based soft ranks, the true class is among the k largest
    scores when its rank is at least ``n - k + 1``: the loss is then 0, and
    otherwise grows with the number of places the label misses the top k
    by. ``k = 1`` is a soft "is the label the arg max" loss.

    Prefer a method whose soft ranks keep the order of the scores
    (``"permutahedron"``, ``"lapsum"``, ``"sinkhorn"``): SoftSort's and
    NeuralSort's soft ranks may cross at moderate ``tau`` (the arg max need
    not get the largest soft rank), and a network trained with this loss
    then learns to exploit the crossing (examples/topk_classification.py
    shows it at ``tau >= 0.1``).

    Parameters
    ----------
    scores : array
        Class scores along ``axis`` (n classes); differentiable.
    labels : array
        Integer class indices in [0, n), ``scores``' shape without ``axis``
        (one per row), same namespace and device. Out-of-range labels give
        ``n - k + 1`` (no class matched), not an error: checking would read
        the data.
    k : int
        1 <= k <= n (a masked row of n_v < k valid classes is NaN).
    %(mask)s
    axis : int, default -1
        The class axis.
    %(rank_method)s

    %(returns)s
    >>> scores = np.array([[0.1, 2.0, 1.0, -1.0], [3.0, 0.0, 1.0, 2.0]])
    >>> rankops.losses.topk_loss(scores, np.array([2, 1]), 2, strength=1e-3)   # row 1: class 1 ranks last
    array([0., 2.])
    """
    xp, axis, (s,) = rows("losses.topk_loss", axis, {"scores": scores}, also={"labels": labels, **with_mask(mask)})
    n = s.shape[-1]
    k = _row_count(n, k)
    class_labels(xp, scores, labels, axis)
    m = row_mask(xp, mask, scores, axis)
    label_rank = at_label(xp, _one_hot(xp, labels, n), soft_rank(s, method=method, mask=m, **options))
    # the valid classes' ranks run 1..n_v: a row of fewer than k is outside k's domain, NaN
    count = n if m is None else xp.sum(xp.astype(m, s.dtype), axis=-1)
    margin = (count - k + 1) - label_rank
    loss = xp.maximum(margin, xp.zeros_like(margin))
    return loss if m is None else xp.where(count >= k, loss, math.nan)


@in_float32
@fill_doc(returns=per_row_returns("``scores``'", ", values in [0, 1] in the hard limit"), rank_method=RANK_METHOD, mask=MASK)
def ndcg_loss(scores: Array, relevance: Array, /, k: int | None = None, *, mask: Array | None = None, axis: int = -1,
              gain: str = "exp", method: str = DEFAULT_METHOD, **options: Any) -> Array:
    r"""``1 - NDCG@k`` with soft ranks in the discounts: a differentiable ranking loss for lists, ragged ones included.

    With ``r = soft_rank(scores, descending=True)`` (1 = best) and gains
    ``g = 2**relevance - 1`` (``gain="exp"``, Burges et al. 2005) or
    ``g = relevance`` (``"linear"``, as ``sklearn.metrics.ndcg_score``)::

        DCG@k  = sum_j g_j c_k(r_j) / log2(1 + r_j),   c_k(r) = clip(k + 1 - r, 0, 1)
        NDCG@k = DCG@k / IDCG@k

    IDCG@k is the DCG of the gains sorted decreasingly (no gradient). The
    cut-off ``c_k`` is 1 up to rank k and falls linearly to 0 at k + 1, so
    the loss is continuous in the scores and, as the relaxation tends to the
    hard ranks of distinct scores, tends to ``1 - NDCG@k`` exactly
    (ApproxNDCG of Qin et al. 2010 with the sigmoid ranks replaced by
    ``soft_rank``, NeuralNDCG's setting of Pobrotyn & Bialobrzeski 2021).
    A row with no relevant entry (IDCG = 0) has NDCG 0 (loss 1, no
    gradient), as in scikit-learn.

    Parameters
    ----------
    scores : array
        Predicted scores along ``axis``; differentiable.
    relevance : array
        Same shape; graded relevance >= 0 (data: no gradient).
    k : int, optional
        Cut-off in [1, n]; ``None``: the whole list.
    %(mask)s
    axis : int, default -1
        The list axis.
    gain : {"exp", "linear"}, default "exp"
    %(rank_method)s

    %(returns)s
    >>> scores, rel = np.array([2.0, 0.5, 1.0]), np.array([0.0, 2.0, 1.0])
    >>> round(float(rankops.losses.ndcg_loss(scores, rel, strength=1e-3)), 4)   # 1 - NDCG: best item ranked last
    0.4131
    """
    xp, axis, (s, rel) = rows("losses.ndcg_loss", axis, {"scores": scores, "relevance": relevance}, also=with_mask(mask))
    n = s.shape[-1]
    k = n if k is None else _row_count(n, k)
    powered = check_gain(gain)
    m = row_mask(xp, mask, scores, axis)
    # a NaN or infinite relevance has no gain to weigh (2^inf / its ideal DCG): the list's loss is NaN
    rel, bad = without_nan(xp, xp.astype(rel, s.dtype), m, finite=True)
    g = gains(xp, rel, powered)
    r = soft_rank(s, axis=-1, descending=True, method=method, mask=m, **options)
    if m is not None:  # padding: no gain, and a rank of 1 where the operator gives 0 (no log2(1) = 0 to divide by)
        g = xp.where(m, g, xp.zeros_like(g))
        r = xp.where(m, r, xp.ones_like(r))
    cut = xp.clip(k + 1 - r, 0, 1)
    dcg = xp.sum(g * cut / xp.log2(1 + r), axis=-1)
    idcg = ideal_dcg(xp, g, None, k)  # g is 0 on the padding
    loss = xp.where(bad, math.nan, 1 - safe_divide(xp, dcg, idcg))
    return loss if m is None else xp.where(xp.any(m, axis=-1), loss, math.nan)


def _log_matrix(xp: Any, s: Any, method: str, options: dict[str, Any], mask: Any = None) -> Any:
    """``log P``: row i of the relaxed permutation matrix of ``s`` (last axis) is a distribution over the items for rank i (1 = largest).

    ``mask``: the matrix of each row's n_v valid entries (rows past n_v and masked columns: 0, or -inf for Sinkhorn).
    """
    if method == "diffsort":  # the sorting network's matrix, largest first
        p = diffsort(s, descending=True, mask=mask, **options)
        return xp.log(p + xp.finfo(p.dtype).smallest_normal)
    if method != "sinkhorn":
        if not options.get("hard", False):
            return log_matrix(s, method=method, mask=mask, **options)  # log P from the logits: no probability underflows
        p = (softsort if method == "softsort" else neuralsort)(s, mask=mask, **options)
        return xp.log(p + xp.finfo(p.dtype).smallest_normal)  # a hard matrix's 0 costs -log(tiny), not inf
    # The S-sort's plan (Cuturi et al. 2019): n * plan^T between the squashed scores (a = 1/n) and the grid j/(n-1)
    # (b = 1/n), descending: the grid is matched against -s. log P straight from the potentials,
    # log n + (f_i + g_j - C_ij) / epsilon: the log of a plan entry that underflows would put a 1/P cotangent on it,
    # which float32's implicit backward cannot absorb. f_i + g_j is exact under implicit differentiation.
    # Options, defaults, squash and cost are soft_rank's (one TransportOptions, one grid, one cost).
    opts, _ = TransportOptions.parse(options, "losses.permutation_loss(method='sinkhorn')", names=SOLVER_OPTIONS)
    n = s.shape[-1]
    opts = with_epsilon(opts, xp, n, s.dtype)[0]
    h = cost_fns(xp, opts.power)[0]
    solve = dict(epsilon=opts.epsilon, max_iter=opts.max_iter, tol=opts.tol, implicit=opts.implicit)
    if mask is None:
        z, _ = squash_vjp(xp, -s, opts.squash)
        cost = h(grid(xp, n, s) - z[..., :, None])
        res, log_n = sinkhorn(cost, **solve), math.log(n)
    else:  # the valid entries alone: weight 0 elsewhere, each row's own grid of n_v targets (soft_rank's, _cores.transport)
        entries = Entries(xp, s, None, mask)
        z = squash_parts(xp, -masked.zero_masked(xp, s, mask), mask, opts.squash)[0]
        y, b, _ = entries.grid(xp, n, s)
        cost = h(y[..., None, :] - z[..., :, None])
        a = safe_divide(xp, xp.astype(mask, s.dtype), entries.count)
        res, log_n = sinkhorn(cost, a, b, **solve), xp.log(xp.maximum(entries.count, xp.ones_like(entries.count)))[..., None]
    log_plan = (res.f[..., :, None] + res.g[..., None, :] - cost) / opts.epsilon
    return log_n + xp.matrix_transpose(log_plan)


@in_float32
@fill_doc(returns=per_row_returns("``scores``'", ", values >= 0"), mask=MASK)
def permutation_loss(scores: Array, target: Array, /, *, mask: Array | None = None, axis: int = -1, method: str = "neuralsort", **options: Any) -> Array:
    r"""Cross-entropy between the relaxed permutation matrix of ``scores`` and the permutation that sorts ``target``.

    ``L = -(1/n) sum_i log P_hat[i, pi(i)]``, ``pi(i)`` the index of the i-th
    largest target (ties in order of appearance) and ``P_hat`` the relaxed
    permutation matrix of the scores, rows indexed by rank: the
    learning-to-sort objective of NeuralSort (Grover et al. 2019, Sec. 6.1),
    SoftSort (Prillo & Eisenschlos 2020, Sec. 5) and the Sinkhorn sort
    (Cuturi et al. 2019, Sec. 5). 0 when ``P_hat`` is the true permutation.
    SoftSort's and NeuralSort's ``log P_hat`` is the log-softmax of their
    logits, and the Sinkhorn plan's log is read from its potentials: a term
    stays exact, gradient included, where its probability underflows (below
    1e-38 in float32); a sorting network's matrix (and ``hard=True``'s) has
    no logits, and ``-log(tiny)`` bounds a term whose probability underflows.

    Parameters
    ----------
    scores : array
        Predicted scores along ``axis``; differentiable.
    target : array
        Same shape: the values whose order is to be learned (data).
    %(mask)s
    axis : int, default -1
        The axis of the items.
    method : {"neuralsort", "softsort", "sinkhorn", "diffsort"}, default "neuralsort"
        ``neuralsort`` / ``softsort``: :func:`rankops.neuralsort` /
        :func:`rankops.softsort` with ``**options`` (``tau``, ...);
        ``diffsort``: :func:`rankops.diffsort` (a sorting network, the
        ranking supervision of Petersen et al. 2021) with its options.
        ``sinkhorn``: ``n`` times the transposed plan of
        :func:`rankops.sinkhorn` between the squashed scores and the grid
        ``j / (n - 1)``, cost ``|y_j - g(s)_i| ** power``; options ``epsilon``
        (1e-2), ``squash`` ("sigmoid"), ``power`` (2), ``max_iter``, ``tol``,
        ``implicit`` (True, as in :func:`rankops.soft_rank`). The O(n log n) methods have no permutation matrix: use
        :func:`spearman_loss` with them.

    %(returns)s
    >>> target = np.array([3.0, 1.0, 2.0])
    >>> bool(rankops.losses.permutation_loss(np.array([0.9, 0.1, 0.5]), target, tau=0.01) < 1e-6)   # right order
    True
    >>> bool(rankops.losses.permutation_loss(np.array([0.1, 0.9, 0.5]), target, tau=0.01) > 10)     # wrong order
    True
    """
    if method not in MATRIX_METHODS:
        raise ValueError(f"permutation_loss needs a relaxed permutation matrix: method must be one of {MATRIX_METHODS}, "
                         f"got {method!r} (spearman_loss works with every method)")
    xp, axis, (s, t) = rows("losses.permutation_loss", axis, {"scores": scores, "target": target}, also=with_mask(mask))
    n = s.shape[-1]
    m = row_mask(xp, mask, scores, axis)
    log_p = _log_matrix(xp, s, method, options, m)
    t, bad = without_nan(xp, t, m)  # a NaN target has no place in the true order: the list's loss is NaN
    if m is None:
        # the true matrix: row i one-hot at the i-th largest target
        hit = _one_hot(xp, xp.argsort(t, axis=-1, descending=True, stable=True), n)
        return xp.where(bad, math.nan, -xp.sum(xp.where(hit, log_p, xp.zeros_like(log_p)), axis=(-2, -1)) / n)
    # the valid targets' order (they sort first), in the first n_v rows
    t = xp.where(m, xp.astype(t, s.dtype), xp.full(t.shape, -math.inf, dtype=s.dtype, device=_device(s)))
    hit = _one_hot(xp, xp.argsort(t, axis=-1, descending=True, stable=True), n) & masked.prefix(xp, m)[..., :, None]
    count = xp.sum(xp.astype(m, s.dtype), axis=-1)
    total = -xp.sum(xp.where(hit, log_p, xp.zeros_like(log_p)), axis=(-2, -1))
    return xp.where(bad, math.nan, safe_divide(xp, total, count, math.nan))
