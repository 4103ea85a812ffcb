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


def tied_top_rows(n: int) -> tuple[np.ndarray, np.ndarray]:
    """``(x, mask)``: two float64 rows of ``n`` entries in steps of 1/3, whose three largest tie, and a mask that keeps
    the first row whole, about 80% of the second and the ties: a block of the ties at the row's end spans a kernel's
    vectorized loop and its scalar tail where ``n`` is no multiple of the vector width."""
    rng = np.random.default_rng(n)
    x = np.round(rng.standard_normal((2, n)) * 3.0) / 3.0
    x[:, -3:] = x.max() + 1.0
    mask = rng.random((2, n)) < 0.8
    mask[0] = True
    mask[:, -3:] = True
    return x, mask


def _tied_entries_share_a_rank() -> None:
    """The p = 4/3 rank of float32 rows whose three largest entries tie, one row masked (under ``jax.jit``, a block of
    the ties spanning a kernel's vectorized loop and its tail split in two, and ranked them 2.5 apart): NumPy's
    float64 fit, to float32's rounding."""
    import jax
    import jax.numpy as jnp

    import rankops

    x, mask = tied_top_rows(135)
    x = x.astype(np.float32)
    on = jnp.asarray(mask)
    for regularization in (dict(regularization="lp", p=4 / 3), dict(regularization="kl")):
        kw = dict(method="permutahedron", strength=0.3, **regularization)
        want = rankops.soft_rank(x.astype(np.float64), mask=mask, **kw)
        got = np.asarray(jax.jit(lambda z: rankops.soft_rank(z, mask=on, **kw))(jnp.asarray(x)))
        np.testing.assert_allclose(got[mask], want[mask], rtol=0, atol=1e-3)  # ranks up to 135: about 3e-5 apart
        np.testing.assert_allclose(want[:, -3:], np.broadcast_to(want[:, -1:], (2, 3)), rtol=1e-12)


