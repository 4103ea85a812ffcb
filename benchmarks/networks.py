"""Differentiable sorting networks: rankops' soft sort (O(n) per layer) against the diffsort package (dense layers).

For each network and n, one forward+backward of ``sum(w * soft_sort(x))``,
``x`` and ``w`` seeded float32 (B, n) arrays (:func:`benchmarks._common.seeded_inputs`),
Cauchy comparators at steepness 10, by four contenders:

- rankops-torch: ``rankops.soft_sort(x, method="diffsort", network=...)`` on
  a leaf tensor, then ``.backward()``;
- rankops-numpy: ``rankops.vjp(rankops.soft_sort, x, ...)`` then ``vjp_fn(w)``;
- rankops-jax: ``jax.jit(jax.grad(...))``, compiled before anything is measured;
- diffsort (the reference): ``diffsort.DiffSortNet(network, n, steepness=...,
  distribution="cauchy")``, built before anything is measured; its forward
  returns ``(sorted, P)`` and ``sum(w * sorted).backward()`` is the call.
  It multiplies dense n x n matrices at every layer (rankops keeps O(n) per
  layer and never builds P); a row says "not installed" where it is absent.

Measured, per network, n and contender:

1. peak memory of one forward+backward call, in a fresh Python process: the
   growth of the resident set during the call (Linux VmHWM after resetting it,
   :func:`benchmarks._common.measure`) over the RSS just before it, after
   imports, inputs, a warm-up call at n = 8, the package's network and the
   JAX compilation ("setup": the package's network construction or the JAX
   compilation, seconds). The parent polls the child's RSS: past
   ``--max-rss-gib`` (default min(8 GiB, 40% of RAM), so that the package at
   n = 4096, which needs tens of GiB, cannot take the machine down) or
   ``--timeout`` the child is killed and the row says "OOM (killed at X GiB)"
   or "timeout"; that contender is then not run at larger n;
2. values: max abs difference of each rankops contender's sorted values from
   the package's (both from the memory runs' inputs; bitonic networks only at
   powers of two, where the two networks are the same);
3. time: median of ``--repeats`` calls interleaved between the contenders
   that ran (:func:`benchmarks._timing.interleaved_medians`, one untimed
   round first), in one more fresh process per backend (torch: rankops-torch
   and the package; NumPy; JAX), so that no other framework's threads share
   the cores; a contender whose one call took more than 10 s is not
   repeated, its time is that call's ("1 call").

"package / this" is the reference's time (or peak) divided by the row's: how
many times faster (or smaller) rankops is. Peaks under 1 MiB are allocator
noise: no memory ratio.

``--threads`` sets torch's intra-op threads for rankops-torch and the
package (default: torch's own, one per core). The package makes several
matrix products per layer, rankops none; a multi-threaded product waits at
its barrier for all its threads, so while another process holds a core it
can wait a scheduler tick whatever its size (16 ms for a (1, 64, 64) @
(64, 32) product against 5 us on one thread, measured on a 2-core machine
while other jobs ran). Under such load the package's time at small n is
mostly those waits and changes from run to run; ``--threads 1`` takes them
out of the comparison (use it, or an idle machine, before quoting a ratio).

The package's odd-even network is n layers of dense n x n matrices (O(n^3)
memory to build: more than 17 GB at n = 1024), so it runs only up to
``--package-odd-even-max`` (256); rankops' odd-even rows go on. Its bitonic
network at n = 4096 needs tens of GiB (78 layers of four dense float64
matrices of up to 4096 x 4096 while it builds, their float32 copies, then
the forward's dense products): the memory guard stops it while it builds
(at 8 GiB within seconds). ``--quick`` (n in {16, 64}, one repeat, one torch thread) runs
every job in one process: it checks that every contender runs, in seconds;
its peaks mean nothing.

Exit status 1 when a rankops contender fails, when values differ from the
package's by more than 1e-4, or when the installed package fails otherwise
than by running out of memory or time.

Usage: python -m benchmarks.networks [--sizes 16 64 256 1024 4096] [--batch 1] [--repeats 5]
       [--network bitonic odd_even] [--steepness 10] [--threads N] [--timeout 300] [--max-rss-gib G] [--quick]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shlex
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ._common import machine, measure, ram_kib, run_child, seeded_inputs
from ._timing import interleaved_medians

CONTENDERS = ("rankops-torch", "rankops-numpy", "rankops-jax", "diffsort")
REFERENCE = "diffsort"
OURS = tuple(c for c in CONTENDERS if c != REFERENCE)
# One timing process per tuple, its contenders interleaved: torch's, NumPy's and XLA's thread pools kept apart, so
# that threads one framework leaves spinning after a call cannot slow another's next call (torch's two share theirs).
PROCESS_GROUPS = (("rankops-torch", "diffsort"), ("rankops-numpy",), ("rankops-jax",))
NAMES = {"diffsort": "diffsort package (reference)"}
TOLERANCE = 1e-4  # float32 sorted values of O(1) inputs: the two agree to ~1e-6 (rounding over the layers)
SLOW_S = 10.0  # a call this slow is timed once (its memory run), not repeated
WARMUP_N = 8  # below every measured size: its case is never the measured one


# -- child side: the cases ---------------------------------------------------------------


@dataclass
class Case:
    """One contender at one size: ``fb()`` is the measured forward+backward, ``values(fb())`` the sorted values (NumPy)."""

    fb: Callable[[], Any]
    values: Callable[[Any], Any]  # outside the measurement: torch and NumPy read them off the call, JAX runs a forward
    setup_s: float | None = None  # network construction (package) or compilation (JAX), outside every measurement


def _torch_case(sort: Callable[[Any], Any], x, w) -> Case:
    import torch

    xt, wt = torch.from_numpy(x), torch.from_numpy(w)

    def fb():
        leaf = xt.clone().requires_grad_(True)
        out = sort(leaf)
        (wt * out).sum().backward()
        return out.detach()

    return Case(fb, lambda out: out.numpy())


def _rankops_torch(spec: dict, x, w) -> Case:
    import rankops

    return _torch_case(lambda v: rankops.soft_sort(v, method="diffsort", **_options(spec)), x, w)


def _package(spec: dict, x, w) -> Case:
    import diffsort

    t0 = time.perf_counter()
    net = diffsort.DiffSortNet(spec["network"], x.shape[-1], steepness=spec["steepness"], distribution="cauchy")
    setup = time.perf_counter() - t0
    case = _torch_case(lambda v: net(v)[0], x, w)  # forward: (sorted, P)
    case.setup_s = setup
    return case


def _rankops_numpy(spec: dict, x, w) -> Case:
    import rankops

    def fb():
        out, vjp_fn = rankops.vjp(rankops.soft_sort, x, method="diffsort", **_options(spec))
        vjp_fn(w)
        return out

    return Case(fb, lambda out: out)


def _rankops_jax(spec: dict, x, w) -> Case:
    import jax
    import jax.numpy as jnp
    import numpy as np

    import rankops

    def sort(v):
        return rankops.soft_sort(v, method="diffsort", **_options(spec))

    xj, wj = jnp.asarray(x), jnp.asarray(w)
    t0 = time.perf_counter()
    grad = jax.jit(jax.grad(lambda v, u: jnp.sum(u * sort(v)))).lower(xj, wj).compile()
    setup = time.perf_counter() - t0
    forward = jax.jit(sort)  # compiled at its first call: values() runs outside every measurement
    return Case(lambda: grad(xj, wj).block_until_ready(), lambda _: np.asarray(forward(xj)), setup)


BUILDERS = {"rankops-torch": _rankops_torch, "rankops-numpy": _rankops_numpy, "rankops-jax": _rankops_jax,
            "diffsort": _package}


def _options(spec: dict) -> dict:
    return {"network": spec["network"], "distribution": "cauchy", "steepness": spec["steepness"]}


def build(spec: dict, contender: str, n: int) -> Case:
    """The case of ``contender`` at size n, on the seeded inputs of ``spec["batch"]`` rows."""
    if spec["threads"] and contender in ("rankops-torch", REFERENCE):
        import torch

        torch.set_num_threads(spec["threads"])
    x, w = seeded_inputs(spec["batch"], n)
    return BUILDERS[contender](spec, x, w)


# -- child side: the jobs ----------------------------------------------------------------

_built: dict[tuple, Case] = {}  # --quick runs every job in one process: its cases are shared


def _case(job: dict, contender: str) -> Case:
    key = (contender, job["network"], job["n"], job["batch"], job["steepness"], job["threads"])
    if key not in _built:
        # a call at n = 8 first, so that lazy imports, thread pools and one-time set-up stay out of the measurements
        build(job, contender, WARMUP_N).fb()
        _built[key] = build(job, contender, job["n"])
    return _built[key]


def _emit(row: dict) -> None:
    print(json.dumps(row), flush=True)


def _error(e: BaseException) -> dict:
    text = f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0]}"[:160]
    return {"error": text, "unavailable": isinstance(e, ImportError)}


def _memory(job: dict) -> None:
    """Build the case (its phase printed first, so that a parent that kills the child knows), measure one call, save the values."""
    import numpy as np

    what = "building its network" if job["contender"] == REFERENCE else "setting up"
    _emit({"id": job["id"], "phase": "setup", "what": what})
    try:
        case = _case(job, job["contender"])
        res, out = measure(case.fb, {"id": job["id"], "phase": "call"})
        np.save(job["save"], case.values(out))  # outside the measured call
        _emit({"id": job["id"], **res, "setup_s": case.setup_s})
    except Exception as e:  # noqa: BLE001 - reported in the job's row
        _emit({"id": job["id"], **_error(e)})
        traceback.print_exc()


def _timing(job: dict) -> None:
    """Interleaved medians of every contender's forward+backward; a contender that fails to build is left out."""
    fns, errors = {}, {}
    _emit({"id": job["id"], "phase": "setup", "what": "setting up"})
    for c in job["contenders"]:
        try:
            fns[c] = _case(job, c).fb
        except Exception as e:  # noqa: BLE001
            errors[c] = _error(e)
    _emit({"id": job["id"], "phase": "timing", "what": "timing"})
    _emit({"id": job["id"], "times": interleaved_medians(fns, job["repeats"]), "errors": errors})


