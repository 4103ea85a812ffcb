"""The examples and the figure scripts run end to end in their ``--quick`` mode and print sensible tables.

Minutes of CPU: marked ``scripts``, run by ``pytest -m scripts`` (.ci/run's second step).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.scripts

ROOT = Path(__file__).resolve().parents[1]


def _run_example(tmp_path: Path, script: str, *modules: str) -> str:
    """Run ``examples/<script> --quick --plot`` (skipped unless ``modules`` import); its stdout, once the plot is written."""
    for module in modules:
        pytest.importorskip(module)
    plot = tmp_path / "plot.png"
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / script), "--quick", "--plot", str(plot)],
                          capture_output=True, text=True, timeout=600, check=True)
    assert plot.stat().st_size > 1000
    return proc.stdout


def test_suquan_kendall_quick(tmp_path):
    out = _run_example(tmp_path, "suquan_kendall.py", "sklearn", "torch")
    accuracy = {m.group(1): float(m.group(2)) for m in re.finditer(r"^\| ([^|]+?) \| (\d\.\d+) ± \d\.\d+ \|$", out, flags=re.M)}
    assert set(accuracy) == {"raw pixels", "quantile normalized (fixed target)", "SUQUAN (learned target)",
                             "Kendall kernel SVM", "linear SVM, raw pixels", "RBF SVM, raw pixels"}, out
    assert min(accuracy.values()) > 0.3, accuracy  # 10 classes: chance is 0.1
    # the kernel is invariant to each image's contrast curve: with 5 images per class it beats raw pixels
    assert accuracy["Kendall kernel SVM"] > accuracy["linear SVM, raw pixels"], accuracy


def test_methods_figure_script_quick(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("matplotlib")
    temp, scale = tmp_path / "t.png", tmp_path / "s.png"
    proc = subprocess.run([sys.executable, "-m", "benchmarks.methods", "--quick", "--plot-temperature", str(temp),
                           "--plot-scale", str(scale)], cwd=ROOT, capture_output=True, text=True, timeout=600, check=True)
    methods = ("sinkhorn", "softsort", "neuralsort", "permutahedron", "lapsum")
    for m in methods:
        # a temperature row: the closest-to-hard temperature found, and finite gradients at the default
        assert re.search(rf"^\| {m} \| `\w+` \| [\d.e-]+ \| [\d.e-]+ \| [\d.e]+ \| [\d.e-]+ \| [\d.e-]+ \|$", proc.stdout, re.M), proc.stdout
        assert len(re.findall(rf"^\| {m} \| \d+ \| \d+\.\d+ \| \d+ \| -?\d+\.\d \|$", proc.stdout, re.M)) == 2, proc.stdout
    assert temp.stat().st_size > 1000 and scale.stat().st_size > 1000


def test_quantile_regression_quick(tmp_path):
    out = _run_example(tmp_path, "quantile_regression.py", "sklearn", "torch")
    losses = {"MSE", "pinball 0.5 (LAD)", "S-quantile 0.5 (sinkhorn)", "S-quantile 0.7 (sinkhorn)",
              "quantile 0.5 (lapsum)", "quantile 0.5 (permutahedron)"}
    # {dataset: {metric: {loss: [mean at 0% outliers, mean at 30%]}}}
    tables = {}
    for section in re.split(r"^## ", out, flags=re.M)[1:]:
        dataset = section.split()[0]
        tables[dataset] = {}
        for block in re.split(r"^clean-test ", section, flags=re.M)[1:]:
            metric = block.split(" (target stds)")[0]
            rows = re.findall(r"^\| ([^|]+?) \| (\d+\.\d+) ± \d+\.\d+ \| (\d+\.\d+) ± \d+\.\d+ \|$", block, flags=re.M)
            tables[dataset][metric] = {name: [float(a), float(b)] for name, a, b in rows}
    assert set(tables) == {"diabetes", "friedman1"}, out
    for dataset, metrics in tables.items():
        assert set(metrics) == {"MAE", "RMSE", "pinball 0.5"}, out
        for metric, table in metrics.items():
            assert set(table) == losses, (dataset, metric, out)
        mae = metrics["MAE"]
        for name in losses:
            # the paper's metric at tau = 0.5 is half the MAE (both rounded to 3 decimals)
            assert all(abs(p - m / 2) <= 1e-3 for p, m in zip(metrics["pinball 0.5"][name], mae[name])), (dataset, name, metrics)
        assert mae["MSE"][0] < 0.8, mae  # clean data: a real fit (predicting the mean scores about 0.8)
        assert mae["MSE"][1] > 1.5 * mae["MSE"][0], mae  # 30% gross outliers pull the least-squares fit
        for name in ("S-quantile 0.5 (sinkhorn)", "quantile 0.5 (lapsum)", "quantile 0.5 (permutahedron)"):
            # the median of |residuals| ignores the 30% outliers: unaffected, and far better than MSE
            assert mae[name][1] < 1.3 * mae[name][0], (dataset, name, mae)
            assert mae[name][1] < 0.7 * mae["MSE"][1], (dataset, name, mae)
    # the MLP fits the outliers under least absolute deviations too; the trimmed criteria do not
    assert tables["friedman1"]["MAE"]["S-quantile 0.5 (sinkhorn)"][1] < 0.5 * tables["friedman1"]["MAE"]["pinball 0.5 (LAD)"][1], tables


def test_topk_classification_quick(tmp_path):
    out = _run_example(tmp_path, "topk_classification.py", "sklearn", "torch")
    rows = re.findall(r"^\| ([^|]+?) \| (\d\.\d+) ± \d\.\d+ \| (\d\.\d+) ± \d\.\d+ \| \d+\.\d \|$", out, flags=re.M)
    names = ["cross-entropy", *(f"top-1 loss, {m}" for m in ("sinkhorn", "softsort", "neuralsort", "permutahedron", "lapsum")),
             "top-3 loss, lapsum"]
    assert [r[0] for r in rows] == names * 2, out  # one table per setting: clean, then noisy labels
    clean = rows[:len(names)]
    for name, top1, top3 in rows:
        assert 0.5 < float(top1) <= float(top3), (name, top1, top3)  # 10 classes: chance is 0.1 (0.3 for top-3)
    # with clean labels every loss learns digits (k = 1 losses: "comparable to cross-entropy")
    assert all(float(top1) > 0.85 for _, top1, _ in clean), clean
    assert float(clean[0][1]) > 0.9 and all(float(top3) > 0.95 for _, _, top3 in clean), clean
    assert "ConvergenceWarnings" not in out


def test_learning_to_sort_quick(tmp_path):
    out = _run_example(tmp_path, "learning_to_sort.py", "sklearn", "torch", "jax", "matplotlib")
    # the two accuracy tables (n = 3, 5), then the paper comparison and the wall times
    exact_part, rest = out.split("Exact-permutation accuracy (chance", 1)[1].split("Per-element accuracy (chance", 1)
    element_part, paper_part = rest.split("Exact-permutation accuracy against", 1)
    row = r"^\| (\w+) \| (torch|jax) \| (\d\.\d+) \| (\d\.\d+) \|$"
    exact, element = ({(m, f): (float(a), float(b)) for m, f, a, b in re.findall(row, part, flags=re.M)}
                      for part in (exact_part, element_part))
    expected = {(m, f) for m in ("neuralsort", "softsort", "sinkhorn", "permutahedron", "lapsum") for f in ("torch", "jax")}
    assert set(exact) == expected and set(element) == expected, out
    for key in expected:
        # chance: 1/3! = 0.17 and 1/5! = 0.008 exact, 1/3 and 1/5 per element; 150 steps reach 0.54-0.70 and 0.29-0.39
        assert exact[key][0] > 0.35 and exact[key][1] > 0.1, (key, exact[key])
        assert element[key][0] > 0.5 and element[key][1] > 0.4, (key, element[key])
        assert exact[key][0] > exact[key][1], (key, exact[key])  # 5 items are harder to order than 3
    assert re.search(r"^\| sinkhorn \| Cuturi et al\. 2019 [^|]*\| 0\.928 \| 0\.811 \|$", paper_part, flags=re.M), out
    assert re.search(r"^\| neuralsort \| Cuturi et al\. 2019 [^|]*\| 0\.919 \| 0\.777 \|$", paper_part, flags=re.M), out
    walls = {(m, f) for m, f in re.findall(r"^\| (\w+) \| (torch|jax) \| \d+\.\d \|$", paper_part, flags=re.M)}
    assert walls == expected, out
