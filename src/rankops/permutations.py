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
import inspect
import math
import numbers
from typing import Any

from ._cores import diffsort as _networks
from ._cores import masked
from ._cores.comparators import DISTRIBUTIONS
from ._cores.networks import NETWORKS
from ._cores.permutation import matrix_core, relaxation_key
from ._cores.softness import calibrated
from ._docstrings import SECTIONS
from ._lib._calls import Call, operator, prepare
from ._lib._compat import Array, is_array
from ._lib._docs import fill_doc
from ._lib._options import Options, boolean, choice, option, optional_count, positive_count, positive_scalar

__all__ = ["softsort", "neuralsort", "diffsort", "PermutationOptions", "NetworkOptions", "OPTION_NAMES"]


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

    @classmethod
    def temperature(cls) -> str:
        return "tau"

    tau: Any = option(1.0, positive_scalar)  # a number, or a 0-d array (learnable)
    softness: Any = option(None, positive_scalar)  # sets tau per row (rankops._cores.softness)
    power: Any = option(1.0, positive_scalar)
    hard: bool = option(False, boolean)
    block: Any = option("auto", _block)


OPTION_NAMES = {"softsort": ("softness", "tau", "power", "hard", "block"), "neuralsort": ("softness", "tau", "hard", "block")}


@operator(methods=("softsort",))
@fill_doc(**SECTIONS)
def softsort(s: Array, /, *, softness: Any = None, tau: Any = None, power: Any = 1, descending: bool = True, hard: bool = False,
             stochastic: bool = False, key: Any = None, n_samples: int | None = None, mask: Array | None = None) -> Call[Array]:
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
    return _bind_matrix("softsort", s, {"softness": softness, "tau": tau, "power": power, "hard": hard}, descending=descending, stochastic=stochastic,
                       key=key, n_samples=n_samples, mask=mask)


@operator(methods=("neuralsort",))
@fill_doc(**SECTIONS)
def neuralsort(s: Array, /, *, softness: Any = None, tau: Any = None, descending: bool = True, hard: bool = False, stochastic: bool = False,
               key: Any = None, n_samples: int | None = None, mask: Array | None = None) -> Call[Array]:
    """NeuralSort relaxed permutation matrix of ``s`` along its last axis.

    ``P[i, :] = softmax(((n + 1 - 2 i) s - A_s 1) / tau)``, i = 1..n,
    ``A_s[j, k] = |s_j - s_k|`` (Grover et al. 2019; Prillo & Eisenschlos
    2020, Eq. 3), in O(n^2) by forming the row sums ``A_s 1`` once (SoftSort
    appendix A.4.5), each row's logits relative to its own item's (exact
    where float32 logits would round away a row's competition). Ascending
    order reverses the rows.

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
    return _bind_matrix("neuralsort", s, {"softness": softness, "tau": tau, "hard": hard}, descending=descending, stochastic=stochastic, key=key,
                       n_samples=n_samples, mask=mask)


def _art_lambda(value: Any, name: str) -> float:
    """A finite real >= 0 (the exponent of the activation replacement trick)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number >= 0, got {type(value).__name__}")
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return float(value)


@dataclasses.dataclass(frozen=True)
class NetworkOptions(Options):
    """Options of the differentiable sorting networks (``rankops.diffsort``, ``method="diffsort"``)."""

    @classmethod
    def temperature(cls) -> str:
        return "steepness"

    network: str = option("odd_even", choice(*NETWORKS))
    distribution: str = option("cauchy", choice(*DISTRIBUTIONS))
    steepness: Any = option(10.0, positive_scalar)  # a number, or a 0-d array (learnable, traced)
    softness: Any = option(None, positive_scalar)  # sets steepness per row (rankops._cores.softness)
    art_lambda: float = option(0.25, _art_lambda)

    def __post_init__(self) -> None:
        # logistic_phi's scale (|b - a| + 1e-10) ** art_lambda is not homogeneous in the
        # differences, so an array steepness cannot ride on rescaled inputs (_cores.tempered)
        if is_array(self.steepness) and self.distribution == "logistic_phi":
            raise TypeError("steepness must be a Python number with distribution='logistic_phi', not an array")


