"""``python -m rankops``: find the installed backends, run every method on each, and time each method.

Prints the backends found (version, devices); then, for each backend, device
and method of ``soft_rank`` / ``soft_sort``, the soft ranks and soft sort of
a small batch and a gradient (the backend's autodiff on torch and JAX,
``rankops.vjp``'s own rules elsewhere), each checked against the NumPy
result; then one line per method with the time of one forward+backward
call at B = 20 rows of n = 1000 (``--size B N``; ``--no-time`` skips it) on
NumPy, torch and JAX (and CuPy with a GPU): array-api-strict and Dask run
NumPy underneath. Exits with status 1 if an installed backend fails or
disagrees.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import traceback
from typing import Any, Callable, Sequence

import numpy as np

import rankops
from rankops.sorting import METHODS as SOFT_RANK_METHODS

from ._lib._backends import BACKENDS, Backend, device_label

X = np.array([[0.3, -1.2, 2.5, 0.7], [4.0, 4.1, -2.0, 0.0]], dtype=np.float32)
W = np.array([1.0, -2.0, 0.5, 3.0], dtype=np.float32)  # weights of the scalar loss sum(w * rank)
# Options that give visibly soft, yet ordered, output on X; a method not listed runs with its defaults.
OPTIONS = {
    "sinkhorn": {"epsilon": 0.01},
    "softsort": {"tau": 0.3},
    "neuralsort": {"tau": 0.3},
    "permutahedron": {"strength": 1.0},
    "lapsum": {"alpha": 0.3},
}
TIMED = ("numpy", "torch", "jax", "cupy")  # array_api_strict and dask compute NumPy underneath


def methods() -> dict[str, dict[str, Any]]:
    """Every method of soft_rank / soft_sort, with the demo's options."""
    return {m: OPTIONS.get(m, {}) for m in SOFT_RANK_METHODS}


def _fmt(row: np.ndarray) -> str:
    return "[" + " ".join(f"{v:6.3f}" for v in row) + "]"


def _loss_gradient(backend: Backend, method: str, options: dict[str, Any], w: np.ndarray) -> Callable[[Any], Any]:
    """``x -> d sum(w * soft_rank(x)) / dx`` (a backend array): the backend's own autodiff, or rankops.vjp where it has none."""
    if backend.name == "torch":
        import torch

        def torch_grad(x: Any) -> Any:
            x = x.detach().clone().requires_grad_(True)
            (rankops.soft_rank(x, method=method, **options) * torch.asarray(w, device=x.device)).sum().backward()
            return x.grad

        return torch_grad
    if backend.name == "jax":
        import jax
        import jax.numpy as jnp

        wj = jnp.asarray(w)
        return jax.jit(jax.grad(lambda v: jnp.sum(rankops.soft_rank(v, method=method, **options) * wj)))

    def rule_grad(x: Any) -> Any:
        value, vjp_fn = rankops.vjp(rankops.soft_rank, x, method=method, **options)
        ct = backend.namespace().broadcast_to(backend.asarray(w, device=_device(x)), tuple(value.shape))
        return vjp_fn(ct)[0]

    return rule_grad


def _device(x: Any) -> Any:
    import array_api_compat

    return array_api_compat.device(x)


