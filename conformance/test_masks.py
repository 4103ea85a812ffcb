"""Ragged rows, as a property of every operator and method that takes ``mask`` (issue 33, item 1).

For each property ``Spec`` of such an operator, hypothesis draws an
example (shapes, dtypes, row kinds of ``strategies.examples``), one of the
spec's option sets, and a mask: random, all but one entry masked, none
masked, or a row with every entry masked; the masked entries hold padding
(NaN, inf or a large number). Then, on every backend:

- each row's valid outputs equal the same call on that row's valid entries
  alone (the compacted row, same backend and dtype; on JAX, where each
  row length compiles a program of its own, on NumPy): a soft sort's first
  n_v positions, a quantile's levels, the others' valid entries;
- masked outputs are exactly 0, and a row without a valid entry (or whose
  valid entries are too few for a top-k's k) is NaN;
- the gradient (``rankops.vjp``) is exactly 0 at every masked entry and
  finite wherever the compacted row's is.

Sinkhorn's masked problem and the compacted one are different problems
with the same solution: both are solved to ``tol = 1e-9`` (float64), and
agree to what that leaves. The other methods agree to rounding.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import rankops
from rankops._lib._backends import get_backend

from .calls import array, to_numpy
from .operators import SPECS, Spec
from .strategies import COMPILED_SHAPES, TRIED, Example, examples

# the operators of the API's "Ragged rows: mask" (every method of each)
MASKED = (rankops.soft_rank, rankops.soft_sort, rankops.soft_cdf, rankops.soft_quantile, rankops.soft_quantile_normalize, rankops.soft_quantize,
          rankops.soft_topk_mask, rankops.isotonic_regression)
MASKED_SPECS = [s for s in SPECS if s.public in MASKED]
EXAMPLES = {"numpy": 12, "array_api_strict": 3, "torch": 6, "jax": 1, "dask": 2, "cupy": 6}  # JAX compiles each row length
MASK_KINDS = ("random", "all_but_one", "none", "empty_row")
PADDING = (np.nan, np.inf, 1e6)
SOLVED = {"tol": 1e-9, "max_iter": 20000}  # Sinkhorn: both problems solved alike, far below the default tol


def _mask(kind: str, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    rows = int(np.prod(shape[:-1]))
    n = shape[-1]
    if kind == "none":
        m = np.ones((rows, n), bool)
    elif kind == "all_but_one":
        m = np.zeros((rows, n), bool)
        m[np.arange(rows), rng.integers(0, n, size=rows)] = True
    else:
        m = rng.uniform(size=(rows, n)) < 0.6
        if kind == "empty_row" and rows:
            m[rng.integers(0, rows)] = False
    return m.reshape(shape)


def _layout(fun: Any, kwargs: dict) -> str:
    """Where a row's valid outputs lie: the first n_v ("first"), all of them ("all"), or the valid entries ("entries")."""
    if fun is rankops.soft_quantile or (fun is rankops.soft_sort and ("num_targets" in kwargs or "topk" in kwargs)):
        return "all"
    return "first" if fun is rankops.soft_sort else "entries"


def _too_short(fun: Any, args: tuple, kwargs: dict, n_valid: int) -> bool:
    """A top-k whose k the valid entries cannot give: NaN (Sinkhorn: k > n_v; LapSum: k >= n_v)."""
    if fun is not rankops.soft_topk_mask:
        return False
    k = args[0]
    return k >= n_valid if kwargs.get("method") == "lapsum" else k > n_valid


def _call(spec: Spec, x: Any, p: dict, arr: Any) -> tuple[Any, tuple, dict]:
    """``spec.call``, with Sinkhorn solved to the tolerance both problems reach (``SOLVED``)."""
    fun, args, kwargs = spec.call(x, p, arr)
    return fun, args, ({**kwargs, **SOLVED} if spec.sinkhorn else kwargs)


