"""Sinkhorn soft ranks: rankops on JAX next to OTT-JAX, plus rankops on torch and NumPy.

All contenders compute the soft ranks of a (B, n) float32 batch onto n
uniform targets with sigmoid-squashed inputs, squared cost, the same
absolute epsilon, the same L1 marginal tolerance and iteration cap.
OTT-JAX (``ott.tools.soft_sort.ranks``) is the reference; it is optional and
its column is left empty when it is not installed. JAX functions are
jit-compiled and timed after a warm-up call; "fwd+bwd" is the gradient of
``sum(w * ranks)``, unrolled through the iterations on both sides
(``implicit=False`` for rankops; "rankops-jax-implicit" is rankops' default,
implicit differentiation of the fixed point, next to them).
"iters" is the number of Sinkhorn iterations each solver ran to reach the
tolerance (the worst row of the batch).

Usage: python -m benchmarks.sinkhorn [--sizes 100 1000] [--epsilons 0.1 0.01] [--repeats 3]
       [--contenders rankops-jax ott-jax]
"""

from __future__ import annotations

import argparse
import platform

import numpy as np

import rankops

from ._timing import interleaved_medians

TOL = 1e-3
MAX_ITER = 2000


def _jax_contenders(x_np: np.ndarray, w_np: np.ndarray, eps: float) -> dict:
    import jax
    import jax.numpy as jnp

    x, w = jnp.asarray(x_np), jnp.asarray(w_np)
    out = {}
    for name, implicit in (("rankops-jax", False), ("rankops-jax-implicit", True)):
        kw = {"epsilon": eps, "tol": TOL, "max_iter": MAX_ITER, "implicit": implicit}
        ours = jax.jit(lambda v, kw=kw: rankops.soft_rank(v, **kw))
        ours_grad = jax.jit(jax.grad(lambda v, kw=kw: jnp.sum(w * rankops.soft_rank(v, **kw))))
        out[name] = (
            lambda f=ours: f(x).block_until_ready(), lambda g=ours_grad: g(x).block_until_ready(), lambda f=ours: np.asarray(f(x))
        )
    try:
        from ott.tools import soft_sort
    except ImportError:
        return out
    # implicit_diff=None: OTT differentiates through its iterations, as rankops does
    # (OTT's default implicit rule fails here: lineax reports the uniform-marginal
    # system singular unless ridge terms are tuned).
    kw = {"epsilon": eps, "threshold": TOL, "max_iterations": MAX_ITER, "implicit_diff": None}
    theirs = jax.jit(lambda v: soft_sort.ranks(v, axis=-1, **kw) + 1.0)  # OTT ranks are 0-based
    theirs_grad = jax.jit(jax.grad(lambda v: jnp.sum(w * soft_sort.ranks(v, axis=-1, **kw))))
    out["ott-jax"] = (lambda: theirs(x).block_until_ready(), lambda: theirs_grad(x).block_until_ready(), lambda: np.asarray(theirs(x)))
    return out


def _torch_contender(x_np: np.ndarray, w_np: np.ndarray, eps: float) -> dict:
    import torch

    x, w = torch.asarray(x_np), torch.asarray(w_np)

    def fwd():
        with torch.no_grad():
            return rankops.soft_rank(x, epsilon=eps, tol=TOL, max_iter=MAX_ITER, implicit=False)

    def fb():
        v = x.clone().requires_grad_(True)
        (w * rankops.soft_rank(v, epsilon=eps, tol=TOL, max_iter=MAX_ITER, implicit=False)).sum().backward()

    return {"rankops-torch": (fwd, fb, lambda: fwd().numpy())}


def _numpy_contender(x_np: np.ndarray, eps: float) -> dict:
    def fwd():
        return rankops.soft_rank(x_np, epsilon=eps, tol=TOL, max_iter=MAX_ITER)

    return {"rankops-numpy": (fwd, None, fwd)}


