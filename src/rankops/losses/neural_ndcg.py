r"""NeuralNDCG (Pobrotyn & Bialobrzeski 2021): NDCG@k with the sort replaced by a relaxed permutation matrix."""

from __future__ import annotations

import math
from typing import Any

from .._cores import masked
from .._lib._adapters import get_adapter
from .._lib._compat import Array
from .._lib._compat import device as _device
from .._lib._docs import fill_doc
from .._solvers.scaling import scale_to_doubly_stochastic
from ..permutations import diffsort, neuralsort, softsort
from ._common import in_float32
from ._lists import check_cutoff, count, discounts, flag, gains, ideal_dcg, lists, number, per_list
from ._ranking_docs import LIST_ARGS, list_returns
from .ranking import MATRIX_METHODS, _log_matrix

__all__ = ["neural_ndcg_loss"]

_EPS = 1e-10  # allRank's DEFAULT_EPS: in the NDCG's denominator and the log of the shifted scores


def _perturbed(xp: Any, s: Any, valid: Any, noise: Any, beta: float, log_scores: bool) -> Any:
    """NeuralSort's stochastic scores (Grover et al. 2019, Sec. 4.1, as allRank feeds them) for Gumbel draws ``noise``.

    ``s + |min s|`` over the list's valid entries (allRank: over the batch),
    its log when ``log_scores``, plus ``beta`` times the noise.
    """
    low = xp.min(xp.where(valid, s, math.inf), axis=-1, keepdims=True)
    z = s + xp.abs(xp.where(xp.isfinite(low), low, 0.0))
    if log_scores:
        z = xp.log(z + _EPS)
    return z + beta * noise


def _matrix(xp: Any, z: Any, valid: Any, ragged: bool, method: str, temperature: float, options: dict[str, Any]) -> Any:
    """The relaxed permutation matrix of ``z``: row i the distribution of the i-th largest entry over the items."""
    mask = valid if ragged else None
    if method in ("neuralsort", "softsort"):
        return (neuralsort if method == "neuralsort" else softsort)(z, tau=temperature, mask=mask, **options)
    if method == "diffsort":
        return diffsort(z, descending=True, mask=mask, **options)
    return xp.exp(_log_matrix(xp, z, method, options, mask))


def _discounted_gains(method: str, temperature: float, options: dict[str, Any], ragged: bool, transposed: bool,
                      k: int | None, max_iter: int, tol: float, beta: float, log_scores: bool) -> Any:
    """Row function ``(s, valid, g[, noise])`` -> the terms of the relaxed DCG: per rank ``d_i (P g)_i``, or per
    item ``g_j (P^T d)_j`` (``transposed``), ``P`` the Sinkhorn-scaled relaxed sort of ``s`` (perturbed by ``noise``)."""

    def terms(xp: Any, s: Any, valid: Any, g: Any, *noise: Any) -> Any:
        ok = valid > 0
        z = _perturbed(xp, s, ok, noise[0], beta, log_scores) if noise else s
        p = _matrix(xp, z, ok, ragged, method, temperature, options)
        p = scale_to_doubly_stochastic(xp, p, masked.prefix(xp, ok), ok, max_iter=max_iter, tol=tol)
        d = discounts(xp, z.shape[-1], k, z)
        if transposed:
            return g * xp.sum(p * d[:, None], axis=-2)  # each item's expected discount
        return xp.matmul(p, g[..., None])[..., 0] * d  # each rank's expected gain

    return terms


