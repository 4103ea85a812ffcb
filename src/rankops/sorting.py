r"""Soft sort and soft rank along an axis, by any registered method.

With a relaxed permutation matrix ``P`` (row i: a distribution over the
items for the i-th position of the sorted order):

- soft sort  = ``P @ x``          (position i gets a weighted mean of items)
- soft rank  = ``P^T @ [1..n]``   (item j gets its expected 1-based position)

``P`` comes from an entropic optimal transport to an ordered grid
(``"sinkhorn"``, Cuturi, Teboul & Vert 2019, the default), or from ``x``
itself (``"softsort"``, Prillo & Eisenschlos 2020; ``"neuralsort"``, Grover
et al. 2019). Two methods need no matrix at all and cost O(n log n):
``"permutahedron"`` (a projection onto the permutahedron, Blondel et al.
2020) and ``"lapsum"`` (sums of Laplace CDFs, after Struski et al. 2025).
A method is declared once, here: one :class:`Method` in :data:`METHODS`
(its option set, the docstring sections that describe its options, and
the functions that bind a call of each operator it serves to its core).
``soft_sort``, ``soft_rank`` and ``soft_topk_mask`` dispatch on it, and
the docstrings' method lists, ``rankops._registry`` (so ``rankops.vjp``)
and the suites read the methods from it.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import numbers
from typing import Any, Callable

from ._cores import diffsort, lapsum, masked, permutahedron
from ._cores.permutation import dense_core, stream_core
from ._cores.softness import calibrated, lowest_calibrated_p
from ._cores.transport import rank_core, sort_core, topk_core
from ._docstrings import SECTIONS, methods_section
from ._lib._calls import Call, Prepared, operator, prepare
from ._lib._compat import Array, concrete_number, is_array
from ._lib._docs import fill_doc
from ._lib._options import Options, boolean, choice, norm_exponent, option, positive_count, positive_scalar
from .permutations import OPTION_NAMES, NetworkOptions, PermutationOptions, check_relaxation_softness
from .sinkhorn import GRID_OPTIONS, SOLVER_OPTIONS, TransportOptions, bind_grid, input_weights, reported, return_info

__all__ = [
    "soft_rank", "soft_sort", "Method", "METHODS", "TOPK_METHODS", "bind_sort", "bind_topk_mask", "PermutahedronOptions",
    "LapsumOptions", "bind_real_k", "DEFAULT_SOFTNESS",
]

# The softness of every method but Sinkhorn when no temperature is passed: ranks about one place
# from the hard ones at any n and scale (Sinkhorn keeps its epsilon, already scale-free).
DEFAULT_SOFTNESS = 1.0


# -- "sinkhorn" (options: rankops.sinkhorn.TransportOptions) ---------------------------------------


def _bind_sinkhorn(output: str, x: Any, axis: Any, descending: Any, options: dict[str, Any]) -> Call[Any]:
    """``soft_sort`` / ``soft_rank`` (``output``) with ``method="sinkhorn"``; ``soft_sort`` also takes ``topk``."""
    where = f"soft_{output}(method='sinkhorn')"
    if output == "sort":
        topk = options.pop("topk", None)  # None: the full sort
        if topk is not None:
            return _bind_sinkhorn_topk(where, x, axis, descending, topk, options)
    return bind_grid(sort_core if output == "sort" else rank_core, where, x, axis, options, descending)


def _bind_sinkhorn_topk(where: str, x: Any, axis: Any, descending: Any, topk: Any, options: dict[str, Any]) -> Call[Any]:
    for name in ("num_targets", "target_weights", "weights"):
        if options.get(name) is not None:
            raise ValueError(f"{where}: topk fixes the targets (k values and one filler); do not pass {name} with it")
    info, opts, p, arrays, k = _sinkhorn_k(where, x, topk, "topk", axis, options)
    params = {**input_weights(p, arrays), "descending": boolean(descending, "descending")}
    # k = n leaves the filler empty without a mask: that is the full sort (with one, each row's n_v decides)
    return reported(sort_core, p, opts, params if k == p.n and "mask" not in arrays else {**params, "topk": k}, where, info)


def _bind_sinkhorn_topk_mask(x: Any, k: Any, axis: Any, options: dict[str, Any]) -> Call[Any]:
    """``soft_topk_mask(method="sinkhorn")``: ``k`` an int in [1, n]."""
    info, opts, p, arrays, k = _sinkhorn_k("soft_topk_mask", x, k, "k", axis, options)
    return reported(topk_core, p, opts, {**input_weights(p, arrays), "k": k}, "soft_topk_mask", info)


def _sinkhorn_k(where: str, x: Any, k: Any, name: str, axis: Any, options: dict[str, Any]) -> tuple[bool, Any, Prepared, dict[str, Any], int]:
    """``(return_info, options, prepared x, its arrays, k)`` of a Sinkhorn top-k call: ``k`` (named ``name``) an int in [1, n]."""
    info = return_info(options)
    opts, arrays = TransportOptions.parse(options, where, names=SOLVER_OPTIONS, arrays=("mask",))
    k = positive_count(k, name)
    p = prepare(x, axis=axis, opts=opts, arrays=arrays)
    if k > p.n:
        raise ValueError(f"{name} must lie in [1, n] = [1, {p.n}], got {k}")
    return info, opts, p, arrays, k


# -- "softsort", "neuralsort" (options: rankops.permutations.PermutationOptions) -------------------


def _bind_permutation(method: str, output: str, x: Any, axis: Any, descending: Any, options: dict[str, Any]) -> Call[Any]:
    """``soft_sort`` / ``soft_rank`` (``output``) with ``method="softsort"`` or ``"neuralsort"``."""
    mask = options.pop("mask", None)
    opts, _ = PermutationOptions.parse(options, f"soft_{output}(method={method!r})", names=OPTION_NAMES[method], softness=DEFAULT_SOFTNESS)
    check_relaxation_softness(method, opts)
    descending = boolean(descending, "descending")
    p = prepare(x, axis=axis, opts=opts, arrays=masked.arrays(mask))
    # The streamed backward treats power as a constant: a learnable (array) power takes
    # the full matrix, whose gradient includes it.
    dense = opts.block is None or is_array(opts.power) or (opts.block == "auto" and _fits(p))
    params = {"method": method, "output": output, "descending": descending}
    return Call(dense_core if dense else stream_core, p, opts, masked.with_mask(p, params, mask))


def _fits(p: Prepared) -> bool:
    """Whether ``block="auto"`` builds the whole (..., n, n) matrix: within the backend's ``dense_matrix_bytes``."""
    itemsize = p.xp.finfo(p.x.dtype).bits // 8
    return math.prod(p.x.shape[:-1]) * p.n * p.n * itemsize <= p.adapter.dense_matrix_bytes


