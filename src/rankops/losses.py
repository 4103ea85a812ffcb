r"""Ready losses built on the soft operators: one value per row, the caller reduces.

Every loss takes ``method=`` (any method of :func:`rankops.soft_rank`) and
its options, and runs on every backend that method runs on, under the
caller's autodiff (torch autograd, ``jax.grad`` / ``jit`` / ``vmap``). The
default method is ``"permutahedron"`` (Blondel et al. 2020): O(n log n), no
iterations, and the relaxation those authors trained Spearman objectives
with.
"""

from __future__ import annotations

import numbers
from typing import Any

import array_api_compat

from ._lib._adapters import get_adapter
from ._lib._compat import namespace, normalize_axis
from .sorting import soft_rank

__all__ = ["spearman_loss", "topk_loss"]

DEFAULT_METHOD = "permutahedron"


def _last(xp: Any, a: Any, axis: int) -> Any:
    return a if axis == a.ndim - 1 else xp.moveaxis(a, axis, -1)


def rankdata(xp: Any, t: Any) -> Any:
    """``scipy.stats.rankdata`` (ties averaged, 1-based) along the last axis: ``(#{< t} + #{<= t} + 1) / 2``."""
    s = xp.sort(t, axis=-1)
    adapter = get_adapter(xp)
    below = adapter.searchsorted(xp, s, t, side="left")
    upto = adapter.searchsorted(xp, s, t, side="right")
    return xp.astype(below + upto + 1, t.dtype) / 2


def spearman_loss(pred: Any, target: Any, /, *, axis: int = -1, method: str = DEFAULT_METHOD, **options: Any) -> Any:
    r"""``1 - corr(soft_rank(pred), rankdata(target))``: a differentiable Spearman loss per row.

    ``corr`` is Pearson's correlation along ``axis``; ``rankdata(target)``
    ranks the targets with ties averaged, like ``scipy.stats.rankdata``, and
    carries no gradient (targets are data). As the relaxation tends to the
    hard ranks (``strength``, ``alpha``, ``tau``, ``epsilon`` -> 0) the loss
    tends to ``1 - scipy.stats.spearmanr(pred, target)``. Values in [0, 2];
    a row whose targets (or soft ranks) are all equal has no correlation:
    NaN, as in SciPy.

    Parameters
    ----------
    pred : array
        Predictions; every axis but ``axis`` is a batch axis. Differentiable.
    target : array
        Same shape, namespace and device; any real dtype.
    axis : int, default -1
        The axis along which the rows are ranked.
    method : str, default "permutahedron"
        Any method of :func:`rankops.soft_rank`; ``**options`` are its options.

    Returns
    -------
    array
        ``pred``'s shape without ``axis``.

    Examples
    --------
    >>> import numpy as np, rankops.losses
    >>> pred, target = np.array([0.1, 0.4, 0.35, 0.8]), np.array([1.0, 2.0, 3.0, 4.0])
    >>> round(float(rankops.losses.spearman_loss(pred, target, strength=1e-3)), 6)   # 1 - spearmanr = 1 - 0.8
    0.2
    """
    xp = namespace(pred, target, names=("pred", "target"))
    if tuple(pred.shape) != tuple(target.shape):
        raise ValueError(f"pred {tuple(pred.shape)} and target {tuple(target.shape)} must have the same shape")
    axis = normalize_axis(axis, pred.ndim)
    r = _last(xp, soft_rank(pred, axis=axis, method=method, **options), axis)
    t = rankdata(xp, xp.astype(_last(xp, target, axis), r.dtype))
    rc = r - xp.mean(r, axis=-1, keepdims=True)
    tc = t - xp.mean(t, axis=-1, keepdims=True)
    return 1 - xp.sum(rc * tc, axis=-1) / xp.sqrt(xp.sum(rc * rc, axis=-1) * xp.sum(tc * tc, axis=-1))


def topk_loss(scores: Any, labels: Any, k: int, /, *, axis: int = -1, method: str = DEFAULT_METHOD, **options: Any) -> Any:
    r"""The top-k loss of Cuturi et al. (2019, paper 002): ``relu(n - k + 1 - soft_rank(scores)[label])``.

    With ascending 1-based soft ranks, the true class is among the k largest
    scores when its rank is at least ``n - k + 1``: the loss is then 0, and
    otherwise grows with the number of places the label misses the top k
    by. ``k = 1`` is a soft "is the label the arg max" loss.

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
        1 <= k <= n.
    axis : int, default -1
        The class axis.
    method : str, default "permutahedron"
        Any method of :func:`rankops.soft_rank`; ``**options`` are its options.

    Returns
    -------
    array
        ``scores``' shape without ``axis``, values >= 0.

    Examples
    --------
    >>> import numpy as np, rankops.losses
    >>> scores = np.array([[0.1, 2.0, 1.0, -1.0], [3.0, 0.0, 1.0, 2.0]])
    >>> rankops.losses.topk_loss(scores, np.array([2, 1]), 2, strength=1e-3)   # row 1: class 1 ranks last
    array([0., 2.])
    """
    xp = namespace(scores, labels, names=("scores", "labels"))
    axis = normalize_axis(axis, scores.ndim)
    n = scores.shape[axis]
    if isinstance(k, bool) or not isinstance(k, numbers.Integral) or not 1 <= k <= n:
        raise ValueError(f"k must be an int in [1, n = {n}], got {k!r}")
    if not xp.isdtype(labels.dtype, "integral"):
        raise TypeError(f"labels must be an integer array of class indices, got dtype {labels.dtype}")
    expected = tuple(scores.shape[:axis]) + tuple(scores.shape[axis + 1 :])
    if tuple(labels.shape) != expected:
        raise ValueError(f"labels must have scores' shape without axis {axis}: {expected}, got {tuple(labels.shape)}")
    r = _last(xp, soft_rank(scores, axis=axis, method=method, **options), axis)
    # the label's rank as a masked sum (a gather that every backend, Dask included, has)
    hit = xp.arange(n, device=array_api_compat.device(r))[None, :] == xp.reshape(labels, (-1, 1))
    hit = xp.reshape(hit, tuple(labels.shape) + (n,))
    label_rank = xp.sum(xp.where(hit, r, xp.zeros_like(r)), axis=-1)
    margin = (n - k + 1) - label_rank
    return xp.maximum(margin, xp.zeros_like(margin))
