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

__all__ = ["DISTRIBUTIONS", "weight", "slope", "clamp_argument"]

DISTRIBUTIONS = ("cauchy", "reciprocal", "optimal", "logistic", "logistic_phi", "gaussian")

# |u| is clamped here: an overflowing difference (inf) would make u * f'(u) = inf * 0. The
# relaxations are 0 or 1 to the last bit long before (the slowest, cauchy: 1 - 3e-31).
_U_MAX = 1e30
_PHI_FLOOR = 1e-10  # diffsort's guard in |d| + 1e-10 and |u| + 1e-10


def clamp_argument(xp: Any, u: Any) -> Any:
    return xp.clip(u, -_U_MAX, _U_MAX)


def _sigmoid(xp: Any, w: Any) -> tuple[Any, Any]:
    """``(sigma(w), sigma'(w))`` from ``exp(-|w|)``: no overflow, no NumPy warning."""
    e = xp.exp(-xp.abs(w))
    inv = 1.0 / (1.0 + e)
    return xp.where(w >= 0, inv, e * inv), e * inv * inv


def _phi_scale(xp: Any, u: Any, steepness: float, art_lambda: float) -> Any:
    return (xp.abs(u) / steepness + _PHI_FLOOR) ** art_lambda


def weight(xp: Any, adapter: Any, distribution: str, u: Any, steepness: float, art_lambda: float) -> Any:
    """``f(u)``: the share of its partner's value a wire takes."""
    if distribution == "logistic":
        return _sigmoid(xp, u)[0]
    if distribution == "logistic_phi":
        return _sigmoid(xp, u / _phi_scale(xp, u, steepness, art_lambda))[0]
    if distribution == "gaussian":
        return adapter.ndtr(xp, u)
    if distribution == "reciprocal":
        return 0.5 + 0.5 * u / (2.0 + xp.abs(u))
    if distribution == "cauchy":
        return 0.5 + xp.atan(u) * (1.0 / math.pi)
    # "optimal": the inner quarter linear, the tails of a reciprocal
    a = xp.abs(u)
    tail = 0.25 - 1.0 / (16.0 * (a + _PHI_FLOOR))
    inner = xp.clip(u, -0.25, 0.25)
    return 0.5 + xp.where(a > 0.25, xp.where(u > 0, 0.25 + tail, -0.25 - tail), inner)


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
        return xp.exp(-0.5 * u * u) * (1.0 / math.sqrt(2.0 * math.pi))
    if distribution == "reciprocal":
        r = 2.0 + xp.abs(u)
        return 1.0 / (r * r)
    if distribution == "cauchy":
        return (1.0 / math.pi) / (1.0 + u * u)
    a = xp.abs(u)
    t = 4.0 * (a + _PHI_FLOOR)
    return xp.where(a > 0.25, 1.0 / (t * t), xp.ones_like(u))
