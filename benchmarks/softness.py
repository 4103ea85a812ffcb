"""``python -m benchmarks.softness``: what ``softness=`` means, measured: rank blur on every method, scale and length.

The rank blur of a soft rank is ``mean_i |soft_rank(x)_i - rankdata(x)_i|``
(ranks); ``softness=s`` asks for a blur of about ``s`` on every method
(docs/softness.md). This script

- ``--calibrate``: measures, on rows of standard normal entries scaled by
  their scale (``row_scale``), the blur of each method at unit
  temperature along a grid of lengths ``T`` (the method's temperature, or
  its inverse, in units of the row's scale), and writes the table
  ``log T(log s, log n)`` that rankops reads
  (``src/rankops/_cores/_calibration.py``). The permutahedron's soft sort
  has tables of its own (``permutahedron-sort-*``, in
  ``_calibration_sorts.py``, on the row's standard deviation): its strength is not a
  length of x, so its blur is read from its sorted values, each as a place
  among the row's hard sorted values, and it falls as ``T`` grows;
- by default, prints the tables of docs/softness.md: the blur at
  ``softness=1`` and at each method's defaults over scales and lengths (the
  issue's grid), the calibration's ratio blur / s on four distributions,
  what computing the row's scale costs against a ``soft_rank`` forward
  and backward (the p-norm permutahedron at p = 3/2, 1.4 and 4/3 in rows
  of their own), and the soft sorts' blur / s, read in places; ``--plot PATH`` draws blur against softness for every
  method and distribution, and blur against n at the old and new defaults.

Usage: python -m benchmarks.softness [--quick] [--plot PATH] [--calibrate [--cache DIR]]
"""

from __future__ import annotations

import argparse
import ast
import json
import math
import re
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import array_api_compat.numpy
import numpy as np
from scipy.stats import rankdata

import rankops
from rankops._cores.softness import reads_deviation, row_scale

ROOT = Path(__file__).resolve().parents[1]
# the generated tables: the soft sorts' keys in a module of their own, the others here
TABLE = ROOT / "src" / "rankops" / "_cores" / "_calibration.py"
SORT_TABLE = TABLE.with_name("_calibration_sorts.py")


def _table_of(key: str) -> Path:
    return SORT_TABLE if "-sort-" in key else TABLE

# the table's grid: log s from log 0.1 and log n from log 10, a quarter decade apart
GRID = (math.log(0.1), math.log(10) / 4, 23, math.log(10.0), math.log(10) / 4, 17)

