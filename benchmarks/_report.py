"""The suite's page: Markdown tables, matplotlib plots (Agg) and the methodology, from the measured results."""

from __future__ import annotations

import datetime
from pathlib import Path

from ._common import git_state, machine, package_version
from ._contenders import CONTENDERS, LARGE, NOT_COMPARED, REFERENCE

TITLES = {
    "softsort": "Soft ranks with SoftSort",
    "neuralsort": "Soft ranks with NeuralSort",
    "sinkhorn": "Sinkhorn soft sort",
    "sinkhorn-defaults": "Sinkhorn soft ranks at the defaults, against the dense floor",
}
REF_NAMES = {"paper-torch": "the papers' PyTorch code", "ott-jax": "OTT-JAX", "dense-torch": "one dense n x n softmax (the O(n^2) floor)"}
PASS_NAMES = {"fwd": "fwd", "fb": "fwd+bwd"}
PACKAGES = ("numpy", "torch", "jax", "jaxlib", "ott-jax", "torchsort", "matplotlib")


def _ok(r: dict | None) -> bool:
    return bool(r) and "error" not in r and "peak_mib" in r


def _cell(text: str) -> str:
    return str(text).replace("|", "/")


def _ms(t: float) -> str:
    ms = t * 1e3
    return f"{ms:.0f}" if ms >= 100 else f"{ms:.1f}" if ms >= 10 else f"{ms:.2f}"


def _why(e: dict, p: str) -> str:
    if "unavailable" in e:
        return _cell(f"not installed ({e['unavailable']})" if "not installed" not in e["unavailable"] else e["unavailable"])
    return _cell(e.get(p, {}).get("error", "n/a"))


def _time_cells(e: dict, ref: dict, p: str) -> list[str]:
    r, rr = e.get(p, {}), ref.get(p, {})
    if not _ok(r):
        return [_why(e, p), ""]
    if "time_s" not in r:
        return [_cell(f"no time: {r.get('time_error', 'not timed')}"), ""]
    ratio = f"{r['time_s'] / rr['time_s']:.2f}x" if _ok(rr) and rr.get("time_s") else "n/a"
    return [_ms(r["time_s"]), ratio]


def _memory_cells(e: dict, ref: dict, p: str) -> list[str]:
    r, rr = e.get(p, {}), ref.get(p, {})
    if not _ok(r):
        return [_why(e, p), ""]
    ratio = "n/a"  # below 1 MiB a peak is allocator noise: no ratio
    if _ok(rr) and rr["peak_mib"] >= 1:
        ratio = f"{r['peak_mib'] / rr['peak_mib']:.2f}x"
    elif rr.get("peak_min_mib"):  # the reference was killed: its peak is a lower bound
        ratio = f"< {r['peak_mib'] / rr['peak_min_mib']:.2g}x"
    return [f"{r['peak_mib']:.1f}", ratio]


def _diff_cell(group: str, c: str, e: dict) -> str:
    if c == REFERENCE[group]:
        return "(reference)"
    if c in NOT_COMPARED:
        return "not compared (other relaxation)"
    if "diff" not in e:
        return e.get("diff_note", "")
    note = f" ({e['diff_note']})" if e.get("diff_note") else ""
    return f"{e['diff']:.1e}{note}{' MISMATCH' if e.get('mismatch') else ''}"


def group_tables(group: str, by_n: dict) -> list[str]:
    ref = REFERENCE[group]
    lines = ["| n | contender | fwd (ms) | ratio | fwd+bwd (ms) | ratio | max abs diff |", "|---|---|---|---|---|---|---|"]
    for n, entries in by_n.items():
        for c, e in entries.items():
            cells = _time_cells(e, entries.get(ref, {}), "fwd") + _time_cells(e, entries.get(ref, {}), "fb")
            lines.append(f"| {n} | {c} | {' | '.join(cells)} | {_diff_cell(group, c, e)} |")
    lines += ["", "| n | contender | fwd peak (MiB) | ratio | fwd+bwd peak (MiB) | ratio |", "|---|---|---|---|---|---|"]
    for n, entries in by_n.items():
        for c, e in entries.items():
            cells = _memory_cells(e, entries.get(ref, {}), "fwd") + _memory_cells(e, entries.get(ref, {}), "fb")
            lines.append(f"| {n} | {c} | {' | '.join(cells)} |")
    return lines


# -- plots ---------------------------------------------------------------------------------


