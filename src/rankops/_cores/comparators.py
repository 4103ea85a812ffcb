r"""Relaxed comparators: how much of its partner's value a wire takes in a soft swap.

A comparator of a sorting network holds ``a`` on its low wire (which gets the
minimum) and ``b`` on its high wire. Petersen et al. (ICML 2021, Eq. 3)
relax it with a sigmoid ``f`` of ``u = steepness * (b - a)``:

    min' = f(u) a + (1 - f(u)) b,    max' = (1 - f(u)) a + f(u) b.

Every ``f`` here is a CDF symmetric about 0 (``f(-u) = 1 - f(u)``), so a
wire keeps ``1 - c`` of its own value and takes ``c = f(tau d)`` of its
partner's, with ``d`` the partner's value minus its own and ``tau =
-steepness`` on the low wire, ``+steepness`` on the high one: the same rule
on both wires. The relaxations (ICLR 2022, "Monotonic Differentiable Sorting
Networks", Sec. 4-5; the ``diffsort`` package's names):

- ``"logistic"``: ``sigma(u)``;
- ``"logistic_phi"``: ``sigma(u / (|d| + 1e-10) ** art_lambda)``, the
  activation replacement trick (ICML 2021, Sec. 4), ``|d| = |u| / steepness``;
- ``"gaussian"``: ``Phi(u)``;
- ``"reciprocal"``: ``(1 + u / (2 + |u|)) / 2``;
- ``"cauchy"``: ``1/2 + arctan(u) / pi``;
- ``"optimal"``: ``1/2 + clip(u, -1/4, 1/4)`` for ``|u| <= 1/4``, ``1 -
  1/(16 (|u| + 1e-10))`` above (mirrored below).

The last three make the whole network monotonic (ICLR 2022, Theorem 3):
every sorted output is non-decreasing in every input. Each relaxation gives
``f(u)`` and its slope ``f'(u)`` (for ``"logistic_phi"`` the slope in ``u``
of the whole activation), which the backward passes use.
"""

from __future__ import annotations

import math
from typing import Any

from .._lib._adapters import get_adapter

__all__ = ["DISTRIBUTIONS", "shares", "slope", "clamp_argument"]

DISTRIBUTIONS = ("cauchy", "reciprocal", "optimal", "logistic", "logistic_phi", "gaussian")

# |u| is clamped here: an overflowing difference (inf) would make u * f'(u) = inf * 0. The
# relaxations are 0 or 1 to the last bit long before (the slowest, cauchy: 1 - 3e-31).
_U_MAX = 1e30
_PHI_FLOOR = 1e-10  # diffsort's guard in |d| + 1e-10 and |u| + 1e-10
# constants of this module, not math.pi in a network's loop body: torch.compile(dynamic=True) makes math.pi a
# symbol where the softness reads it first, and a scan's body may close over no symbolic float
_INV_PI = 1.0 / math.pi
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


def clamp_argument(xp: Any, u: Any) -> Any:
    return get_adapter(xp).clip(xp, u, -_U_MAX, _U_MAX)


def _sigmoid(xp: Any, w: Any) -> tuple[Any, Any]:
    """``(sigma(w), sigma'(w))`` from ``exp(-|w|)``: no overflow, no NumPy warning."""
    e = xp.exp(-xp.abs(w))
    inv = 1.0 / (1.0 + e)
    return xp.where(w >= 0, inv, e * inv), e * inv * inv


def _phi_scale(xp: Any, u: Any, steepness: float, art_lambda: float) -> Any:
    return (xp.abs(u) / steepness + _PHI_FLOOR) ** art_lambda


def shares(xp: Any, adapter: Any, distribution: str, u: Any, steepness: float, art_lambda: float) -> tuple[Any, Any]:
    """``(1 - f(u), f(u))``: the share of its own value a wire keeps and of its partner's it takes.

    Each is evaluated so that it keeps its relative precision where it is
    small: cauchy's as ``arctan2(1, -u) / pi`` and ``arctan2(1, u) / pi``
    (``1 - f(u) = f(-u)``), the others from the smaller one, ``f(-|u|)``,
    written in its tail's own form. As ``1/2 + arctan(u) / pi`` (and
    ``reciprocal``'s and ``optimal``'s ``1/2 - ...``), or as ``1 - f`` of a
    rounded ``f`` near 1, the small share loses its relative precision to
    cancellation, and a wire blends values of any magnitudes: on a float32
    row spread over 10^-2..10^2 the share of a far partner's value (3e-4 for
    cauchy at ``|u| = 10^3``) carried a relative error of 1e-4 into its
    product with that value, and the gradients were 1-3% off float64's.
    """
    if distribution == "cauchy":
        one = xp.ones_like(u)
        return xp.atan2(one, u) * _INV_PI, xp.atan2(one, -u) * _INV_PI
    a = xp.abs(u)
    if distribution in ("logistic", "logistic_phi"):
        e = xp.exp(-(a if distribution == "logistic" else a / _phi_scale(xp, u, steepness, art_lambda)))
        tail = e / (1.0 + e)
    elif distribution == "gaussian":
        tail = adapter.ndtr(xp, -a)
    elif distribution == "reciprocal":
        tail = 1.0 / (2.0 + a)
    else:  # "optimal": the inner quarter linear, the tails of a reciprocal
        tail = xp.where(a > 0.25, 1.0 / (16.0 * (a + _PHI_FLOOR)), 0.5 - a)
    low = u < 0
    return xp.where(low, 1.0 - tail, tail), xp.where(low, tail, 1.0 - tail)


def slope(xp: Any, distribution: str, u: Any, steepness: float, art_lambda: float) -> Any:
    """``df/du`` (``"logistic_phi"``: of ``sigma(u / (|u|/steepness + 1e-10)^lambda)``)."""
    if distribution == "logistic":
        return _sigmoid(xp, u)[1]
    if distribution == "logistic_phi":
        scale = _phi_scale(xp, u, steepness, art_lambda)
        a = xp.abs(u) / steepness
        # d/du [u / (a + floor)^lambda] = (a + floor - lambda a) / (a + floor)^(lambda + 1)
        return _sigmoid(xp, u / scale)[1] * (a + _PHI_FLOOR - art_lambda * a) / (scale * (a + _PHI_FLOOR))
    if distribution == "gaussian":
        return xp.exp(-0.5 * u * u) * _INV_SQRT_2PI
    if distribution == "reciprocal":
        r = 2.0 + xp.abs(u)
        return 1.0 / (r * r)
    if distribution == "cauchy":
        return _INV_PI / (1.0 + u * u)
    a = xp.abs(u)
    t = 4.0 * (a + _PHI_FLOOR)
    return xp.where(a > 0.25, 1.0 / (t * t), xp.ones_like(u))
