"""Run-to-run determinism on JAX's and torch's devices, and what their deterministic modes cost.

Each operator's value and gradient is computed ``--calls`` times on the
same batch and the distinct results counted bit for bit (JAX: ``jax.jit``
of the value with its ``vjp``; torch, eager: the value and
``torch.autograd.grad``, on CUDA when there is one); a few rows computed
alone are compared with the same rows computed in the batch (the
conformance suite's ``test_batch_rows_independent`` asks both to be equal
to the bit). On a CPU every count is 1 and every row equal. A GPU adds a
scatter-add's terms with atomics, in an order that may change from run to
run: XLA:GPU unless ``XLA_FLAGS=--xla_gpu_deterministic_ops=true``, torch
CUDA unless ``torch.use_deterministic_algorithms(True)``. ``--deterministic``
sets both (the XLA flag before JAX starts); ``.ci/gpu`` runs this script
without and with it, so one GPU call shows whether the pooling rounds'
block sums (scatter-adds) make a row's last bits vary, and what the
deterministic modes cost. The JAX rows marked "(scans)" sum segments by
the portable adapter's scans instead of scatter-adds: the alternative to
XLA's deterministic mode, timed in the same call.

Usage: python -m benchmarks.determinism [--batch 64] [--n 1000] [--calls 10] [--deterministic] [--quick]
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import itertools
import os
import statistics
import time
from typing import Any, Callable, Iterator
from unittest import mock

import numpy as np

ROWS_ALONE = 4


def _operators(rankops: Any) -> dict[str, Callable[[Any], Any]]:
    """The operators whose rounds sum blocks by scatter-adds (the pooling rounds of isotonic regression and the
    permutahedron), and LapSum's."""
    return {
        "isotonic_regression": lambda v: rankops.isotonic_regression(v),
        "soft_rank[permutahedron]": lambda v: rankops.soft_rank(v, method="permutahedron"),
        "soft_sort[permutahedron]": lambda v: rankops.soft_sort(v, method="permutahedron"),
        # a per-row total by scatter-add (jaxlib's float32 scatter-add on a GPU may be a compare-and-swap loop)
        "soft_rank[lapsum]": lambda v: rankops.soft_rank(v, method="lapsum"),
    }


def _counted(step: Callable[[], tuple[Any, Any]], alone: Callable[[int], Any], calls: int,
             to_numpy: Callable[[Any], np.ndarray]) -> tuple[int, int, int, float, float]:
    """(distinct values, distinct gradients, rows alone unequal to the batch's, their largest difference, median ms)
    of ``step()`` (the value and gradient of the batch, complete when it returns) called ``calls`` times, and of
    ``alone(i)``, row ``i`` computed by itself."""
    step()  # compiled, or its kernels loaded, outside the timing
    results, times = [], []
    for _ in range(calls):
        start = time.perf_counter()
        out, grad = step()
        times.append(time.perf_counter() - start)
        results.append((to_numpy(out), to_numpy(grad)))
    values = {out.tobytes() for out, _ in results}
    grads = {grad.tobytes() for _, grad in results}
    unequal, largest = 0, 0.0
    for i in range(min(ROWS_ALONE, results[0][0].shape[0])):
        row = to_numpy(alone(i))
        unequal += int(row.tobytes() != results[0][0][i].tobytes())
        largest = max(largest, float(np.max(np.abs(row - results[0][0][i]), initial=0.0)))
    return len(values), len(grads), unequal, largest, 1e3 * statistics.median(times)


def _jax_rows(rankops: Any, x: np.ndarray, ct: np.ndarray, calls: int) -> Iterator[tuple[str, Callable[[], Any]]]:
    import jax
    import jax.numpy as jnp

    xj, cj = jnp.asarray(x), jnp.asarray(ct)
    for scans, (name, f) in itertools.product((False, True), _operators(rankops).items()):
        def value_and_gradient(v: Any, c: Any, f: Callable[[Any], Any] = f) -> tuple[Any, Any]:
            out, pull = jax.vjp(f, v)
            return out, pull(c)[0]

        def measure(f: Callable[[Any], Any] = f, scans: bool = scans) -> tuple[int, int, int, float, float]:
            step, alone = jax.jit(value_and_gradient), jax.jit(f)
            with _segment_sums_by_scans(jax) if scans else contextlib.nullcontext():
                return _counted(lambda: jax.block_until_ready(step(xj, cj)), lambda i: alone(xj[i:i + 1])[0], calls,
                                np.asarray)

        yield f"jax {jax.devices()[0].platform}{' (scans)' if scans else ''}: {name}", measure


