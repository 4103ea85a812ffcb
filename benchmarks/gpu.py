"""GPU readiness: what each operator asks of a device, and the time table a user with a GPU runs.

Two tables, both printed by ``python -m benchmarks.gpu``, the time table
first (a call that a time limit stops keeps the rows printed so far; the
census prints each operator's row as it is counted, and its seconds on
stderr):

1. **census** (torch, on the GPU when there is one, else the CPU): per
   operator and method, forward and forward+backward at B = 20, n = 1000,
   float32, counted with a ``TorchDispatchMode``:

   - *kernels*: aten ops that compute (each one a kernel launch on a GPU);
     views (``slice``, ``expand``, ``detach``, ...) are counted apart, they
     launch nothing;
   - *syncs*: ``_local_scalar_dense`` calls, the device-to-host reads behind
     ``bool(tensor)`` / ``.item()`` (one per convergence check of a loop
     that stops early, never per element or per iteration);
   - *graph breaks* under ``torch.compile`` (``torch._dynamo.explain``;
     ``--no-compile`` skips it).

2. **time** (median of interleaved repeats, ms, forward+backward, float32)
   of ``soft_rank`` per method on every device present: torch CUDA, CuPy
   (through ``rankops.vjp``), JAX GPU (``jax.jit``), next to torchsort and
   OTT-JAX's ``soft_sort.ranks`` when installed, ratios against the first
   rankops row. Without a GPU the same table runs on the CPU (torch, JAX,
   NumPy), so the command works anywhere.

Usage: python -m benchmarks.gpu [--batch 20] [--n 1000] [--repeats 7] [--no-compile] [--quick]
"""

from __future__ import annotations

import argparse
import collections
import importlib.util
import itertools
import sys
import time
import warnings
from typing import Any, Callable, Iterator

import numpy as np

from ._timing import interleaved_medians

METHODS = ("permutahedron", "lapsum", "softsort", "neuralsort", "sinkhorn")


def _torch_operators(torch: Any, rankops: Any) -> dict[str, Callable[[Any], Any]]:
    """name -> f(x) on torch for the census: every public operator, each method of soft_rank / soft_sort."""
    ops: dict[str, Callable[[Any], Any]] = {}
    for m in METHODS:
        ops[f"soft_rank[{m}]"] = lambda x, m=m: rankops.soft_rank(x, method=m)
        ops[f"soft_sort[{m}]"] = lambda x, m=m: rankops.soft_sort(x, method=m)
    # sorting networks: a few kernels per layer, 55 layers (bitonic) at n = 1000; odd-even has n layers
    ops["soft_rank[diffsort]"] = lambda x: rankops.soft_rank(x, method="diffsort", network="bitonic")
    ops["soft_sort[diffsort]"] = lambda x: rankops.soft_sort(x, method="diffsort", network="bitonic")
    ops["soft_topk_mask[lapsum]"] = lambda x: rankops.soft_topk_mask(x, 10.5, method="lapsum")
    ops["soft_topk_mask[sinkhorn]"] = lambda x: rankops.soft_topk_mask(x, 10)
    ops["soft_cdf"] = lambda x: rankops.soft_cdf(x, num_targets=100)
    ops["soft_quantile"] = lambda x: rankops.soft_quantile(x, 0.3)
    ops["soft_quantile_normalize"] = lambda x: rankops.soft_quantile_normalize(x, torch.linspace(-1, 1, 100, device=x.device))
    ops["soft_quantize"] = lambda x: rankops.soft_quantize(x, 8)
    ops["softsort"] = lambda x: rankops.softsort(x)
    ops["neuralsort"] = lambda x: rankops.neuralsort(x)
    ops["diffsort"] = lambda x: rankops.diffsort(x, network="bitonic")
    ops["isotonic_regression"] = lambda x: rankops.isotonic_regression(x)
    ops["soft_kendall_tau"] = lambda x: rankops.soft_kendall_tau(x, torch.flip(x, (-1,)))
    ops["losses.spearman_loss[permutahedron]"] = lambda x: rankops.losses.spearman_loss(x, torch.flip(x, (-1,)), method="permutahedron")
    return ops