def run_jobs(spec: str) -> None:
    for job in json.loads(spec):
        (_memory if job["kind"] == "memory" else _timing)(job)


# -- parent side: guarded children -----------------------------------------------------


def _memory_job(spec: dict, n: int, contender: str, save: Path) -> dict:
    return {**spec, "id": f"mem:{spec['network']}:{n}:{contender}", "kind": "memory", "n": n,
            "contender": contender, "save": str(save)}


def _timing_job(spec: dict, n: int, contenders: list[str], repeats: int) -> dict:
    return {**spec, "id": f"time:{spec['network']}:{n}:{','.join(contenders)}", "kind": "timing", "n": n,
            "contenders": contenders, "repeats": repeats}


def _killed(child, timeout: float, running: dict) -> dict:
    """The error of the job that was running when the parent killed ``child`` (or the child died)."""
    where = f", {running['what']}" if "what" in running else ""
    if child.reason == "rss":
        return {"error": f"OOM (killed at {child.seen_kib / 2**20:.1f} GiB{where})", "oom": True}
    if child.reason == "timeout":
        return {"error": f"timeout (> {timeout:.0f} s{where})", "timeout": True}
    if child.returncode == -9:
        return {"error": f"killed (signal 9: out of memory?{where})", "oom": True}
    return {"error": f"exit {child.returncode}: {child.stderr_tail()}"[:160]}


