"""Hypothesis strategies for hostile inputs: shapes, dtypes, row values and hyper-parameters.

Rows are drawn by *kind* (ties, constant, near the float range, subnormal,
non-finite, ...) and filled from a seeded NumPy generator, so an example is
small to describe and quick to build; hypothesis still shrinks the shape,
the dtype, each row's kind and the seed. Shapes come from short lists; on a
backend that compiles per shape (JAX) from one list of five whole shapes,
``COMPILED_SHAPES``, so that its compiled programs are reused across
examples and operators.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np
from hypothesis import strategies as st

# 0 to 3 batch axes, an empty batch among them
BATCHES = [(), (1,), (3,), (2, 2), (2, 1, 2), (0,), (2, 0)]
SIZES = [1, 2, 3, 5, 8]
# a compiling backend's shapes: 0 to 3 batch axes, an empty batch, n = 1, 3, 5, 8
COMPILED_SHAPES = [(5,), (2, 2, 1), (2, 1, 2, 3), (2, 2, 8), (0, 3)]
FLOAT_DTYPES = ["float16", "bfloat16", "float32", "float64"]
INT_DTYPES = ["int32", "int64", "bool"]
ROW_KINDS = ["normal", "ties", "constant", "huge", "tiny", "subnormal", "mixed", "nonfinite"]


@dataclass(frozen=True)
class Limits:
    """The float range of a dtype, as NumPy float64 numbers."""

    max: float
    tiny: float  # smallest normal
    subnormal: float  # smallest subnormal


def limits(dtype: str) -> Limits:
    if dtype == "bfloat16":  # float32's exponent range
        return Limits(3.3895e38, 2.0 ** -126, 2.0 ** -133)
    f = np.finfo(dtype if dtype != "bool" and not dtype.startswith("int") else "float64")
    return Limits(float(f.max), float(f.smallest_normal), float(f.smallest_subnormal))


def row_values(kind: str, n: int, dtype: str, rng: np.random.Generator) -> np.ndarray:
    """One row of ``n`` float64 values of ``kind``, representable in ``dtype``."""
    lim = limits(dtype)
    huge = min(1e30, lim.max / 8)  # 1e30 where it exists; float16's range tops out at 65504
    tiny = max(1e-30, lim.tiny * 4)  # 1e-30 where it is a normal number
    if kind == "normal":
        return rng.normal(size=n) * float(rng.choice([1e-3, 1.0, 1e3]))
    if kind == "ties":
        return rng.integers(-1, 2, size=n).astype(np.float64) * 1.5
    if kind == "constant":
        return np.full(n, float(rng.normal()))
    if kind == "huge":
        return rng.choice([-1.0, 1.0], size=n) * huge * rng.uniform(0.1, 1.0, size=n)
    if kind == "tiny":
        return rng.normal(size=n) * tiny
    if kind == "subnormal":
        return rng.integers(-8, 9, size=n) * lim.subnormal
    if kind == "mixed":
        return rng.choice([-huge, -1.0, -tiny, 0.0, tiny, 1.0, huge], size=n)
    if kind == "nonfinite":
        row = rng.normal(size=n)
        row[rng.integers(0, n)] = float(rng.choice([np.inf, -np.inf, np.nan]))
        return row
    raise ValueError(kind)


def int_row(n: int, dtype: str, rng: np.random.Generator) -> np.ndarray:
    if dtype == "bool":
        return rng.integers(0, 2, size=n).astype(bool)
    big = 2**40 if dtype == "int64" else 2**20
    return rng.choice([rng.integers(-3, 4, size=n), rng.integers(-big, big, size=n)]).astype(dtype)


@dataclass(frozen=True)
class Example:
    x: np.ndarray  # float64 (or integer / bool) values, already rounded to ``dtype``
    dtype: str
    kinds: tuple[str, ...]  # one per row of the flattened batch

    @property
    def finite_rows(self) -> np.ndarray:
        rows = self.x.reshape(-1, self.x.shape[-1]).astype(np.float64)
        return np.isfinite(rows).all(axis=-1)


def rounded(values: np.ndarray, dtype: str) -> np.ndarray:
    """Values as they are in ``dtype`` (float64 holds every float16/bfloat16/float32 value)."""
    if dtype == "bfloat16":  # round to nearest even on the top 16 bits of float32
        bits = values.astype(np.float32).view(np.uint32).astype(np.uint64)
        bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
        return bits.astype(np.uint32).view(np.float32).astype(np.float64)
    with np.errstate(over="ignore"):
        return values.astype(dtype).astype(np.float64)


@st.composite
def examples(
    draw: st.DrawFn, dtypes: list[str], sizes: list[int] = SIZES, kinds: list[str] = ROW_KINDS, shapes: list[tuple[int, ...]] | None = None
) -> Example:
    """An example: a batch from ``BATCHES`` and n from ``sizes``, or a whole shape from ``shapes`` when given."""
    if shapes is None:
        batch = draw(st.sampled_from(BATCHES))
        n = draw(st.sampled_from(sizes))
    else:
        *batch, n = draw(st.sampled_from(shapes))
        batch = tuple(batch)
    dtype = draw(st.sampled_from(dtypes))
    rows = int(np.prod(batch))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    if dtype in INT_DTYPES:
        x = np.stack([int_row(n, dtype, rng) for _ in range(rows)]) if rows else np.zeros((0, n), dtype)
        return Example(x.reshape(batch + (n,)), dtype, ("integer",) * rows)
    row_kinds = tuple(draw(st.lists(st.sampled_from(kinds), min_size=rows, max_size=rows)))
    x = np.stack([row_values(k, n, dtype, rng) for k in row_kinds]) if rows else np.zeros((0, n))
    return Example(rounded(x, dtype).reshape(batch + (n,)), dtype, row_kinds)


# (backend, what) -> how many were tried; printed by conformance/conftest.py
TRIED: Counter = Counter()
