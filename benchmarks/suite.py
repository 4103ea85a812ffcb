"""The benchmark suite: soft ranks (SoftSort, NeuralSort) and Sinkhorn soft sort against their references, and large n.

For every group, size and contender (see :mod:`benchmarks._contenders`)
the suite measures, each in a fresh Python process, the peak memory of one
forward call and of one forward+backward call (growth of the peak RSS over
the RSS after imports, inputs and compilation); values are then checked
against the group's reference (the papers' PyTorch code, OTT-JAX); then the
times are medians of interleaved repeats of all the contenders of that
group and size, in one more fresh process. A process whose RSS passes the
memory guard (``--max-rss-gib``) or that outlives its time limit is killed
and its row says so ("OOM (killed at X GiB)"); a contender that ran out of
memory or time at one size is not run at the larger ones. Large n: torch,
B = 1, forward+backward, one process per operator. ``--smoke`` shrinks
everything and runs all the jobs of a framework in one process (two such
processes at a time): it checks that every contender runs, in well under a
minute, and writes to a temporary directory unless ``--output`` is given.

The groups "fast", "kernels" and "networks" run :mod:`benchmarks.fast`,
:mod:`benchmarks.kernels` and :mod:`benchmarks.networks` (differentiable
sorting networks against the diffsort package) in a fresh process each
(``--quick`` under ``--smoke``); the tables they print go into the page.
The page (tables, plots, methodology) is written by :mod:`benchmarks._report`.
The exit status is 1 when a contender that should work failed: any rankops
contender, a reference that is installed (out of memory or time at real
sizes excepted), a disagreement with the reference; in ``--smoke`` mode any
error at all.

Usage: python -m benchmarks [--sizes 100 300 1000 4000 16000] [--batch 20] [--repeats 5]
       [--groups softsort neuralsort sinkhorn large fast kernels networks] [--large-n 100000] [--output DIR] [--smoke] ...
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import shlex
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ._common import ROOT, default_max_rss_gib, run_child
from ._contenders import CONTENDERS, FLOORS, LARGE, NOT_COMPARED, OPTIONAL, REFERENCE
from .sinkhorn import MAX_ITER, TOL

GROUPS = ("softsort", "neuralsort", "sinkhorn", "sinkhorn-defaults")
OTHER_GROUPS = ("large", "fast", "kernels", "networks")  # large n, then the sections of standalone modules
PASSES = ("fwd", "fb")


def repeats_at(n: int, repeats: int) -> int:
    """Fewer repeats at large n: all of them up to 1000, at most 3 up to 4000, then 1."""
    return repeats if n <= 1000 else min(repeats, 3) if n <= 4000 else 1


def tolerance(group: str, n: int) -> float:
    """Largest max-abs difference from the reference that still counts as agreement.

    Ranks lie in [1, n]: a wrong convention is off by O(n), while the papers'
    float32 NeuralSort (it subtracts two O(n) terms) drifts by up to ~1e-3 n.
    Sinkhorn sorted values are O(1); the two solvers stop within ``tol``.
    """
    return 0.05 * n if group in ("softsort", "neuralsort") else 1e-2


def available(contender: str) -> bool:
    module = OPTIONAL.get(contender)
    return module is None or importlib.util.find_spec(module) is not None


# -- running jobs in guarded children ------------------------------------------------


def _killed(child, timeout: float) -> dict:
    """The error of the call that was running when ``child`` ended abnormally."""
    if child.reason == "rss":
        return {"error": f"OOM (killed at {child.seen_kib / 2**20:.1f} GiB)", "oom": True}
    if child.reason == "timeout":
        return {"error": f"timeout (> {timeout:.0f} s)", "timeout": True}
    if child.returncode == -9:
        return {"error": "killed (signal 9: out of memory?)", "oom": True}
    return {"error": f"exit {child.returncode}: {child.stderr_tail()}"[:160]}


def execute(jobs: list[dict], timeout: float, max_rss_kib: float | None, env: dict | None = None) -> dict[str, dict]:
    """Run ``jobs`` in one fresh child; per job id: ``{pass: result}`` (memory) or the timing row.

    A memory pass's ``once_s`` is the wall time of its one measured call.
    """
    child = run_child(["-m", "benchmarks", "--child", json.dumps(jobs)], timeout, max_rss_kib, env)
    out: dict[str, dict] = {job["id"]: {} for job in jobs}
    running = None
    for row in child.rows:
        if "base_kib" in row:
            running = row
        elif "pass" in row:
            passes = [row["pass"]] if row["pass"] else next(j["passes"] for j in jobs if j["id"] == row["id"])
            r = {("once_s" if k == "time_s" else k): v for k, v in row.items() if k not in ("id", "pass")}
            out[row["id"]].update({p: dict(r) for p in passes})
        else:
            out[row["id"]] = row
    if not child.reason and child.returncode == 0:
        return out
    dead = _killed(child, timeout)
    for job in jobs:
        got = out[job["id"]]
        for p in job["passes"] if job["kind"] == "memory" else [None]:
            if (p in got) if p else got:
                continue  # finished before the end
            here = running is not None and running["id"] == job["id"] and running.get("pass") == p
            r = dict(dead) if here else {"error": f"not run ({dead['error']})", "skipped": True}
            if here and dead.get("oom") and child.seen_kib > running["base_kib"]:
                r["peak_min_mib"] = (child.seen_kib - running["base_kib"]) / 1024
            if p:
                got[p] = r
            else:
                out[job["id"]] = r
    return out


def _memory_job(group, contender, n, batch, settings, passes, save=None) -> dict:
    return {"id": f"mem:{group}:{n}:{contender}:{batch}:{','.join(passes)}", "kind": "memory", "group": group, "contender": contender,
            "n": n, "batch": batch, "settings": settings, "passes": list(passes), "save": save and str(save)}


def _timing_job(group, n, batch, settings, contenders: dict, repeats: int) -> dict:
    return {"id": f"time:{group}:{n}:{','.join(contenders)}", "kind": "timing", "group": group, "n": n,
            "batch": batch, "settings": settings, "contenders": contenders, "repeats": repeats,
            "warmup": 1 if n <= 1000 else 0}


def _ok(r: dict | None) -> bool:
    return bool(r) and "error" not in r and "peak_mib" in r


def _apply_times(entries: dict, row: dict) -> None:
    for c, passes in row.get("times", {}).items():
        for p, t in passes.items():
            if p in entries.get(c, {}):
                entries[c][p]["time_s"] = t
    failed = {c: err["error"] for c, err in row.get("errors", {}).items()}
    if "error" in row:
        failed.update({c: row["error"] for c in row.get("contenders", {})})
    for c, err in failed.items():
        for p in PASSES:
            if _ok(entries.get(c, {}).get(p)):
                entries[c][p]["time_error"] = err


# -- agreement with the reference ------------------------------------------------------


def check_agreement(group: str, n: int, entries: dict, files: dict, ref_row0: Path | None = None) -> None:
    """Max abs difference of each contender's forward output from the reference's (``files``: contender -> .npy)."""
    import numpy as np

    ref = REFERENCE[group]
    if ref in FLOORS:
        return
    ref_out = np.load(files[ref]) if _ok(entries.get(ref, {}).get("fwd")) else None
    note = ""
    if ref_out is None and ref_row0 is not None and ref_row0.exists():
        ref_out, note = np.load(ref_row0), "row 0"
    for c, e in entries.items():
        if c == ref or c in NOT_COMPARED or not _ok(e.get("fwd")):
            continue
        if ref_out is None:
            e["diff_note"] = "no reference"
            continue
        out = np.load(files[c])[: ref_out.shape[0]]
        d = float(np.max(np.abs(out - ref_out)))
        e["diff"], e["diff_note"] = d, note
        e["mismatch"] = not d <= tolerance(group, n)  # NaN is a mismatch too


# -- schedules ---------------------------------------------------------------------------


def _skip_after(entry: dict, later: dict, n: int) -> None:
    """Remember a pass that ran out of memory or time: at larger n it would again."""
    for p in PASSES:
        r = entry.get(p, {})
        if r.get("oom") or r.get("timeout"):
            why = f"skipped ({'OOM' if r.get('oom') else 'timeout'} at n={n})"
            later.update({q: why for q in (PASSES if p == "fwd" else ("fb",)) if q not in later})


def _memory_runs(group, c, n, settings, args, guard, skips: dict, save: Path) -> dict:
    """One fresh process per pass (fwd, then fb), so that neither inherits the other's allocator caches."""
    e = {p: {"error": why, "skipped": True} for p, why in skips.items()}
    for p in [p for p in PASSES if p not in skips]:
        fwd = e.get("fwd", {})
        if p == "fb" and (fwd.get("oom") or fwd.get("timeout")):  # fb needs more of both
            e["fb"] = {"error": f"not run (fwd: {fwd['error']})", "skipped": True}
            continue
        job = _memory_job(group, c, n, args.batch, settings, [p], save if p == "fwd" else None)
        e.update(execute([job], args.timeout, guard)[job["id"]])
        if e[p].get("unavailable"):
            return {"unavailable": e[p]["error"]}
    _progress(group, n, c, e)
    return e