def execute(jobs: list[dict], timeout: float, max_rss_kib: float | None) -> dict[str, dict]:
    """Run ``jobs`` in one fresh child; per job id, its result row, or the error of a kill."""
    child = run_child(["-m", "benchmarks.networks", "--child", json.dumps(jobs)], timeout, max_rss_kib)
    out: dict[str, dict] = {}
    running: dict = {}  # the last phase line: which job was running, from which baseline
    for row in child.rows:
        if "phase" in row:
            running = row
        else:
            out[row["id"]] = row
    if child.reason is None and child.returncode == 0:
        return out
    dead = _killed(child, timeout, running)
    for job in jobs:
        if job["id"] in out:
            continue  # finished before the end
        if running.get("id") == job["id"]:
            out[job["id"]] = dict(dead)
            if dead.get("oom") and "base_kib" in running and child.seen_kib > running["base_kib"]:
                out[job["id"]]["peak_min_mib"] = (child.seen_kib - running["base_kib"]) / 1024
        else:
            out[job["id"]] = {"error": f"not run ({dead['error']})", "skipped": True}
    return out


# -- parent side: the schedule ------------------------------------------------------------


def _spec(network: str, args) -> dict:
    """What every job of one network shares."""
    return {"network": network, "batch": args.batch, "steepness": args.steepness, "threads": args.threads}