def _count(torch: Any, run: Callable[[], Any]) -> tuple[int, int, int]:
    """(kernels, views, syncs) dispatched while ``run`` runs."""
    from torch.utils._python_dispatch import TorchDispatchMode

    counts: collections.Counter[str] = collections.Counter()

    class Count(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            name = func.overloadpacket.__name__
            counts["sync" if name == "_local_scalar_dense" else "view" if func.is_view else "kernel"] += 1
            return func(*args, **(kwargs or {}))

    with Count():
        run()
    return counts["kernel"], counts["view"], counts["sync"]


def per_call(torch: Any, f: Callable[[Any], Any], x0: Any) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """``_count`` of one call of ``f`` forward, and forward+backward (a cotangent of ones), on a fresh leaf from ``x0``.

    One call runs first: first-call imports and caches are not the operator's. The calls take the path they take
    on a GPU: the isotonic fits' CPU-only finish (``rankops._cores.windows.pays``) is off, and a batch runs whole,
    not in blocks that fit a CPU core's cache (``PortableAdapter.cache_block``).
    """
    from unittest import mock

    from rankops._cores import windows
    from rankops._lib._adapters import _generic

    x = x0.clone().requires_grad_()

    def both() -> None:
        y = f(x)
        torch.autograd.grad(y, x, torch.ones_like(y))

    with mock.patch.object(windows, "pays", lambda v: False), mock.patch.object(_generic, "WHOLE_BYTES", 1 << 62):
        both()
        return _count(torch, lambda: f(x)), _count(torch, both)


def _graph_breaks(torch: Any, f: Callable[[Any], Any], x: Any) -> str:
    torch._dynamo.reset()
    try:
        return str(torch._dynamo.explain(f)(x).graph_break_count)
    except Exception as e:  # noqa: BLE001 - reported in the table
        return type(e).__name__


def census(batch: int, n: int, compile_check: bool) -> Iterator[str]:
    import torch

    import rankops

    device = "cuda" if torch.cuda.is_available() else "cpu"
    # seeded: the pooling rounds, and so the counts, depend on the data
    gen = torch.Generator().manual_seed(0)
    x0 = torch.randn(batch, n, generator=gen).to(device)
    small = torch.randn(batch, 16, generator=gen).to(device)
    yield f"census on torch {device}, B = {batch}, n = {n}, float32 (kernels: computing aten ops; views apart; syncs: host reads)"
    yield ""
    yield "| operator | fwd kernels | fwd+bwd kernels | fwd+bwd views | fwd syncs | fwd+bwd syncs | graph breaks |"
    yield "| --- | --- | --- | --- | --- | --- | --- |"
    for name, f in _torch_operators(torch, rankops).items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            start = time.perf_counter()
            fwd, total = per_call(torch, f, x0)
            counted = time.perf_counter()
            breaks = _graph_breaks(torch, f, small) if compile_check else "-"
        # where a GPU call's minutes go (the counts, or dynamo's tracing), apart from the table
        print(f"census {name}: counted in {counted - start:.1f} s, graph breaks in {time.perf_counter() - counted:.1f} s",
              file=sys.stderr, flush=True)
        yield f"| {name} | {fwd[0]} | {total[0]} | {total[1]} | {fwd[2]} | {total[2]} | {breaks} |"


def _contenders(batch: int, n: int) -> dict[str, dict[str, Callable[[], Any]]]:
    """device label -> {contender: forward+backward closure}, for every device present (CPU when no GPU is)."""
    import rankops

    x = np.random.default_rng(0).normal(size=(batch, n)).astype(np.float32)
    ct = np.random.default_rng(1).normal(size=(batch, n)).astype(np.float32)
    backends: dict[str, dict[str, Callable[[], Any]]] = {}
    gpu = False
    if importlib.util.find_spec("torch"):
        import torch

        dev = "cuda" if torch.cuda.is_available() else "cpu"
        gpu |= dev == "cuda"
        xt, ctt = torch.from_numpy(x).to(dev), torch.from_numpy(ct).to(dev)
        sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
        row: dict[str, Callable[[], Any]] = {}

        def torch_run(f: Callable[[Any], Any]) -> Callable[[], Any]:
            def run() -> None:
                v = xt.clone().requires_grad_()
                torch.autograd.grad(f(v), v, ctt)
                sync()

            return run

        for m in METHODS:
            row[f"rankops {m}"] = torch_run(lambda v, m=m: rankops.soft_rank(v, method=m))
        if importlib.util.find_spec("torchsort"):
            import torchsort

            row["torchsort"] = torch_run(lambda v: torchsort.soft_rank(v, regularization_strength=1.0))
        backends[f"torch {dev}"] = row
    if importlib.util.find_spec("jax"):
        import jax
        import jax.numpy as jnp

        on_gpu = jax.default_backend() == "gpu"
        gpu |= on_gpu
        xj, ctj = jnp.asarray(x), jnp.asarray(ct)
        row = {}

        def jax_run(f: Callable[[Any], Any]) -> Callable[[], Any]:
            step = jax.jit(lambda v, c: jax.vjp(f, v)[1](c)[0])
            return lambda: step(xj, ctj).block_until_ready()

        for m in METHODS:
            row[f"rankops {m}"] = jax_run(lambda v, m=m: rankops.soft_rank(v, method=m))
        if importlib.util.find_spec("ott"):
            from ott.tools import soft_sort

            row["OTT-JAX soft_sort.ranks"] = jax_run(lambda v: soft_sort.ranks(v, axis=-1))
        backends[f"jax {jax.default_backend()}"] = row
    cupy_gpu = False
    if importlib.util.find_spec("cupy"):
        try:
            import cupy

            cupy_gpu = cupy.cuda.runtime.getDeviceCount() > 0
        except Exception:  # noqa: BLE001 - no driver: no CuPy row
            cupy_gpu = False
    if cupy_gpu:
        import cupy

        xc, ctc = cupy.asarray(x), cupy.asarray(ct)
        backends["cupy"] = {
            f"rankops {m}": (lambda m=m: (rankops.vjp(rankops.soft_rank, xc, method=m)[1](ctc), cupy.cuda.Device().synchronize()))
            for m in METHODS
        }
    elif not gpu:
        backends["numpy (rankops.vjp)"] = {
            f"rankops {m}": (lambda m=m: rankops.vjp(rankops.soft_rank, x, method=m)[1](ct)) for m in METHODS
        }
    return backends


def timings(batch: int, n: int, repeats: int) -> Iterator[str]:
    yield f"soft_rank forward+backward, B = {batch}, n = {n}, float32: median of {repeats} interleaved repeats (ms)"
    yield ""
    yield "| device | contender | ms | / rankops permutahedron |"
    yield "| --- | --- | --- | --- |"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # convergence notes of the Sinkhorn rows at default tol are not the point here
        for backend, row in _contenders(batch, n).items():
            start = time.perf_counter()
            ms = {k: 1e3 * v for k, v in interleaved_medians(row, repeats).items()}
            print(f"time {backend}: measured in {time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)
            ref = ms["rankops permutahedron"]
            yield from (f"| {backend} | {name} | {t:.3g} | {t / ref:.2f} |" for name, t in ms.items())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu", description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=20)
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--no-compile", action="store_true", help="skip the graph-break column (torch.compile)")
    parser.add_argument("--quick", action="store_true", help="B = 4, n = 64, 2 repeats, no graph-break column (smoke test)")
    args = parser.parse_args(argv)
    if args.quick:
        args.batch, args.n, args.repeats, args.no_compile = 4, 64, 2, True
    lines = timings(args.batch, args.n, args.repeats)
    if importlib.util.find_spec("torch"):
        lines = itertools.chain(lines, [""], census(args.batch, args.n, not args.no_compile))
    for line in lines:  # each row as it is measured
        print(line, flush=True)


if __name__ == "__main__":
    main()