def _drawn_fits(seed: int, count: int) -> None:
    """``count`` permutahedron fits drawn from ``seed`` (rank, sort and top-k mask; ``"l2"``, ``"kl"`` and p = 3/2,
    4/3 and 1.25; rows of lengths about kernels' vector widths and longer, ties, trends, masks; float64 and short
    float32 rows), each under ``jax.jit`` against NumPy's float64 fit of the same numbers."""
    import jax
    import jax.numpy as jnp

    import rankops

    rng = np.random.default_rng(seed)
    regularizations = (dict(regularization="l2"), dict(regularization="kl"), dict(regularization="lp", p=1.5),
                       dict(regularization="lp", p=4 / 3), dict(regularization="lp", p=1.25))
    for case in range(count):
        wide = rng.random() < 0.6
        n = int(rng.choice([33, 64, 65, 127, 130, 135, 257, 1000, 2001] if wide else [33, 65, 130, 135, 257]))
        b = int(rng.integers(1, 4))
        x = rng.standard_normal((b, n))
        data = int(rng.integers(3))
        if data == 1:
            x = np.round(x * 3.0) / 3.0  # ties
        elif data == 2:
            x = np.cumsum(x, axis=-1)  # long runs
        op = str(rng.choice(["rank", "sort", "topk_mask"]))
        kw: dict = dict(method="permutahedron", **regularizations[int(rng.integers(len(regularizations)))])
        if op == "topk_mask" and kw["regularization"] == "kl":
            op = "rank"
        args = (max(1, n // 4),) if op == "topk_mask" else ()
        if op == "topk_mask" or rng.random() < 0.5:
            kw["strength"] = float(10.0 ** rng.uniform(-2.0 if wide else -1.0, 1.0))
        mask = rng.random((b, n)) < 0.8 if rng.random() < 0.3 else None
        if mask is not None:
            mask[:, 0] = True
        x = x if wide else x.astype(np.float32)
        f = getattr(rankops, "soft_" + op)
        want = np.asarray(f(x.astype(np.float64), *args, mask=mask, **kw), dtype=np.float64)
        on = None if mask is None else jnp.asarray(mask)
        got = np.asarray(jax.jit(lambda z: f(z, *args, mask=on, **kw))(jnp.asarray(x)), dtype=np.float64)
        valid = np.isfinite(want)
        scale = max(1.0, float(np.max(np.abs(want[valid]), initial=0.0)))
        tol = 1e-9 * scale if wide else 3e-6 * n * scale  # float32: ranks of up to 257, to a few of its units
        assert np.array_equal(valid, np.isfinite(got)), (case, n, op, kw)
        assert np.max(np.abs(got - want)[valid], initial=0.0) <= tol, (case, n, b, data, op, kw, mask is not None,
                                                                          float(np.max(np.abs(got - want)[valid])))


def _every_conformance_case() -> None:
    """Every conformance case (``conformance.operators.CASES``: each operator, method and option variant) under
    ``jax.jit``, rows of 33 and 130 entries, with and without ties: its values against NumPy's (1e-7 of the largest),
    and on the rows of 130 without ties its gradient (``jax.grad`` of a weighted sum) against ``rankops.vjp`` on NumPy
    (1e-6). The gradient of a row with ties is no one vector: the sort splits it among tied entries in its own order."""
    import jax
    import jax.numpy as jnp

    from conformance.operators import CASES, converged

    failures = []
    for case in CASES:
        kw = converged(case)
        for n in (33, 130):
            for tied in (False, True):
                rng = np.random.default_rng(n + tied)
                x = rng.standard_normal((2, n)) * 0.5
                x = np.round(x * 6.0) / 6.0 if tied else x
                want = np.asarray(case(x, **kw), dtype=np.float64)
                got = np.asarray(jax.jit(lambda z: case(z, **kw))(jnp.asarray(x)), dtype=np.float64)
                scale = max(1.0, float(np.max(np.abs(want[np.isfinite(want)]), initial=0.0)))
                if not np.allclose(got, want, rtol=0.0, atol=1e-7 * scale, equal_nan=True):
                    failures.append((case.name, n, tied, "values", float(np.nanmax(np.abs(got - want)))))
                if tied or n == 33 or case.vjp is None:
                    continue
                ct = rng.standard_normal(want.shape)
                want_grad = np.asarray(case.vjp(x, **kw)[1](ct)[0], dtype=np.float64)
                got_grad = np.asarray(jax.jit(jax.grad(lambda z: jnp.sum(case(z, **kw) * jnp.asarray(ct))))(jnp.asarray(x)))
                scale = max(1e-3, float(np.max(np.abs(want_grad))))
                if not np.allclose(got_grad, want_grad, rtol=0.0, atol=1e-6 * scale):
                    failures.append((case.name, n, "gradient", float(np.max(np.abs(got_grad - want_grad)))))
    assert not failures, failures


def _run(*checks: str) -> None:
    """The ``checks`` (``"name"`` or ``"name:seed:count"``) under JAX's default compilation, x64 enabled (float64 as
    well; float32 arrays stay float32)."""
    import jax

    jax.config.update("jax_enable_x64", True)
    for check in checks:
        name, *numbers = check.split(":")
        globals()[name](*map(int, numbers))


def _in_a_fresh_process(*checks: str) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_DISABLE_MOST_OPTIMIZATIONS")}
    env["JAX_PLATFORMS"] = "cpu"
    call = f"from tests.test_default_compilation import _run; _run(*{checks!r})"
    proc = subprocess.run([sys.executable, "-c", call], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]


def test_the_pooling_rounds_read_one_value_per_block_under_jax_default_compilation():
    pytest.importorskip("jax")
    _in_a_fresh_process("_slots_read_one_value_per_segment", "_tied_entries_share_a_rank")


@pytest.mark.exhaustive
def test_drawn_permutahedron_fits_under_jax_default_compilation():
    pytest.importorskip("jax")
    _in_a_fresh_process("_drawn_fits:0:40")


@pytest.mark.exhaustive
def test_every_conformance_case_under_jax_default_compilation():
    pytest.importorskip("jax")
    _in_a_fresh_process("_every_conformance_case")