def _skip_reason(contender: str, network: str, n: int, args, earlier: dict[str, str]) -> str | None:
    """Why ``contender`` is not run at this n, or None."""
    if contender in earlier:
        return earlier[contender]
    if contender == REFERENCE and importlib.util.find_spec("diffsort") is None:
        return "not installed (pip install diffsort)"
    if contender == REFERENCE and network == "odd_even" and n > args.package_odd_even_max:
        return (f"skipped: its odd_even network is n dense n x n layers, O(n^3) memory to build "
                f"(runs up to n = {args.package_odd_even_max})")
    return None


def compare_values(network: str, n: int, entries: dict, files: dict) -> None:
    """Max abs difference of each rankops contender's sorted values from the package's."""
    import numpy as np

    if not _ok(entries[REFERENCE]):
        for c in OURS:
            entries[c]["diff_note"] = "no reference"
        return
    if network == "bitonic" and n & (n - 1):
        for c in OURS:
            entries[c]["diff_note"] = "not compared (the package's bitonic network differs off powers of two)"
        return
    ref = np.load(files[REFERENCE])
    for c in OURS:
        if _ok(entries[c]):
            d = float(np.max(np.abs(np.load(files[c]) - ref)))
            entries[c]["diff"], entries[c]["mismatch"] = d, not d <= TOLERANCE  # NaN is a mismatch too


def _time(spec: dict, n: int, entries: dict, args, guard: float | None) -> None:
    """Interleaved medians, one fresh process per backend (one per contender if they do not fit together); slow ones once."""
    for e in entries.values():
        if _ok(e) and e["time_s"] > SLOW_S:
            e["median_s"], e["once"] = e["time_s"], True
    for group in PROCESS_GROUPS:
        todo = [c for c in group if _ok(entries[c]) and "median_s" not in entries[c]]
        if not todo:
            continue
        job = _timing_job(spec, n, todo, args.repeats)
        row = execute([job], args.timeout * len(todo), guard)[job["id"]]
        rows = [(todo, row)]
        if "error" in row and len(todo) > 1:
            rows = [([c], execute([one], args.timeout, guard)[one["id"]])
                    for c in todo for one in [_timing_job(spec, n, [c], args.repeats)]]
        for cs, r in rows:
            _apply_times(entries, cs, r)


def _apply_times(entries: dict, contenders: list[str], row: dict) -> None:
    for c in contenders:
        if c in row.get("times", {}):
            entries[c]["median_s"] = row["times"][c]
        else:
            entries[c]["time_error"] = row.get("errors", {}).get(c, row).get("error", "not timed")


def run_full(args, tmp: Path) -> dict:
    """Fresh processes: one per (network, n, contender) for memory and values, one per (network, n) for times."""
    guard = args.max_rss_gib * 2**20 if args.max_rss_gib else None
    results: dict = {}
    for network in args.network:
        spec = _spec(network, args)
        earlier: dict[str, str] = {}  # contender -> why it is not run at larger n
        for n in args.sizes:
            entries, files = {}, {c: tmp / f"{network}-{n}-{c}.npy" for c in CONTENDERS}
            for c in CONTENDERS:
                why = _skip_reason(c, network, n, args, earlier)
                if why:
                    entries[c] = {"error": why, "skipped": True}
                    continue
                job = _memory_job(spec, n, c, files[c])
                entries[c] = execute([job], args.timeout, guard)[job["id"]]
                if entries[c].get("oom") or entries[c].get("timeout"):
                    earlier[c] = f"skipped ({'OOM' if entries[c].get('oom') else 'timeout'} at n = {n})"
                _progress(network, n, c, entries[c])
            compare_values(network, n, entries, files)
            _time(spec, n, entries, args, guard)
            results[network, n] = entries
    return results


