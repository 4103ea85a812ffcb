"""Run-to-run determinism on JAX's default device, and what XLA's deterministic mode costs.

Each operator's value and gradient (``jax.jit`` of the value with its
``vjp``) is computed ``--calls`` times on the same batch and the distinct
results counted bit for bit; a few rows computed alone are compared with
the same rows computed in the batch (the conformance suite's
``test_batch_rows_independent`` asks both to be equal to the bit). On a CPU
every count is 1 and every row equal. XLA:GPU adds a scatter-add's terms
with atomics, in an order that may change from run to run, unless
``XLA_FLAGS=--xla_gpu_deterministic_ops=true``: ``.ci/gpu`` runs this
script with and without that flag, so one GPU call shows whether the
pooling rounds' block sums (scatter-adds) make a row's last bits vary, and
the time the flag costs.

Usage: python -m benchmarks.determinism [--batch 64] [--n 1000] [--calls 10] [--quick]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any, Callable, Iterator

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


def probe(f: Callable[[Any], Any], x: Any, ct: Any, calls: int) -> tuple[int, int, int, float, float]:
    """(distinct values, distinct gradients, rows alone unequal to the batch's, their largest difference, median ms)
    of ``f``'s jitted value and gradient on ``x``, called ``calls`` times."""
    import jax

    def value_and_gradient(v: Any, c: Any) -> tuple[Any, Any]:
        out, pull = jax.vjp(f, v)
        return out, pull(c)[0]

    step = jax.jit(value_and_gradient)
    jax.block_until_ready(step(x, ct))  # compiled once, outside the timing
    results, times = [], []
    for _ in range(calls):
        start = time.perf_counter()
        out, grad = jax.block_until_ready(step(x, ct))
        times.append(time.perf_counter() - start)
        results.append((np.asarray(out), np.asarray(grad)))
    values = {out.tobytes() for out, _ in results}
    grads = {grad.tobytes() for _, grad in results}
    alone = jax.jit(f)
    unequal, largest = 0, 0.0
    for i in range(min(ROWS_ALONE, x.shape[0])):
        row = np.asarray(alone(x[i:i + 1]))[0]
        unequal += int(row.tobytes() != results[0][0][i].tobytes())
        largest = max(largest, float(np.max(np.abs(row - results[0][0][i]), initial=0.0)))
    return len(values), len(grads), unequal, largest, 1e3 * statistics.median(times)


def table(batch: int, n: int, calls: int) -> Iterator[str]:
    import jax
    import jax.numpy as jnp

    import rankops

    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.normal(size=(batch, n)), dtype=jnp.float32)
    ct = jnp.asarray(rng.normal(size=(batch, n)), dtype=jnp.float32)
    yield (f"determinism on {jax.devices()[0]}, XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}: B = {batch}, n = {n}, "
           f"float32, jit(value and vjp) called {calls} times; {ROWS_ALONE} rows alone against the batch\n")
    yield "| operator | distinct values | distinct gradients | rows alone unequal | largest difference | ms per call |"
    yield "| --- | --- | --- | --- | --- | --- |"
    for name, f in _operators(rankops).items():
        try:
            values, grads, unequal, largest, ms = probe(f, x, ct, calls)
        except Exception as exc:  # noqa: BLE001  (a report: each operator's failure is a line)
            yield f"| {name} | {type(exc).__name__}: {str(exc)[:80]} | | | | |"
            continue
        yield f"| {name} | {values} | {grads} | {unequal} | {largest:.3g} | {ms:.3g} |"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.determinism", description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--quick", action="store_true", help="B = 4, n = 64, 3 calls (smoke test)")
    args = parser.parse_args(argv)
    if args.quick:
        args.batch, args.n, args.calls = 4, 64, 3
    for line in table(args.batch, args.n, args.calls):  # each row as it is measured: a time limit keeps those before
        print(line, flush=True)


if __name__ == "__main__":
    main()