def run_full(args, settings: dict, tmp: Path) -> dict:
    """Fresh processes: one per (group, n, contender, pass) for memory and values, one per (group, n) for times."""
    guard = args.max_rss_gib * 2**20 if args.max_rss_gib else None
    results: dict = {"groups": {}, "large": {}}
    for group in [g for g in GROUPS if g in args.groups]:
        skips: dict[str, dict] = {c: {} for c in CONTENDERS[group]}
        for n in args.sizes:
            entries, files = {}, {c: tmp / f"{group}-{n}-{c}.npy" for c in CONTENDERS[group]}
            for c in CONTENDERS[group]:
                if not available(c):
                    entries[c] = {"unavailable": f"{OPTIONAL[c]} not installed"}
                    continue
                entries[c] = _memory_runs(group, c, n, settings, args, guard, skips[c], files[c])
                _skip_after(entries[c], skips[c], n)
            ref, row0 = REFERENCE[group], None
            ref_fwd = entries.get(ref, {}).get("fwd", {})
            if group in ("softsort", "neuralsort") and (ref_fwd.get("oom") or ref_fwd.get("skipped")):
                row0 = tmp / f"{group}-{n}-{ref}-row0.npy"  # the reference on one row still fits
                job = _memory_job(group, ref, n, 1, settings, ["fwd"], row0)
                execute([job], args.timeout, guard)
            check_agreement(group, n, entries, files, row0)
            _time(group, n, entries, settings, args, guard)
            results["groups"].setdefault(group, {})[str(n)] = entries
    if "large" in args.groups:
        for op in LARGE:
            job = _memory_job(op, "rankops-torch", args.large_n, 1, settings, ["fb"])
            r = execute([job], args.timeout, guard)[job["id"]]["fb"]
            results["large"][op] = r
            _progress(op, args.large_n, "rankops-torch", {"fb": r})
    return results


