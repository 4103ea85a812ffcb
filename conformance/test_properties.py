"""Property-based tests: every public operator, every CPU backend, hostile inputs.

For each drawn example (shape with 0-3 batch axes or an empty batch, n from
1; float16 / bfloat16 / float32 / float64 / integer / bool; rows of ties,
constants, values near the float range, 1e-30 and subnormals, mixed
magnitudes, inf and NaN) and hyper-parameters across their valid ranges:

- namespace, dtype, device and shape of the output follow the contract;
- the input is not modified;
- a finite row gives a finite output and a finite gradient (a NaN / inf row
  may give anything, but only in its own row);
- outputs lie in their documented ranges (``RANGES`` below);
- rows are independent: replacing one row by NaN leaves the others' bits;
- tied entries get equal soft ranks;
- a Sinkhorn operator warns exactly when ``return_info`` reports a row that
  stopped above ``tol``.

Where a finite row gives a non-finite result, an exact computation decides
whether that is admissible (``conformance/oracle.py``: the same call in
float64, the operator's homogeneity under an exact power of two, the
transport's cost in float64, the backend's own arithmetic on the row),
never the kind or scale of the row that was drawn (docs/reliability.md);
each decision is counted. Counts of inputs tried go to the terminal summary and, with
``RANKOPS_PROPERTY_REPORT=path``, to a JSON file. ``RANKOPS_PROPERTY_EXAMPLES``
scales the number of examples (default 1; CI runs the default).
"""

from __future__ import annotations

import json
import os
import warnings
import zlib
from typing import Any, Callable

import array_api_compat
import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings, strategies as st

import rankops
from .memory import MAPPINGS_WITHIN_A_GROUP, release_compiled_programs

from . import oracle
from .calls import Reference, array, as_rows, dtype_name, first, to_numpy, value_and_gradient
from .losses import CORRELATIONS, LOSS_SPECS, check_loss_row, no_correlation
from .operators import SPECS, Spec
from .strategies import COMPILED_SHAPES, FLOAT_DTYPES, INT_DTYPES, TRIED, Example, examples

ALL_SPECS = SPECS + LOSS_SPECS  # every registered operator and method, and the ready losses

# examples per (operator, backend): eager JAX compiles each new shape / option set, Dask builds graphs
EXAMPLES = {"numpy": 30, "array_api_strict": 6, "torch": 20, "jax": 1, "dask": 4, "cupy": 30}
# on a backend that compiles (JAX), each example's shape, dtype and options are checked on this many
# draws of values: the later ones run the programs the first compiled (compiling is most of the time)
VALUES_PER_PROGRAM = 4
# option sets per (operator, n) on a backend that compiles per option set (Backend.compiles: JAX), drawn
# once from the spec's Choices: with strategies.COMPILED_SHAPES, few enough programs that the large
# tier reuses each of them tens of times
MENU = 8
SCALE = float(os.environ.get("RANKOPS_PROPERTY_EXAMPLES", "1"))
DTYPES = {
    "numpy": FLOAT_DTYPES[:1] + FLOAT_DTYPES[2:] + INT_DTYPES,
    "array_api_strict": FLOAT_DTYPES[2:] + INT_DTYPES,  # no float16 in the standard
    "torch": FLOAT_DTYPES + INT_DTYPES,
    "jax": FLOAT_DTYPES + INT_DTYPES,
    "dask": FLOAT_DTYPES[:1] + FLOAT_DTYPES[2:] + INT_DTYPES,
    "cupy": FLOAT_DTYPES[:1] + FLOAT_DTYPES[2:] + INT_DTYPES,
}



# -- arrays of every dtype on every backend --------------------------------------------------------


def _expected_dtype(xp: Any, x: Any, device: Any) -> Any:
    if xp.isdtype(x.dtype, ("bool", "integral")):
        return xp.__array_namespace_info__().default_dtypes(device=device)["real floating"]
    return x.dtype


def _eps(dtype: Any) -> float:
    name = str(dtype).split(".")[-1]
    return {"float16": 1e-3, "bfloat16": 8e-3, "float32": 1.2e-7}.get(name, 2.3e-16)