def _iterations(x_np: np.ndarray, eps: float) -> dict[str, int]:
    """Iterations to TOL: rankops' solver on the same cost, and OTT's solver output."""
    import array_api_compat.numpy as xp

    from rankops._cores.squash import squash_vjp

    n = x_np.shape[-1]
    z = squash_vjp(xp, x_np.astype(np.float64), "sigmoid")[0]
    cost = (np.arange(n) / (n - 1) - z[..., :, None]) ** 2
    its = {"rankops": int(rankops.sinkhorn(cost.astype(np.float32), epsilon=eps, tol=TOL, max_iter=MAX_ITER).n_iter)}
    try:
        import jax
        import jax.numpy as jnp
        from ott.tools import soft_sort
    except ImportError:
        return its
    a = jnp.full((n,), 1.0 / n)

    def n_iters(row):
        return soft_sort.transport_for_sort(row, a, a, epsilon=eps, threshold=TOL, max_iterations=MAX_ITER).n_iters

    its["ott"] = int(jnp.max(jax.vmap(n_iters)(jnp.asarray(x_np))))
    return its


def bench(batch: int, n: int, eps: float, repeats: int, only: list[str] | None = None) -> list[str]:
    rng = np.random.default_rng(n)
    x = rng.normal(size=(batch, n)).astype(np.float32)
    w = rng.normal(size=(batch, n)).astype(np.float32)
    contenders = {**_jax_contenders(x, w, eps), **_torch_contender(x, w, eps), **_numpy_contender(x, eps)}
    if only:
        contenders = {k: v for k, v in contenders.items() if k in only}
    values = {k: c[2]() for k, c in contenders.items()}
    ref_name = next((k for k in ("ott-jax", "rankops-jax") if k in contenders), next(iter(contenders)))
    fwd = interleaved_medians({k: c[0] for k, c in contenders.items()}, repeats)
    fb = interleaved_medians({k: c[1] for k, c in contenders.items() if c[1] is not None}, repeats)
    its = _iterations(x, eps)
    rows = []
    for k in contenders:
        diff = np.abs(values[k] - values[ref_name]).max()
        it = its.get("ott" if k == "ott-jax" else "rankops", "")
        fb_ms = f"{fb[k] * 1e3:.1f}" if k in fb else "-"
        fb_ratio = f"{fb[k] / fb[ref_name]:.2f}x" if k in fb else "-"
        rows.append(
            f"| {n} | {eps:g} | {k} | {fwd[k] * 1e3:.1f} | {fwd[k] / fwd[ref_name]:.2f}x | {fb_ms} | {fb_ratio} | {it} | {diff:.1e} |"
        )
    return rows


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1000, 4000])
    parser.add_argument("--epsilons", type=float, nargs="+", default=[0.1, 0.01])
    parser.add_argument("--batch", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--contenders", nargs="+", help="e.g. rankops-jax ott-jax (default: all)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one repeat: checks that it runs (benchmarks.docs --quick)")
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes, args.epsilons, args.batch, args.repeats = [16, 64], [0.1], 2, 1
    import jax

    try:
        import ott

        ott_version = ott.__version__
    except ImportError:
        ott_version = "not installed"
    print(f"jax {jax.__version__}, ott-jax {ott_version}, {platform.machine()}; B={args.batch}, float32, "
          f"tol={TOL} (L1 marginal), max_iter={MAX_ITER}, median of {args.repeats} interleaved runs; "
          "ratios against ott-jax (rankops-jax when OTT is absent)")
    print("| n | epsilon | contender | fwd (ms) | ratio | fwd+bwd (ms) | ratio | iters | max abs diff of ranks |")
    print("|---|---|---|---|---|---|---|---|---|")
    for n in args.sizes:
        for eps in args.epsilons:
            for row in bench(args.batch, n, eps, args.repeats, args.contenders):
                print(row, flush=True)


if __name__ == "__main__":
    main()
