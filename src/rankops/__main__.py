"""``python -m rankops``: find the installed backends and run every method on each.

Prints the backends found (version, devices), then for each backend, device
and method the soft ranks and soft sort of a small batch and a gradient (the
backend's autodiff on torch and JAX, ``rankops.vjp``'s own rules elsewhere),
each checked against the NumPy result.
Exits with status 1 if an installed backend fails or disagrees.
"""

from __future__ import annotations

import argparse
import sys
import traceback
from typing import Any, Sequence

import numpy as np

import rankops

from ._lib._backends import BACKENDS, Backend, device_label

X = np.array([[0.3, -1.2, 2.5, 0.7], [4.0, 4.1, -2.0, 0.0]], dtype=np.float32)
W = np.array([1.0, -2.0, 0.5, 3.0], dtype=np.float32)  # weights of the scalar loss sum(w * rank)
# Each method with a regularisation that gives visibly soft, yet ordered, output.
METHODS = {"sinkhorn": {"epsilon": 0.01}, "softsort": {"tau": 0.3}, "neuralsort": {"tau": 0.3}}


def _fmt(row: np.ndarray) -> str:
    return "[" + " ".join(f"{v:6.3f}" for v in row) + "]"


def _gradient(backend: Backend, x: Any, method: str) -> np.ndarray:
    """d/dx of sum(w * soft_rank(x)): the backend's own autodiff, or rankops.vjp where it has none."""
    if backend.name == "torch":
        import torch

        x = x.detach().clone().requires_grad_(True)
        w = torch.asarray(W, device=x.device)
        (rankops.soft_rank(x, method=method, **METHODS[method]) * w).sum().backward()
        return backend.to_numpy(x.grad)
    if backend.name == "jax":
        import jax
        import jax.numpy as jnp

        w = jnp.asarray(W)
        g = jax.jit(jax.grad(lambda v: jnp.sum(rankops.soft_rank(v, method=method, **METHODS[method]) * w)))(x)
        return backend.to_numpy(g)
    value, vjp_fn = rankops.vjp(rankops.soft_rank, x, method=method, **METHODS[method])
    xp = backend.namespace()
    ct = xp.broadcast_to(backend.asarray(W, device=_device(x)), tuple(value.shape))
    return backend.to_numpy(vjp_fn(ct)[0])


def _device(x: Any) -> Any:
    import array_api_compat

    return array_api_compat.device(x)


def _reference(method: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    value, vjp_fn = rankops.vjp(rankops.soft_rank, X, method=method, **METHODS[method])
    return (
        np.asarray(value),
        np.asarray(rankops.soft_sort(X, method=method, **METHODS[method])),
        np.asarray(vjp_fn(np.broadcast_to(W, value.shape))[0]),
    )


def run_demo(names: Sequence[str] | None = None, out: Any = None) -> int:
    out = out if out is not None else sys.stdout
    chosen = [b for b in BACKENDS if names is None or b.name in names]
    print(f"rankops {rankops.__version__}: backends", file=out)
    usable = []
    for b in chosen:
        reason = b.unavailable_reason()
        if reason is None:
            devices = ", ".join(device_label(d) for d in b.devices())
            print(f"  {b.name:<17} {b.version:<14} devices: {devices}", file=out)
            usable.append(b)
        else:
            print(f"  {b.name:<17} {'-':<14} skipped: {reason}", file=out)
    settings = ", ".join(f"{m}: {', '.join(f'{k}={v}' for k, v in o.items())}" for m, o in METHODS.items())
    print(f"\nx[0] = {_fmt(X[0])} ({settings}); grad = d sum(w * soft_rank(x)) / dx, w = {_fmt(W)}", file=out)
    header = f"{'backend':<17} {'device':<12} {'method':<10} {'soft_rank(x)[0]':<30} {'soft_sort(x)[0]':<30} {'grad[0]':<30} status"
    print(header, file=out)
    print("-" * len(header), file=out)
    failures = 0
    for b in usable:
        for device in b.devices():
            for method in METHODS:
                ref_rank, ref_sort, ref_grad = _reference(method)
                try:
                    x = b.asarray(X, device=device)
                    rank = b.to_numpy(rankops.soft_rank(x, method=method, **METHODS[method]))
                    srt = b.to_numpy(rankops.soft_sort(x, method=method, **METHODS[method]))
                    grad = _gradient(b, x, method)
                    ok = (
                        np.allclose(rank, ref_rank, atol=1e-3)
                        and np.allclose(srt, ref_sort, atol=1e-3)
                        and np.allclose(grad, ref_grad, rtol=1e-2, atol=1e-2)
                    )
                    status = "ok" if ok else "MISMATCH with numpy"
                    failures += not ok
                    print(
                        f"{b.name:<17} {device_label(device):<12} {method:<10} {_fmt(rank[0]):<30} {_fmt(srt[0]):<30} "
                        f"{_fmt(grad[0]):<30} {status}",
                        file=out,
                    )
                except Exception as exc:  # report every backend, then fail
                    failures += 1
                    print(f"{b.name:<17} {device_label(device):<12} {method:<10} FAILED: {type(exc).__name__}: {exc}", file=out)
                    traceback.print_exc(file=sys.stderr)
    print(f"\n{len(usable)} backend(s) run, {failures} failure(s)", file=out)
    return 1 if failures else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rankops", description=__doc__.splitlines()[0])
    parser.add_argument("--backend", action="append", help="only this backend (repeatable)")
    args = parser.parse_args(argv)
    return run_demo(args.backend)


if __name__ == "__main__":
    sys.exit(main())