# -- invariants -------------------------------------------------------------------------------


# decisions under which a finite row may give NaN or +-inf anywhere in its own row (conformance.oracle,
# conformance.losses.no_correlation)
UNDETERMINED = ("cost-overflow", "beyond-precision", "no-correlation")


def _decide(spec: Spec, p: dict, ex: Example, seen: np.ndarray, out_dtype: str) -> list[str | None]:
    """Per row: None (non-finite input), "cost-overflow", "beyond-precision", "subnormals-flushed" or "" (none), decided by conformance.oracle.

    ``seen``: the rows as the backend's arithmetic sees them (``x * 1`` read
    back); ``out_dtype``: the output's dtype (integer inputs give a floating one).
    """
    rows = np.asarray(ex.x, dtype=np.float64).reshape(-1, ex.x.shape[-1])
    decided = []
    for kind, row, as_seen in zip(ex.kinds, rows, seen):
        cost = oracle.cost_decision(p, row, spec.name == "sinkhorn", out_dtype) if spec.sinkhorn and kind != "nonfinite" else ""
        if kind == "nonfinite":
            decided.append(None)
        elif cost:
            decided.append(cost)
        elif not np.array_equal(row, as_seen):
            decided.append("subnormals-flushed")
        else:
            decided.append("")
    return decided


