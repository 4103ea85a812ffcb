r"""Relaxed permutation matrices: SoftSort and NeuralSort.

Both map a score vector ``s`` of length n to an n x n unimodal row-stochastic
matrix ``P``; row i is a distribution over the items for the i-th position of
the sorted order, so ``P @ s`` approximates ``sort(s)`` and ``argmax`` of
each row recovers ``argsort(s)`` (Prillo & Eisenschlos 2020, Theorem 1). The
row kernels are in :mod:`rankops._cores.rows`.

Stochastic variants sample from the Plackett-Luce distribution with
log-weights ``s`` by the Gumbel trick (Grover et al. 2019, Sec. 4.1): the
operator is applied to ``s + g`` with ``g`` standard Gumbel noise drawn from
the caller's seed, generator or key. ``hard=True`` is the straight-through
estimator: the forward value is the exact permutation matrix, the gradient
is that of the relaxed one.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ._cores.permutation import matrix_core
from ._docstrings import SECTIONS
from ._lib._calls import Call, operator, prepare
from ._lib._compat import Array
from ._lib._docs import fill_doc
from ._lib._options import Options, boolean, option, optional_count, positive_count, positive_scalar

__all__ = ["softsort", "neuralsort", "PermutationOptions", "OPTION_NAMES"]


def _block(value: Any, name: str) -> Any:
    """``"auto"``, None (the full matrix) or an int >= 1 (rows per block)."""
    if value is None or (isinstance(value, str) and value == "auto"):
        return value
    if isinstance(value, str):
        raise ValueError(f"{name} must be 'auto', None or an int >= 1, got {value!r}")
    return positive_count(value, name)


@dataclasses.dataclass(frozen=True)
class PermutationOptions(Options):
    """Options of SoftSort and NeuralSort (``power``: SoftSort only), as operators and as soft_sort / soft_rank methods."""

    tau: Any = option(1.0, positive_scalar)  # a number, or a 0-d array (learnable)
    power: Any = option(1.0, positive_scalar)
    hard: bool = option(False, boolean)
    block: Any = option("auto", _block)


OPTION_NAMES = {"softsort": ("tau", "power", "hard", "block"), "neuralsort": ("tau", "hard", "block")}


@operator(methods=("softsort",))
@fill_doc(**SECTIONS)
def softsort(s: Array, /, *, tau: Any = 1.0, power: Any = 1, descending: bool = True, hard: bool = False,
             stochastic: bool = False, key: Any = None, n_samples: int | None = None) -> Call[Array]:
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
    return _bind_matrix("softsort", s, {"tau": tau, "power": power, "hard": hard}, descending=descending, stochastic=stochastic,
                       key=key, n_samples=n_samples)


@operator(methods=("neuralsort",))
@fill_doc(**SECTIONS)
def neuralsort(s: Array, /, *, tau: Any = 1.0, descending: bool = True, hard: bool = False, stochastic: bool = False,
               key: Any = None, n_samples: int | None = None) -> Call[Array]:
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
    return _bind_matrix("neuralsort", s, {"tau": tau, "hard": hard}, descending=descending, stochastic=stochastic, key=key,
                       n_samples=n_samples)


def _bind_matrix(method: str, s: Any, options: dict[str, Any], *, descending: Any, stochastic: Any, key: Any, n_samples: Any) -> Call[Array]:
    """The matrix of ``s`` (Gumbel-perturbed when ``stochastic``)."""
    opts, _ = PermutationOptions.parse(options, method, names=tuple(options))
    descending = boolean(descending, "descending")
    stochastic = boolean(stochastic, "stochastic")
    n_samples = optional_count(n_samples, "n_samples")
    if not stochastic and (key is not None or n_samples is not None):
        raise ValueError("key and n_samples are only used with stochastic=True")
    p = prepare(s, name="s", opts=opts)
    if stochastic:
        x = p.x
        shape = ((n_samples,) if n_samples is not None else ()) + tuple(x.shape)
        x = x + p.adapter.gumbel(p.xp, key, shape, x.dtype, p.device)
        p = dataclasses.replace(p, x=x, layout=dataclasses.replace(p.layout, axes=(x.ndim - 1,), shape=tuple(x.shape)))
    return Call(matrix_core, p, opts, {"method": method, "descending": descending})
