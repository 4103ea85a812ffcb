"""Choosing a method: every soft_rank method's value, gradient, time and memory, side by side.

Prints two tables and saves two figures (the "choosing a method" page of the docs):

1. **Temperature**: for one row of n = 8 well-spread values (float64, NumPy,
   gradients by ``rankops.vjp``), each method's soft ranks and the diagonal
   of its Jacobian ``d r_i / d x_i`` as its temperature (``epsilon``, ``tau``,
   ``strength``, ``alpha``) sweeps six decades; the table gives, per method,
   the largest temperature whose ranks are within 0.05 of ``rankdata`` and the
   mean Jacobian diagonal there and at the default temperature.
2. **Scale**: forward+backward time (median of interleaved repeats, and its
   ratio to one ``torch.sort`` of the row measured in the same run) and
   peak memory (resident-set growth of one call in a fresh process) of
   ``soft_rank`` at default settings on torch, float32, one row of n, for n
   from 100 up to what each method affords (n x n work: Sinkhorn, SoftSort,
   NeuralSort up to 10^4; the O(n log n) methods up to 10^6).

Usage: python -m benchmarks.methods [--sizes 100 1000 10000 100000 1000000] [--repeats 5] [--points 16]
                                    [--plot-temperature PNG] [--plot-scale PNG] [--quick]
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import numpy as np

from ._common import git_state, machine
from ._timing import interleaved_medians
from .fast import _peak_gib

# method -> (its temperature option, the sweep's ends, the default)
TEMPERATURES: dict[str, tuple[str, tuple[float, float], float]] = {
    "sinkhorn": ("epsilon", (1e-4, 1e1), 1e-2),
    "softsort": ("tau", (1e-3, 1e2), 1.0),
    "neuralsort": ("tau", (1e-3, 1e2), 1.0),
    "permutahedron": ("strength", (1e-3, 1e2), 1.0),
    "lapsum": ("alpha", (1e-3, 1e2), 1.0),
}
# n x n work (or memory): the sizes beyond this take minutes or gigabytes
QUADRATIC_LIMIT = {"sinkhorn": 10_000, "softsort": 10_000, "neuralsort": 10_000}


def _row(n: int = 8) -> np.ndarray:
    """Values spread over about [-2, 2] with gaps from 0.1 to 1: close pairs and far ones."""
    return np.array([-1.9, -1.0, -0.3, -0.2, 0.4, 0.5, 1.3, 2.1])[:n]


def _sinkhorn_budget(method: str) -> dict[str, Any]:
    # small epsilon needs many more iterations to reach tol; the sweep wants converged values
    return {"max_iter": 100_000} if method == "sinkhorn" else {}


def sweep(method: str, points: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(temperatures, ranks (T, n), jacobian diagonals (T, n))`` for one method."""
    import rankops

    name, ends, _ = TEMPERATURES[method]
    temps = np.geomspace(*ends, points)
    x = _row()
    n = x.size
    ranks, diag = [], []
    for t in temps:
        r, pull = rankops.vjp(rankops.soft_rank, x, method=method, **{name: float(t)}, **_sinkhorn_budget(method))
        ranks.append(np.asarray(r))
        diag.append(np.array([np.asarray(pull(np.eye(n)[i])[0])[i] for i in range(n)]))
    return temps, np.stack(ranks), np.stack(diag)


def temperature_table(sweeps: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]) -> list[str]:
    from scipy.stats import rankdata

    import rankops

    hard = rankdata(_row())
    rows = ["| method | temperature | largest within 0.05 of rankdata | mean d r_i / d x_i there | default | "
            "max abs(soft - rankdata) at default | mean d r_i / d x_i at default |", "|---|---|---|---|---|---|---|"]
    for method, (temps, ranks, diag) in sweeps.items():
        name, _, default = TEMPERATURES[method]
        close = np.abs(ranks - hard).max(axis=-1) <= 0.05
        i = int(np.flatnonzero(close).max()) if close.any() else None
        r, pull = rankops.vjp(rankops.soft_rank, _row(), method=method, **_sinkhorn_budget(method))
        d = np.array([np.asarray(pull(np.eye(8)[j])[0])[j] for j in range(8)])
        gap = float(np.abs(np.asarray(r) - hard).max())
        where = f"{temps[i]:.3g}" if i is not None else "none"
        there = f"{diag[i].mean():.3g}" if i is not None else "-"
        rows.append(f"| {method} | `{name}` | {where} | {there} | {default:g} | {gap:.3g} | {d.mean():.3g} |")
    return rows