def _check_row(spec: Spec, p: dict, x: np.ndarray, out: np.ndarray, tol: float, info: Any, floor: float) -> None:
    """Documented range of one finite row's output (``out``: that row's output, float64).

    ``floor``: the compute dtype's smallest normal number; below it (subnormal
    rows) products lose their relative precision, so it is an absolute slack.
    """
    n = x.shape[-1]
    lo, hi = x.min(), x.max()
    span = tol * max(abs(lo), abs(hi)) + floor
    kind = spec.kind
    descending = p.get("descending", False)
    m = p.get("num_targets", n)
    if kind.startswith("loss-"):
        check_loss_row(kind, out, tol)
    elif kind == "rank":  # n * b_bar: [n / m, n] for m targets ([1, n] for m = n)
        assert np.all(out >= n / m * (1 - tol) - tol) and np.all(out <= n * (1 + tol)), out
    elif kind == "cdf":
        assert np.all(out >= 1 / m * (1 - tol) - tol) and np.all(out <= 1 + tol), out
    elif kind in ("sort", "quantile", "quantize", "sort_with"):  # exact convex combinations of the row
        assert np.all(out >= lo - span) and np.all(out <= hi + span), (out, lo, hi)
        values = out[:, 0] if kind == "sort_with" else out  # sort_with's first feature is the criterion itself
        if kind in ("sort", "sort_with") and p.get("power", 2) >= 1 and values.size > 1:
            steps = np.diff(-values if descending else values)
            assert np.all(steps >= -span), out  # non-decreasing: the plan is totally positive for a convex cost
    elif kind == "qnorm":
        t = np.linspace(-2.0, 3.0, p["m"]) ** 3
        assert np.all(out >= t.min() - tol * 27) and np.all(out <= t.max() + tol * 27), out
        if p.get("power", 2) >= 1 and n > 1:  # the order of x is kept
            order = np.argsort(x, kind="stable")
            assert np.all(np.diff(out[order]) >= -tol * 27), (x, out)
    elif kind == "mask":
        assert np.all(out >= -tol) and np.all(out <= 1 + tol), out
        if info is not None and info:  # converged: the mask holds k units of mass
            assert abs(out.sum() - min(p["k"], n)) <= p["tol"] * n + tol * n, out
    elif kind in ("rank-permutahedron", "rank-lapsum"):
        # a point of the permutahedron (LapSum: F(u) + F(-u) = 1 pairs up): the ranks add up to n (n + 1) / 2
        assert abs(out.sum() - n * (n + 1) / 2) <= tol * n * n * (n + 1), out
        low, high = (1.0, n) if kind == "rank-permutahedron" else (0.5, n + 0.5)
        assert np.all(out >= low - tol * n) and np.all(out <= high + tol * n), out
    elif kind == "sort-permutahedron":
        assert np.all(np.diff(-out if descending else out) >= -span * n), out  # sorted
        if p["regularization"] in ("l2", "lp"):  # a point of the permutahedron of x: in [min, max], sum kept
            assert np.all(out >= lo - span * n) and np.all(out <= hi + span * n), (out, lo, hi)
            assert abs(out.sum() - x.sum()) <= span * n * n, (out, x)
    elif kind == "sort-lapsum":  # R(t) = i - 1/2 lies within alpha log(2n) of the row's range
        reach = p["alpha"] * np.log(2 * n)
        assert np.all(out >= lo - reach - span * n) and np.all(out <= hi + reach + span * n), (out, lo, hi)
        assert np.all(np.diff(-out if descending else out) >= -span * n - tol * reach), out
    elif kind in ("mask-lapsum", "mask-permutahedron"):
        assert np.all(out >= -tol) and np.all(out <= 1 + tol), out
        assert abs(out.sum() - p["k"] * n) <= tol * n, out
    elif kind == "magnitude":  # 0, x itself, or between them with x's sign
        assert np.all((out == 0) | (np.sign(out) == np.sign(x))), (x, out)
        assert np.all(np.abs(out) <= np.abs(x) * (1 + tol) + tol), (x, out)
    elif kind == "rank-diffsort":  # P is doubly stochastic: ranks in [1, n] adding up to n (n + 1) / 2
        assert abs(out.sum() - n * (n + 1) / 2) <= tol * n * n * (n + 1), out
        assert np.all(out >= 1 - tol * n) and np.all(out <= n + tol * n), out
    elif kind == "sort-diffsort":  # convex combinations of the row, adding up to its sum (a network is not sorted until steep)
        assert np.all(out >= lo - span * n) and np.all(out <= hi + span * n), (out, lo, hi)
        assert abs(out.sum() - x.sum()) <= span * n * n, (out, x)
    elif kind == "isotonic":  # monotone, in [min, max], blocks hold means: the sum is kept
        steps = np.diff(out if p["increasing"] else -out)
        assert np.all(steps >= -span * n), out
        assert np.all(out >= lo - span * n) and np.all(out <= hi + span * n), (out, lo, hi)
        assert abs(out.sum() - x.sum()) <= span * n * n, (out, x)
    elif kind.startswith("rank-"):
        # row-stochastic, not doubly stochastic: the ranks add up to n (n + 1) / 2
        # but one may leave [1, n] at large tau (documented exception)
        assert abs(out.sum() - n * (n + 1) / 2) <= tol * n * n * (n + 1), out
        assert np.all(out >= -tol * n)
        if p["hard"]:
            assert sorted(out.tolist()) == list(range(1, n + 1)), out
    elif kind.startswith("sort-"):
        assert np.all(out >= lo - span) and np.all(out <= hi + span), (out, lo, hi)
        if p["hard"]:
            expected = np.sort(x)[::-1] if descending else np.sort(x)
            np.testing.assert_allclose(out, expected, rtol=tol, atol=span)
    elif kind == "tau":  # a mean of products of two tanh: in [-1, 1]
        assert np.all(np.abs(out) <= 1 + tol), out
    elif kind == "matrix":
        assert np.all(out >= -tol) and np.all(out <= 1 + tol)
        np.testing.assert_allclose(out.sum(axis=-1), 1.0, atol=tol * n)
    elif kind == "plan":
        assert np.all(out >= 0)
        np.testing.assert_allclose(out.sum(axis=-1), 1.0 / out.shape[-2], rtol=tol * n * 10, atol=tol)


def _ties_equal(spec: Spec, p: dict, x: np.ndarray, out: np.ndarray, tol: float) -> None:
    """Tied entries of a row get equal soft ranks (and CDFs, masks, normalized values)."""
    if spec.kind not in ("rank", "cdf", "mask", "qnorm", "rank-softsort", "rank-neuralsort", "rank-permutahedron", "rank-lapsum",
                         "mask-lapsum", "mask-permutahedron", "magnitude") or p.get("hard"):
        return  # hard=True breaks ties by position, like a stable argsort
    for value in np.unique(x):
        group = out[x == value]
        assert np.ptp(group) <= tol * max(1.0, np.abs(group).max()), (x, out)


