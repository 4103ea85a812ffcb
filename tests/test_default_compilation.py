"""Checks under JAX's default compilation, as ``jax.jit`` compiles for a user, in a fresh process.

The suite compiles JAX with most of XLA's optimisations off and without its
newer fusion emitters (conftest.py, docs/testing.md: compiling is most of a
JAX test's time), and a process reads XLA's flags once, when JAX starts. But
XLA's fusion decides which expressions are evaluated again at each entry that
reads them, and a kernel's vectorized loop and its scalar tail may round one
expression 1 ulp apart (vectorized exp and log, contracted multiply-adds).
The pooling rounds need every entry of a block to hold its block's one value:
two values 1 ulp apart are two blocks. So the values that the pooling reads
back to a block's entries are checked here as the default compile fuses them,
against NumPy.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]


def _slots_read_one_value_per_segment() -> None:
    """``segment_slots``' read of a value computed in the slots (the p = 4/3 root of a block's moments, once per slot:
    ``block_roots.slotted``) gives each entry its segment's value as stored; a quotient of the slots' sums
    (``exact``), evaluated at each entry, the same bits. Lengths 33, 129, 130 and 135 leave scalar tails."""
    import jax
    import jax.numpy as jnp

    from rankops._cores import powers
    from rankops._lib._adapters import get_adapter

    adapter = get_adapter(jnp)

    def values(starts, a, b, c):
        total, read = adapter.segment_slots(jnp, starts)
        sums = total(jnp.stack([a, b, c, jnp.ones_like(a)]))  # each segment's sums, in its slot
        m = jnp.where(sums[3] > 0, sums[3], 1.0)
        mean = sums[2] / m
        return read(mean - powers.moment_root(jnp, 4.0, sums[0], m, sums[1] * sums[1], sums[1])), read(mean, exact=True)

    rng = np.random.default_rng(0)
    for n, dtype in ((33, np.float64), (129, np.float32), (130, np.float64), (135, np.float32)):
        a, b, c = (rng.uniform(lo, hi, size=(64, n)).astype(dtype) for lo, hi in ((0.5, 3.0), (-2.0, 2.0), (1.0, 5.0)))
        starts = np.zeros((64, n), dtype=bool)
        starts[:, [0, n // 2]] = True
        for got in map(np.asarray, jax.jit(values)(*map(jnp.asarray, (starts, a, b, c)))):
            for lo, hi in ((0, n // 2), (n // 2, n)):
                np.testing.assert_array_equal(got[:, lo:hi], np.broadcast_to(got[:, lo:lo + 1], (64, hi - lo)))


def _tied_entries_share_a_rank() -> None:
    """The p = 4/3 rank of float32 rows whose three largest entries tie, one row masked (under ``jax.jit``, a block of
    the ties spanning a kernel's vectorized loop and its tail split in two, and ranked them 2.5 apart): NumPy's
    float64 fit, to float32's rounding."""
    import jax
    import jax.numpy as jnp

    import rankops

    n = 135
    rng = np.random.default_rng(n)
    x = np.round(rng.standard_normal((2, n)) * 3.0) / 3.0
    x[:, -3:] = x.max() + 1.0
    mask = rng.random((2, n)) < 0.8
    mask[0] = True
    mask[:, -3:] = True
    x = x.astype(np.float32)
    on = jnp.asarray(mask)
    for regularization in (dict(regularization="lp", p=4 / 3), dict(regularization="kl")):
        kw = dict(method="permutahedron", strength=0.3, **regularization)
        want = rankops.soft_rank(x.astype(np.float64), mask=mask, **kw)
        got = np.asarray(jax.jit(lambda z: rankops.soft_rank(z, mask=on, **kw))(jnp.asarray(x)))
        np.testing.assert_allclose(got[mask], want[mask], rtol=0, atol=1e-3)  # ranks up to 135: about 3e-5 apart
        np.testing.assert_allclose(want[:, -3:], np.broadcast_to(want[:, -1:], (2, 3)), rtol=1e-12)


def _run_checks() -> None:
    import jax

    jax.config.update("jax_enable_x64", True)  # float64 as well (the float32 arrays stay float32)
    _slots_read_one_value_per_segment()
    _tied_entries_share_a_rank()


def test_the_pooling_rounds_read_one_value_per_block_under_jax_default_compilation():
    pytest.importorskip("jax")
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_DISABLE_MOST_OPTIMIZATIONS")}
    env["JAX_PLATFORMS"] = "cpu"
    proc = subprocess.run([sys.executable, "-c", "from tests.test_default_compilation import _run_checks; _run_checks()"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