def _time(group: str, n: int, entries: dict, settings: dict, args, guard) -> None:
    """Interleaved medians of every contender that ran; at a single repeat, the memory run's one call."""
    todo = {c: [p for p in PASSES if _ok(e.get(p))] for c, e in entries.items() if _ok(e.get("fwd"))}
    reps = repeats_at(n, args.repeats)
    if reps == 1 and not args.smoke:
        for c, passes in todo.items():
            for p in passes:
                entries[c][p]["time_s"] = entries[c][p]["once_s"]
        return
    job = _timing_job(group, n, args.batch, settings, todo, reps)
    row = execute([job], args.timeout * max(1, len(todo)), guard)[job["id"]]
    if "error" in row and len(todo) > 1:  # the contenders together did not fit: one process each
        for c, passes in todo.items():
            one = _timing_job(group, n, args.batch, settings, {c: passes}, reps)
            r = execute([one], args.timeout, guard)[one["id"]]
            _apply_times(entries, {**r, "contenders": {c: passes}})
        return
    _apply_times(entries, {**row, "contenders": todo})


def run_smoke(args, settings: dict, tmp: Path) -> dict:
    """Every job of a framework family in one process, two processes at a time, longest first.

    Imports and JAX compilations are most of a smoke run's time, so the JAX
    children also compile with XLA's cheapest optimisation level.
    """
    family = {"ott-jax": "ott", "rankops-jax": "jax"}
    packs: dict[str, list] = {"ott": [], "jax": [], "torch": [], "large": []}
    groups = [g for g in GROUPS if g in args.groups]
    memory, timing, files = {}, {}, {}
    for group in groups:
        for n in args.sizes:
            for c in [c for c in CONTENDERS[group] if available(c)]:
                files[group, n, c] = tmp / f"{group}-{n}-{c}.npy"
                memory[group, n, c] = _memory_job(group, c, n, args.batch, settings, PASSES, files[group, n, c])
                packs[family.get(c, "torch")].append(memory[group, n, c])
            for fam in ("ott", "jax", "torch"):
                cs = {c: list(PASSES) for c in CONTENDERS[group] if available(c) and family.get(c, "torch") == fam}
                if cs:
                    timing[group, n, fam] = _timing_job(group, n, args.batch, settings, cs, 1)
                    packs[fam].append(timing[group, n, fam])
    large = {op: _memory_job(op, "rankops-torch", args.large_n, 1, settings, ["fb"]) for op in LARGE}
    if "large" in args.groups:
        packs["large"] += large.values()
    guard = args.max_rss_gib * 2**20 if args.max_rss_gib else None
    env = {"XLA_FLAGS": "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true"}
    done: dict = {}
    with ThreadPoolExecutor(max_workers=2) as pool:
        for r in pool.map(lambda jobs: execute(jobs, args.timeout, guard, env), [p for p in packs.values() if p]):
            done.update(r)
    results: dict = {"groups": {}, "large": {}}
    for group in groups:
        for n in args.sizes:
            entries = {}
            for c in CONTENDERS[group]:
                e = done[memory[group, n, c]["id"]] if available(c) else {"unavailable": f"{OPTIONAL[c]} not installed"}
                entries[c] = {"unavailable": e["fwd"]["error"]} if e.get("fwd", {}).get("unavailable") else e
            for (g, m, _), job in timing.items():
                if (g, m) == (group, n):
                    _apply_times(entries, {**done[job["id"]], "contenders": job["contenders"]})
            check_agreement(group, n, entries, {c: files.get((group, n, c)) for c in entries})
            results["groups"].setdefault(group, {})[str(n)] = entries
    if "large" in args.groups:
        results["large"] = {op: done[job["id"]]["fb"] for op, job in large.items()}
    return results