def _expected_shape(spec: Spec, p: dict, shape: tuple[int, ...]) -> tuple[int, ...]:
    if spec.kind in ("matrix", "plan"):
        return shape + shape[-1:]
    if spec.kind == "tau" or spec.kind.startswith("loss-"):
        return shape[:-1]
    if spec.kind == "quantile":
        levels = p["levels"]
        return shape[:-1] + ((len(levels),) if isinstance(levels, tuple) else ())
    if spec.kind == "sort" and "num_targets" in p:
        return shape[:-1] + (p["num_targets"],)
    if spec.kind == "sort_with":  # the feature axis of conformance.operators._vectors
        return shape[:-1] + (p.get("topk", p.get("num_targets", shape[-1])), 2)
    return shape


def _evaluate(spec: Spec, p: dict, x: Any, arr: Callable, info: bool, finite: bool) -> tuple[Any, Any, list]:
    """``(value, converged or None, ConvergenceWarnings)`` of one call."""
    fun, args, kwargs = spec.call(x, p, arr)
    if info and fun is not rankops.sinkhorn:
        kwargs = {**kwargs, "return_info": True}
    with warnings.catch_warnings(record=True) as caught:
        if not finite:  # NumPy's "invalid value" on inf - inf: NaN rows are expected there
            warnings.simplefilter("ignore", RuntimeWarning)
        head = first(fun, x)  # sinkhorn's cost: inf - inf in a non-finite row
        # IEEE overflow to +-inf is judged on the results (conformance.oracle), not by NumPy's warning
        warnings.filterwarnings("ignore", "overflow encountered", RuntimeWarning)
        warnings.simplefilter("always", rankops.ConvergenceWarning)  # checked first: the later filter wins
        out = fun(head, *args, **kwargs)
        if array_api_compat.is_dask_array(x):  # compute here, under these filters
            import dask

            (out,) = dask.persist(out)
    found = [w for w in caught if issubclass(w.category, rankops.ConvergenceWarning)]
    if fun is rankops.sinkhorn:
        return out.plan, (out.converged, out.error), found
    return (out[0], out[1], found) if info else (out, None, found)


