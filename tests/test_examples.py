"""The examples and the figure scripts run end to end in their ``--quick`` mode and print sensible tables.

Every command that generates a table or figure of the docs runs once, in its
quick mode, through ``python -m benchmarks.docs --quick`` (the
``generated_docs`` fixture of tests/conftest.py); the tests here read its
outputs. Minutes of CPU: marked ``scripts``, run by ``pytest -m scripts``
(.ci/run's second step).
"""

from __future__ import annotations

import re

import numpy as np

import pytest

from benchmarks.docs import REGION, regions

from .conftest import ROOT

pytestmark = pytest.mark.scripts


def test_every_generated_region_is_refilled(generated_docs):
    """Every command ran, every region got its table with the page's columns and a stamp, every figure was written."""
    assert generated_docs.returncode == 0, generated_docs.log[-6000:]
    found = regions()
    assert {r.command for r in found} == set(generated_docs.outputs)
    for page in {r.page for r in found if r.tables is not None}:
        written = (generated_docs.out / page.relative_to(ROOT)).read_text()
        bodies = [m["body"] for m in REGION.finditer(written)]
        assert bodies and all(b.startswith("\n*Generated on ") and "\n|" in b for b in bodies), page
    for command in generated_docs.outputs:
        for figure in generated_docs.figures(command):
            assert figure.stat().st_size > 1000, figure


def _example(generated_docs, script: str) -> str:
    """The quick run's output of ``examples/<script>``, once its figure is written."""
    command = generated_docs.command(f"python examples/{script} --plot")
    (plot,) = generated_docs.figures(command)
    assert plot.stat().st_size > 1000
    return generated_docs.stdout(command)


def test_suquan_kendall_quick(generated_docs):
    out = _example(generated_docs, "suquan_kendall.py")
    accuracy = {m.group(1): float(m.group(2)) for m in re.finditer(r"^\| ([^|]+?) \| (\d\.\d+) ± \d\.\d+ \|$", out, flags=re.M)}
    assert set(accuracy) == {"raw pixels", "quantile normalized (fixed target)", "SUQUAN (learned target)",
                             "Kendall kernel SVM", "linear SVM, raw pixels", "RBF SVM, raw pixels"}, out
    assert min(accuracy.values()) > 0.3, accuracy  # 10 classes: chance is 0.1
    # the kernel is invariant to each image's contrast curve: with 5 images per class it beats raw pixels
    assert accuracy["Kendall kernel SVM"] > accuracy["linear SVM, raw pixels"], accuracy


def test_methods_figure_script_quick(generated_docs):
    stdout = generated_docs.stdout("python -m benchmarks.methods")
    methods = ("sinkhorn", "softsort", "neuralsort", "permutahedron", "lapsum")
    for m in methods:
        # a temperature row: the closest-to-hard temperature found, and finite gradients at the default
        assert re.search(rf"^\| {m} \| `\w+` \| [\d.e-]+ \| [\d.e-]+ \| [\d.e]+ \| [\d.e-]+ \| [\d.e-]+ \|$", stdout, re.M), stdout
        assert len(re.findall(rf"^\| {m} \| \d+ \| \d+\.\d+ \| \d+ \| -?\d+\.\d \|$", stdout, re.M)) == 2, stdout
    figures = generated_docs.figures(generated_docs.command("python -m benchmarks.methods"))
    assert [f.name for f in figures] == ["methods-temperature.png", "methods-scale.png"]
    assert all(f.stat().st_size > 1000 for f in figures)


def test_sweeps_print_their_tables(generated_docs):
    """The temperature sweeps behind the examples' "how the temperatures were chosen" tables."""
    topk = generated_docs.stdout("python examples/topk_classification.py --sweep")
    assert {m for m in re.findall(r"^\| (\w+) \| \w+=[\d.e-]+ \|", topk, flags=re.M)} == {
        "sinkhorn", "softsort", "neuralsort", "permutahedron", "lapsum"}, topk
    ranking = generated_docs.stdout("python examples/learning_to_sort.py --sweep")
    assert {m for m in re.findall(r"^\| (\w+) \| \w+ \| [\d.e-]+ \| \d\.\d+ \| \d\.\d+ \|$", ranking, flags=re.M)} == {
        "sinkhorn", "softsort", "neuralsort", "permutahedron", "lapsum", "odd_even", "bitonic"}, ranking


