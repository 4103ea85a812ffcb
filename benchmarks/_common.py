"""Helpers shared by the benchmark scripts: peak-RSS measurement, the guarded child process, machine facts.

Child side: :func:`measure` runs a callable once and reports the growth of
the process's resident set during the call (Linux VmHWM after resetting it
through /proc/self/clear_refs, ``getrusage`` where that is refused), and
:func:`seeded_inputs` gives the same float32 inputs to every contender.

Parent side: :func:`run_child` starts a benchmark in a fresh Python process
and polls it: a child whose RSS passes the memory guard, or that outlives
its time limit, is killed, and what it printed before (its baseline RSS)
still comes back, with the largest RSS seen, so that the caller can report
"killed at X GiB" instead of crashing.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import resource
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]  # children run `-m benchmarks...` from here
MIB = 2.0**20


# -- child side --------------------------------------------------------------------


def proc_status_kib(field: str, pid: str = "self") -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def reset_peak() -> bool:
    """Reset VmHWM to the current RSS, so the peak covers only what follows."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def measure(run, before: dict | None = None) -> tuple[dict, object]:
    """Peak extra RSS (MiB) and wall time of ``run()``, and what it returned.

    Prints ``before`` and the baseline RSS as a JSON line first, so that the
    parent can still bound the peak from below if it has to kill the case.
    """
    import gc

    gc.collect()
    resettable = reset_peak()
    base = proc_status_kib("VmRSS")
    print(json.dumps({**(before or {}), "base_kib": base}), flush=True)
    t0 = time.perf_counter()
    result = run()
    elapsed = time.perf_counter() - t0
    peak = proc_status_kib("VmHWM") if resettable else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"peak_mib": (peak - base) / 1024, "time_s": elapsed, "peak_source": "VmHWM" if resettable else "ru_maxrss"}, result


def seeded_inputs(b: int, n: int):
    """Seeded float32 ``(x, w)`` of shape (b, n); row 0 does not depend on ``b``."""
    import numpy as np

    rng = np.random.default_rng(n)
    return rng.normal(size=(b, n)).astype(np.float32), rng.normal(size=(b, n)).astype(np.float32)


# -- parent side -------------------------------------------------------------------


def fresh_jax_programs() -> None:
    """JAX's traced programs dropped (rankops' cached ``jit``s and JAX's own), so that a core patched since traces anew."""
    import jax

    from rankops._lib._adapters import _jax

    _jax._compiled.cache_clear()
    _jax._jitted.cache_clear()
    jax.clear_caches()


def ram_kib() -> int | None:
    try:
        with open("/proc/meminfo") as f:  # first line: "MemTotal: <KiB> kB"
            return int(f.readline().split()[1])
    except (OSError, IndexError, ValueError):
        return None


def default_max_rss_gib() -> float:
    """The memory guard's default: min(20 GiB, 80% of RAM)."""
    ram = ram_kib()
    return min(20.0, 0.8 * ram / 2**20) if ram else 20.0


@dataclass
class ChildRun:
    """What a guarded child printed and how it ended."""

    out: str
    err: str
    returncode: int
    reason: str | None  # "timeout" or "rss" when the parent killed it, else None
    seen_kib: int  # largest RSS sampled: bounds a killed child's peak from below

    @property
    def rows(self) -> list[dict]:
        return [json.loads(ln) for ln in self.out.splitlines() if ln.startswith("{")]

    def stderr_tail(self) -> str:
        return (self.err.strip().splitlines() or ["no output"])[-1]


def run_child(argv: list[str], timeout: float, max_rss_kib: float | None, env: dict | None = None) -> ChildRun:
    """Run ``python argv...`` from the repository root, killing it past ``timeout`` s or ``max_rss_kib`` RSS."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu", **(env or {})}
    proc = subprocess.Popen([sys.executable, *argv], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + timeout
    seen_kib = 0
    why = None
    while True:
        try:  # communicate() keeps draining the pipes, and may be retried after a timeout without losing output
            out, err = proc.communicate(timeout=0.05)  # short: an unrolled reference can grow by GiBs per second
            break
        except subprocess.TimeoutExpired:
            why = "timeout" if time.monotonic() > deadline else None
            try:
                rss = proc_status_kib("VmRSS", str(proc.pid))
                seen_kib = max(seen_kib, rss)
                if max_rss_kib and rss > max_rss_kib:
                    why = "rss"
            except (OSError, KeyError):
                pass  # the child has just exited
            if why:
                proc.kill()
                out, err = proc.communicate()  # what it printed before the kill
                break
    return ChildRun(out, err, proc.returncode, why, seen_kib)


def package_version(pkg: str) -> str:
    try:
        return importlib.metadata.version(pkg)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def git_state() -> str:
    """``git <head>``, with a note when src/ has uncommitted changes: the library may change under a benchmark."""
    try:
        st = subprocess.run(["git", "status", "--porcelain", "src"], cwd=ROOT, capture_output=True, text=True).stdout
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
        return f"git {head}{' + uncommitted src changes' if st.strip() else ''}" if head else "no git"
    except OSError:
        return "no git"


def machine() -> str:
    """Platform, CPUs, RAM, Python."""
    ram = ram_kib()
    return (f"{platform.platform()}, {platform.machine()}, {os.cpu_count()} CPUs, "
            f"{f'{ram / 2**20:.1f} GiB RAM' if ram else 'RAM unknown'}; Python {platform.python_version()}")