def check_example(backend: Any, device: Any, spec: Spec, ex: Example, p: dict) -> None:
    xp = backend.namespace()
    x = array(backend, device, ex.x, ex.dtype)
    arr = lambda values: backend.asarray(values, device=device)  # noqa: E731
    before = to_numpy(backend, x)
    batch = ex.x.shape[:-1]
    # the rows as the backend's arithmetic sees them (XLA on CPU flushes subnormals)
    seen = (before if ex.dtype in INT_DTYPES else to_numpy(backend, x * 1)).reshape(-1, ex.x.shape[-1])
    decided = _decide(spec, p, ex, seen, dtype_name(_expected_dtype(xp, x, device)))
    if spec.kind in CORRELATIONS:  # a side whose ranks are all equal has no correlation: NaN, as in SciPy
        flat = no_correlation(backend, x, spec, p)
        decided = [d if d is None or not flat[i] else "no-correlation" for i, d in enumerate(decided)]
    # NumPy warns about inf - inf in NaN rows, in costs beyond the range or the precision, and 0 / 0
    clean = bool(ex.finite_rows.all()) and not set(UNDETERMINED) & set(decided)
    value, info, caught = _evaluate(spec, p, x, arr, info=spec.sinkhorn, finite=clean)

    # the contract: namespace, dtype, device, shape; the input untouched
    assert array_api_compat.array_namespace(value) is array_api_compat.array_namespace(x)
    assert value.dtype == _expected_dtype(xp, x, device)
    assert array_api_compat.device(value) == array_api_compat.device(x)
    assert tuple(value.shape) == _expected_shape(spec, p, ex.x.shape)
    np.testing.assert_array_equal(to_numpy(backend, x), before)

    rows = int(np.prod(batch))
    TRIED[(backend.name, "inputs")] += 1
    TRIED[(backend.name, f"dtype {ex.dtype}")] += 1
    TRIED[(backend.name, "rows")] += rows
    if rows == 0:
        return
    out = as_rows(to_numpy(backend, value), batch)
    reference = Reference(backend, device, spec, p, ex, out, dtype_name(value.dtype))
    # rounding of the compute dtype (float32 for float16 / bfloat16) over n terms, then of the output dtype
    compute = value.dtype if value.dtype in (xp.float32, xp.float64) else xp.float32
    tol = 256 * _eps(compute) * max(8, ex.x.shape[-1]) + 2 * _eps(value.dtype)
    # absolute slack near 0: the compute dtype's smallest normal, or the output dtype's subnormal
    # spacing where that is coarser (float16: 6e-8, a row's mean of tiny entries rounds to it)
    out_info = xp.finfo(value.dtype)
    floor = 4 * max(1.2e-38 if compute == xp.float32 else 2.3e-308, float(out_info.smallest_normal) * float(out_info.eps))

    converged = None
    if info is not None:
        converged_entries = as_rows(to_numpy(backend, info[0]), batch)
        converged = converged_entries.all(axis=-1)
        error = as_rows(to_numpy(backend, info[1]), batch)
        stopped_early = bool(np.any(~converged_entries & ~np.isnan(error)))  # NaN: a data problem
        if spec.name == "sinkhorn" or backend.name == "dask":
            # the solver's result carries converged itself; lazy values are not read
            assert not caught
        else:
            assert bool(caught) == stopped_early, (caught, error)
        TRIED[(backend.name, "not converged (warned)")] += int(stopped_early)

    for i, (kind, decision) in enumerate(zip(ex.kinds, decided)):
        TRIED[(backend.name, f"row {kind}")] += 1
        if decision is None:  # a non-finite row: anything, in its own row (_check_rows_independent)
            continue
        if decision:
            TRIED[(backend.name, f"exception {decision}")] += 1
            if decision == "cost-overflow":
                continue
        if not np.all(np.isfinite(out[i])):
            if decision in UNDETERMINED:  # no plan or no correlation: +-inf or NaN admitted (counted above)
                continue
            _admit_overflow(backend, "value-overflow", out[i], [v[i] for v, _ in reference.references], dtype_name(value.dtype), (kind, ex.dtype, seen[i]))
            continue
        if converged is not None and not converged[i]:
            # stopped above tol (max_iter, or a cost beyond float precision with squash=None):
            # reported and warned (checked above); the ranges are those of a solved transport
            continue
        # a converged row's marginals are off by at most its reported error: slack for the ranges
        slack = tol + (0.0 if info is None else float(np.nanmax(error[i])) * ex.x.shape[-1])
        if spec.sinkhorn:
            # exp(-C / epsilon) is known to a relative eps * C / epsilon only (conformance.oracle):
            # at C / epsilon = 1e9 (squash=None, integers of 1e6, epsilon 1e-3) that is 2e-7 in float64
            slack += _eps(compute) * oracle.scaled_cost(p, seen[i].astype(np.float64), spec.name == "sinkhorn", dtype_name(value.dtype)) * ex.x.shape[-1]
        _check_row(spec, p, seen[i].astype(np.float64), _shaped(spec, p, out[i], ex.x.shape[-1]), slack,
                   None if converged is None else converged[i], floor)
        if kind == "ties" or ex.dtype in INT_DTYPES:
            _ties_equal(spec, p, seen[i], out[i], tol)

    _check_gradient(backend, device, spec, p, ex, decided, clean, reference, seen)
    if rows >= 2 and ex.dtype not in INT_DTYPES:
        _check_rows_independent(backend, device, spec, p, ex, out, arr)


def _admit_overflow(backend: Any, what: str, low: np.ndarray, refs: list[np.ndarray], dtype: str, context: tuple) -> None:
    """Non-finite entries of a finite row's result must be the rounding of a reference beyond ``dtype``'s range (calls.Reference)."""
    admitted = np.zeros(low.shape, dtype=bool)
    for ref in refs:
        admitted |= oracle.overflow_admissible(low, ref, dtype)
    assert np.all(np.isfinite(low) | admitted), (*context, low, "references:", refs)
    TRIED[(backend.name, f"exception {what}")] += 1


