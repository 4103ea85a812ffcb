"""`python -m benchmarks --smoke` runs every group and contender, and writes its page and plots (via benchmarks.docs --quick).

Only that it works is checked: the numbers of a smoke run (tiny sizes, jobs
sharing processes) mean nothing, so nothing here depends on a time.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.scripts

ROOT = Path(__file__).resolve().parents[1]
SECTIONS = ("Soft ranks with SoftSort", "Soft ranks with NeuralSort", "Sinkhorn soft sort", "Large n")


def _section(page: str, title: str) -> str:
    start = page.index(f"## {title}")
    end = page.find("\n## ", start + 1)
    return page[start:] if end < 0 else page[start:end]


@pytest.fixture(scope="module")
def smoke(generated_docs):
    """The suite's quick run (``--smoke``) from ``benchmarks.docs --quick``: its result, and the directory it wrote."""
    from benchmarks._report import PAGE_COMMAND

    return generated_docs.outputs.get(PAGE_COMMAND, {"returncode": None}), generated_docs.out / "docs"


def test_smoke_exits_zero(smoke, generated_docs):
    result, _ = smoke
    assert result["returncode"] == 0, generated_docs.log[-4000:]


def test_smoke_writes_page_and_plots(smoke):
    _, out = smoke
    page = (out / "benchmarks.md").read_text()
    pngs = {p.name for p in (out / "img").glob("*.png")}
    for group in ("softsort", "neuralsort", "sinkhorn"):
        for metric in ("time-fwd", "time-fwdbwd", "memory"):
            name = f"{group}-{metric}.png"
            assert name in pngs and (out / "img" / name).stat().st_size > 1000
            assert f"](img/{name})" in page
    assert "benchmarks-scripts.md" in page and "## How these numbers are measured" in page


@pytest.mark.parametrize("title", SECTIONS)
def test_smoke_page_has_numeric_rows(smoke, title):
    _, out = smoke
    text = _section((out / "benchmarks.md").read_text(), title)
    if title == "Large n":  # | `op` | time s | peak MiB | yes/no |
        rows = re.findall(r"^\| `[^`]+` \| \d+\.\d+ \| -?\d+\.\d+ \| (?:yes|NO) \|$", text, flags=re.M)
        assert len(rows) == 4, text
        return
    # | n | contender | fwd ms | ratio | fwd+bwd ms | ratio | diff |: a number in both time columns
    timed = re.findall(r"^\| (\d+) \| (rankops-\w+) \| \d+(?:\.\d+)? \| [^|]+ \| \d+(?:\.\d+)? \|", text, flags=re.M)
    assert {c for _, c in timed} == {"rankops-numpy", "rankops-torch", "rankops-jax"}, text
    assert {n for n, _ in timed} == {"8", "32"}, text
    peaks = re.findall(r"^\| \d+ \| [\w-]+ \| -?\d+\.\d+ \| [^|]* \| -?\d+\.\d+ \| [^|]* \|$", text, flags=re.M)
    assert len(peaks) >= 6, text