# -- "permutahedron" ----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class PermutahedronOptions(Options):
    """Options of ``method="permutahedron"``."""

    @classmethod
    def temperature(cls) -> str:
        return "strength"

    regularization: str = option("l2", choice("l2", "kl", "lp"))
    p: float = option(4.0 / 3.0, norm_exponent)  # the exponent of regularization="lp" (Sander et al. 2023)
    strength: Any = option(1.0, positive_scalar)  # a number, or a 0-d array (learnable, traced)
    softness: Any = option(None, positive_scalar)  # sets strength per row (rankops._cores.softness)

    @classmethod
    def parse_for(cls, options: dict[str, Any], where: str, *, sort: bool = False) -> Any:
        """The options, with ``p`` only beside ``regularization="lp"``, softness for it where calibrated (p from
        ``lowest_calibrated_p`` to 2; below, the default is ``strength=1``)."""
        lp = options.get("regularization") == "lp"
        if "p" in options and not lp:
            raise ValueError(f"{where}: p is the exponent of regularization='lp', got regularization={options.get('regularization', 'l2')!r}")
        opts, _ = cls.parse(options, where, softness=DEFAULT_SOFTNESS)
        key = permutahedron.softness_key("lp", opts.p, "sort" if sort else "rank") if lp else None
        if key is not None and opts.softness is not None and not calibrated(key):
            if options.get("softness") is not None:
                raise ValueError(f"{where}: softness is calibrated for regularization='lp' with p in [{lowest_calibrated_p(key)}, 2], "
                                 f"got p={opts.p!r}: pass strength= (the scale of x at which entries blend)")
            opts = dataclasses.replace(opts, softness=None)  # no table below it: the default is strength=1
        return opts


