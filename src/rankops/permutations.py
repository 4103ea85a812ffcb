r"""Relaxed permutation matrices: SoftSort and NeuralSort.

Both map a score vector ``s`` of length n to an n x n unimodal row-stochastic
matrix ``P``; row i is a distribution over the items for the i-th position of
the sorted order, so ``P @ s`` approximates ``sort(s)`` and ``argmax`` of
each row recovers ``argsort(s)`` (Prillo & Eisenschlos 2020, Theorem 1).

SoftSort (Prillo & Eisenschlos 2020, Eq. 4)::

    P[i, j] = softmax_j( -|s_[i] - s_j| ** power / tau )

with ``s_[i]`` the i-th largest entry (i-th smallest when ascending).

NeuralSort (Grover et al. 2019; Prillo & Eisenschlos 2020, Eq. 3)::

    P[i, :] = softmax( ((n + 1 - 2 i) s - A_s 1) / tau ),   A_s[j, k] = |s_j - s_k|

computed in O(n^2) by forming the row sums ``A_s 1`` once (SoftSort appendix
A.4.5) rather than the O(n^3) product of the original code. Ascending order
uses ``-(n + 1 - 2 i)``, which reverses the rows.

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

import array_api_compat

from ._lib._adapters import get_adapter
from ._lib._apply import finish, prepare, run, with_value
from ._lib._compat import is_array
from ._lib._numerics import abs_power, abs_power_slope
from ._lib._validation import boolean, optional_count, positive_scalar

__all__ = ["softsort", "neuralsort"]


def positions(xp: Any, s: Any, n: int) -> Any:
    """``[1, 2, ..., n]`` in the dtype and on the device of ``s``."""
    return xp.arange(1, n + 1, dtype=s.dtype, device=array_api_compat.device(s))


def _softmax_back(xp: Any, p: Any, dp: Any) -> Any:
    """Pullback of a row softmax with output ``p``."""
    return p * (dp - xp.sum(dp * p, axis=-1, keepdims=True))


def _softsort_logits(xp: Any, s: Any, tau: Any, power: Any, descending: bool) -> tuple[Any, Any]:
    """Logits and their pullback ``dlogits -> (ds, {"tau": dtau, "power": dpower})`` (array ones only)."""
    s_sorted = xp.sort(s, axis=-1, descending=descending)
    diff = s_sorted[..., :, None] - s[..., None, :]
    d = xp.abs(diff)
    dp = abs_power(xp, d, power)
    # One n x n multiply instead of a negation and a division.
    logits = dp * (-1.0 / tau)

    def pullback(d_logits: Any) -> tuple[Any, Any]:
        d_d = d_logits * (-1.0 / tau)
        if is_array(power) or power != 1.0:
            d_d = d_d * abs_power_slope(xp, d, power)
        d_diff = d_d * xp.sign(diff)
        # sort's pullback sends position i's cotangent to the item sorted there
        order = hard_permutation(xp, s, descending)
        ds = xp.matmul(xp.sum(d_diff, axis=-1)[..., None, :], order)[..., 0, :] - xp.sum(d_diff, axis=-2)
        extra = {}
        if is_array(tau):
            extra["tau"] = xp.sum(d_logits * dp) / (tau * tau)
        if is_array(power):  # d(d ** p)/dp = d ** p log d, 0 at d = 0
            log_d = xp.log(xp.where(d == 0, xp.ones_like(d), d))
            extra["power"] = -xp.sum(d_logits * dp * log_d) / tau
        return ds, extra

    return logits, pullback


def _neuralsort_logits(xp: Any, s: Any, tau: Any, descending: bool) -> tuple[Any, Any]:
    """Logits and their pullback ``dlogits -> (ds, {"tau": dtau})`` (an array tau only)."""
    n = s.shape[-1]
    diff = s[..., :, None] - s[..., None, :]
    row_sums = xp.sum(xp.abs(diff), axis=-1)
    scaling = (n + 1) - 2 * positions(xp, s, n)
    if not descending:
        scaling = -scaling
    # Dividing the two vectors by tau before broadcasting saves a full n x n pass.
    logits = (scaling / tau)[:, None] * s[..., None, :] - (row_sums / tau)[..., None, :]

    def pullback(d_logits: Any) -> tuple[Any, Any]:
        ds = xp.matmul((scaling / tau)[None, :], d_logits)[..., 0, :]
        d_rows = -xp.sum(d_logits, axis=-2) / tau
        sign = xp.sign(diff)
        ds = ds + d_rows * xp.sum(sign, axis=-1) - xp.matmul(d_rows[..., None, :], sign)[..., 0, :]
        return ds, ({"tau": -xp.sum(d_logits * logits) / tau} if is_array(tau) else {})

    return logits, pullback


def hard_permutation(xp: Any, s: Any, descending: bool) -> Any:
    """Exact permutation matrix: ``P[i, j] = 1`` iff item j is i-th in order."""
    n = s.shape[-1]
    order = xp.argsort(s, axis=-1, descending=descending, stable=True)
    items = xp.arange(n, dtype=order.dtype, device=array_api_compat.device(s))
    return xp.astype(order[..., :, None] == items, s.dtype)


def straight_through(xp: Any, hard: Any, soft: Any) -> Any:
    """The value of ``hard`` with the gradient of ``soft``.

    ``stop(hard) + (soft - stop(soft))``: the bracket is exactly 0 in value
    (for finite entries), and only ``soft`` carries a gradient.
    """
    stop = get_adapter(xp).stop_gradient
    return stop(xp, hard) + (soft - stop(xp, soft))


def _finish_matrix(xp: Any, s: Any, logits: tuple[Any, Any], descending: bool, hard: bool) -> tuple[Any, Any]:
    """The matrix and its pullback ``dP -> {"x": ds, "tau": dtau, ...}`` (that of the relaxed matrix)."""
    z, logits_back = logits
    p_soft = get_adapter(xp).softmax(xp, z, -1)

    def pullback(dp: Any) -> dict[str, Any]:
        ds, extra = logits_back(_softmax_back(xp, p_soft, dp))
        return {"x": ds, **extra}

    if not hard:
        return p_soft, pullback
    return straight_through(xp, hard_permutation(xp, s, descending), p_soft), pullback


def softsort_matrix_vjp(
    xp: Any, s: Any, *, tau: Any, power: Any = 1.0, descending: bool, hard: bool = False
) -> tuple[Any, Any]:
    """Core of :func:`softsort` on a prepared array (operator axis last), with its pullback."""
    return _finish_matrix(xp, s, _softsort_logits(xp, s, tau, power, descending), descending, hard)


def neuralsort_matrix_vjp(xp: Any, s: Any, *, tau: Any, descending: bool, hard: bool = False) -> tuple[Any, Any]:
    """Core of :func:`neuralsort` on a prepared array (operator axis last), with its pullback."""
    return _finish_matrix(xp, s, _neuralsort_logits(xp, s, tau, descending), descending, hard)


softsort_matrix = with_value(softsort_matrix_vjp)
neuralsort_matrix = with_value(neuralsort_matrix_vjp)


def _relaxed_permutation(
    matrix: Any,
    s: Any,
    params: dict[str, Any],
    *,
    descending: Any,
    hard: Any,
    stochastic: Any,
    key: Any,
    n_samples: Any,
) -> Any:
    descending = boolean(descending, "descending")
    hard = boolean(hard, "hard")
    stochastic = boolean(stochastic, "stochastic")
    n_samples = optional_count(n_samples, "n_samples")
    if not stochastic and (key is not None or n_samples is not None):
        raise ValueError("key and n_samples are only used with stochastic=True")
    p = prepare(s, axis=-1, name="s", params=params)
    x = p.x
    if stochastic:
        shape = ((n_samples,) if n_samples is not None else ()) + tuple(x.shape)
        x = x + get_adapter(p.xp).gumbel(p.xp, key, shape, x.dtype, p.device)
        p = dataclasses.replace(p, x=x, axis=x.ndim - 1, ndim=x.ndim)
    out = run(matrix, p, (p.n, p.n), descending=descending, hard=hard, **params)
    return finish(p, out)


def softsort(
    s: Any,
    /,
    *,
    tau: Any = 1.0,
    power: Any = 1,
    descending: bool = True,
    hard: bool = False,
    stochastic: bool = False,
    key: Any = None,
    n_samples: int | None = None,
) -> Any:
    """SoftSort relaxed permutation matrix of ``s`` along its last axis.

    Parameters
    ----------
    s : array, shape (..., n)
        Scores. Every leading axis is a batch axis.
    tau : float or 0-d array, > 0
        Temperature; as ``tau -> 0`` the matrix tends to the permutation
        matrix that sorts ``s``.
    power : float, > 0
        Exponent p of the distance ``|s_[i] - s_j| ** p`` (1 in the paper's
        main experiments; 2 gives Gaussian rows, appendix Prop. 3).
    descending : bool
        Row 0 is the largest entry when True (the paper's convention).
    hard : bool
        Straight-through: return the exact permutation matrix, with the
        gradient of the relaxed one.
    stochastic, key, n_samples
        Sample from the Plackett-Luce distribution with log-weights ``s``
        (Gumbel-perturbed scores). ``key``: an int seed, or the framework's
        own generator (``torch.Generator``, a ``jax.random`` key, a
        ``numpy.random.Generator``); None uses torch's global generator, a
        fresh NumPy one, and is an error on JAX. ``n_samples=k`` prepends a
        sample axis of length k.

    Returns
    -------
    P : array, shape ([n_samples,] ..., n, n)
        Same namespace, device and floating dtype as ``s``.
    """
    params = {"tau": positive_scalar(tau, "tau"), "power": positive_scalar(power, "power")}
    return _relaxed_permutation(
        softsort_matrix, s, params, descending=descending, hard=hard, stochastic=stochastic, key=key, n_samples=n_samples
    )


def neuralsort(
    s: Any,
    /,
    *,
    tau: Any = 1.0,
    descending: bool = True,
    hard: bool = False,
    stochastic: bool = False,
    key: Any = None,
    n_samples: int | None = None,
) -> Any:
    """NeuralSort relaxed permutation matrix of ``s`` along its last axis.

    Same parameters and return value as :func:`softsort` (without
    ``power``): ``P[i, :] = softmax(((n + 1 - 2 i) s - A_s 1) / tau)``.
    """
    params = {"tau": positive_scalar(tau, "tau")}
    return _relaxed_permutation(
        neuralsort_matrix, s, params, descending=descending, hard=hard, stochastic=stochastic, key=key, n_samples=n_samples
    )
