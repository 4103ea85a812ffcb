r"""Pairwise learning-to-rank losses: RankNet and the LambdaLoss framework, one value per list.

Both sum over the ordered pairs of a list's valid entries, so they hold one
(..., n, n) array of pairs per call: O(B n^2) memory, never O(B n^3).
"""

from __future__ import annotations

import math
from typing import Any

from .._lib._compat import Array
from .._lib._docs import fill_doc
from .._lib._numerics import safe_divide
from ._common import in_float32
from ._lists import check_cutoff, flag, lists, log_sigmoid, max_dcg, number, pairs, per_list, positions
from ._ranking_docs import LIST_ARGS, list_returns

__all__ = ["ranknet_loss", "lambda_loss", "WEIGHING_SCHEMES"]

# the LambdaLoss weighing schemes, as allRank names them
WEIGHING_SCHEMES = (None, "ndcgLoss1", "ndcgLoss2", "ndcgLoss2PP", "lambdaRank", "rankNet", "rankNetWeightedByGTDiff",
                    "rankNetWeightedByGTDiffPowed")


@in_float32
@fill_doc(list_args=LIST_ARGS, returns=list_returns("values >= 0; 0 for a list without a pair of different labels"))
def ranknet_loss(pred: Array, target: Array, /, *, weight_by_diff: bool = False, weight_by_diff_powed: bool = False,
                 mask: Array | None = None, axis: int = -1) -> Array:
    r"""RankNet (Burges et al. 2005): the logistic loss of every pair's score difference, averaged per list.

    Over the pairs (i, j) of valid entries with ``t_i > t_j``::

        L = mean_{t_i > t_j} w_ij log(1 + exp(-(s_i - s_j)))

    with ``w_ij = 1``, ``|t_i - t_j|`` (``weight_by_diff``) or
    ``|t_i^2 - t_j^2|`` (``weight_by_diff_powed``); the mean divides by the
    number of pairs, as allRank's ``rankNet`` (whose value is the mean over
    the pairs of the whole batch: lists of equal pair counts give the same
    mean).

    Parameters
    ----------
    %(list_args)s
    weight_by_diff, weight_by_diff_powed : bool, default False
        Weigh each pair by its label difference, or by the difference of
        the squared labels (the first wins when both are set, as in allRank).
    %(returns)s
    >>> round(float(rankops.losses.ranknet_loss(np.array([2.0, 0.0]), np.array([1.0, 0.0]))), 6)   # log(1 + e^-2)
    0.126928
    """
    by_diff, by_powed = flag("weight_by_diff", weight_by_diff), flag("weight_by_diff_powed", weight_by_diff_powed)
    xp, s, t, valid = lists("losses.ranknet_loss", pred, target, mask, axis)
    ordered = pairs(xp, valid) & (t[..., :, None] > t[..., None, :])
    term = -log_sigmoid(xp, s[..., :, None] - s[..., None, :])
    if by_diff:
        term = term * xp.abs(t[..., :, None] - t[..., None, :])
    elif by_powed:
        term = term * xp.abs(t[..., :, None] ** 2 - t[..., None, :] ** 2)
    count = xp.sum(xp.astype(ordered, s.dtype), axis=(-2, -1))
    total = xp.sum(xp.where(ordered, term, xp.zeros_like(term)), axis=(-2, -1))
    return per_list(xp, safe_divide(xp, total, count), valid)


def _weights(xp: Any, scheme: str | None, gain: Any, discount: Any, pos: Any, t: Any, mu: float) -> Any:
    """The LambdaLoss weight of each pair (i, j) of entries (Wang et al. 2018, Table 1; allRank's ``*_scheme``)."""
    if scheme in (None, "rankNet"):
        return None
    if scheme == "rankNetWeightedByGTDiff":
        return xp.abs(t[..., :, None] - t[..., None, :])
    if scheme == "rankNetWeightedByGTDiffPowed":
        return xp.abs(t[..., :, None] ** 2 - t[..., None, :] ** 2)
    if scheme == "ndcgLoss1":
        return (gain / discount)[..., :, None]  # one weight per row i, broadcast over j
    gap = xp.abs(gain[..., :, None] - gain[..., None, :])
    lambda_rank = xp.abs(1 / discount[..., :, None] - 1 / discount[..., None, :]) * gap
    if scheme == "lambdaRank":
        return lambda_rank
    # ndcgLoss2: delta_ij = |1 / D(|i - j|) - 1 / D(|i - j| + 1)|, D(d) = log2(1 + d), 0 on the diagonal
    d = xp.abs(pos[..., :, None] - pos[..., None, :])
    far = d > 0
    d1 = xp.where(far, d, xp.ones_like(d))
    delta = xp.where(far, xp.abs(1 / xp.log2(1 + d1) - 1 / xp.log2(2 + d1)), xp.zeros_like(d)) * gap
    return delta if scheme == "ndcgLoss2" else mu * delta + lambda_rank