# calibration key -> (how to run it at length T on a standardized row, the lengths n measured)
_LONG = (10, 20, 30, 60, 100, 200, 300, 600, 1000, 3000, 10000, 30000, 100000)
_SHORT = (10, 20, 30, 60, 100, 200, 300, 600, 1000)
_NETWORK = (8, 16, 32, 64, 128, 256, 512, 1024)
def _sort_places(z: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Each soft sorted value as a place among its row's hard sorted values (1-based, interpolated), laid out as the
    entries of that rank (distinct entries): :func:`blur` then reads a soft sort's blur in places, as a soft rank's."""
    s = np.sort(z, axis=-1)
    places = np.stack([np.interp(v, row, np.arange(1.0, z.shape[-1] + 1)) for v, row in zip(values, s)])
    return np.take_along_axis(places, rankdata(z, axis=-1).astype(int) - 1, -1)


def _permutahedron_sort(**regularizer: object) -> Callable[[np.ndarray, float], np.ndarray]:
    """The permutahedron's soft sort at length ``T = 1 / V`` as softness runs it (``T sort(z / T)`` at unit strength),
    in places: its blur grows with ``V``."""
    return lambda z, V: _sort_places(z, rankops.soft_sort(V * z, method="permutahedron", strength=1.0, **regularizer) / V)


@dataclass(frozen=True)
class Key:
    """A calibration: ``run(z, T)`` on standardized rows z (rank-like: :func:`blur` reads it), at the lengths
    ``ns``, along the ``grid`` of T; ``inverse``: ``run`` takes ``V = 1 / T`` (its blur grows with V), and the table
    holds ``log T = -log V``."""

    run: Callable[[np.ndarray, float], np.ndarray]
    ns: tuple[int, ...]
    grid: tuple[float, float, int] = (-7.0, 2.0, 46)  # log10 of the first and last T, and the count
    inverse: bool = False


_SORT_GRID = (-3.0, 9.0, 49)
KEYS = {
    "lapsum": Key(lambda z, T: rankops.soft_rank(z, method="lapsum", alpha=T), _LONG),
    "permutahedron-l2": Key(lambda z, T: rankops.soft_rank(z, method="permutahedron", strength=T), _LONG),
    "permutahedron-kl": Key(lambda z, T: rankops.soft_rank(z, method="permutahedron", regularization="kl", strength=T), _LONG[:-2]),
    # the p-norm regularizer at q = p / (p - 1) = 3, 4, 5 and 6 (p = 3/2, 4/3, 5/4, 6/5); q = 2 is "l2"'s table
    **{f"permutahedron-lp-{q}": Key(lambda z, T, q=q: rankops.soft_rank(z, method="permutahedron", regularization="lp",
                                                                        p=q / (q - 1.0), strength=T), _LONG) for q in (3, 4, 5, 6)},
    "permutahedron-sort-l2": Key(_permutahedron_sort(), _LONG, _SORT_GRID, inverse=True),
    "permutahedron-sort-kl": Key(_permutahedron_sort(regularization="kl"), _LONG[:-2], _SORT_GRID, inverse=True),
    # the p-norm sort's blur needs far larger V at large n (and its long rows are slow there), the more so the larger q
    # (q = 6 blurs a row of 10^4 by 33 places at V = 1e15)
    **{f"permutahedron-sort-lp-{q}": Key(_permutahedron_sort(regularization="lp", p=q / (q - 1.0)), _LONG[:-2],
                                         (-3.0, 15.0, 37) if q <= 4 else (-3.0, 21.0, 49), inverse=True) for q in (3, 4, 5, 6)},
    "softsort-1": Key(lambda z, T: rankops.soft_rank(z, method="softsort", tau=T), _SHORT),
    "softsort-2": Key(lambda z, T: rankops.soft_rank(z, method="softsort", tau=T**2, power=2), _SHORT),
    "neuralsort": Key(lambda z, T: rankops.soft_rank(z, method="neuralsort", tau=T), _SHORT),
    **{
        f"diffsort-{d}": Key(lambda z, T, d=d: rankops.soft_rank(z, method="diffsort", distribution=d, steepness=1.0 / T), _NETWORK)
        for d in ("cauchy", "reciprocal", "optimal", "logistic", "logistic_phi", "gaussian")
    },
    "sinkhorn": Key(lambda z, T: rankops.soft_rank(z, epsilon=T, tol=1e-4, max_iter=20_000), (10, 20, 30, 60, 100, 200, 300, 600, 1000),
                    (-7.0, -0.5, 27)),
}
DISTRIBUTIONS = ("normal", "uniform", "lognormal", "clustered")
METHODS = ("sinkhorn", "softsort", "neuralsort", "permutahedron", "lapsum", "diffsort")
# the tables' rows: each method at its defaults, the p-norm permutahedron at the calibrated q = 3, 4 and 5 and at a p
# between them (its table blended from theirs), then the KL permutahedron
VARIANTS = tuple((m, m, {}) for m in METHODS) + tuple(
    (f"permutahedron, lp, p = {label}", "permutahedron", {"regularization": "lp", "p": p})
    for label, p in (("3/2", 1.5), ("1.4", 1.4), ("4/3", 4.0 / 3.0), ("5/4", 1.25))) + (
    ("permutahedron, kl", "permutahedron", {"regularization": "kl"}),)


def sample(dist: str, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Rows of ``dist``: standard normal, uniform, lognormal(0, 1), or 8 clusters (centres N(0, 9), spread 0.3)."""
    if dist == "normal":
        return rng.standard_normal(shape)
    if dist == "uniform":
        return rng.uniform(size=shape)
    if dist == "lognormal":
        return rng.lognormal(size=shape)
    centres = 3.0 * rng.standard_normal(shape[:-1] + (8,))
    return np.take_along_axis(centres, rng.integers(0, 8, shape), -1) + 0.3 * rng.standard_normal(shape)


def blur(ranks: np.ndarray, x: np.ndarray) -> float:
    return float(np.mean(np.abs(np.asarray(ranks) - rankdata(x, axis=-1))))


def rows_for(n: int, budget: int = 20_000) -> int:
    return min(max(2 if n > 1000 else 4, budget // n), 2000)


# -- calibration ----------------------------------------------------------------------------------


def measure(key: str, lengths: np.ndarray, quick: bool) -> dict[int, list[tuple[float, float]]]:
    """``{n: [(T, blur)]}`` of ``key`` on standardized normal rows (``(V, blur)`` for an inverse key)."""
    run, ns = KEYS[key].run, KEYS[key].ns
    rng = np.random.default_rng(1)
    out = {}
    for n in ns[:3] if quick else ns:
        # the permutahedron's blur turns steeply with T at large n: more rows to pin its curve
        # (and Sinkhorn's long rows at small epsilon are slow: fewer rows there)
        budget = (2000 if quick else 20_000 if key.startswith("permutahedron-sort-lp") else 200_000 if key.startswith("permutahedron")
                  else 4000 if key == "sinkhorn" and n > 300 else 20_000)
        x = sample("normal", (rows_for(n, budget), n), rng)
        z = x / np.asarray(row_scale(array_api_compat.numpy, np.sort(x, axis=-1), n, reads_deviation(key)))  # softness's scale
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out[n] = [(float(T), blur(run(x if key == "sinkhorn" else z, T), x)) for T in lengths]
    return out


def _increasing(curve: list[tuple[float, float]]) -> tuple[np.ndarray, np.ndarray]:
    """The curve up to its first maximum of blur (SoftSort's and NeuralSort's blur turns back at large T), from where
    it leaves rounding (a soft sort's blur at tiny T is rounding of its values, not a place)."""
    c = np.asarray(curve)
    T, b = c[:, 0], np.where(c[:, 1] < 1e-9, 0.0, c[:, 1])
    end = len(b)
    for i in range(1, len(b)):
        if b[i] < b[i - 1]:
            end = i
            break
    T, b = T[:end], np.maximum.accumulate(b[:end])
    keep = np.concatenate([[True], np.diff(b) > 0])
    return np.log(T[keep]), np.log(np.maximum(b[keep], 1e-300))


def table(curves: dict[int, list[tuple[float, float]]]) -> list[list[float]]:
    """``log T`` on the grid (rows log s, columns log n): interpolated, linear beyond the measured blurs and lengths,
    and capped at the largest blur a method reaches."""
    u0, du, nu, w0, dw, nw = GRID
    us, ws = u0 + du * np.arange(nu), w0 + dw * np.arange(nw)
    per_n = []
    for n in sorted(curves):
        logT, logb = _increasing(curves[n])
        low = np.polyfit(logb[:3], logT[:3], 1)[0] if len(logb) >= 3 else 1.0
        col = np.interp(us, logb, logT)
        col = np.where(us < logb[0], logT[0] + low * (us - logb[0]), col)  # finer than measured: the small-T slope
        per_n.append(col)  # coarser than the method reaches: its largest blur's T (np.interp holds the end)
    logn = np.log(sorted(curves))
    per_n = np.asarray(per_n)  # (measured n, grid s)
    out = np.empty((nu, nw))
    for i in range(nu):
        v = per_n[:, i]
        col = np.interp(ws, logn, v)
        lo, hi = (v[1] - v[0]) / (logn[1] - logn[0]), (v[-1] - v[-2]) / (logn[-1] - logn[-2])
        col = np.where(ws < logn[0], v[0] + lo * (ws - logn[0]), col)
        out[i] = np.where(ws > logn[-1], v[-1] + hi * (ws - logn[-1]), col)
    return [[round(float(v), 4) for v in row] for row in out]


def calibrate(quick: bool, cache: Path | None, only: str | None = None) -> None:
    """Measure (or read from ``cache``) every key matching ``only`` (all by default), keep the table's other keys."""
    tables = {}
    for path in (TABLE, SORT_TABLE) if only is not None else ():
        if path.exists():
            text = path.read_text()
            lengths = ast.literal_eval(text[text.index("LENGTHS = ") + len("LENGTHS = "):])
            tables.update({k: [list(r) for r in v] for k, v in lengths.items()})
    for key in KEYS:
        if only is not None and not re.search(only, key):
            continue
        path = cache / f"{key}.json" if cache else None
        if path is not None and path.exists():
            curves = {int(n): c for n, c in json.loads(path.read_text()).items()}
        else:
            t0 = time.perf_counter()
            curves = measure(key, np.logspace(*KEYS[key].grid), quick)
            print(f"{key}: measured in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
            if path is not None:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(json.dumps(curves))
        tables[key] = table(curves)
        if KEYS[key].inverse:
            tables[key] = [[-v for v in row] for row in tables[key]]
    if quick:
        print(f"calibrated {len(tables)} keys (quick: not written)")
        return
    for path in (TABLE, SORT_TABLE):
        _write(path, {key: rows for key, rows in tables.items() if _table_of(key) == path})
        print(f"wrote {path.relative_to(ROOT)}")


def _write(path: Path, tables: dict[str, list[list[float]]]) -> None:
    sorts = path == SORT_TABLE
    what = "sort blur (places)" if sorts else "rank blur"
    lines = [
        f'"""Softness calibration{" of the soft sorts" * sorts}: ``log T`` on a grid of ``(log s, log n)`` per key (generated; do not edit).',
        "",
        "Written by ``python -m benchmarks.softness --calibrate``: T is the unit-temperature length (in units of",
        f"the row's scale, ``rankops._cores.softness.row_scale``{'' if sorts else '; Sinkhorn: its epsilon'}) whose {what}"
        " on standard normal rows is s.",
        f"Rows are log s from log 0.1, columns log n from log 10, a quarter decade apart ({'``_calibration.GRID``' if sorts else '``GRID``'}).",
        '"""',
        "",
        *([] if sorts else [f"GRID = {GRID!r}  # (u0, du, count, w0, dw, count): log s, then log n", ""]),
        "LENGTHS = {",
    ]
    for key, rows in tables.items():
        lines.append(f"    {key!r}: (")
        lines += [f"        ({', '.join(f'{v:.4f}' for v in row)})," for row in rows]
        lines.append("    ),")
    lines.append("}")
    path.write_text("\n".join(lines) + "\n")


# -- report ----------------------------------------------------------------------------------------


def _rank(method: str, x: np.ndarray, **options: object) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return np.asarray(rankops.soft_rank(x, method=method, **options))


def _old_defaults(method: str) -> dict[str, object]:
    """Each method's temperature default before softness (rankops 0.x): its native number."""
    return {"sinkhorn": {}, "softsort": {"tau": 1.0}, "neuralsort": {"tau": 1.0}, "permutahedron": {"strength": 1.0},
            "lapsum": {"alpha": 1.0}, "diffsort": {"steepness": 10.0}}[method]


def _largest(method: str) -> int:
    return 1000 if method in ("sinkhorn", "softsort", "neuralsort") else 1024 if method == "diffsort" else 100_000


def scale_table(quick: bool) -> str:
    """Blur at softness=1 and at the defaults, eight normal rows scaled by s, n in {100, 1000}: the issue's grid."""
    rng = np.random.default_rng(0)
    ns, scales = ((100,), (0.01, 100.0)) if quick else ((100, 1000), (0.01, 1.0, 100.0))
    head = [f"n={n}, s={s:g}" for n in ns for s in scales]
    lines = ["| method | options | " + " | ".join(head) + " |", "|---|---|" + "---|" * len(head)]
    for name, method, extra in VARIANTS:
        for label, opts in (("softness=1", {"softness": 1.0}), ("defaults", {}), ("old defaults", _old_defaults(method))):
            cells = []
            for n in ns:
                n = 1024 if method == "diffsort" and n == 1000 else n
                x = rng.standard_normal((8, n))
                cells += [f"{blur(_rank(method, s * x, **extra, **opts), x):.3g}" for s in scales]
            lines.append(f"| {name} | {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _softnesses(method: str, n: int, grid: tuple[float, ...]) -> list[float]:
    """The softnesses of ``grid`` in [0.3 (Sinkhorn: 1), n / 20]."""
    lo = 1.0 if method == "sinkhorn" else 0.3
    return [s for s in grid if lo <= s <= max(n / 20, lo)]


def _ratio_table(quick: bool, seed: int, lengths: Callable[[str, dict], list[int]], softnesses: Callable[[str, int], list[float]],
                 ratio: Callable[[str, np.ndarray, float, dict], float], curves: dict | None = None) -> str:
    """``ratio(method, x, s, options) / s``, smallest - largest over ``softnesses(method, n)``, for each variant, length
    (``lengths(method, options)``) and distribution; ``curves``: each default variant's ratios, by (method, dist, n)."""
    rng = np.random.default_rng(seed)
    lines = ["| method | n | " + " | ".join(DISTRIBUTIONS) + " |", "|---|---|" + "---|" * len(DISTRIBUTIONS)]
    for name, method, extra in VARIANTS:
        ns = [16, 128, 1024] if method == "diffsort" else lengths(method, extra)
        for n in ns[:2] if quick else ns:
            ss = softnesses(method, n)
            cells = []
            for dist in DISTRIBUTIONS:
                x = sample(dist, (rows_for(n, 400 if quick else 4000), n), rng)
                ratios = [ratio(method, x, s, extra) / s for s in ss]
                if curves is not None and not extra:
                    curves[(method, dist, n)] = (ss, ratios)
                cells.append(f"{min(ratios):.2f} - {max(ratios):.2f}")
            lines.append(f"| {name} | {n} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def calibration_table(quick: bool) -> tuple[str, dict]:
    """Ratio blur / s on four distributions, over s in [0.3 (Sinkhorn 1), n / 20] and n up to each method's largest."""

    def softnesses(method: str, n: int) -> list[float]:
        ss = _softnesses(method, n, (0.3, 1.0, 3.0, 10.0, 30.0, 100.0, 300.0, 1000.0, 5000.0))
        return ss + [n / 20] if n / 20 > ss[-1] * 1.5 else ss

    curves: dict = {}
    # the p-norm's rows up to 10^4: its pooling rounds, on NumPy, take seconds a call at 10^5
    text = _ratio_table(quick, 2, lambda method, extra: [n for n in (10, 100, 1000, 10_000, 100_000)
                                                        if n <= (10_000 if extra else _largest(method))],
                        softnesses, lambda method, x, s, extra: blur(_rank(method, x, softness=s, **extra), x), curves)
    return text, curves


def _sort_blur(method: str, x: np.ndarray, s: float, extra: dict) -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return blur(_sort_places(x, np.asarray(rankops.soft_sort(x, method=method, softness=s, **extra))), x)


def sort_table(quick: bool) -> str:
    """Ratio sort blur / s (each soft sorted value's place among the row's hard sorted values, :func:`_sort_places`) on
    four distributions, as :func:`calibration_table` (n up to 1000; 10^4 for the O(n log n) methods but the p-norm, whose
    sort at large strengths takes seconds a call on NumPy there)."""
    return _ratio_table(quick, 6, lambda method, extra: [n for n in (10, 100, 1000, 10_000)
                                                         if n <= (10_000 if method in ("permutahedron", "lapsum") and not extra else 1000)],
                        lambda method, n: _softnesses(method, n, (0.3, 1.0, 3.0, 10.0, 30.0, 100.0, 300.0)), _sort_blur)


def cost_table(quick: bool) -> str:
    """What softness adds to a soft_rank forward + backward (torch, float32, B=20, n=1000, one thread): the call with
    ``softness=1`` against the same call at the native temperature softness sets, and the row's scale alone (from the
    sorted rows, which the method needs anyway). Every row is a permutation of one sample, so that both compute at one
    temperature and do the same work inside the method."""
    import torch

    from benchmarks._timing import interleaved_medians
    from rankops._cores.softness import length

    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(0)
    base = torch.randn(1000, generator=gen)
    x = torch.stack([base[torch.randperm(1000, generator=gen)] for _ in range(20)])
    scale = float(row_scale(array_api_compat.numpy, np.sort(base.numpy().astype(np.float64))[None], 1000)[0, 0])
    srt = torch.sort(x, dim=-1).values
    xp = array_api_compat.array_namespace(x)
    lines = ["| method | native temperature fwd+bwd (ms) | softness=1 fwd+bwd (ms) | added | the scale alone (ms) | its share |",
             "|---|---|---|---|---|---|"]
    for method, key, name in (("permutahedron", "permutahedron-l2", "strength"), ("lapsum", "lapsum", "alpha")):
        native = {name: scale * length(array_api_compat.numpy, key, 1.0, 1000)}

        def run(**options: object) -> None:
            xr = x.clone().requires_grad_(True)
            rankops.soft_rank(xr, method=method, **options).sum().backward()

        t = interleaved_medians({"native": lambda: run(**native), "soft": lambda: run(softness=1.0),
                                 "scale": lambda: row_scale(xp, srt, 1000)}, repeats=5 if quick else 100)
        lines.append(f"| {method} | {t['native'] * 1e3:.3f} | {t['soft'] * 1e3:.3f} | {100 * (t['soft'] / t['native'] - 1):.1f}% "
                     f"| {t['scale'] * 1e3:.3f} | {100 * t['scale'] / t['native']:.1f}% |")
    return "\n".join(lines)


def plot(path: str, curves: dict, quick: bool) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 5))
    colors = dict(zip(METHODS, plt.rcParams["axes.prop_cycle"].by_key()["color"]))
    styles = dict(zip(DISTRIBUTIONS, ("-", "--", ":", "-.")))
    ax = axes[0]
    for (method, dist, n), (ss, ratios) in curves.items():
        if n in (100, 128, 1000, 1024) or quick:
            ax.plot(ss, np.asarray(ratios) * np.asarray(ss), styles[dist], color=colors[method], alpha=0.7,
                    label=f"{method}" if dist == "normal" and n in (1000, 1024) else None)
    lim = [0.2, 100]
    ax.plot(lim, lim, color="black", lw=0.8)
    ax.fill_between(lim, [v / 1.5 for v in lim], [v * 1.5 for v in lim], color="gray", alpha=0.15)
    ax.set(xscale="log", yscale="log", xlabel="softness s", ylabel="rank blur (mean |soft - hard rank|)",
           title="blur against softness (n = 100 and 1000; line style: distribution)")
    ax.legend(fontsize=8)
    ax = axes[1]
    rng = np.random.default_rng(3)
    ns = (10, 100, 1000) if quick else (10, 30, 100, 300, 1000, 3000, 10000)
    for method in METHODS:
        ms = [n for n in ns if n <= _largest(method)]
        for label, opts, style in (("new", {}, "-"), ("old", _old_defaults(method), ":")):
            b = []
            for n in ms:
                x = rng.standard_normal((rows_for(n, 2000), n))
                b.append(blur(_rank(method, x, **opts), x))
            ax.plot(ms, b, style, color=colors[method], label=f"{method} ({label} defaults)")
    ax.plot(ns, [max(10, n / 100) for n in ns], color="black", lw=0.8, label="max(10, n/100)")
    ax.set(xscale="log", yscale="log", xlabel="n", ylabel="rank blur at the defaults", title="defaults, standard normal rows")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--plot")
    parser.add_argument("--calibrate", action="store_true")
    parser.add_argument("--cache", type=Path)
    parser.add_argument("--only", help="--calibrate: the keys matching this regex (the table keeps the others)")
    args = parser.parse_args(argv)
    if args.calibrate:
        calibrate(args.quick, args.cache, args.only)
        return
    print("Rank blur (mean |soft_rank - rankdata|) of eight standard normal rows times s:\n")
    print(scale_table(args.quick))
    text, curves = calibration_table(args.quick)
    print("\nCalibration: blur / softness over s in [0.3 (Sinkhorn: 1), n / 20], smallest - largest:\n")
    print(text)
    print("\nCost of the row scale (torch, float32, B = 20, n = 1000, one thread; median of interleaved runs):\n")
    print(cost_table(args.quick))
    print("\nSorts: sort blur / softness (places among the hard sorted values) over s in [0.3 (Sinkhorn: 1), n / 20]:\n")
    print(sort_table(args.quick))
    if args.plot:
        plot(args.plot, curves, args.quick)


if __name__ == "__main__":
    main()