def _progress(group, n, contender, entry) -> None:
    cells = {p: (f"{r['peak_mib']:.0f} MiB, {r['once_s']:.3f} s" if _ok(r) else r.get("error")) for p, r in entry.items()
             if isinstance(r, dict)}
    print(f"  {group} n={n} {contender}: {cells or entry}", file=sys.stderr, flush=True)


# -- verdict -----------------------------------------------------------------------------


def failures(results: dict, smoke: bool) -> list[str]:
    """What should have worked and did not (a missing optional contender never counts)."""
    bad = []
    for group, by_n in results["groups"].items():
        for n, entries in by_n.items():
            for c, e in entries.items():
                optional = c == REFERENCE[group] or c in OPTIONAL
                if "unavailable" in e:
                    if not optional:
                        bad.append(f"{group} n={n} {c}: {e['unavailable']}")
                    continue
                for p in PASSES:
                    r = e.get(p, {})
                    excused = not smoke and optional and (r.get("oom") or r.get("timeout") or r.get("skipped"))
                    if "error" in r and not excused:
                        bad.append(f"{group} n={n} {c} {p}: {r['error']}")
                    elif _ok(r) and "time_s" not in r:
                        bad.append(f"{group} n={n} {c} {p}: no time ({r.get('time_error', 'not timed')})")
                if e.get("mismatch"):
                    bad.append(f"{group} n={n} {c}: differs from {REFERENCE[group]} by {e['diff']:.3g} "
                               f"(tolerance {tolerance(group, int(n)):.3g})")
    for op, r in results["large"].items():
        if not _ok(r):
            bad.append(f"{op}: {r.get('error')}")
    return bad


def _run_module(name: str, args: argparse.Namespace, bad: list[str], extra: list[str], full: list[str]) -> str:
    """``python -m benchmarks.<name>`` in a fresh process (``--quick`` under ``--smoke``); its tables, as printed."""
    import subprocess

    cmd = [sys.executable, "-m", f"benchmarks.{name}", *extra] + (["--quick"] if args.smoke else full)
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=args.timeout)
    if proc.returncode != 0:
        bad.append(f"{name}: exit {proc.returncode}: {proc.stderr[-300:]}")
    return proc.stdout


def run_fast(args: argparse.Namespace, out: Path, bad: list[str]) -> str:
    """The fast-methods section: :mod:`benchmarks.fast`."""
    (out / "img").mkdir(parents=True, exist_ok=True)
    return _run_module("fast", args, bad, ["--plot", str(out / "img" / "fast-time-fwdbwd.png")],
                       ["--batch", str(args.batch), "--repeats", str(args.repeats)])


def run_kernels(args: argparse.Namespace, bad: list[str]) -> str:
    """The kernels section: :mod:`benchmarks.kernels` (the smooth tau up to p = 10^4: p = 10^5 takes minutes)."""
    return _run_module("kernels", args, bad, [], ["--repeats", str(args.repeats), "--soft", "1000", "10000"])