def test_compare_reads_every_timed_row(smoke):
    """``python -m benchmarks.compare`` finds each section's rankops rows; a page against itself gives ratio 1."""
    from benchmarks.compare import read_times

    _, out = smoke
    page = str(out / "benchmarks.md")
    times = read_times(page)
    for title in SECTIONS[:3]:
        found = {(n, c) for s, n, c in times if s == title and c.startswith("rankops-")}
        assert found == {(n, f"rankops-{b}") for n in (8, 32) for b in ("numpy", "torch", "jax")}, (title, found)
    proc = subprocess.run([sys.executable, "-m", "benchmarks.compare", page, page], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    rows = [line.split(" | ") for line in proc.stdout.splitlines() if re.match(r"\| [A-Z].* \| \d+ \|", line)]
    assert len(rows) >= 18 and {r[5] for r in rows} == {r[8].rstrip(" |") for r in rows} == {"1.00"}, proc.stdout
    # fwd and fwd+bwd at n = 8 and 32: three backends in the three reference sections, torch and JAX at the Sinkhorn defaults
    count = 2 * 2 * (3 * 3 + 2)
    assert f"geometric mean of new/base over {count} rankops times: 1.000" in proc.stdout, proc.stdout


def test_smoke_fast_section_times_every_contender(smoke):
    """The fast-methods section (``python -m benchmarks.fast --quick``): a time for each method on each backend, and its plot."""
    _, out = smoke
    text = _section((out / "benchmarks.md").read_text(), "Fast soft ranks")
    timed = re.findall(r"^\| \d+ \| (\d+) \| rankops (\w+) ([\w-]+) \| \d+\.\d+ \| \d+\.\d+ \|", text, flags=re.M)
    assert {(m, h) for _, m, h in timed} == {(m, h) for m in ("permutahedron", "lapsum") for h in ("torch", "jax-jit", "numpy")}, text
    assert {n for n, _, _ in timed} == {"16", "64", "128"}, text  # B = 2 rows, and one row of 128
    assert len(re.findall(r"^\| (?:permutahedron|lapsum) \| \d+\.\d+ \|$", text, flags=re.M)) == 2, text
    assert (out / "img" / "fast-time-fwdbwd.png").stat().st_size > 1000 and "](img/fast-time-fwdbwd.png)" in text


def test_smoke_kernels_section_times_every_contender(smoke):
    """The kernels section (``python -m benchmarks.kernels --quick``): a time per algorithm and backend, SciPy's loop, the smooth tau's memory."""
    _, out = smoke
    text = _section((out / "benchmarks.md").read_text(), "Kernels on permutations")
    rows = re.findall(r"^\| (\d+) \| 3 \|((?: \d+\.\d+ \|){6})$", text, flags=re.M)
    assert [p for p, _ in rows] == ["8", "40"], text
    assert re.search(r"^\| 200 \| \d+\.\d+ \| -?\d+\.\d+ \| 0 \|$", text, flags=re.M), text


def test_smoke_networks_section_checks_every_contender(smoke):
    """The sorting-networks section (``python -m benchmarks.networks --quick``): a time per backend, network and n, values equal to the diffsort package's."""
    _, out = smoke
    text = _section((out / "benchmarks.md").read_text(), "Differentiable sorting networks")
    assert "`python -m benchmarks.networks --quick`" in text, text
    # | network | n | contender | ms | package / this | peak MiB | package / this | setup s | max abs diff |
    rows = re.findall(r"^\| (bitonic|odd_even) \| (\d+) \| (rankops-\w+) \| \d+(?:\.\d+)? \| ([^|]*) \| -?\d+\.\d+ \| "
                      r"[^|]* \| [^|]* \| ([^|]*) \|$", text, flags=re.M)
    assert {(net, n, c) for net, n, c, _, _ in rows} == {
        (net, n, f"rankops-{h}") for net in ("bitonic", "odd_even") for n in ("16", "64") for h in ("torch", "numpy", "jax")
    }, text
    if importlib.util.find_spec("diffsort") is None:
        assert "not installed" in text, text
        return
    assert all(re.fullmatch(r"\d+\.\dx", ratio.strip()) for _, _, _, ratio, _ in rows), text
    assert all(float(diff) <= 1e-4 for *_, diff in rows), text


@pytest.mark.parametrize("script, rows", [("benchmarks.topk_sort", 3), ("benchmarks.quantile_levels", 4), ("benchmarks.smoothness", 4),
                                          ("benchmarks.masks", 6), ("benchmarks.loss_vjp", 13)])
def test_single_question_scripts_print_their_table(generated_docs, script, rows):
    """The scripts behind docs/benchmarks-scripts.md in their quick modes: a table with one timed row per case."""
    stdout = generated_docs.stdout(f"python -m {script}")
    timed = [line for line in stdout.splitlines() if re.match(r"\| [\w=]+ \|.*\| [\d.]+x \|", line)]
    assert len(timed) == rows, stdout


def test_ltr_losses_script_times_every_loss(generated_docs):
    """``benchmarks.ltr_losses`` in its quick mode: one timed row per loss; against allRank where it is installed, whose
    values then equal rankops' for the losses whose batch reduction is a mean of per-list values."""
    stdout = generated_docs.stdout("python -m benchmarks.ltr_losses")
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in stdout.splitlines() if re.match(r"\| \w[\w (=,)]*\| [\d.]+ \|", line)]
    assert len(rows) == 10, stdout
    if importlib.util.find_spec("allrank") is None:
        assert "allRank not installed" in stdout, stdout
        return
    values = {name: (float(ours), float(theirs)) for name, *_, ours, theirs in rows}
    for name in ("listnet", "binary_listnet", "approx_ndcg", "neural_ndcg", "lambda (ndcgLoss2PP)"):
        assert abs(values[name][0] - values[name][1]) <= 1e-5 * max(1.0, abs(values[name][1])), (name, values[name])


