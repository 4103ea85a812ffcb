"""Docstring sections shared by the public operators (filled in by ``_lib._docs.fill_doc``)."""

from __future__ import annotations

import textwrap
from typing import Mapping

from .sinkhorn import DEFAULT_EPSILON, SOLVER_BUDGET

__all__ = ["SECTIONS", "methods_section"]

SECTIONS = {
    "softness": """
        softness : float or 0-d array, optional
            The one scale-free knob (docs/softness.md): ranks about ``softness``
            places from the hard ones on average, for every method, whatever
            the row's scale, shift and length (ranks, CDFs and masks are
            invariant under ``x -> a x + b``, ``a > 0``; sorted values and
            quantiles equivariant). It sets the method's own temperature per
            row from the row's scale and length; passing both raises
            ``ValueError``. A 0-d array receives a gradient. Default: 1.0 for
            every method but ``"sinkhorn"``, whose default is its ``epsilon``.
    """,
    "x": """
        x : array
            Any array API array (NumPy, CuPy, PyTorch, JAX, Dask, array-api-strict);
            integer and bool inputs are promoted to the default floating dtype.
        axis : int or tuple of ints, default -1
            The operator's axis; every other axis is a batch axis. A tuple of
            axes is one operator axis: they are flattened (in increasing order,
            C order) into one of length the product of their lengths, and the
            result is laid out back (an output axis of another length, as
            quantile levels or ``num_targets``, takes the first axis' place
            and the others are dropped).
    """,
    "sinkhorn_options": f"""
        epsilon : float or 0-d array, default {DEFAULT_EPSILON:g}
            Entropic regularisation in the units of the squashed cost (which the
            default squash bounds by 1): larger is smoother (OTT-JAX's
            ``epsilon``; not with ``softness``, which sets it from n). A 0-d
            array of the input's namespace is traced and receives a gradient.
{textwrap.indent(textwrap.dedent(SOLVER_BUDGET).strip(chr(10)), " " * 8)}""" + """
        squash : {"sigmoid", "arctan", "minmax", None}, default "sigmoid"
            How each row is mapped into [0, 1] before the cost: sigmoid (or
            arctan) of the standardized row, an affine map, or none.
        implicit : bool, default True
            Gradients by implicit differentiation of the fixed point (memory
            independent of the iterations run); False unrolls the iterations.
        return_info : bool, default False
            Also return a :class:`rankops.SinkhornInfo` (each row's ``converged``
            flag and marginal ``error``). A row that stops at ``max_iter`` above
            ``tol`` raises a :class:`rankops.ConvergenceWarning` wherever values
            can be read (not under ``jax.jit`` / ``grad`` / ``vmap``, not on Dask).
    """,
    "targets": """
        num_targets : int, optional
            m, the number of targets (default: the length of ``target_weights``, else n).
        target_weights : 1-D array, optional
            Probability weights b of the m targets (default uniform); differentiable.
            A negative or non-finite entry, or all zeros, make every row NaN.
    """,
    "weights": """
        weights : array, optional
            The entries' masses a (default uniform, 1/n): shaped like ``x``, or
            1-D of length n for every row; normalized per row, ``a = w / sum(w)``
            (the squash does not see their values); differentiable. Weighted
            sorts and quantiles read the weighted quantile function; an integer
            weight k is the entry repeated k times. A zero weight is
            ``mask=False`` there; a row with a negative or non-finite weight,
            or all zeros, is NaN; not with ``topk``.
        mask : bool array, optional
            True for the valid entries (shaped like ``x``, or broadcastable to
            it): each row's valid entries get the operator of those entries
            alone, the others 0 and no gradient (a soft sort's n_v values come
            first); a row without a valid entry is NaN. Ragged rows, padded
            (see docs/api.md, "Ragged rows").
    """,
    "cost_power": """
        power : float, default 2
            Exponent of the transport cost ``|y_j - g(x)_i| ** power``.
    """,
    "relaxations": """
        power : float or 0-d array
            ``method="sinkhorn"``: exponent of the transport cost ``|y_j -
            g(x)_i| ** power`` (a number, default 2). ``method="softsort"``:
            exponent of the distance ``|s_[i] - s_j| ** power`` (default 1; a 0-d
            array is learnable).
        tau : float or 0-d array
            ``"softsort"``, ``"neuralsort"``: temperature in the units of x
            (instead of ``softness``); the hard operator as ``tau -> 0``. A 0-d
            array receives a gradient.
        hard : bool, default False
            ``"softsort"``, ``"neuralsort"``: straight-through, the exact value
            with the gradient of the relaxed one.
        block : "auto", int or None, default "auto"
            ``"softsort"``, ``"neuralsort"``: rows of the n x n matrix formed at
            a time, in the forward and backward passes (memory O(n block) per
            row); "auto" sizes blocks to about 36 MiB, None forms the whole
            matrix and lets torch / JAX differentiate it.
    """,
    "matrix": """
        s : array, shape (..., n)
            Scores; every leading axis is a batch axis.
        softness : float or 0-d array, optional
            Scale-free softness (docs/softness.md): the matrix's ranks
            ``P^T (1..n)`` lie about ``softness`` places from the hard ones,
            whatever the scale and length of the row; sets ``tau`` per row
            (not with ``tau``). A 0-d array receives a gradient.
        tau : float or 0-d array, default 1.0
            Temperature (used when ``softness`` is not given); as ``tau -> 0``
            the matrix tends to the permutation matrix that sorts ``s``. A 0-d
            array receives a gradient.
        descending : bool, default True
            Row 0 is the largest entry when True (the papers' convention).
        hard : bool, default False
            Straight-through: the exact permutation matrix, with the gradient
            of the relaxed one.
        stochastic : bool, default False
            Sample from the Plackett-Luce distribution with log-weights ``s``
            (Gumbel-perturbed scores, Grover et al. 2019, Sec. 4.1).
        key : None, int or generator, optional
            The noise's seed or the framework's own generator
            (``torch.Generator``, a ``jax.random`` key, a
            ``numpy.random.Generator``); None uses torch's global generator or a
            fresh NumPy one, and is an error on JAX.
        n_samples : int, optional
            Prepend a sample axis of this length (``stochastic=True`` only).
        mask : bool array, optional
            True for the valid entries: each row's matrix is that of its n_v
            valid entries alone, in the first n_v rows and their columns (the
            rest 0; a row without a valid entry NaN). See docs/api.md, "Ragged rows".
    """,
    "matrix_returns": """
        Returns
        -------
        P : array, shape ([n_samples,] ..., n, n)
            Row-stochastic; row i is a distribution over the items (columns) for
            the i-th position of the sorted order. Same namespace, device and
            floating dtype as ``s``.
    """,
    "fast": """
        strength : float or 0-d array
            ``method="permutahedron"``: regularisation strength of the projection
            onto the permutahedron (Blondel et al. 2020; torchsort's
            ``regularization_strength``, instead of ``softness``); the hard
            operator as ``strength -> 0``.
        regularization : {"l2", "kl", "lp"}, default "l2"
            ``method="permutahedron"``: quadratic or entropic regularisation,
            or ``"lp"``: the p-norm
            regulariser ``(1/p) sum |mu_i|^p`` of Sander et al. 2023 (smooth
            where ``"l2"`` has kinks: docs/fast-methods.md); ``softness`` is
            calibrated for p in [6/5, 2] (its default ``softness=1``), below
            that pass ``strength`` (default 1.0).
        p : float in (1, 2], default 4/3
            ``regularization="lp"``: the exponent (``p = 2`` is ``"l2"``).
        alpha : float or 0-d array
            ``method="lapsum"``: scale of the Laplace CDFs summed, in the units
            of x (after Struski et al. 2025; instead of ``softness``); the hard
            operator as ``alpha -> 0``.
    """,
    "networks": """
        network : {"odd_even", "bitonic"}, default "odd_even"
            ``method="diffsort"``: the sorting network (odd-even transposition,
            n layers; Batcher's bitonic sorter, ``L (L + 1) / 2`` layers).
        distribution : {"cauchy", "reciprocal", "optimal", "logistic", "logistic_phi", "gaussian"}, default "cauchy"
            ``method="diffsort"``: the comparators' relaxation (a CDF); the
            first three are monotonic (Petersen et al. 2022).
        steepness : float or 0-d array
            ``method="diffsort"``: the comparators' inverse temperature, in the
            units of 1 / x (diffsort's ``steepness``, instead of ``softness``).
        art_lambda : float, default 0.25
            ``method="diffsort"``, ``distribution="logistic_phi"``: the
            activation replacement trick's exponent.
    """,
}