def _bind_permutahedron(output: str, x: Any, axis: Any, descending: Any, options: dict[str, Any]) -> Call[Any]:
    mask = options.pop("mask", None)
    opts = PermutahedronOptions.parse_for(options, f"soft_{output}(method='permutahedron')", sort=output == "sort")
    p = prepare(x, axis=axis, opts=opts, arrays=masked.arrays(mask))
    params = {"output": output, "descending": boolean(descending, "descending")}
    return Call(permutahedron.projection_core, p, opts, masked.with_mask(p, params, mask))


# -- "lapsum" (also soft_topk_mask's) ----------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class LapsumOptions(Options):
    """Options of ``method="lapsum"``."""

    @classmethod
    def temperature(cls) -> str:
        return "alpha"

    alpha: Any = option(1.0, positive_scalar)  # a number, or a 0-d array (learnable, traced)
    softness: Any = option(None, positive_scalar)  # sets alpha per row (rankops._cores.softness)


def _bind_rank_or_sort(option_set: type[Options], cores: Any, method: str, output: str, x: Any, axis: Any, descending: Any,
                       options: dict[str, Any]) -> Call[Any]:
    """The binding of a method whose options are all in ``option_set`` and whose module ``cores`` holds a
    ``rank_core`` and a ``sort_core`` taking ``descending`` and a ``mask`` (LapSum, the sorting networks)."""
    mask = options.pop("mask", None)
    opts, _ = option_set.parse(options, f"soft_{output}(method='{method}')", softness=DEFAULT_SOFTNESS)
    p = prepare(x, axis=axis, opts=opts, arrays=masked.arrays(mask))
    core = cores.rank_core if output == "rank" else cores.sort_core
    return Call(core, p, opts, masked.with_mask(p, {"descending": boolean(descending, "descending")}, mask))


_bind_lapsum = functools.partial(_bind_rank_or_sort, LapsumOptions, lapsum, "lapsum")


def _bind_lapsum_topk(x: Any, k: Any, axis: Any, options: dict[str, Any]) -> Call[Any]:
    """``soft_topk_mask(method="lapsum")``: ``k`` a real in (0, n), or an array of per-row k (the batch shape).

    With a ``mask``, the top k of each row's valid entries (k >= n_v selects them all).
    """
    mask = options.pop("mask", None)
    opts, _ = LapsumOptions.parse(options, "soft_topk_mask(method='lapsum')", softness=DEFAULT_SOFTNESS)
    return bind_real_k(lapsum.topk_core, opts, x, k, axis, mask, "soft_topk_mask(method='lapsum')", closed=False)


def _bind_permutahedron_topk(x: Any, k: Any, axis: Any, options: dict[str, Any]) -> Call[Any]:
    """``soft_topk_mask(method="permutahedron")``: ``k`` a real in (0, n], or an array of per-row k (the batch shape).

    With a ``mask``, the top k of each row's valid entries (a row with k > n_v is NaN).
    """
    mask = options.pop("mask", None)
    opts = PermutahedronOptions.parse_for(options, "soft_topk_mask(method='permutahedron')")
    return bind_real_k(permutahedron.topk_core, opts, x, k, axis, mask, "soft_topk_mask(method='permutahedron')", closed=True)


def bind_real_k(core: Any, opts: Any, x: Any, k: Any, axis: Any, mask: Any, where: str, *, closed: bool) -> Call[Any]:
    """A top-k operator's call (``where``: its name in errors): ``k`` a real in (0, n) (``closed``: (0, n]) or an
    array of per-row k of the batch shape."""
    if is_array(k):
        p = prepare(x, axis=axis, opts=opts, arrays={"k": k, **masked.arrays(mask)})
        batch = tuple(p.x.shape[:-1])
        if tuple(k.shape) not in ((), batch):
            raise ValueError(f"k must be a number or an array of the batch shape {batch} (x without axis), got shape {tuple(k.shape)}")
        if not p.xp.isdtype(k.dtype, ("real floating", "integral")):
            raise TypeError(f"k must be a real array, got dtype {k.dtype}")
        k = p.xp.broadcast_to(p.xp.astype(k, p.x.dtype), batch)
        return Call(core, p, opts, masked.with_mask(p, {"k": k}, mask))
    if isinstance(k, bool) or not isinstance(k, numbers.Real):
        raise TypeError(f"k must be a real number or an array, got {type(k).__name__}")
    k = concrete_number(k)
    p = prepare(x, axis=axis, opts=opts, arrays=masked.arrays(mask))
    if not (math.isfinite(k) and 0 < k and (k <= p.n if closed else k < p.n)):
        interval = f"(0, n] = (0, {p.n}]" if closed else f"(0, n) = (0, {p.n})"
        raise ValueError(f"{where}: k must lie in the interval {interval}, got {k!r}")
    return Call(core, p, opts, masked.with_mask(p, {"k": float(k)}, mask))