def _series(by_n: dict, c: str, p: str, key: str) -> tuple[list, list, list, list]:
    """(n, value) where measured, and (n, lower bound) where the case was killed."""
    xs, ys, kx, ky = [], [], [], []
    for n, entries in by_n.items():
        r = entries.get(c, {}).get(p, {})
        if _ok(r) and r.get(key) is not None and r[key] > 0:
            xs.append(int(n))
            ys.append(r[key])
        elif key == "peak_mib" and r.get("peak_min_mib"):
            kx.append(int(n))
            ky.append(r["peak_min_mib"])
    return xs, ys, kx, ky


def _plot(path: Path, group: str, by_n: dict, panels: list[tuple[str, str]], ylabel: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4.2), squeeze=False)
    for ax, (p, key) in zip(axes[0], panels):
        for i, c in enumerate(CONTENDERS[group]):
            ref = c == REFERENCE[group]
            color = "black" if ref else f"C{i}"
            xs, ys, kx, ky = _series(by_n, c, p, key)
            if xs:
                ax.plot(xs, ys, marker="o", color=color, linestyle="--" if ref else "-",
                        label=f"{c} (reference)" if ref else c)
            if kx:
                ax.scatter(kx, ky, marker="^", s=70, facecolors="none", edgecolors=color,
                           label=f"{c}: killed (lower bound)")
        ax.set_xscale("log")
        ax.set_yscale("log")
        sizes = sorted(int(n) for n in by_n)
        ax.set_xticks(sizes, [str(n) for n in sizes])
        ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
        ax.set_xlabel("n")
        ax.set_ylabel(ylabel)
        ax.set_title(f"{title}, {PASS_NAMES[p]}" if len(panels) > 1 else title, fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        if ax.has_data():
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def group_plots(out: Path, group: str, by_n: dict, batch: int) -> list[str]:
    """Three PNGs under ``out/img``: time fwd, time fwd+bwd, peak memory; Markdown image lines."""
    title = f"{TITLES[group]}, B={batch}"
    plots = [
        (f"{group}-time-fwd.png", [("fwd", "time_s")], "median time (s)", f"{title}: time, fwd"),
        (f"{group}-time-fwdbwd.png", [("fb", "time_s")], "median time (s)", f"{title}: time, fwd+bwd"),
        (f"{group}-memory.png", [("fwd", "peak_mib"), ("fb", "peak_mib")], "peak RSS growth (MiB)", f"{title}: memory"),
    ]
    lines = []
    for name, panels, ylabel, caption in plots:
        _plot(out / "img" / name, group, by_n, panels, ylabel, caption)
        lines.append(f"![{caption}](img/{name})")
    return lines


# How benchmarks.docs regenerates this page (docs/benchmarks.md).
PAGE_COMMAND = "python -m benchmarks --repeats 3 --timeout 900 --output docs"

# -- the page ------------------------------------------------------------------------------


def _header(args, settings: dict, command: str, started: datetime.datetime, elapsed: float) -> list[str]:
    versions = ", ".join(f"{p} {package_version(p)}" for p in PACKAGES)
    lines = [
        "# Benchmarks", "",
        f"<!-- generated page: {PAGE_COMMAND} -->",
        "<!-- Written by `python -m benchmarks` (benchmarks/suite.py): edit the suite, not this page. -->", "",
        f"Generated by `{command}` on {started:%Y-%m-%d %H:%M} (took {elapsed / 60:.1f} min).", "",
        f"- Machine: {machine()}.",
        f"- Versions: {versions}, rankops-xp {package_version('rankops-xp')} ({git_state()}).",
        f"- Sizes: B = {args.batch}, n in {{{', '.join(map(str, args.sizes))}}}, float32; large n: B = 1, "
        f"n = {args.large_n}, torch.",
        f"- Timing: median of {args.repeats} interleaved repeat{'s' if args.repeats > 1 else ''} up to n = 1000, "
        f"{min(args.repeats, 3)} up to n = 4000, a single call above; every case in a fresh process, a time limit of "
        f"{args.timeout:.0f} s per case and a memory guard at {args.max_rss_gib:.1f} GiB of RSS.",
        f"- SoftSort / NeuralSort: tau = {settings['tau']}. Sinkhorn: epsilon = {settings['epsilon']} (absolute), "
        f"tol = {settings['tol']} (L1 marginal error), max_iter = {settings['max_iter']}, "
        f"m = min(n, {settings['targets']}) targets.",
    ]
    if args.smoke:
        lines += ["", "**Smoke run**: tiny sizes, one repeat, jobs sharing processes (two at a time): it checks "
                  "that every contender runs, its numbers mean nothing."]
    return lines + ["", "Each rankops figure comes with its ratio to the reference measured in the same run (below "
                    "1: rankops is faster or smaller). The scripts behind single questions (relaxed permutation "
                    "matrices, Sinkhorn at two epsilons against OTT-JAX, implicit-differentiation memory) and their "
                    "recorded results are in [benchmarks-scripts.md](benchmarks-scripts.md)."]


def _group_intro(group: str, settings: dict) -> str:
    if group == "sinkhorn-defaults":
        return ("`rankops.soft_rank(x)` with every default (epsilon 1e-2, tol 1e-3, m = n targets, implicit "
                "gradients) on torch and JAX, against one dense transport step on torch: the (B, n, n) cost, its "
                "softmax and a product, `softmax(-(x_i - y_j)^2 / 0.01) @ (1..n)`, the least any O(n^2) method does. "
                "Not the same operator, so values are not compared; the ratio says how many such passes the "
                "Sinkhorn solve and its implicit backward cost.")
    if group == "sinkhorn":
        return (f"`rankops.soft_sort(x, epsilon={settings['epsilon']}, tol={settings['tol']}, "
                f"max_iter={settings['max_iter']}, num_targets=m, implicit=False)` against OTT-JAX's "
                "`ott.tools.soft_sort.sort(x, num_targets=m, epsilon=..., threshold=tol, max_iterations=max_iter, "
                "implicit_diff=None, initializer=DefaultInitializer())`, both differentiated through the iterations "
                "(rankops-numpy's `rankops.vjp` uses the implicit rule, the only one it has). rankops starts from the "
                "exact unregularised potentials of the sorted row (`rankops._solvers.line`), differentiated "
                "with the iterations; OTT starts from zero potentials (at m = n its `sort` would otherwise pick its "
                "sorting initializer, whose loop reverse-mode autodiff cannot go through). The full n x n transport costs O(n^2) memory and time "
                f"per iteration on both sides, so the targets are capped: m = min(n, {settings['targets']}), the "
                "same m on both sides, which keeps n = 16000 at O(n m) per iteration.")
    name = "SoftSort" if group == "softsort" else "NeuralSort"
    extra = (" `torchsort.soft_rank` (regularization strength tau) is timed next to them: another relaxation, "
             "O(n log n), so its values are not compared." if group == "softsort" else "")
    return (f"`rankops.soft_rank(x, method=\"{group}\", tau={settings['tau']})` on NumPy, torch and JAX against the "
            f"{name} paper's own PyTorch code (`benchmarks/permutations.py`), which builds the (B, n, n) matrix "
            "(B n^2 4 bytes per matrix in float32). The reference's ranks are `P(-x)^T @ (1..n)`: the descending "
            "matrix of -x is the ascending matrix of x, rankops' convention (smallest entry rank 1). \"max abs diff\" "
            "compares each forward output with the reference's (row 0 only where the reference's whole batch did not "
            "fit)." + extra)


def _large(results: dict, settings: dict) -> list[str]:
    ops = {"large-softsort": f"soft_rank, method=\"softsort\", tau={settings['tau']}",
           "large-neuralsort": f"soft_rank, method=\"neuralsort\", tau={settings['tau']}",
           "large-quantile": f"soft_quantile, q={settings['q']} (Sinkhorn defaults)",
           "large-topk": f"soft_topk_mask, k={settings['k']} (Sinkhorn defaults)"}
    lines = ["| operation | fwd+bwd time (s) | peak RSS growth (MiB) | peak under 4 GiB |", "|---|---|---|---|"]
    for op in LARGE:
        r = results.get(op)
        if r is None:
            continue
        if _ok(r):
            lines.append(f"| `{ops[op]}` | {r['once_s']:.2f} | {r['peak_mib']:.1f} | "
                         f"{'yes' if r['peak_mib'] < 4096 else 'NO'} |")
        else:
            lines.append(f"| `{ops[op]}` | {_cell(r.get('error'))} | | NO |")
    return lines


METHODOLOGY = """## How these numbers are measured

Every measurement of memory (one group, one size, one contender, one pass:
forward, or forward+backward) runs in a fresh Python process started by the
suite, so that one call's allocations, and the allocator caches they leave
behind, cannot lift or hide another's peak. Inside, the inputs are seeded
float32 arrays, the same for every contender; a small call warms up lazy
imports and thread pools, and a JAX program (`jax.jit` of the operator, or
`jax.jit(jax.grad(...))` of `sum(w * out)` with `w` passed as an argument)
is compiled ahead of time. Then the call is made once: its peak memory is
the growth of the process's resident set during the call, Linux's VmHWM
after resetting it through `/proc/self/clear_refs`, minus the RSS just
before the call, so imports, inputs and compiled programs do not count.
Forward+backward is `.backward()` of `sum(w * out)` on torch, the compiled
gradient on JAX, and `rankops.vjp(op, x, **options)` then `vjp_fn(w)` on
NumPy. Peaks below a few MiB are allocator noise (no ratio is given under
1 MiB); they mean something from n = 1000 up.

The parent polls each child's RSS every 50 ms: a child past the memory
guard is killed and its cell reads "OOM (killed at X GiB)", X the RSS it had
reached (a memory ratio against it is then an upper bound, "< r"); one past
the time limit reads "timeout". A pass that ran out of memory or time at one
size is not run at larger ones, nor is forward+backward where the forward
alone did not fit. Out of memory or time is no failure for a reference; for
rankops it is, and so is any error and any disagreement with the reference
(the command then exits with status 1 and lists the failures above).

The forward outputs of the memory runs are compared with the reference's
before anything is timed (tolerance 0.05 n for ranks: a wrong convention is
off by O(n), while the papers' float32 NeuralSort drifts by ~1e-3 n; 1e-2 for
Sinkhorn sorted values, where the two solvers stop within their tolerance).
Times are medians over repeats that alternate between all the contenders of
a group and size (A, B, C, A, B, C, ...) in one more fresh process, after
one untimed round up to n = 1000, so that slow drifts of the machine hit
every contender alike; where a single repeat is planned (n above 4000) the
time is the memory run's one call. Ratios divide by the reference measured
in the same run."""


def write_report(out: Path, results: dict, args, settings: dict, command: str, started: datetime.datetime,
                 failures: list[str]) -> Path:
    """Write ``out/benchmarks.md`` and ``out/img/*.png``; returns the page's path."""
    (out / "img").mkdir(parents=True, exist_ok=True)
    elapsed = (datetime.datetime.now() - started).total_seconds()
    lines = _header(args, settings, command, started, elapsed)
    for group, by_n in results["groups"].items():
        lines += ["", f"## {TITLES[group]}", "", _group_intro(group, settings), "",
                  f"Reference: {REF_NAMES[REFERENCE[group]]} (`{REFERENCE[group]}`); times in ms, peaks in MiB.", ""]
        lines += group_tables(group, by_n) + [""] + group_plots(out, group, by_n, args.batch)
    if results["large"]:
        lines += ["", f"## Large n: torch CPU, B = 1, n = {args.large_n}", "",
                  "Forward+backward (`.backward()` of `sum(w * out)`), one call in a fresh process; "
                  "no reference (the papers' code would need n^2 4 bytes = "
                  f"{args.large_n ** 2 * 4 / 2**30:.3g} GiB per matrix).", ""]
        lines += _large(results["large"], settings)
    if results.get("fast"):
        lines += ["", "## Fast soft ranks: permutahedron and LapSum", "",
                  "`python -m benchmarks.fast` (see [fast methods](fast-methods.md)): soft_rank, float32, CPU; "
                  "forward+backward of `sum(w * out)`; torchsort (C++) measured in the same run when installed.", "",
                  results["fast"].rstrip(), "", "![fast methods: time against n](img/fast-time-fwdbwd.png)"]
    if results.get("kernels"):
        lines += ["", "## Kernels on permutations", "",
                  "`python -m benchmarks.kernels` (see [kernels](kernels.md)): `kendall_kernel` Gram matrices by signs and by "
                  "merges against `scipy.stats.kendalltau` in a loop over the pairs; `soft_kendall_tau` forward+backward "
                  "with its peak memory.", "", results["kernels"].rstrip()]
    if results.get("networks"):
        lines += ["", "## Differentiable sorting networks: rankops against the diffsort package", "",
                  "`python -m benchmarks.networks` (the command line that produced the table opens it): "
                  "`soft_sort(x, method=\"diffsort\", network=...)` forward+backward of `sum(w * sorted)` on torch, "
                  "NumPy (`rankops.vjp`) and JAX (`jit(grad)`), O(n) per layer, against `diffsort.DiffSortNet`, "
                  "which multiplies dense n x n matrices at every layer (its network built outside every measurement). "
                  "Peak memory of one call in a fresh process, killed past the memory guard; sorted values compared "
                  "with the package's; \"package / this\" is how many times faster or smaller rankops is.", "",
                  results["networks"].rstrip()]
    if failures:
        lines += ["", "## Failures", ""] + [f"- {_cell(f)}" for f in failures]
    lines += ["", METHODOLOGY]
    page = out / "benchmarks.md"
    page.write_text("\n".join(lines) + "\n")
    return page