@operator(methods=("diffsort",))
@fill_doc(**SECTIONS)
def diffsort(x: Array, /, *, softness: Any = None, network: str = "odd_even", distribution: str = "cauchy",
             steepness: Any = None, art_lambda: float = 0.25, descending: bool = False, mask: Array | None = None) -> Call[Array]:
    """Relaxed permutation matrix of a differentiable sorting network, along the last axis of ``x``.

    A sorting network (``"odd_even"``: odd-even transposition, n layers;
    ``"bitonic"``: Batcher's bitonic sorter, ``L (L + 1) / 2`` layers for
    ``L = ceil(log2 n)``) whose comparators swap softly: the low wire gets
    ``f(u) a + (1 - f(u)) b`` and the high wire the rest, ``u = steepness (b
    - a)`` (Petersen et al., ICML 2021, Eq. 3). ``P`` is the product of the
    layers; ``P @ x`` is ``soft_sort(x, method="diffsort")`` and ``P^T @
    (1..n)`` is the soft rank. ``P`` is doubly stochastic.

    Parameters
    ----------
    x : array
        Scores along the last axis (any batch shape).
    network : {"odd_even", "bitonic"}, default "odd_even"
    distribution : {"cauchy", "reciprocal", "optimal", "logistic", "logistic_phi", "gaussian"}, default "cauchy"
        The relaxation ``f`` (a CDF). ``"cauchy"``, ``"reciprocal"`` and
        ``"optimal"`` are monotonic: every soft-sorted value is
        non-decreasing in every input (Petersen et al., ICLR 2022).
    softness : float or 0-d array, optional
        Scale-free softness (docs/softness.md): ranks about ``softness``
        places from the hard ones, whatever the scale and length of the row;
        not with ``steepness``.
    steepness : float or 0-d array, default 10.0
        The inverse temperature: the hard network as it grows (used when
        ``softness`` is not given).
    art_lambda : float, default 0.25
        ``"logistic_phi"`` only: ``u / |b - a| ** art_lambda`` (the activation
        replacement trick).
    descending : bool, default False
        Row i the i-th largest when True.
    mask : bool array, optional
        True for the valid entries: each row's matrix is that of its n_v
        valid entries alone, in the first n_v rows and their columns (the
        rest 0; a row without a valid entry NaN). See docs/api.md, "Ragged rows".

    Returns
    -------
    array
        Shape ``(..., n, n)``, rows the positions of the sorted order; the
        ``diffsort`` package's matrix (``x @ P_ds`` sorted) transposed.
        Memory per row: O(n^2 + K n), the backward too (it recomputes the
        layers' matrices in blocks of columns, about 8 matrices at a time,
        once more the forward's O(K n^2) work); for values and ranks use ``soft_sort`` /
        ``soft_rank(method="diffsort")``, O(K n).

    Examples
    --------
    >>> import numpy as np, rankops
    >>> x = np.array([0.3, -1.2, 2.5])
    >>> p = rankops.diffsort(x, steepness=10.0)
    >>> np.round(p, 2)
    array([[0.04, 0.96, 0.  ],
           [0.94, 0.04, 0.01],
           [0.01, 0.  , 0.99]])
    >>> np.round(p @ x, 2)
    array([-1.14,  0.27,  2.47])
    """
    opts, _ = NetworkOptions.parse({"softness": softness, "network": network, "distribution": distribution,
                                    "steepness": steepness, "art_lambda": art_lambda}, "diffsort")
    p = prepare(x, opts=opts, arrays=masked.arrays(mask))
    return Call(_networks.matrix_core, p, opts, masked.with_mask(p, {"descending": boolean(descending, "descending")}, mask))


def check_relaxation_softness(method: str, opts: PermutationOptions) -> None:
    """SoftSort's softness is calibrated for the powers 1 and 2 (a learnable power has none)."""
    if opts.softness is not None and method == "softsort" and not (
        not is_array(opts.power) and calibrated(relaxation_key("softsort", opts.power))
    ):
        raise ValueError(f"softness is calibrated for SoftSort's power 1 and 2 (numbers), got power={opts.power!r}; pass tau= instead")


def _bind_log_matrix(s: Array, /, *, method: str, mask: Array | None = None, **options: Any) -> Call[Array]:
    """``log P`` of :func:`softsort`'s or :func:`neuralsort`'s matrix (``method``), ``options`` theirs and checked as
    theirs are: the log-softmax of its logits (``matrix_core``'s ``log``), for the losses that read ``log P``."""
    bound = inspect.signature(softsort if method == "softsort" else neuralsort).bind(s, mask=mask, **options)
    bound.apply_defaults()
    kw = {name: value for name, value in bound.arguments.items() if name != "s"}
    relaxation = {name: kw.pop(name) for name in OPTION_NAMES[method] if name in kw}
    return _bind_matrix(method, s, relaxation, log=True, **kw)


log_matrix = operator(methods=("softsort", "neuralsort"))(_bind_log_matrix)


def _bind_matrix(
    method: str, s: Any, options: dict[str, Any], *, descending: Any, stochastic: Any, key: Any, n_samples: Any, mask: Any = None,
    log: bool = False,
) -> Call[Array]:
    """The matrix of ``s`` (Gumbel-perturbed when ``stochastic``; ``mask``: of each row's valid entries alone; ``log``:
    its log)."""
    opts, _ = PermutationOptions.parse(options, method, names=tuple(options))
    check_relaxation_softness(method, opts)
    descending = boolean(descending, "descending")
    stochastic = boolean(stochastic, "stochastic")
    n_samples = optional_count(n_samples, "n_samples")
    if not stochastic and (key is not None or n_samples is not None):
        raise ValueError("key and n_samples are only used with stochastic=True")
    p = prepare(s, name="s", opts=opts, arrays=masked.arrays(mask))
    params = masked.with_mask(p, {"method": method, "descending": descending, **({"log": True} if log else {})}, mask)
    if stochastic:
        x = p.x
        shape = ((n_samples,) if n_samples is not None else ()) + tuple(x.shape)
        x = x + p.adapter.gumbel(p.xp, key, shape, x.dtype, p.device)
        p = dataclasses.replace(p, x=x, layout=dataclasses.replace(p.layout, axes=(x.ndim - 1,), shape=tuple(x.shape)))
    return Call(matrix_core, p, opts, params)