# -- "diffsort" (options: rankops.permutations.NetworkOptions) ------------------------------------


_bind_diffsort = functools.partial(_bind_rank_or_sort, NetworkOptions, diffsort, "diffsort")


# -- the declarations ---------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Method:
    """A relaxation, declared once: what the operators that take ``method=`` dispatch on.

    ``options``: its option set (names, defaults, checks, its temperature),
    of which it takes ``names`` (None: every field); ``documented_in``: the
    docstring sections (``rankops._docstrings.SECTIONS``) that describe its
    options, gathered into ``soft_sort`` / ``soft_rank``'s;
    ``bind(output, x, axis, descending, options)``: a ``soft_sort`` or
    ``soft_rank`` call (``output`` "sort" or "rank") bound to its core;
    ``bind_topk(x, k, axis, options)``: a ``soft_topk_mask`` call, for a
    method that has one. The method's softness calibration lives with its
    core (``rankops._cores.softness.softened``), keyed by its options.
    """

    options: type[Options]
    names: tuple[str, ...] | None
    documented_in: tuple[str, ...]
    bind: Callable[[str, Any, Any, Any, dict[str, Any]], Call[Any]]
    bind_topk: Callable[[Any, Any, Any, dict[str, Any]], Call[Any]] | None = None

    @property
    def option_names(self) -> tuple[str, ...]:
        """The fields of ``options`` it takes (its array options, ``mask`` and Sinkhorn's weights, aside)."""
        return self.names if self.names is not None else tuple(f.name for f in dataclasses.fields(self.options))

    @property
    def operators(self) -> tuple[str, ...]:
        """The public operators that take this method."""
        return ("soft_sort", "soft_rank") + (("soft_topk_mask",) if self.bind_topk is not None else ())


# every method of soft_sort and soft_rank; the first is their default
METHODS: dict[str, Method] = {
    "sinkhorn": Method(TransportOptions, GRID_OPTIONS, ("sinkhorn_options", "targets", "weights", "relaxations"), _bind_sinkhorn,
                       bind_topk=_bind_sinkhorn_topk_mask),
    "softsort": Method(PermutationOptions, OPTION_NAMES["softsort"], ("relaxations",), functools.partial(_bind_permutation, "softsort")),
    "neuralsort": Method(PermutationOptions, OPTION_NAMES["neuralsort"], ("relaxations",),
                         functools.partial(_bind_permutation, "neuralsort")),
    "permutahedron": Method(PermutahedronOptions, None, ("fast",), _bind_permutahedron, bind_topk=_bind_permutahedron_topk),
    "lapsum": Method(LapsumOptions, None, ("fast",), _bind_lapsum, bind_topk=_bind_lapsum_topk),
    "diffsort": Method(NetworkOptions, None, ("networks",), _bind_diffsort),
}

# the methods of soft_topk_mask, in declaration order (the first is its default)
TOPK_METHODS = tuple(name for name, m in METHODS.items() if m.bind_topk is not None)


# soft_sort's and soft_rank's method parameter and every method's option sections, from the declarations
_METHODS_SECTION = methods_section({name: m.documented_in for name, m in METHODS.items()})


def _declared(method: Any, among: tuple[str, ...], where: str) -> Method:
    if not (isinstance(method, str) and method in among):
        raise ValueError(f"method must be one of {', '.join(map(repr, among))}{where}, got {method!r}")
    return METHODS[method]


def bind_sort(output: str, x: Any, axis: Any, descending: Any, method: Any, options: dict[str, Any]) -> Call[Array]:
    """``soft_sort`` / ``soft_rank`` (``output`` "sort" or "rank") bound by ``method``'s declaration."""
    return _declared(method, tuple(METHODS), "").bind(output, x, axis, descending, options)


def bind_topk_mask(x: Any, k: Any, axis: Any, method: Any, options: dict[str, Any]) -> Call[Array]:
    """``soft_topk_mask`` bound by ``method``'s declaration."""
    bind = _declared(method, TOPK_METHODS, " for soft_topk_mask").bind_topk
    assert bind is not None  # TOPK_METHODS holds the methods that have one
    return bind(x, k, axis, options)