def _shaped(spec: Spec, p: dict, row_out: np.ndarray, n: int) -> np.ndarray:
    if spec.kind == "sort_with":
        return row_out.reshape(-1, 2)
    return row_out.reshape(n, n) if spec.kind in ("matrix", "plan") else row_out


def _check_gradient(
    backend: Any, device: Any, spec: Spec, p: dict, ex: Example, decided: list, clean: bool, reference: Reference, seen: np.ndarray
) -> None:
    _, g, dtype = value_and_gradient(backend, device, spec, p, ex.x, ex.dtype, quiet=not clean)
    if g is None:  # a loss on a backend without autodiff, or of an integer input: its value only
        return
    for i, (kind, decision) in enumerate(zip(ex.kinds, decided)):
        if decision is None or decision == "cost-overflow":
            continue
        if not np.all(np.isfinite(g[i])) and decision not in UNDETERMINED:
            _admit_overflow(backend, "gradient-overflow", g[i], [g_[i] for _, g_ in reference.references], dtype, (kind, ex.dtype, seen[i]))
    TRIED[(backend.name, "gradients")] += 1


def _check_rows_independent(backend: Any, device: Any, spec: Spec, p: dict, ex: Example, out: np.ndarray, arr: Callable) -> None:
    """A NaN in the first row leaves every other row's output bit for bit."""
    poisoned = np.array(ex.x, dtype=np.float64)
    poisoned.reshape(-1, ex.x.shape[-1])[0, 0] = np.nan
    x = array(backend, device, poisoned, ex.dtype)
    # the first call's options (return_info included): a compiling backend (JAX) reuses that call's compiled function
    value, _, _ = _evaluate(spec, p, x, arr, info=spec.sinkhorn, finite=False)
    again = as_rows(to_numpy(backend, value), ex.x.shape[:-1])
    np.testing.assert_array_equal(again[1:], out[1:])


# -- the tests -------------------------------------------------------------------------------


def _run(backend: Any, device: Any, spec: Spec, budget: int, explore: bool, collect: bool = False) -> None:
    """``budget`` examples of ``spec``; ``collect``: every failing example is recorded and the run goes on (the large tier).

    Hypothesis stops at the first failure and shrinks it, which is what a
    small run wants. A run of 10^5 inputs wants every failure and its full
    count: it records each failing example (``RANKOPS_PROPERTY_FAILURES``, a
    JSON-lines file, when set; counted as ``failed``) and fails the test at
    the end, listing them.
    """
    phases = [ph for ph in Phase if ph is not Phase.shrink or not (collect or os.environ.get("RANKOPS_PROPERTY_NOSHRINK"))]
    failures: list[dict] = []
    examples_run: list[None] = []
    options = _options(backend, spec, explore)

    @settings(max_examples=budget, deadline=None, database=None, derandomize=not explore,
              suppress_health_check=list(HealthCheck), phases=phases)
    @given(ex=examples(DTYPES[backend.name], shapes=COMPILED_SHAPES if backend.compiles else None), data=st.data())
    def run(ex: Example, data: Any) -> None:
        p = data.draw(options(ex.x.shape[-1]), label="options")
        if not collect:
            check_example(backend, device, spec, ex, p)
            for _ in range(VALUES_PER_PROGRAM - 1 if backend.compiles else 0):
                again = data.draw(examples([ex.dtype], shapes=[ex.x.shape]), label="values for the same programs")
                check_example(backend, device, spec, again, p)
            return
        try:
            check_example(backend, device, spec, ex, p)
        except Exception as error:  # noqa: BLE001  (recorded, and the test fails at the end)
            failures.append(_failure(backend, spec, ex, p, error))
        examples_run.append(None)
        if backend.compiles and len(examples_run) % 25 == 0:  # a shard compiles hundreds of programs: clear of vm.max_map_count
            release_compiled_programs(MAPPINGS_WITHIN_A_GROUP)

    run()
    if failures:
        pytest.fail(f"{len(failures)} of {budget} examples failed; first: {json.dumps(failures[0])}", pytrace=False)