def check_masked(backend: Any, device: Any, spec: Spec, ex: Example, p: dict, kind: str, pad: float, seed: int) -> None:
    rng = np.random.default_rng(seed)
    mask = _mask(kind, ex.x.shape, rng)
    padded = np.where(mask, ex.x, pad)
    dtype = ex.dtype
    arr = lambda v: backend.asarray(v, device=device)  # noqa: E731
    x = array(backend, device, padded, dtype)
    fun, args, kwargs = _call(spec, x, p, arr)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", rankops.ConvergenceWarning)
        value, pull = rankops.vjp(fun, x, *args, mask=arr(mask), **kwargs)
        got = to_numpy(backend, value)
        ct = np.random.default_rng(1).normal(size=got.shape)
        (grad,) = pull(array(backend, device, np.where(np.isnan(got), 0.0, ct), str(value.dtype).split(".")[-1]))[:1]
        grad = to_numpy(backend, grad)
    TRIED[(backend.name, "masked inputs")] += 1
    if backend.compiles:
        # each valid count is a row length, a program of its own there: the rows alone run on NumPy, which
        # test_contract holds to the same values
        backend, device = get_backend("numpy"), None
        fun, args, kwargs = _call(spec, np.asarray(padded, dtype=dtype), p, np.asarray)
    rows_x, rows_m = padded.reshape(-1, padded.shape[-1]), mask.reshape(-1, mask.shape[-1])
    out = got.reshape((rows_x.shape[0],) + got.shape[len(ex.x.shape) - 1 :])
    layout = _layout(fun, kwargs)
    rtol = {"float16": 2e-2, "bfloat16": 1e-1, "float32": 2e-4}.get(dtype, 1e-6)
    assert np.all(grad.reshape(rows_m.shape)[~rows_m] == 0.0), "a masked entry received a gradient"
    for i, (row, valid) in enumerate(zip(rows_x, rows_m)):
        n_valid = int(valid.sum())
        if n_valid == 0 or _too_short(fun, args, kwargs, n_valid):
            assert np.isnan(out[i]).all(), (i, out[i])
            continue
        if layout == "entries":
            assert np.all(out[i][~valid] == 0.0), out[i]
        elif layout == "first":
            assert np.all(out[i][n_valid:] == 0.0), out[i]
        alone = array(backend, device, row[valid], dtype)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", rankops.ConvergenceWarning)
            warnings.simplefilter("ignore", RuntimeWarning)  # a hostile compacted row's own NaN / overflow warnings
            expected = to_numpy(backend, fun(alone, *args, **kwargs))
        mine = out[i][valid] if layout == "entries" else out[i][:n_valid] if layout == "first" else out[i]
        scale = 1.0 + np.nanmax(np.abs(expected), initial=0.0)
        np.testing.assert_allclose(mine, expected.reshape(mine.shape), rtol=rtol, atol=rtol * scale, equal_nan=True,
                                   err_msg=f"row {i}, {n_valid} valid of {row.size}")


def _examples(backend: Any, spec: Spec) -> Any:
    # float dtypes a mask's rows are compared in (promoted integers are checked by the hostile-input suite);
    # Sinkhorn's two problems agree to the tolerance both reach: float64's
    dtypes = ["float64"] if backend.name == "jax" or spec.sinkhorn else ["float32", "float64"]
    return examples(dtypes, shapes=COMPILED_SHAPES[:3] if backend.compiles else None,
                    kinds=["normal", "ties", "constant", "huge", "tiny", "mixed"])


@pytest.mark.parametrize("spec", MASKED_SPECS, ids=lambda s: s.name)
def test_masked_rows_are_the_rows_of_their_valid_entries(backend, device, spec):
    budget = EXAMPLES.get(backend.name, 3)

    @settings(max_examples=budget, deadline=None, database=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(ex=_examples(backend, spec), kind=st.sampled_from(MASK_KINDS), pad=st.sampled_from(PADDING), seed=st.integers(0, 2**16),
           data=st.data())
    def run(ex: Example, kind: str, pad: float, seed: int, data: Any) -> None:
        options = spec.params(ex.x.shape[-1])
        p = data.draw(st.sampled_from(options.menu(4, seed)) if backend.compiles else options.strategy(), label="options")
        check_masked(backend, device, spec, ex, p, kind, pad, seed)

    run()


def test_every_masked_operator_and_method_has_a_spec():
    """The registry's side: each method of each masked operator is drawn above."""
    from rankops._registry import OPERATORS

    for fn in MASKED:
        for method in OPERATORS[fn]:
            assert any(s.public is fn and s.method == method for s in MASKED_SPECS), (fn.__name__, method)