def test_softness_script_prints_its_tables(generated_docs):
    """``benchmarks.softness`` in its quick mode: the blur over scales for every method (softness=1, the defaults, the
    old defaults), the calibration ratios on the four distributions, and the row scale's share of a fwd+bwd."""
    stdout = generated_docs.stdout("python -m benchmarks.softness")
    methods = ("sinkhorn", "softsort", "neuralsort", "permutahedron", "lapsum", "diffsort")
    blur = re.findall(r"^\| (\w+) \| (softness=1|defaults|old defaults) \|(?: [\d.e+-]+ \|){2,6}$", stdout, flags=re.M)
    assert {(m, label) for m, label in blur} == {(m, lab) for m in methods for lab in ("softness=1", "defaults", "old defaults")}, stdout
    ratios = re.findall(r"^\| (\w+) \| \d+ \|(?: \d+\.\d\d - \d+\.\d\d \|){4}$", stdout, flags=re.M)
    assert set(ratios) == set(methods), stdout
    cost = re.findall(r"^\| (permutahedron|lapsum) \| [\d.]+ \| [\d.]+ \| -?[\d.]+% \| [\d.]+ \| [\d.]+% \|$", stdout, flags=re.M)
    assert sorted(cost) == ["lapsum", "permutahedron"], stdout


def test_gpu_check_runs_here_in_its_cpu_mode(tmp_path):
    """``.ci/gpu --dry-run``: the one-call GPU check's steps on this CPU machine (docs/gpu.md, "The GPU check")."""
    proc = subprocess.run(["bash", str(ROOT / ".ci" / "gpu"), "--dry-run", str(tmp_path)], cwd=ROOT, capture_output=True,
                          text=True, timeout=600, env={**os.environ, "PYTHON": sys.executable})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    devices = (tmp_path / "devices.txt").read_text()
    assert re.search(r"^torch \S+, cuda ", devices, flags=re.M) and "conformance: exit 0" in devices, devices
    log = (tmp_path / "conformance.txt").read_text()
    assert re.search(r"^=* ?\d+ passed", log, flags=re.M), log[-3000:]
    # each check named with its outcome as it ends: a run its time limit stops still names its failures
    assert re.search(r"conformance/test_backends\.py::\S+ PASSED", log), log[-3000:]
    assert (tmp_path / "junit.xml").stat().st_size > 0
    assert "| soft_rank[permutahedron] | " in (tmp_path / "benchmarks_gpu.md").read_text()
    # the determinism probe, without and with JAX's and torch's deterministic modes: on a CPU one result per operator
    # and framework, rows equal
    determinism = (tmp_path / "determinism.md").read_text()
    assert determinism.count("determinism, defaults") == 1 and determinism.count("determinism, deterministic") == 1
    assert "--xla_gpu_deterministic_ops=true" in determinism and "use_deterministic_algorithms(True)" in determinism
    rows = re.findall(r"^\| (jax|torch) cpu( \(scans\))?: ([^|]+?) \| (\d+) \| (\d+) \| (\d+) \| ", determinism,
                      flags=re.M)
    assert len(rows) == 24 and all(r[3:] == ("1", "1", "0") for r in rows), determinism


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_failure_log_holds_each_failure_once(tmp_path, workers):
    """``RANKOPS_FAILURE_LOG`` (``conformance/failure_log.py``, which ``.ci/gpu`` sets): each failure's traceback is in
    the file once, under pytest-xdist too (its hook runs in the worker and again in the controller)."""
    if workers and importlib.util.find_spec("xdist") is None:
        pytest.skip("pytest-xdist is not installed")
    planted = tmp_path / "test_planted.py"
    planted.write_text("def test_passes():\n    assert True\n\n\n"
                       "def test_fails():\n    assert 1 + 1 == 3, 'planted failure'\n\n\n"
                       "def test_fails_too():\n    raise ValueError('planted error')\n")
    log = tmp_path / "failures.txt"
    env = {**os.environ, "RANKOPS_FAILURE_LOG": str(log), "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    env.pop("PYTEST_XDIST_WORKER", None)  # this test may itself run in a worker
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "conformance.failure_log", "-p", "no:cacheprovider",
                           *workers, str(planted)], cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 1 and "2 failed, 1 passed" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-3000:]
    entries = log.read_text().split("=== ")[1:]
    assert sorted(entry.splitlines()[0] for entry in entries) == ["test_planted.py::test_fails (call)",
                                                                    "test_planted.py::test_fails_too (call)"], entries
    text = log.read_text()
    assert "planted failure" in text and "ValueError: planted error" in text and "assert 1 + 1 == 3" in text, text