def run_networks(args: argparse.Namespace, bad: list[str]) -> str:
    """The sorting-networks section: :mod:`benchmarks.networks` at its own B = 1 and memory guard.

    Not the suite's B: the package's dense layers at B = 20 take 30 s a call at n = 1024.
    """
    return _run_module("networks", args, bad, [], ["--repeats", str(args.repeats)])


# -- command line ------------------------------------------------------------------------


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[100, 300, 1000, 4000, 16000])
    p.add_argument("--batch", type=int, default=20, help="B, rows per batch (default 20)")
    p.add_argument("--repeats", type=int, default=5, help="timed repeats up to n=1000 (3 up to 4000, then 1)")
    p.add_argument("--groups", nargs="+", choices=[*GROUPS, *OTHER_GROUPS], default=[*GROUPS, *OTHER_GROUPS],
                   help="fast: the O(n log n) methods against torchsort (python -m benchmarks.fast); "
                        "kernels: Kendall Gram matrices and the smooth tau (python -m benchmarks.kernels); "
                        "networks: differentiable sorting networks against the diffsort package "
                        "(python -m benchmarks.networks)")
    p.add_argument("--large-n", type=int, default=100_000, help="n of the large cases (B=1, torch)")
    p.add_argument("--tau", type=float, default=1.0, help="SoftSort / NeuralSort temperature (torchsort strength)")
    p.add_argument("--epsilon", type=float, default=0.1, help="Sinkhorn group: absolute epsilon, both sides")
    p.add_argument("--sinkhorn-targets", type=int, default=100, help="Sinkhorn group: m = min(n, this) targets")
    p.add_argument("--q", type=float, default=0.5, help="large n: soft_quantile level")
    p.add_argument("--k", type=int, default=100, help="large n: soft_topk_mask k")
    p.add_argument("--timeout", type=float, default=1800, help="seconds per case (default 1800)")
    p.add_argument("--max-rss-gib", type=float, default=default_max_rss_gib(),
                   help="memory guard: kill a case whose RSS passes this (default min(20, 80%% of RAM); 0: none)")
    p.add_argument("--output", type=Path, help="directory for benchmarks.md and img/ (default docs/; smoke: a temp dir)")
    p.add_argument("--smoke", "--quick", action="store_true",
                   help="B=2, n in {8, 32}, large n=2000, 1 repeat, 4 GiB guard, jobs sharing processes; < 1 min")
    p.add_argument("--child", help=argparse.SUPPRESS)  # internal: run a list of jobs, print JSON lines
    args = p.parse_args(argv)
    if args.smoke:
        args.batch, args.sizes, args.large_n, args.repeats = 2, [8, 32], 2000, 1
        args.max_rss_gib, args.timeout = 4.0, 300
    return args


def main(argv=None) -> int:
    args = parse(argv)
    if args.child:
        from ._jobs import run_jobs

        run_jobs(args.child)
        return 0
    out = args.output or (Path(tempfile.mkdtemp(prefix="rankops-bench-")) if args.smoke else ROOT / "docs")
    settings = {"tau": args.tau, "epsilon": args.epsilon, "tol": TOL, "max_iter": MAX_ITER,
                "targets": args.sinkhorn_targets, "q": args.q, "k": args.k}
    command = "python -m benchmarks" + "".join(f" {shlex.quote(a)}" for a in (sys.argv[1:] if argv is None else argv))
    started = datetime.datetime.now()
    for c in sorted({c for g in GROUPS if g in args.groups for c in CONTENDERS[g]}):
        if not available(c):
            print(f"{c}: {OPTIONAL[c]} is not installed, its rows say so (not a failure)")
    with tempfile.TemporaryDirectory(prefix="rankops-bench-values-") as tmp:
        results = (run_smoke if args.smoke else run_full)(args, settings, Path(tmp))
    bad = failures(results, args.smoke)
    if "fast" in args.groups:
        results["fast"] = run_fast(args, out, bad)
    if "kernels" in args.groups:
        results["kernels"] = run_kernels(args, bad)
    if "networks" in args.groups:
        results["networks"] = run_networks(args, bad)
    from ._report import write_report

    page = write_report(out, results, args, settings, command, started, bad)
    elapsed = (datetime.datetime.now() - started).total_seconds()
    print(f"wrote {page} ({elapsed:.0f} s)")
    for line in bad:
        print(f"FAILED: {line}", file=sys.stderr)
    return 1 if bad else 0
