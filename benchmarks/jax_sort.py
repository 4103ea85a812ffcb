"""JAX's sort on a CPU: the adapter's packed sort against ``lax.sort`` of (values, positions), alone and in operators.

XLA's CPU sort takes a fast path for one operand of integers; a sort of
floats, or of several operands, compares through a called comparator. The
JAX adapter's ``sort_order`` therefore sorts each row as one array of 64-bit
integers (an order-preserving key of each entry above its position,
``rankops._lib._adapters._jax._packed_order``) where it can.

First table: the stable order of each row (and the row in it) of a (B, n)
float32 batch under ``jax.jit``, median of interleaved repeats (ms): the
packed sort, ``lax.sort`` of (values, positions) as the adapter sorted
before, and ``jnp.sort`` (values only) and ``jnp.argsort`` for reference;
the last column says whether the packed order equals ``lax.sort``'s, on rows
with ties, zeros of either sign, infinities and NaNs. Second table: jitted
forward+backward (the sum of squares) of operators with the packed sort and
with ``lax.sort`` of pairs (the adapter's route switched off), each program
compiled once, then timed interleaved; and whether value and gradient agree
bit for bit.

Usage: python -m benchmarks.jax_sort [--repeats 9] [--quick]
"""

from __future__ import annotations

import argparse
from fractions import Fraction
from typing import Any, Callable
from unittest import mock

from ._timing import interleaved_medians

OPERATORS: list[tuple[str, dict[str, Any]]] = [
    ("soft_rank", {"method": "permutahedron"}),
    ("soft_rank", {"method": "permutahedron", "regularization": "kl"}),
    ("soft_rank", {"method": "permutahedron", "regularization": "lp", "p": 4.0 / 3.0}),
    ("soft_sort", {"method": "permutahedron"}),
    ("soft_rank", {"method": "lapsum"}),
    ("soft_topk_mask", {"method": "permutahedron"}),
    ("soft_rank", {"method": "softsort"}),
]
DENSE_LONGEST = 2000  # SoftSort's n x n matrix stops here


def _rows(batch: int, n: int) -> Any:
    """A (batch, n) float32 batch of normal rows, with ties, zeros of either sign, infinities and NaNs in its first."""
    import numpy as np

    x = np.random.default_rng(0).normal(size=(batch, n)).astype(np.float32)
    k = max(n // 10, 1)
    x[0, :k] = x[0, k : 2 * k]
    x[0, 2 * k : 3 * k : 3] = 0.0
    x[0, 2 * k + 1 : 3 * k : 3] = -0.0
    x[0, 3 * k : 3 * k + 2] = (np.inf, -np.inf)
    x[0, 3 * k + 2 : 3 * k + 4] = np.nan
    return x


def _label(op: str, options: dict[str, Any]) -> str:
    shown = "".join(f", p = {Fraction(v).limit_denominator(8)}" if k == "p" else f", {v}"
                    for k, v in options.items() if k != "method")
    return f"{op}, {options['method']}{shown}"


def _packed_off() -> Any:
    from rankops._lib._adapters import _jax

    return mock.patch.object(_jax, "_packs", lambda x: False)


def sort_table(shapes: list[tuple[int, int]], repeats: int) -> list[str]:
    import jax
    import jax.numpy as jnp

    from rankops._lib._adapters._jax import _packed_order

    lines = ["| B | n | packed (ms) | lax.sort of pairs (ms) | pairs / packed | jnp.sort (ms) | jnp.argsort (ms) | same order |",
             "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for batch, n in shapes:
        x = jnp.asarray(_rows(batch, n))
        iota = jax.lax.broadcasted_iota(jnp.int32, x.shape, 1)
        fns = {
            "packed": jax.jit(lambda a: _packed_order(a, jnp.int32)),
            "pairs": jax.jit(lambda a: jax.lax.sort((a, iota), dimension=1, is_stable=True, num_keys=1)[1]),
            "jnp.sort": jax.jit(lambda a: jnp.sort(a, axis=-1)),
            "jnp.argsort": jax.jit(lambda a: jnp.argsort(a, axis=-1, stable=True)),
        }
        same = bool(jnp.all(fns["packed"](x) == fns["pairs"](x)))
        medians = interleaved_medians({k: (lambda f=f: f(x).block_until_ready()) for k, f in fns.items()}, repeats)
        ms = {k: v * 1e3 for k, v in medians.items()}
        lines.append(f"| {batch} | {n:,} | {ms['packed']:.3g} | {ms['pairs']:.3g} | {ms['pairs'] / ms['packed']:.1f}x | "
                     f"{ms['jnp.sort']:.3g} | {ms['jnp.argsort']:.3g} | {'yes' if same else 'NO'} |")
    return lines


def _program(op: str, options: dict[str, Any], x: Any, packed: bool) -> tuple[Callable[[], Any], Any]:
    import jax
    import jax.numpy as jnp

    import rankops
    from rankops._lib._adapters import _jax

    fn = getattr(rankops, op)
    kw = dict(options, k=max(x.shape[-1] // 10, 1)) if op == "soft_topk_mask" else options
    f = jax.jit(jax.value_and_grad(lambda v: jnp.sum(fn(v, **kw) ** 2)))
    _jax._compiled.cache_clear()  # a fresh inner program for each route
    if packed:
        compiled = f.lower(x).compile()
    else:
        with _packed_off():
            compiled = f.lower(x).compile()
    out = jax.block_until_ready(compiled(x))
    return (lambda: jax.block_until_ready(compiled(x))), out


def operator_table(shapes: list[tuple[int, int]], repeats: int) -> list[str]:
    import jax.numpy as jnp
    import numpy as np

    lines = ["| operator | B | n | packed (ms) | lax.sort of pairs (ms) | pairs / packed | bit-equal |",
             "| --- | ---: | ---: | ---: | ---: | ---: | --- |"]
    for batch, n in shapes:
        x = jnp.asarray(np.random.default_rng(1).normal(size=(batch, n)).astype(np.float32))
        for op, options in OPERATORS:
            if options["method"] == "softsort" and n > DENSE_LONGEST:
                continue
            runs, outs = {}, {}
            for packed in (True, False):
                runs[packed], outs[packed] = _program(op, options, x, packed)
            medians = interleaved_medians({"packed": runs[True], "pairs": runs[False]}, repeats, warmup=0)
            equal = all(bool(jnp.all(a == b)) for a, b in zip(outs[True], outs[False]))
            packed_ms, pairs_ms = medians["packed"] * 1e3, medians["pairs"] * 1e3
            lines.append(f"| {_label(op, options)} | {batch} | {n:,} | {packed_ms:.3g} | {pairs_ms:.3g} | "
                         f"{pairs_ms / packed_ms:.2f}x | {'yes' if equal else 'no'} |")
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--quick", action="store_true", help="tiny sizes and two repeats (a smoke run)")
    args = parser.parse_args(argv)
    repeats = 2 if args.quick else args.repeats
    sorts = [(2, 100)] if args.quick else [(20, 1000), (1, 100_000), (1, 1_000_000)]
    operators = [(2, 100)] if args.quick else [(20, 1000), (1, 100_000)]
    print("JAX on a CPU: the stable order of each row of a (B, n) float32 batch under jax.jit, median of interleaved repeats")
    print()
    print("\n".join(sort_table(sorts, repeats)))
    print()
    print("jitted forward+backward (sum of squares), float32: the packed sort against lax.sort of (values, positions)")
    print()
    print("\n".join(operator_table(operators, repeats)))


if __name__ == "__main__":
    main()