def test_jax_compile_script_prints_its_tables():
    """``benchmarks.jax_compile --quick``: a compile time per method and length, KL against L2 on both backends
    (torch's also without the windows), the permutahedron with the rounds' extensions and without, and JAX's
    log-cumsum-exp by either route."""
    pytest.importorskip("jax")
    pytest.importorskip("torch")
    proc = subprocess.run([sys.executable, "-m", "benchmarks.jax_compile", "--quick"], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    compiled = re.findall(r"^\| ([\w.,=/ ]+) \| [\d.]+ \| [\d.]+ \| [\d.]+x \|$", proc.stdout, flags=re.M)
    assert len(compiled) == 11 and compiled[0] == "jnp.sort" and "permutahedron, lp, p = 5/4" in compiled, proc.stdout
    number = r"[\d.e+]+"
    kl = re.findall(rf"^\| (jax|torch) \| 2 \| 100 \| {number} \| {number} \| {number} \| (- \| -|{number} \| {number}) \|$",
                    proc.stdout, flags=re.M)
    assert sorted(kl) == [("jax", "- | -"), ("torch", kl[-1][1])] and kl[-1][1] != "- | -", proc.stdout  # windows off: torch
    scans = re.findall(rf"^\| \(2, 100\) \| {number} \| {number} \| {number}x \| {number} \| {number} \|$", proc.stdout, flags=re.M)
    assert len(scans) == 1, proc.stdout  # the log-cumsum-exp's row
    extended = re.findall(rf"^\| (soft_sort|soft_rank) \| (l2|kl) \| 2 \| 100 \| {number} \| {number} \| {number} \|$", proc.stdout, flags=re.M)
    assert len(extended) == 4, proc.stdout  # the extensions on and off: each operator and regularization


def test_jax_sort_script_prints_its_tables():
    """``benchmarks.jax_sort --quick``: the packed sort against ``lax.sort`` of pairs (the same order), then each
    operator with either route, bit-equal."""
    pytest.importorskip("jax")
    proc = subprocess.run([sys.executable, "-m", "benchmarks.jax_sort", "--quick"], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    number = r"[\d.e+]+"
    sorts = re.findall(rf"^\| 2 \| 100 \| {number} \| {number} \| {number}x \| {number} \| {number} \| (yes|NO) \|$",
                       proc.stdout, flags=re.M)
    assert sorts == ["yes"], proc.stdout
    operators = re.findall(rf"^\| ([\w, =/]+) \| 2 \| 100 \| {number} \| {number} \| {number}x \| (yes|no) \|$",
                           proc.stdout, flags=re.M)
    assert len(operators) == 7 and all(equal == "yes" for _, equal in operators), proc.stdout


def test_compile_time_script_prints_its_table():
    """``benchmarks.compile_time --quick``: a fresh process per cell, the reference row and an odd-even network's."""
    pytest.importorskip("torch")
    proc = subprocess.run([sys.executable, "-m", "benchmarks.compile_time", "--quick"], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = re.findall(r"^\| ([\w., ()]+) \| [\d.]+ \| [\d.]+ \| [\d.]+ \|$", proc.stdout, flags=re.M)
    assert rows == ["torch.sort (reference)", "soft_rank, diffsort, odd_even"], proc.stdout


def test_sparse_topk_script_prints_its_tables():
    """``benchmarks.sparse_topk --quick``: speed against l2 per backend and operator, the rank's by strength, and the
    exact zeros and ones (or entries kept exactly) of the mask and the top-k in magnitude."""
    pytest.importorskip("jax")
    pytest.importorskip("torch")
    proc = subprocess.run([sys.executable, "-m", "benchmarks.sparse_topk", "--quick"], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = re.findall(r"^\| (torch|jax) \| (soft_rank|soft_sort|soft_topk_mask|soft_topk_magnitude) \| \d+ \| [\d,]+ \| "
                      r"(strength 0\.1|default softness) \|(?: [\d.e+]+ \|){5}$", proc.stdout, flags=re.M)
    # per backend and size: the rank and the sort at strength 0.1 and the default softness, the masks at strength 0.1
    knobs = ["strength 0.1", "default softness"]
    ops = [("soft_rank", k) for k in knobs] + [("soft_sort", k) for k in knobs] + [(op, knobs[0]) for op in ("soft_topk_mask", "soft_topk_magnitude")]
    assert rows == [(backend, *op) for _ in range(2) for backend in ("torch", "jax") for op in ops], proc.stdout
    # the rank across the knob at both sizes: the softnesses (n / 20 the last, 10 and 100 at the quick sizes), five
    # strengths, and the slowest of each column over either
    knob = re.findall(r"^\| \d+ \| [\d,]+ \| ((?:softness|strength) [\d.e+-]+|slowest, \w+) \|(?: [\d.e+]+ \|){5}$", proc.stdout,
                      flags=re.M)
    labels = [f"softness {s}" for s in ("0.3", "1", "3", "10")] + [f"strength {e}" for e in ("10", "1", "0.1", "0.01", "0.001")]
    assert [k for k in knob if k != "softness 100"] == (labels + ["slowest, softness", "slowest, strength"]) * 2, proc.stdout
    # the rank at p with no closed forms: torch and JAX, both sizes at the default softness and strength 1 and 0.1
    other = re.findall(r"^\| (torch|jax) \| \d+ \| [\d,]+ \| (default|1|0\.1) \|(?: [\d.e+]+ \|){5}$", proc.stdout, flags=re.M)
    assert other == [(b, k) for b in ("torch", "jax") for k in ("default", "1", "0.1") * 2], proc.stdout
    shares = r"^\| soft_topk_(mask|magnitude) \| \d+ \| [\d,]+ \|(?: [\d.]+% / [\d.]+% \|){4}$"
    assert len(re.findall(shares, proc.stdout, flags=re.M)) == 4, proc.stdout
    try:
        import numba  # noqa: F401
    except ImportError:  # the comparison with the reference code's host PAV needs it
        return
    # the host PAV's route against rankops': the mask and the rank at both sizes, with the values checked equal
    callback = re.findall(r"^\| (soft_topk_mask|soft_rank) \| \d+ \| [\d,]+ \|(?: [\d.e+]+ \|){3}$", proc.stdout, flags=re.M)
    assert callback == ["soft_topk_mask", "soft_rank"] * 2, proc.stdout