@operator(methods=tuple(METHODS))
@fill_doc(**SECTIONS, methods=_METHODS_SECTION)
def soft_sort(x: Array, /, *, axis: int | tuple[int, ...] = -1, descending: bool = False, method: str = "sinkhorn", **options: Any) -> Call[Array]:
    """Differentiable sort of ``x`` along ``axis`` (ascending by default).

    ``P @ x`` for a relaxed permutation matrix ``P``. With ``"sinkhorn"``
    this is ``b^-1 (P^T x)`` for the plan ``P`` between the squashed entries
    and m targets on [0, 1] (Cuturi, Teboul & Vert 2019, Definition 1); the
    values are exact convex combinations of the entries. Sinkhorn's
    ``topk=k`` keeps the k largest only: k targets of mass 1/n and one
    filler target of mass (n - k)/n, an n x (k + 1) transport (as OTT-JAX's
    ``soft_sort.sort(topk=k)``).

    Parameters
    ----------
    %(x)s
    descending : bool, default False
        Largest first when True (the ascending operator applied to ``-x``).
    %(methods)s

    Returns
    -------
    array
        Shape, namespace, device and floating dtype of ``x`` (``axis`` of
        length m with ``num_targets=m``); tends to ``sort(x)`` as ``epsilon``
        or ``tau`` goes to 0. With ``return_info=True``: ``(value, info)``.

    Examples
    --------
    >>> import numpy as np, rankops
    >>> x = np.array([[0.3, -1.2, 2.5, 0.7]])
    >>> np.round(rankops.soft_sort(x, epsilon=1e-3), 2)
    array([[-1.2,  0.3,  0.7,  2.5]])
    >>> np.round(rankops.soft_sort(x, topk=2, epsilon=1e-3), 2)
    array([[0.7, 2.5]])
    >>> np.round(rankops.soft_sort(x, method="neuralsort", tau=1.0), 2)
    array([[-0.84,  0.27,  0.71,  2.16]])
    >>> np.round(rankops.soft_sort(x, method="permutahedron", strength=1.0), 3)
    array([[-0.925,  0.075,  1.075,  2.075]])
    """
    return bind_sort("sort", x, axis, descending, method, options)


@operator(methods=tuple(METHODS))
@fill_doc(**SECTIONS, methods=_METHODS_SECTION)
def soft_rank(x: Array, /, *, axis: int | tuple[int, ...] = -1, descending: bool = False, method: str = "sinkhorn", **options: Any) -> Call[Array]:
    """Differentiable 1-based ranks of ``x`` along ``axis``.

    Ascending like ``scipy.stats.rankdata`` (the smallest entry has rank 1);
    ``descending=True`` gives the largest entry rank 1. ``P^T @ (1..n)`` for
    a relaxed permutation matrix ``P``; with ``"sinkhorn"``, ``n a^-1 (P
    b_bar)`` for the transport plan ``P`` and ``b_bar = cumsum(b)`` (Cuturi,
    Teboul & Vert 2019, Definition 2). SoftSort / NeuralSort matrices are
    row- but not doubly stochastic: the ranks of a row always sum to
    ``n (n + 1) / 2``, yet at large ``tau`` one rank can leave ``[1, n]``.

    Parameters
    ----------
    %(x)s
    descending : bool, default False
        Rank 1 for the largest entry when True.
    %(methods)s

    Returns
    -------
    array
        Shape, namespace, device and floating dtype of ``x``; tends to
        ``rankdata(x)`` on inputs without ties as ``epsilon`` or ``tau`` goes
        to 0. With ``return_info=True``: ``(value, info)``.

    Examples
    --------
    >>> import numpy as np, rankops
    >>> x = np.array([[0.3, -1.2, 2.5, 0.7]])
    >>> np.round(rankops.soft_rank(x, epsilon=1e-3), 2)
    array([[2., 1., 4., 3.]])
    >>> np.round(rankops.soft_rank(x, method="softsort", tau=0.5), 2)
    array([[2.32, 1.05, 3.92, 2.72]])
    >>> np.round(rankops.soft_rank(x, method="lapsum", alpha=0.5), 2)
    array([[2.21, 1.04, 3.98, 2.78]])
    >>> ranks, info = rankops.soft_rank(x, return_info=True)
    >>> bool(info.converged.all())
    True
    """
    return bind_sort("rank", x, axis, descending, method, options)
