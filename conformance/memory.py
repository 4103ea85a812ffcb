"""The test runs' guard against XLA's memory mappings: JAX's compiled programs dropped before Linux's limit.

Test harness, not library: a test run compiles thousands of small JAX
programs, which no user program does.
"""

from __future__ import annotations

import gc
import sys

__all__ = ["MAPPINGS_BETWEEN_GROUPS", "MAPPINGS_WITHIN_A_GROUP", "defer_full_collections", "memory_mappings",
           "release_compiled_programs"]


def memory_mappings() -> int | None:
    """How many memory mappings this process holds (Linux: lines of /proc/self/maps), else None.

    XLA's CPU executables keep three mappings per compiled kernel while their
    cache entries live, and Linux stops a process at ``vm.max_map_count``
    (65,530 by default): test runs that compile thousands of programs watch
    this and call ``jax.clear_caches()`` in time. Reading it reads a line per
    mapping.
    """
    try:
        with open("/proc/self/maps", "rb") as maps:
            return maps.read().count(b"\n")
    except OSError:
        return None


# A test run drops JAX's compiled programs above these mapping counts: at a change of test group
# (a group's tests share programs), and within one, well below vm.max_map_count (65,530).
MAPPINGS_BETWEEN_GROUPS = 30_000
MAPPINGS_WITHIN_A_GROUP = 50_000


def release_compiled_programs(above: int) -> bool:
    """``jax.clear_caches()`` when this process holds more than ``above`` memory mappings; whether it did.

    Nothing when JAX is not loaded or the count is unknown; clearing costs only recompiles.
    """
    jax = sys.modules.get("jax")
    if jax is None or (memory_mappings() or 0) <= above:
        return False
    jax.clear_caches()
    gc.collect()  # the full pass that defer_full_collections leaves to this moment
    return True


def defer_full_collections() -> None:
    """The cycle collector's passes over every object only where compiled programs are dropped
    (:func:`release_compiled_programs`); the young generations' passes run as usual.

    A test process holds JAX's traces and compiled programs, millions of objects that live to its end, and each
    automatic full pass scans them all again: 23 passes, 4.5 s of a 90 s run of ``conformance/test_autodiff.py`` and
    ``tests/test_pnorm.py`` on JAX, which freed nothing (its peak memory 1,236-1,242 MB with them and without).
    """
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, 1 << 30)