def run_quick(args, tmp: Path) -> dict:
    """Every job in one child process: memory runs, then one timing job per (network, n)."""
    jobs, files = [], {}
    for network in args.network:
        spec = _spec(network, args)
        for n in args.sizes:
            run = [c for c in CONTENDERS if not _skip_reason(c, network, n, args, {})]
            for c in run:
                files[network, n, c] = tmp / f"{network}-{n}-{c}.npy"
                jobs.append(_memory_job(spec, n, c, files[network, n, c]))
            jobs.append(_timing_job(spec, n, run, args.repeats))
    guard = args.max_rss_gib * 2**20 if args.max_rss_gib else None
    done = execute(jobs, args.timeout, guard)
    results = {}
    for network in args.network:
        for n in args.sizes:
            entries = {c: done.get(f"mem:{network}:{n}:{c}") or {"error": _skip_reason(c, network, n, args, {}),
                                                                   "skipped": True} for c in CONTENDERS}
            compare_values(network, n, entries, {c: files.get((network, n, c)) for c in CONTENDERS})
            ran = [c for c in CONTENDERS if (network, n, c) in files]
            _apply_times(entries, [c for c in ran if _ok(entries[c])], done[f"time:{network}:{n}:{','.join(ran)}"])
            results[network, n] = entries
    return results


def _ok(e: dict | None) -> bool:
    return bool(e) and "error" not in e and "peak_mib" in e


def _progress(network: str, n: int, contender: str, e: dict) -> None:
    cell = f"{e['peak_mib']:.1f} MiB, {e['time_s']:.3f} s" if _ok(e) else e.get("error")
    print(f"  {network} n={n} {contender}: {cell}", file=sys.stderr, flush=True)


# -- the table ---------------------------------------------------------------------------


def _ms(t: float) -> str:
    ms = t * 1e3
    return f"{ms:.0f}" if ms >= 100 else f"{ms:.1f}" if ms >= 10 else f"{ms:.2f}"


def _cell(text: Any) -> str:
    return str(text).replace("|", "/")


def _time_cells(c: str, e: dict, ref: dict) -> list[str]:
    if not _ok(e):
        return [_cell(e.get("error", "n/a")), ""]
    if "median_s" not in e:
        return [_cell(f"no time: {e.get('time_error', 'not timed')}"), ""]
    t = _ms(e["median_s"]) + (" (1 call)" if e.get("once") else "")
    if c == REFERENCE:
        return [t, "(reference)"]
    return [t, f"{ref['median_s'] / e['median_s']:.1f}x" if "median_s" in ref else "n/a"]


def _memory_cells(c: str, e: dict, ref: dict) -> list[str]:
    if not _ok(e):
        return [f"> {e['peak_min_mib']:.0f} (killed)" if "peak_min_mib" in e else "", ""]
    peak = f"{e['peak_mib']:.1f}"
    if c == REFERENCE:
        return [peak, "(reference)"]
    if e["peak_mib"] < 1:  # allocator noise: no ratio
        return [peak, "n/a (< 1 MiB)"]
    if _ok(ref):
        return [peak, f"{ref['peak_mib'] / e['peak_mib']:.1f}x"]
    return [peak, f"> {ref['peak_min_mib'] / e['peak_mib']:.0f}x" if "peak_min_mib" in ref else "n/a"]


def _diff_cell(c: str, e: dict) -> str:
    if c == REFERENCE:
        return "(reference)"
    if "diff" in e:
        return f"{e['diff']:.1e}{' MISMATCH' if e['mismatch'] else ''}"
    return e.get("diff_note", "")


def table(results: dict) -> list[str]:
    """One row per (network, n, contender): time, speed-up, peak, memory ratio, setup, values."""
    rows = ["| network | n | contender | fwd+bwd (ms) | package / this | peak fwd+bwd (MiB) | package / this | "
            "setup (s) | max abs diff from package |", "|---|---|---|---|---|---|---|---|---|"]
    for (network, n), entries in results.items():
        ref = entries[REFERENCE]
        for c, e in entries.items():
            setup = f"{e['setup_s']:.2f}" if e.get("setup_s") is not None else ""
            cells = _time_cells(c, e, ref) + _memory_cells(c, e, ref) + [setup, _diff_cell(c, e)]
            rows.append(f"| {network} | {n} | {NAMES.get(c, c)} | {' | '.join(cells)} |")
    return rows