def test_quantile_regression_quick(generated_docs):
    out = _example(generated_docs, "quantile_regression.py")
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


def test_topk_classification_quick(generated_docs):
    out = _example(generated_docs, "topk_classification.py")
    rows = re.findall(r"^\| ([^|]+?) \| (\d\.\d+) ± \d\.\d+ \| (\d\.\d+) ± \d\.\d+ \| \d+\.\d \|$", out, flags=re.M)
    names = ["cross-entropy", *(f"top-1 loss, {m}" for m in ("sinkhorn", "softsort", "neuralsort", "permutahedron", "lapsum")),
             "top-3 loss, lapsum", "top-k cross-entropy, odd_even"]
    assert [r[0] for r in rows] == names * 2, out  # one table per setting: clean, then noisy labels
    clean = rows[:len(names)]
    for name, top1, top3 in rows:
        assert 0.5 < float(top1) <= float(top3), (name, top1, top3)  # 10 classes: chance is 0.1 (0.3 for top-3)
    # with clean labels every loss learns digits (k = 1 losses: "comparable to cross-entropy")
    assert all(float(top1) > 0.85 for _, top1, _ in clean), clean
    assert float(clean[0][1]) > 0.9 and all(float(top3) > 0.95 for _, _, top3 in clean), clean
    assert "ConvergenceWarnings" not in out


def test_learning_to_sort_quick(generated_docs):
    out = _example(generated_docs, "learning_to_sort.py")
    # the two accuracy tables (n = 3, 5), then the paper comparison and the wall times
    exact_part, rest = out.split("Exact-permutation accuracy (chance", 1)[1].split("Per-element accuracy (chance", 1)
    element_part, paper_part = rest.split("Exact-permutation accuracy against", 1)
    row = r"^\| (\w+) \| (torch|jax) \| (\d\.\d+) \| (\d\.\d+) \|$"
    exact, element = ({(m, f): (float(a), float(b)) for m, f, a, b in re.findall(row, part, flags=re.M)}
                      for part in (exact_part, element_part))
    expected = {(m, f) for m in ("neuralsort", "softsort", "sinkhorn", "permutahedron", "lapsum", "odd_even", "bitonic")
                for f in ("torch", "jax")}
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


def test_learning_to_rank_quick(generated_docs):
    """Every ranking loss trains on both frameworks, and torch and JAX reach the same NDCGs (one implementation; the
    two sharpest relaxations within rounding that training amplifies)."""
    out = generated_docs.stdout("python examples/learning_to_rank.py")
    rows = re.findall(r"^\| ([^|]+?) \| (torch|jax) \| (\d\.\d{3}) \| (\d\.\d{3}) \| (\d\.\d{3}) \| [\d.]+ \|$", out, flags=re.M)
    by = {(name, fw): values for name, fw, *values in rows}
    names = {name for name, _ in by}
    assert names == {"listnet", "listmle", "ranknet", "lambda (ndcgLoss2PP)", "approx_ndcg", "neural_ndcg", "smooth_ap",
                     "ndcg_loss (permutahedron)", "mse"}, out
    for name in names:
        torch_, jax_ = (np.array(by[(name, fw)], dtype=float) for fw in ("torch", "jax"))
        sharp = name in ("smooth_ap", "ndcg_loss (permutahedron)")
        assert np.all(np.abs(torch_ - jax_) <= (0.05 if sharp else 0.0)), (name, out)


def test_sparse_router_quick(generated_docs):
    """The permutahedron routers hold exact zeros at every reported step and learn; softmax has none."""
    out = generated_docs.stdout("python examples/sparse_router.py")
    rows = {name: [(float(e), float(z)) for e, z in re.findall(r"(\d\.\d{3}) / (\d+)%", line)]
            for name, line in re.findall(r"^\| ([^|]+?) \| (.+) \|$", out, flags=re.M) if name not in ("router", "---")}
    assert set(rows) == {"sparse (p = 4/3)", "sparse (l2)", "softmax"}, out
    for name in ("sparse (p = 4/3)", "sparse (l2)"):
        assert all(zeros >= 40 for _, zeros in rows[name]), out
        assert rows[name][-1][0] < rows[name][0][0] / 2, out  # it learns
    assert all(zeros == 0 for _, zeros in rows["softmax"]), out