def _reference(method: str, options: dict[str, Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    value, vjp_fn = rankops.vjp(rankops.soft_rank, X, method=method, **options)
    return (
        np.asarray(value),
        np.asarray(rankops.soft_sort(X, method=method, **options)),
        np.asarray(vjp_fn(np.broadcast_to(W, value.shape))[0]),
    )


def _usable(names: Sequence[str] | None, out: Any) -> list[Backend]:
    print(f"rankops {rankops.__version__}: backends", file=out)
    usable = []
    for b in BACKENDS:
        if names is not None and b.name not in names:
            continue
        reason = b.unavailable_reason()
        if reason is None:
            devices = ", ".join(device_label(d) for d in b.devices())
            print(f"  {b.name:<17} {b.version:<14} devices: {devices}", file=out)
            usable.append(b)
        else:
            print(f"  {b.name:<17} {'-':<14} skipped: {reason}", file=out)
    return usable


def _check_values(usable: list[Backend], out: Any) -> int:
    """Values and gradients of every method on every backend and device, against NumPy; the number of failures."""
    settings = ", ".join(f"{m}: {', '.join(f'{k}={v}' for k, v in o.items()) or 'defaults'}" for m, o in methods().items())
    print(f"\nx[0] = {_fmt(X[0])}; grad = d sum(w * soft_rank(x)) / dx, w = {_fmt(W)}\n({settings})", file=out)
    header = f"{'backend':<17} {'device':<12} {'method':<14} {'soft_rank(x)[0]':<30} {'soft_sort(x)[0]':<30} {'grad[0]':<30} status"
    print(header, file=out)
    print("-" * len(header), file=out)
    failures = 0
    for method, options in methods().items():
        ref_rank, ref_sort, ref_grad = _reference(method, options)
        for b in usable:
            for device in b.devices():
                try:
                    x = b.asarray(X, device=device)
                    rank = b.to_numpy(rankops.soft_rank(x, method=method, **options))
                    srt = b.to_numpy(rankops.soft_sort(x, method=method, **options))
                    grad = b.to_numpy(_loss_gradient(b, method, options, W)(x))
                    ok = (
                        np.allclose(rank, ref_rank, atol=1e-3)
                        and np.allclose(srt, ref_sort, atol=1e-3)
                        and np.allclose(grad, ref_grad, rtol=1e-2, atol=1e-2)
                    )
                    status = "ok" if ok else "MISMATCH with numpy"
                    failures += not ok
                    print(
                        f"{b.name:<17} {device_label(device):<12} {method:<14} {_fmt(rank[0]):<30} {_fmt(srt[0]):<30} "
                        f"{_fmt(grad[0]):<30} {status}",
                        file=out,
                    )
                except Exception as exc:  # report every backend, then fail
                    failures += 1
                    print(f"{b.name:<17} {device_label(device):<12} {method:<14} FAILED: {type(exc).__name__}: {exc}", file=out)
                    traceback.print_exc(file=sys.stderr)
    return failures


# a timed call longer than this is timed once: its time is far above the timer's noise, and the demo stays short
_LONG_CALL = 0.25


def _median_seconds(fn: Callable[[], Any], repeats: int) -> tuple[float, float]:
    """``(first call, median of up to ``repeats`` next calls)`` in seconds, one call once one takes over
    ``_LONG_CALL``; ``fn`` returns once its result exists (synchronised)."""
    t0 = time.perf_counter()
    fn()
    first = time.perf_counter() - t0
    times: list[float] = []
    while len(times) < repeats and not (times and times[-1] > _LONG_CALL):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return first, statistics.median(times)


def _timing(usable: list[Backend], batch: int, n: int, repeats: int, out: Any) -> int:
    """One line per method: forward+backward time of sum(w * soft_rank(x)), float32, on each timed backend; the number of failures."""
    timed = [b for b in usable if b.name in TIMED]
    if not timed:
        return 0
    rng = np.random.default_rng(0)
    x_np = rng.normal(size=(batch, n)).astype(np.float32)
    w = rng.normal(size=n).astype(np.float32)
    print(f"\nforward+backward of sum(w * soft_rank(x)), float32, B = {batch}, n = {n}: median of {repeats} calls after "
          f"the first, one call where one takes over {_LONG_CALL:g} s (JAX: under jit, first call compiling in parentheses)", file=out)
    header = f"{'method':<14} " + " ".join(f"{b.name:>20}" for b in timed)
    print(header + "\n" + "-" * len(header), file=out)
    failures = 0
    for method, options in methods().items():
        cells = []
        for b in timed:
            try:
                x = b.asarray(x_np, device=b.devices()[0])
                grad = _loss_gradient(b, method, options, w)
                first, median = _median_seconds(lambda: b.to_numpy(grad(x)), repeats)
                cells.append(f"{median * 1e3:8.1f} ms" + (f" ({first:4.1f} s)" if b.name == "jax" else " " * 9))
            except Exception as exc:  # report, then fail
                failures += 1
                cells.append(f"FAILED: {type(exc).__name__}")
                traceback.print_exc(file=sys.stderr)
        print(f"{method:<14} " + " ".join(f"{c:>20}" for c in cells), file=out)
    print("(docs/choosing-a-method.md: what each method computes, and its cost against n)", file=out)
    return failures


def run_demo(names: Sequence[str] | None = None, out: Any = None, *, size: tuple[int, int] | None = (20, 1000), repeats: int = 3) -> int:
    """The demo: backends, values and gradients of every method on each, then (``size`` = (B, n), None: skipped) their times."""
    out = out if out is not None else sys.stdout
    usable = _usable(names, out)
    failures = _check_values(usable, out)
    if size is not None:
        failures += _timing(usable, *size, repeats, out)
    print(f"\n{len(usable)} backend(s) run, {failures} failure(s)", file=out)
    return 1 if failures else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rankops", description=__doc__.splitlines()[0])
    parser.add_argument("--backend", action="append", help="only this backend (repeatable)")
    parser.add_argument("--size", type=int, nargs=2, default=(20, 1000), metavar=("B", "N"), help="timed batch: B rows of n (default 20 1000)")
    parser.add_argument("--no-time", action="store_true", help="skip the timing")
    args = parser.parse_args(argv)
    return run_demo(args.backend, size=None if args.no_time else tuple(args.size))


if __name__ == "__main__":
    sys.exit(main())