def speedups(results: dict) -> list[str]:
    """One line per network: package time / rankops-torch time at each n where both were timed."""
    lines = []
    for network in dict.fromkeys(net for net, _ in results):
        got = [(n, e[REFERENCE]["median_s"] / e["rankops-torch"]["median_s"]) for (net, n), e in results.items()
               if net == network and "median_s" in e[REFERENCE] and "median_s" in e["rankops-torch"]]
        if got:
            lines.append(f"- {network}, package time / rankops-torch time: "
                         + ", ".join(f"{r:.{0 if r >= 10 else 1}f}x at n = {n}" for n, r in got) + ".")
    return lines


def failures(results: dict) -> list[str]:
    """What should have worked: every rankops contender, agreement, and the package unless out of memory or time."""
    bad = []
    for (network, n), entries in results.items():
        for c, e in entries.items():
            excused = c == REFERENCE and (e.get("oom") or e.get("timeout") or e.get("skipped") or e.get("unavailable"))
            if "error" in e and not excused:
                bad.append(f"{network} n={n} {c}: {e['error']}")
            elif _ok(e) and "median_s" not in e:
                bad.append(f"{network} n={n} {c}: no time ({e.get('time_error')})")
            if e.get("mismatch"):
                bad.append(f"{network} n={n} {c}: sorted values differ from the package's by {e['diff']:.3g}")
    return bad


# -- command line ------------------------------------------------------------------------


def default_max_rss_gib() -> float:
    """min(8 GiB, 40% of RAM): the package at n = 4096 is stopped long before the machine runs short."""
    ram = ram_kib()
    return min(8.0, 0.4 * ram / 2**20) if ram else 8.0


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.networks", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[16, 64, 256, 1024, 4096])
    ap.add_argument("--batch", type=int, default=1, help="B, rows per batch (default 1)")
    ap.add_argument("--repeats", type=int, default=5, help="timed repeats per contender (default 5)")
    ap.add_argument("--network", nargs="+", choices=["bitonic", "odd_even"], default=["bitonic", "odd_even"])
    ap.add_argument("--steepness", type=float, default=10.0)
    ap.add_argument("--package-odd-even-max", type=int, default=256,
                    help="largest n of the package's odd_even network (O(n^3) memory to build)")
    ap.add_argument("--timeout", type=float, default=300, help="seconds per process (default 300)")
    ap.add_argument("--max-rss-gib", type=float, default=default_max_rss_gib(),
                    help="memory guard: kill a process whose RSS passes this (default min(8, 40%% of RAM); 0: none)")
    ap.add_argument("--threads", type=int, default=0,
                    help="torch intra-op threads of rankops-torch and the package (default 0: torch's own; --quick: 1)")
    ap.add_argument("--quick", action="store_true", help="n in {16, 64}, one repeat, one torch thread, every job in one process")
    ap.add_argument("--child", help=argparse.SUPPRESS)  # internal: run a list of jobs, print JSON lines
    args = ap.parse_args(argv)
    if args.quick:
        args.sizes, args.repeats = [16, 64], 1
        args.threads = args.threads or 1  # the package's products then skip the thread wake-ups (see above): seconds saved
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.child:
        run_jobs(args.child)
        return 0
    command = "python -m benchmarks.networks" + "".join(f" {shlex.quote(a)}" for a in (sys.argv[1:] if argv is None else argv))
    with tempfile.TemporaryDirectory(prefix="rankops-networks-") as tmp:
        results = (run_quick if args.quick else run_full)(args, Path(tmp))
    threads = args.threads or "torch's default"
    print(f"`{command}`: B = {args.batch}, float32, Cauchy comparators, steepness {args.steepness:g}; torch threads: "
          f"{threads}; median of {args.repeats} interleaved call{'s' if args.repeats > 1 else ''}; memory guard "
          f"{args.max_rss_gib:.1f} GiB, {args.timeout:.0f} s per process; {machine()}.")
    print()
    print("\n".join(table(results)))
    print()
    print("\n".join(speedups(results)))
    bad = failures(results)
    for line in bad:
        print(f"FAILED: {line}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