def _options(backend: Any, spec: Spec, explore: bool) -> Callable[[int], st.SearchStrategy]:
    """n -> the strategy of option sets: all of the spec's Choices, or on a compiling backend a seeded menu of ``MENU`` of them.

    The menu is the same in every run (seed 0) unless the run explores, where
    each process draws its own (RANKOPS_PROPERTY_MENU_SEED fixes it); a
    failure records its options whatever menu they came from.
    """
    if not backend.compiles:
        return lambda n: spec.params(n).strategy()
    run_seed = int(os.environ.get("RANKOPS_PROPERTY_MENU_SEED", _PROCESS_SEED if explore else 0))
    return lambda n: st.sampled_from(spec.params(n).menu(MENU, zlib.crc32(f"{spec.name}/{n}".encode()) ^ run_seed))


_PROCESS_SEED = int.from_bytes(os.urandom(4), "little")  # one menu per process: a spec's shards share its programs


def _failure(backend: Any, spec: Spec, ex: Example, p: dict, error: BaseException) -> dict:
    """One failing example as JSON (inputs as float64 lists: every drawn value is exact there), counted and appended to RANKOPS_PROPERTY_FAILURES."""
    TRIED[(backend.name, "failed")] += 1
    record = {"backend": backend.name, "spec": spec.name, "dtype": ex.dtype, "kinds": list(ex.kinds),
              "x": np.asarray(ex.x, dtype=np.float64).tolist(), "shape": list(ex.x.shape),
              "options": {k: (list(v) if isinstance(v, tuple) else v) for k, v in p.items()},
              "error": f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"[:300]}
    path = os.environ.get("RANKOPS_PROPERTY_FAILURES")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(record) + "\n")
    return record


@pytest.mark.parametrize("spec", ALL_SPECS, ids=lambda s: s.name)
def test_hostile_inputs(backend, device, spec):
    # array_api_strict runs on two devices (conftest): its examples are split between them
    per_device = EXAMPLES[backend.name] * SCALE / (2 if backend.name == "array_api_strict" else 1)
    _run(backend, device, spec, max(1, round(per_device)), bool(os.environ.get("RANKOPS_PROPERTY_EXPLORE")))


# The large tier: at least SLOW_INPUTS fresh inputs per backend, in SLOW_SHARDS tests per
# operator so that pytest-xdist spreads them over its workers (array_api_strict counts each
# device, so it gets half per device).
SLOW_INPUTS = int(os.environ.get("RANKOPS_PROPERTY_SLOW_INPUTS", "100000"))
SLOW_SHARDS = 4


@pytest.mark.slow
@pytest.mark.parametrize("shard", range(SLOW_SHARDS))
@pytest.mark.parametrize("spec", ALL_SPECS, ids=lambda s: s.name)
def test_hostile_inputs_at_scale(backend, device, spec, shard):
    devices = 2 if backend.name == "array_api_strict" else 1
    _run(backend, device, spec, -(-SLOW_INPUTS // (len(ALL_SPECS) * SLOW_SHARDS * devices)), explore=True, collect=True)


# Replaying recorded failures (RANKOPS_PROPERTY_REPLAY=failures.jsonl, written by the large tier
# through RANKOPS_PROPERTY_FAILURES): each example of the selected backends, checked again.
if os.environ.get("RANKOPS_PROPERTY_REPLAY"):

    def test_replay_recorded_failures(backend, device):
        by_name = {spec.name: spec for spec in ALL_SPECS}
        with open(os.environ["RANKOPS_PROPERTY_REPLAY"]) as f:
            records = [r for r in map(json.loads, f) if r["backend"] == backend.name]
        if not records:
            pytest.skip(f"no recorded failure on {backend.name}")
        failed = []
        for r in records:
            ex = Example(np.asarray(r["x"], dtype=r["dtype"] if r["dtype"] in INT_DTYPES else np.float64).reshape(r["shape"]),
                         r["dtype"], tuple(r["kinds"]))
            p = {k: tuple(v) if isinstance(v, list) else v for k, v in r["options"].items()}
            try:
                check_example(backend, device, by_name[r["spec"]], ex, p)
            except Exception as error:  # noqa: BLE001  (all are reported below)
                failed.append(f"{r['spec']} {r['dtype']} {p}: {type(error).__name__}: {str(error)[:200]}")
        assert not failed, "\n".join(failed)