# the start of a Returns section whose value is laid out as x (the sentence goes on in the docstring)
SECTIONS["returns_like_x"] = """
    Returns
    -------
    array
        Shape, namespace, device and floating dtype of ``x``;
"""

# an operator whose only other parameters are the solver's and the cost's
SECTIONS["sinkhorn_other_parameters"] = "\n".join([
    "Other Parameters", "----------------",
    *(textwrap.dedent(SECTIONS[name]).strip("\n") for name in ("softness", "sinkhorn_options", "cost_power")),
])


def methods_section(documented_in: Mapping[str, tuple[str, ...]]) -> str:
    """soft_sort / soft_rank: the choice among the methods (``documented_in``'s keys; the first is the default), then the
    softness and every method's option sections (its value: their names), each once, in declaration order."""
    names = tuple(documented_in)
    choice = ", ".join(f'"{m}"' for m in names)
    sections = dict.fromkeys(["softness", *(section for m in names for section in documented_in[m])])
    return "\n".join([
        textwrap.dedent(f"""
        method : {{{choice}}}, default "{names[0]}"
            The relaxation; each takes the options listed below. An option the
            method does not know raises ``TypeError``. ``"permutahedron"`` and
            ``"lapsum"`` cost O(n log n) per row (one sort; no n x n matrix).

        Other Parameters
        ----------------"""),
        *(textwrap.dedent(SECTIONS[name]).strip("\n") for name in sections),
    ])
