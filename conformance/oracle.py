"""Exact references that decide when a finite row may give a non-finite result.

The property suite requires a finite row to give a finite value and a
finite gradient. Where that cannot hold, the reason is decided here by a
computation, never by the kind or scale of the row that was drawn:

- **Beyond the range** (``gradient-overflow``, ``value-overflow``): the same
  call in float64 on the same backend. float64 holds every float16,
  bfloat16 and float32 value exactly, so casting the inputs (and the
  cotangent, rounded to the value's dtype first) up asks the same question
  with more range and precision. An entry of the low-precision result may be
  ``+-inf`` only where the float64 one has the same sign and a magnitude
  past ``RANGE_SLACK`` times that dtype's largest finite number: ``+-inf``
  is then the rounded answer. ``RANGE_SLACK`` leaves room for the
  low-precision computation's own rounding near the edge of the range.
  float64 examples have no wider dtype on the backend; there the reference is
  the same call on the row multiplied by an exact power of two ``c`` that
  brings it to magnitude 1. Where the operator is homogeneous, ``f(c x) =
  c**d f(x)`` with ``d`` 0 or 1 (checked on the values, not assumed), the
  gradient is exactly ``c**(1 - d)`` times the one at ``c x``, whose
  magnitude is then compared with float64's range. The same reference in
  the example's own dtype decides rows whose natural gradient scale
  ``1 / max|x|`` is itself beyond the range (float32 rows of subnormals):
  there the float64 gradient is that scale times rounding noise, and
  ``+-inf`` is accepted where it is the exact rounding of what the operator
  computes for the normalized row, scaled back by the power of two.
- **Unrepresentable transport** (``cost-overflow``): with ``squash=None`` a
  Sinkhorn operator's cost is ``|y_j - x_i| ** power / epsilon`` on targets
  ``y`` in [0, 1] (``rankops.sinkhorn``: the caller's cost over epsilon).
  Where its largest entry, evaluated in float64, exceeds the compute dtype's
  range, the problem the row poses does not exist in that dtype, and the row
  may give anything, NaN included (in its own row only: the rows-independent
  check still applies).
- **Flushed subnormals** (``subnormals-flushed``): the backend's own
  arithmetic on the row (``x * 1``) is read back. XLA on CPU flushes
  subnormals to zero there, and the row the operator saw is then the
  flushed one: ranges and exact sorts are checked against that row.

NaN from a finite row is never admissible except under ``cost-overflow``.
"""

from __future__ import annotations

import math

import numpy as np

from .strategies import limits

RANGE_SLACK = 0.5  # a float64 reference beyond half the dtype's range may round to +-inf there
_HOMOGENEITY_RTOL = 1e-6


def compute_dtype(dtype: str) -> str:
    """What the operators compute in: float32 for float16 / bfloat16 (and integer outputs of float32)."""
    return "float32" if dtype in ("float16", "bfloat16") else dtype


def overflow_admissible(low: np.ndarray, ref: np.ndarray, dtype: str) -> np.ndarray:
    """Entries of a finite row's result in ``dtype`` that may be +-inf: the float64 reference ``ref`` lies beyond the range."""
    beyond = np.abs(ref) > RANGE_SLACK * limits(dtype).max
    return np.isinf(low) & beyond & (np.sign(low) == np.sign(ref))


def exact_scale_exponents(rows: np.ndarray) -> np.ndarray:
    """Per row, the power of two ``k >= 0`` that brings its largest magnitude to [0.5, 1) (0 for rows already there or above, and all-zero rows)."""
    top = np.max(np.abs(rows), axis=-1)
    with np.errstate(divide="ignore"):
        exponent = np.frexp(top)[1]  # top = m * 2**e with m in [0.5, 1)
    return np.where(top > 0, np.maximum(-exponent, 0), 0).astype(np.int64)


def homogeneity_rtol(dtype: str) -> float:
    """How closely ``f(2**k x)`` must match ``2**(k d) f(x)``: 16 units of ``dtype``'s rounding, at least 1e-6.

    The two calls differ only by the exact power of two, so a scale-free
    operator gives them nearly bit for bit; a factor ``2**k`` with k >= 1
    separates the degrees 0 and 1 far beyond this.
    """
    eps = 2.0**-7 if dtype == "bfloat16" else float(np.finfo(dtype).eps)
    return max(_HOMOGENEITY_RTOL, 16 * eps)


def homogeneity_degree(value: np.ndarray, scaled_value: np.ndarray, k: int, rtol: float = _HOMOGENEITY_RTOL) -> int | None:
    """``d`` in {0, 1} with ``f(2**k x) = 2**(k d) f(x)`` on this row's values, or None (not homogeneous)."""
    if k == 0:
        return 0
    for d in (0, 1):
        ref = np.ldexp(scaled_value, -k * d)
        scale = max(np.max(np.abs(ref)), np.max(np.abs(value)), np.finfo(np.float64).tiny)
        if np.all(np.isfinite(ref)) and np.all(np.isfinite(value)) and np.max(np.abs(ref - value)) <= rtol * scale:
            return d
    return None


def rescaled_gradient(scaled_gradient: np.ndarray, k: int, d: int) -> np.ndarray:
    """The gradient at x from the one at ``2**k x`` for degree ``d``: ``2**(k (1 - d))`` times it (+-inf where that passes float64)."""
    with np.errstate(over="ignore"):
        return np.ldexp(scaled_gradient, k * (1 - d))


def scaled_cost(p: dict, row: np.ndarray, sinkhorn_cost: bool, dtype: str) -> float:
    """The largest entry of a Sinkhorn row's scaled cost ``C / epsilon``, evaluated in float64 (inf where C itself does not fit its dtype).

    Squashed rows lie in [0, 1] and their cost is at most ``1 / epsilon``:
    that bound is returned for them.
    """
    if not sinkhorn_cost and p.get("squash", "sigmoid") is not None:
        return 1.0 / p["epsilon"]
    with np.errstate(over="ignore"):
        if sinkhorn_cost:  # rankops.sinkhorn on the suite's cost |x_i - x_j|, formed in the input's dtype
            top = np.max(row) - np.min(row)
        else:  # targets in [0, 1], the cost formed in the compute dtype
            top = np.max(np.maximum(np.abs(row), np.abs(row - 1.0))) ** np.float64(p["power"])
    formed_in = limits(dtype if sinkhorn_cost else compute_dtype(dtype)).max
    return math.inf if not top <= formed_in else float(top) / p["epsilon"]


def cost_decision(p: dict, row: np.ndarray, sinkhorn_cost: bool, dtype: str) -> str:
    """``"cost-overflow"``, ``"beyond-precision"`` or "" for one finite row of a Sinkhorn operator."""
    top, compute = scaled_cost(p, row, sinkhorn_cost, dtype), compute_dtype(dtype)
    if top > limits(compute).max:
        return "cost-overflow"
    # the spacing of floats at the largest cost exceeds 1: exp(-C / epsilon) is not determined
    # by the input to within a factor e, and no plan is
    return "beyond-precision" if top * float(np.finfo(compute).eps) >= 1.0 else ""