@in_float32
@fill_doc(list_args=LIST_ARGS, returns=list_returns("values in [-1, 0]; 0 for a list without a relevant item"))
def neural_ndcg_loss(pred: Array, target: Array, /, *, temperature: float = 1.0, powered_relevancies: bool = True, k: int | None = None,
                     stochastic: bool = False, n_samples: int = 32, beta: float = 0.1, log_scores: bool = True,
                     transposed: bool = False, max_iter: int = 50, tol: float = 1e-6, key: Any = None,
                     method: str = "neuralsort", mask: Array | None = None, axis: int = -1, **options: Any) -> Array:
    r"""Minus NeuralNDCG@k (Pobrotyn & Bialobrzeski 2021): NDCG with the sort relaxed to a doubly stochastic matrix.

    ``P`` is NeuralSort's relaxed permutation matrix of the scores (row i:
    the i-th largest, temperature ``temperature``), scaled towards a doubly
    stochastic matrix by Sinkhorn scaling (``max_iter`` and ``tol``, the
    paper's Sec. 4.2). With gains ``g = 2^t - 1`` (or ``t``) and discounts
    ``d_i = 1 / log2(i + 1)`` for ranks ``i <= k`` (0 after)::

        NeuralNDCG@k            = sum_i d_i (P g)_i   / (IDCG@k + 1e-10)
        NeuralNDCG@k, transposed = sum_j g_j (P^T d)_j / (IDCG@k + 1e-10)

    the first sorting the gains, the second giving each item its expected
    discount; the value is minus the NDCG (allRank's ``neuralNDCG`` /
    ``neuralNDCG_transposed``), 0 where IDCG is 0. ``stochastic=True``
    averages over ``n_samples`` Gumbel-perturbed scorings (Grover et al.
    2019): ``log(s + |min s| + 1e-10)`` (``log_scores``; else ``s + |min s|``)
    plus ``beta`` times Gumbel noise, ``min`` over the list's valid entries.

    allRank's transposed form computes IDCG with powered gains even when
    ``powered_relevancies=False``; here IDCG uses the same gains as the DCG.

    Parameters
    ----------
    %(list_args)s
    temperature : float, default 1.0
        NeuralSort's (or SoftSort's) ``tau``.
    powered_relevancies : bool, default True
        Gains ``2^t - 1`` (True) or ``t``.
    k : int, optional
        The cut-off (None: the whole list).
    stochastic : bool, default False
    n_samples : int, default 32
    beta : float, default 0.1
        The Gumbel noise's scale (``stochastic``).
    log_scores : bool, default True
        Perturb the log of the shifted scores (``stochastic``).
    transposed : bool, default False
    max_iter : int, default 50
    tol : float, default 1e-6
        Sinkhorn scaling's budget and tolerance (rows and columns within
        ``tol`` of 1; each list stops on its own).
    key : None, int or generator, optional
        The noise's seed or generator (``stochastic``; required on JAX).
    method : {"neuralsort", "softsort", "sinkhorn", "diffsort"}, default "neuralsort"
        The relaxed permutation matrix (:func:`rankops.neuralsort`,
        :func:`rankops.softsort`, the S-sort plan of
        :func:`rankops.losses.permutation_loss`, :func:`rankops.diffsort`);
        ``**options`` are its options (``temperature`` is the ``tau`` of the
        first two).
    %(returns)s
    >>> pred, target = np.array([2.0, 0.0, 1.0]), np.array([1.0, 0.0, 2.0])
    >>> round(float(rankops.losses.neural_ndcg_loss(pred, target, temperature=1e-3)), 6)   # -NDCG of the hard order
    -0.796708
    """
    if method not in MATRIX_METHODS:
        raise ValueError(f"method must be one of {MATRIX_METHODS}, got {method!r}")
    for name, value in (("powered_relevancies", powered_relevancies), ("stochastic", stochastic), ("log_scores", log_scores),
                        ("transposed", transposed)):
        flag(name, value)
    temperature = number("temperature", temperature, positive=True)
    beta, tol = number("beta", beta), number("tol", tol)
    n_samples, max_iter = count("n_samples", n_samples), count("max_iter", max_iter)
    xp, s, t, valid = lists("losses.neural_ndcg_loss", pred, target, mask, axis)
    k = check_cutoff(s.shape[-1], k)
    g = xp.where(valid, gains(xp, t, powered_relevancies), 0.0)
    lists_ = (s, xp.astype(valid, s.dtype), g)
    if stochastic:  # a sample axis in front: each draw a batch of its own
        noise = get_adapter(xp).gumbel(xp, key, (n_samples,) + tuple(s.shape), s.dtype, _device(s))
        lists_ = tuple(xp.broadcast_to(a, tuple(noise.shape)) for a in lists_) + (noise,)
    terms = _discounted_gains(method, temperature, options, mask is not None, transposed, k, max_iter, tol, beta, log_scores)
    # whole lists at a time: on Dask the scaling loop runs on each block's NumPy arrays, not on a growing graph
    dcg = xp.sum(get_adapter(xp).rows(xp, terms, *lists_, dtype=s.dtype), axis=-1)
    idcg = ideal_dcg(xp, g, valid, k)
    ndcg = xp.where(idcg == 0, xp.zeros_like(dcg), dcg / (idcg + _EPS))
    if stochastic:
        ndcg = xp.mean(ndcg, axis=0)
    return per_list(xp, -ndcg, valid)
