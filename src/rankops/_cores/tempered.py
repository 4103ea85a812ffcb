r"""A temperature that is an array: learnable, traced, and differentiated, for operators homogeneous in it.

Several operators depend on their temperature ``t`` only through a rescaled
input, up to a rescaled output:

    value(x; t) = t**k * value(x * t**p; 1),

LapSum's rank and top-k mask (``x / alpha``: p = -1, k = 0) and its sort
(k = 1); the permutahedron's rank (``x / strength``) and its l2 sort
(``P(rho / eps, -x) = P(rho, -eps x) / eps``: p = 1, k = -1, the
projection being jointly homogeneous) and its p-norm sort (Sander et al.
2023: ``mu = (z - v)^(q-1)``, so ``P(c z, c^(q-1) w) = c^(q-1) P(z, w)``
and p = q - 1, k = 1 - q, real exponents); a sorting network's rank and matrix
(``f(steepness (b - a))``: p = 1, k = 0) and its sort (convex combinations
of x: k = -1). The rule below runs the core at temperature 1 on the
rescaled input when ``t`` is an array; backends with autodiff differentiate the
two rescalings themselves, and the pullback (``rankops.vjp`` elsewhere)
adds ``t``'s cotangent

    dt = k <ct, value> / t + p <dx', x> t**(p - 1),   dx = dx' t**p,

with ``dx'`` the core's gradient for the rescaled input and the cotangent
``t**k ct``. A temperature given as a Python number runs the core as it is.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable

from .._lib._compat import is_array

__all__ = ["tempered"]


def _power(t: Any, e: float) -> Any:
    """``t**e``; a quotient or ``t`` itself for ``e = -1, 1`` (no power's rounding where the exponent is whole)."""
    return t if e == 1 else 1.0 / t if e == -1 else t**e


def tempered(
    name: str, powers: Callable[[dict[str, Any], Any], tuple[float, float] | None]
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator of a core rule homogeneous in the option ``name``; ``powers(params, opts) -> (p, k)`` as in the module docstring
    (real numbers).

    ``powers`` returns None for a call that is not homogeneous: the rule then gets the array itself.
    """

    def wrap(rule: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(rule)
        def run(xp: Any, x: Any, opts: Any, **params: Any) -> Any:
            t = getattr(opts, name)
            pk = powers(params, opts) if is_array(t) else None
            if pk is None:
                return rule(xp, x, opts, **params)
            p, k = pk
            t = xp.astype(t, x.dtype)
            scale = _power(t, p)
            outs, back = rule(xp, x * scale, dataclasses.replace(opts, **{name: 1.0}), **params)
            out_scale = None if k == 0 else _power(t, k)
            value = outs[0] if out_scale is None else outs[0] * out_scale

            def pullback(cts: tuple[Any, ...]) -> dict[str, Any]:
                ct = cts[0]
                inner = back(cts if ct is None or out_scale is None else (ct * out_scale, *cts[1:]))
                dx = inner["x"]
                dt = p * xp.sum(dx * x) * scale / t
                if out_scale is not None and ct is not None:
                    dt = dt + k * xp.sum(ct * value) / t
                return {**inner, "x": dx * scale, name: dt}

            return (value, *outs[1:]), pullback

        return run

    return wrap