def plot_temperature(path: str, sweeps: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, len(sweeps), figsize=(3.2 * len(sweeps), 6), sharey="row")
    for col, (method, (temps, ranks, diag)) in enumerate(sweeps.items()):
        name, _, default = TEMPERATURES[method]
        for ax, values, label in ((axes[0, col], ranks, "soft rank of each entry"), (axes[1, col], diag, "d r_i / d x_i")):
            ax.plot(temps, values, lw=1.2)
            ax.axvline(default, color="k", ls=":", lw=1)
            ax.set_xscale("log")
            ax.grid(True, alpha=0.3)
            if col == 0:
                ax.set_ylabel(label)
        axes[0, col].set_title(method)
        axes[1, col].set_xlabel(f"{name} (dotted: default)")
    fig.suptitle("soft_rank of x = [-1.9, -1.0, -0.3, -0.2, 0.4, 0.5, 1.3, 2.1] against each method's temperature")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def scale_table(sizes: list[int], repeats: int, series: dict[str, dict[int, tuple[float, float]]]) -> list[str]:
    """Forward+backward ms and peak MiB per (method, n); fills ``series[method][n] = (ms, MiB)``."""
    import torch

    import rankops

    rows = ["| method | n | fwd+bwd ms | / torch.sort | peak memory, fwd+bwd (MiB) |", "|---|---|---|---|---|"]
    for n in sizes:
        x = torch.from_numpy(np.random.default_rng(0).normal(size=(1, n)).astype(np.float32))
        # the reference measured in the same run: one hard sort of the row, the floor of every sorting-based method
        fns = {"torch.sort": lambda: torch.sort(x, dim=-1)}
        for method in TEMPERATURES:
            if n > QUADRATIC_LIMIT.get(method, n):
                continue

            def run(method: str = method) -> Any:
                leaf = x.detach().requires_grad_(True)
                rankops.soft_rank(leaf, method=method).sum().backward()
                return leaf.grad

            fns[method] = run
        times = interleaved_medians(fns, repeats)
        ref = times.pop("torch.sort")
        rows.append(f"| torch.sort (hard, forward) | {n} | {1e3 * ref:.3f} | 1 | - |")
        for method in times:
            mib = 1024 * _peak_gib(method, 1, n)
            series.setdefault(method, {})[n] = (1e3 * times[method], mib)
            rows.append(f"| {method} | {n} | {1e3 * times[method]:.2f} | {times[method] / ref:.0f} | {mib:.1f} |")
    return rows


def plot_scale(path: str, series: dict[str, dict[int, tuple[float, float]]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for method, by_n in series.items():
        ns = sorted(by_n)
        left.plot(ns, [by_n[n][0] for n in ns], marker="o", label=method)
        right.plot(ns, [max(by_n[n][1], 0.1) for n in ns], marker="o", label=method)
    left.set(xscale="log", yscale="log", xlabel="n", ylabel="forward+backward (ms)", title="time, torch CPU float32, one row")
    right.set(xscale="log", yscale="log", xlabel="n", ylabel="peak resident-set growth (MiB)", title="memory of one call")
    for ax in (left, right):
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[100, 1000, 10_000, 100_000, 1_000_000])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--points", type=int, default=16, help="temperatures per method in the sweep")
    ap.add_argument("--plot-temperature", help="save the value / gradient against temperature figure here (PNG)")
    ap.add_argument("--plot-scale", help="save the time / memory against n figure here (PNG)")
    ap.add_argument("--quick", action="store_true", help="small sizes, one repeat: checks that everything runs")
    args = ap.parse_args(argv)
    if args.quick:
        args.sizes, args.repeats, args.points = [64, 256], 1, 3
    print(f"# {machine()}; {git_state()}\n")
    sweeps = {m: sweep(m, args.points) for m in TEMPERATURES}
    print("\n".join(temperature_table(sweeps)))
    if args.plot_temperature:
        plot_temperature(args.plot_temperature, sweeps)
    print()
    series: dict[str, dict[int, tuple[float, float]]] = {}
    print("\n".join(scale_table(args.sizes, args.repeats, series)))
    if args.plot_scale:
        plot_scale(args.plot_scale, series)
    return 0


if __name__ == "__main__":
    sys.exit(main())
