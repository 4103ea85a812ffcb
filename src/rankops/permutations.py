r"""Relaxed permutation matrices: SoftSort and NeuralSort.

Both map a score vector ``s`` of length n to an n x n unimodal row-stochastic
matrix ``P``; row i is a distribution over the items for the i-th position of
the sorted order, so ``P @ s`` approximates ``sort(s)`` and ``argmax`` of
each row recovers ``argsort(s)`` (Prillo & Eisenschlos 2020, Theorem 1). The
row kernels are in :mod:`rankops._kernels.rows`.

Stochastic variants sample from the Plackett-Luce distribution with
log-weights ``s`` by the Gumbel trick (Grover et al. 2019, Sec. 4.1): the
operator is applied to ``s + g`` with ``g`` standard Gumbel noise drawn from
the caller's seed, generator or key. ``hard=True`` is the straight-through
estimator: the forward value is the exact permutation matrix, the gradient
is that of the relaxed one.
"""

from __future__ import annotations

from typing import Any

from ._docstrings import SECTIONS
from ._kernels.permutation import bind_matrix
from ._lib._calls import Call
from ._lib._docs import fill_doc
from ._lib._operator import operator

__all__ = ["softsort", "neuralsort"]


@operator
@fill_doc(**SECTIONS)
def softsort(s: Any, /, *, tau: Any = 1.0, power: Any = 1, descending: bool = True, hard: bool = False,
             stochastic: bool = False, key: Any = None, n_samples: int | None = None) -> Call:
    """SoftSort relaxed permutation matrix of ``s`` along its last axis.

    ``P[i, j] = softmax_j(-|s_[i] - s_j| ** power / tau)``, ``s_[i]`` the i-th
    largest entry (i-th smallest when ``descending=False``) (Prillo &
    Eisenschlos 2020, Eq. 4).

    Parameters
    ----------
    %(matrix)s
    power : float or 0-d array, default 1
        Exponent p of the distance ``|s_[i] - s_j| ** p`` (1 in the paper's
        main experiments; 2 gives Gaussian rows, appendix Prop. 3).

    %(matrix_returns)s

    Examples
    --------
    >>> import numpy as np, rankops
    >>> np.round(rankops.softsort(np.array([0.3, -1.2, 2.5]), tau=0.5), 3)
    array([[0.012, 0.001, 0.987],
           [0.942, 0.047, 0.012],
           [0.047, 0.952, 0.001]])
    """
    return bind_matrix("softsort", s, {"tau": tau, "power": power, "hard": hard}, descending=descending, stochastic=stochastic,
                       key=key, n_samples=n_samples)


@operator
@fill_doc(**SECTIONS)
def neuralsort(s: Any, /, *, tau: Any = 1.0, descending: bool = True, hard: bool = False, stochastic: bool = False,
               key: Any = None, n_samples: int | None = None) -> Call:
    """NeuralSort relaxed permutation matrix of ``s`` along its last axis.

    ``P[i, :] = softmax(((n + 1 - 2 i) s - A_s 1) / tau)``, i = 1..n,
    ``A_s[j, k] = |s_j - s_k|`` (Grover et al. 2019; Prillo & Eisenschlos
    2020, Eq. 3), in O(n^2) by forming the row sums ``A_s 1`` once (SoftSort
    appendix A.4.5). Ascending order reverses the rows.

    Parameters
    ----------
    %(matrix)s

    %(matrix_returns)s

    Examples
    --------
    >>> import numpy as np, rankops
    >>> p = rankops.neuralsort(np.array([0.3, -1.2, 2.5]), tau=0.1)
    >>> p.argmax(axis=-1)
    array([2, 0, 1])
    """
    return bind_matrix("neuralsort", s, {"tau": tau, "hard": hard}, descending=descending, stochastic=stochastic, key=key,
                       n_samples=n_samples)