@in_float32
@fill_doc(list_args=LIST_ARGS, returns=list_returns("values >= 0"))
def lambda_loss(pred: Array, target: Array, /, *, weighing_scheme: str | None = None, k: int | None = None, sigma: float = 1.0,
                mu: float = 10.0, reduction_log: str = "binary", eps: float = 1e-10, mask: Array | None = None, axis: int = -1) -> Array:
    r"""The LambdaLoss framework (Wang, Li, Golbandi, Bendersky & Najork 2018), with every weighing scheme of allRank.

    With the list sorted by ``pred`` (largest first, ties in order of
    appearance), positions ``p_i`` from 0, discounts ``D_i = log2(2 + p_i)``
    and normalised gains ``G_i = (2^{t_i} - 1) / maxDCG@k``::

        L = -sum_{(i, j)} log_b( max(max(sigmoid(sigma (s_i - s_j)), eps) ** w_ij, eps) )

    over the pairs of valid entries with ``t_i > t_j`` (every pair for
    ``ndcgLoss1``), both at positions ``< k``; ``b`` is 2 (``reduction_log=
    "binary"``) or e. The weights ``w_ij`` (allRank's ``*_scheme``):
    ``None`` / ``"rankNet"`` 1; ``"ndcgLoss1"`` ``G_i / D_i``;
    ``"ndcgLoss2"`` ``|1/log2(1 + |p_i - p_j|) - 1/log2(2 + |p_i - p_j|)|
    |G_i - G_j|``; ``"lambdaRank"`` ``|1/D_i - 1/D_j| |G_i - G_j|``;
    ``"ndcgLoss2PP"`` ``mu`` ndcgLoss2 + lambdaRank; ``"rankNetWeightedByGTDiff"``
    ``|t_i - t_j|``; ``"rankNetWeightedByGTDiffPowed"`` ``|t_i^2 - t_j^2|``.
    Labels below 0 count as 0 in gains and weights, and ``maxDCG`` is at
    least ``eps``, as in allRank. The value is the list's sum, so a batch's
    sum is allRank's ``lambdaLoss`` (``reduction="sum"``).

    Parameters
    ----------
    %(list_args)s
    weighing_scheme : str or None, default None
        One of ``rankops.losses.WEIGHING_SCHEMES``.
    k : int, optional
        Only pairs within the first k positions (None: all).
    sigma : float, default 1.0
        The slope of the pairs' sigmoid.
    mu : float, default 10.0
        The weight of ndcgLoss2 in ``"ndcgLoss2PP"``.
    reduction_log : {"binary", "natural"}, default "binary"
    eps : float, default 1e-10
        The floor of the probabilities and of maxDCG.
    %(returns)s
    >>> pred, target = np.array([0.5, 0.3, 0.5]), np.array([0.5, 0.3, 0.5])
    >>> round(float(rankops.losses.lambda_loss(pred, target, weighing_scheme="ndcgLoss2PP")), 6)   # allRank's test value
    1.124415
    """
    if weighing_scheme not in WEIGHING_SCHEMES:
        raise ValueError(f"weighing_scheme must be one of {WEIGHING_SCHEMES}, got {weighing_scheme!r}")
    if reduction_log not in ("binary", "natural"):
        raise ValueError(f"reduction_log must be 'binary' or 'natural', got {reduction_log!r}")
    sigma, mu, eps = number("sigma", sigma), number("mu", mu), number("eps", eps)
    xp, s, t, valid = lists("losses.lambda_loss", pred, target, mask, axis)
    k = check_cutoff(s.shape[-1], k)
    pos = positions(xp, s, valid)
    discount = xp.log2(2.0 + pos)
    t0 = xp.maximum(t, xp.zeros_like(t))
    gain = (2.0**t0 - 1.0) / max_dcg(xp, 2.0**t0 - 1.0, valid, k, eps)[..., None]
    chosen = pairs(xp, valid)
    if weighing_scheme != "ndcgLoss1":
        chosen = chosen & (t[..., :, None] > t[..., None, :])
    if k is not None:
        top = pos < k
        chosen = chosen & top[..., :, None] & top[..., None, :]
    floor = math.log(eps) if eps > 0 else -math.inf
    diff = xp.clip(s[..., :, None] - s[..., None, :], min=-1e8, max=1e8)
    log_p = xp.clip(log_sigmoid(xp, sigma * diff), min=floor)
    w = _weights(xp, weighing_scheme, gain, discount, pos, t0, mu)
    if w is not None:
        log_p = xp.clip(w * log_p, min=floor)
    if reduction_log == "binary":
        log_p = log_p / math.log(2)
    return per_list(xp, -xp.sum(xp.where(chosen, log_p, xp.zeros_like(log_p)), axis=(-2, -1)), valid)