@contextlib.contextmanager
def _segment_sums_by_scans(jax: Any) -> Iterator[None]:
    """JAX's segmented sums by the portable adapter's scans (a fixed order of additions) instead of scatter-adds
    (atomics on a GPU): the alternative to XLA's deterministic mode, timed beside it. Programs traced before are
    forgotten on the way in and out, so that neither side reuses the other's."""
    from rankops._lib._adapters._generic import PortableAdapter
    from rankops._lib._adapters._jax import Jax

    jax.clear_caches()
    try:
        with mock.patch.multiple(Jax, segment_sum=PortableAdapter.segment_sum,
                                 segment_totals=PortableAdapter.segment_totals,
                                 segment_logsumexp=PortableAdapter.segment_logsumexp):
            yield
    finally:
        jax.clear_caches()


def _torch_rows(rankops: Any, x: np.ndarray, ct: np.ndarray, calls: int) -> Iterator[tuple[str, Callable[[], Any]]]:
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    xt, ctt = torch.asarray(x, device=device), torch.asarray(ct, device=device)

    def to_numpy(t: Any) -> np.ndarray:
        return t.detach().cpu().numpy()

    for name, f in _operators(rankops).items():
        def step(f: Callable[[Any], Any] = f) -> tuple[Any, Any]:
            v = xt.clone().requires_grad_(True)
            out = f(v)
            (grad,) = torch.autograd.grad(out, v, ctt)
            if device == "cuda":
                torch.cuda.synchronize()
            return out, grad

        yield f"torch {device}: {name}", lambda step=step, f=f: _counted(step, lambda i: f(xt[i:i + 1])[0], calls, to_numpy)


def table(batch: int, n: int, calls: int, deterministic: bool) -> Iterator[str]:
    import rankops

    rng = np.random.default_rng(0)
    x = rng.normal(size=(batch, n)).astype(np.float32)
    ct = rng.normal(size=(batch, n)).astype(np.float32)
    yield (f"determinism, {'deterministic modes' if deterministic else 'defaults'} (XLA_FLAGS="
           f"{os.environ.get('XLA_FLAGS', '')!r}, torch.use_deterministic_algorithms({deterministic})): B = {batch}, "
           f"n = {n}, float32, value and gradient called {calls} times; {ROWS_ALONE} rows alone against the batch\n")
    yield "| operator | distinct values | distinct gradients | rows alone unequal | largest difference | ms per call |"
    yield "| --- | --- | --- | --- | --- | --- |"
    rows: list[Iterator[tuple[str, Callable[[], Any]]]] = []
    if importlib.util.find_spec("jax"):
        rows.append(_jax_rows(rankops, x, ct, calls))
    if importlib.util.find_spec("torch"):
        import torch

        torch.use_deterministic_algorithms(deterministic)
        rows.append(_torch_rows(rankops, x, ct, calls))
    for name, measure in itertools.chain.from_iterable(rows):
        try:
            values, grads, unequal, largest, ms = measure()
        except Exception as exc:  # noqa: BLE001  (a report: each operator's failure is a line)
            yield f"| {name} | {type(exc).__name__}: {str(exc)[:80]} | | | | |"
            continue
        yield f"| {name} | {values} | {grads} | {unequal} | {largest:.3g} | {ms:.3g} |"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.determinism", description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--deterministic", action="store_true",
                        help="XLA's deterministic ops (set before JAX starts) and torch.use_deterministic_algorithms(True)")
    parser.add_argument("--quick", action="store_true", help="B = 4, n = 64, 3 calls (smoke test)")
    args = parser.parse_args(argv)
    if args.quick:
        args.batch, args.n, args.calls = 4, 64, 3
    if args.deterministic:
        os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} --xla_gpu_deterministic_ops=true".strip()
        # cuBLAS's deterministic workspace, without which torch's deterministic mode refuses a CUDA matrix product
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    for line in table(args.batch, args.n, args.calls, args.deterministic):  # each row as it is measured: a time limit keeps those before
        print(line, flush=True)


if __name__ == "__main__":
    main()
