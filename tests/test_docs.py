"""The docs cannot drift: their code blocks run, their signature table equals the functions', their links resolve."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import numpy as np
import pytest

import rankops
import rankops.losses

ROOT = Path(__file__).resolve().parents[1]
EXECUTED = ["docs/index.md", "docs/getting-started.md", "docs/losses.md", "docs/migration.md"]
BLOCKS = [(page, code) for page in EXECUTED for code in re.findall(r"```python\n(.*?)```", (ROOT / page).read_text(), flags=re.S)]


@pytest.mark.parametrize("page,code", BLOCKS, ids=[f"{p.split('/')[-1]}-{i}" for i, (p, _) in enumerate(BLOCKS)])
def test_doc_code_block_runs(page, code):
    for module in re.findall(r"^import (\w+)", code, flags=re.M):
        pytest.importorskip(module)
    exec(compile(code, page, "exec"), {})


def _plain(sig: inspect.Signature) -> str:
    params = [p.replace(annotation=inspect.Parameter.empty) for p in sig.parameters.values()]
    return str(sig.replace(parameters=params, return_annotation=inspect.Signature.empty))


def test_conventions_table_lists_every_public_function_with_its_signature():
    text = (ROOT / "docs" / "conventions.md").read_text()
    rows = dict(re.findall(r"^\| `((?:losses\.)?\w+)(\(.*?\))` \|", text, flags=re.M))
    public = {n for n in rankops.__all__ if callable(getattr(rankops, n)) and not isinstance(getattr(rankops, n), type)}
    public |= {f"losses.{n}" for n in rankops.losses.__all__}
    assert set(rows) == public
    for name, documented in rows.items():
        fun = getattr(rankops.losses, name[7:]) if name.startswith("losses.") else getattr(rankops, name)
        assert documented == _plain(inspect.signature(fun)).replace("'", '"'), name


def test_repository_markdown_links_resolve():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    for page in pages:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if re.match(r"[a-z]+://", target):
                continue
            assert (page.parent / target).resolve().exists(), f"{page.relative_to(ROOT)} links to missing {target}"


def test_generated_regions_refill_from_a_commands_tables():
    """benchmarks.docs: a region takes the table it names under a stamp; a quoted marker is no region; a wrong table is reported."""
    from benchmarks.docs import REGION, fill, tables

    page = ("intro\n\n    <!-- generated: python -m x | table 1 -->\n\n"  # an indented (quoted) marker: left alone
            "<!-- generated: python -m x | table 2 -->\n\nold stamp\n\n| n | ms |\n|---|---|\n| 1 | 9.0 |\n\n<!-- /generated -->\n"
            "outro\n")
    stdout = "# header\n| case | a |\n|---|---|\n| x | 1 |\n\ntext\n| n | ms |\n|---|---|\n| 1 | 2.5 |\n| 2 | 7.5 |\n"
    assert tables(stdout) == ["| case | a |\n|---|---|\n| x | 1 |", "| n | ms |\n|---|---|\n| 1 | 2.5 |\n| 2 | 7.5 |"]
    assert [m["command"] for m in REGION.finditer(page)] == ["python -m x"]
    text, problems = fill(page, "python -m x", stdout, "*STAMP*")
    assert problems == []
    assert text == page.replace("old stamp", "*STAMP*").replace("| 1 | 9.0 |", "| 1 | 2.5 |\n| 2 | 7.5 |")
    assert fill(page, "python -m other", stdout, "*STAMP*") == (page, [])  # another command's region is untouched
    _, problems = fill(page.replace("x | table 2", "x | table 1"), "python -m x", stdout, "*STAMP*")
    assert len(problems) == 1 and "rows of ['case'] where the page has ['n']" in problems[0]
    _, problems = fill(page.replace("x | table 2", "x | table 3"), "python -m x", stdout, "*STAMP*")
    assert problems == ["`python -m x` printed 2 table(s); a region asks for table 3"]


def _traced(fn, watch):
    """Run ``fn()`` with ``watch(frame)`` called on every rankops frame it enters."""
    import os
    import sys

    root = os.path.dirname(rankops.__file__) + os.sep

    def trace(frame, event, arg):
        if event == "call" and frame.f_code.co_filename.startswith(root):
            watch(frame)

    sys.setprofile(trace)
    try:
        fn()
    finally:
        sys.setprofile(None)


def test_architecture_names_the_files_one_sinkhorn_call_enters():
    """docs/architecture.md lists the rankops files one ``soft_rank(x, method="sinkhorn")`` on NumPy enters: a runtime
    trace (every Python frame of a warm call) finds the same set, and the count it states."""
    import os

    text = (Path(__file__).resolve().parents[1] / "docs" / "architecture.md").read_text()
    found = re.search(r"on NumPy enters (\d+) rankops files \([^)]*\):\s*(.*?\.py`)\.", text, re.S)
    assert found, "docs/architecture.md no longer states the files of one Sinkhorn call"
    listed = set(re.findall(r"`([\w/]+\.py)`", found.group(2)))
    x = np.random.default_rng(0).normal(size=(3, 8))
    rankops.soft_rank(x, method="sinkhorn")  # imports done: the trace sees the call alone
    root = os.path.dirname(rankops.__file__)
    entered = set()
    _traced(lambda: rankops.soft_rank(x, method="sinkhorn"),
            lambda frame: entered.add(os.path.relpath(frame.f_code.co_filename, root).replace(os.sep, "/")))
    assert listed == entered, (sorted(listed - entered), sorted(entered - listed))
    assert int(found.group(1)) == len(entered)


SINKHORN_CALLS = [
    ("soft_rank", (), {}), ("soft_sort", (), {}), ("soft_cdf", (), {}), ("soft_quantile", (np.array([0.3, 0.5]),), {}),
    ("soft_quantile", (0.3,), {}), ("soft_rank", (), {"implicit": False}), ("soft_sort", (), {"implicit": False}),
]


@pytest.mark.parametrize("fun, args, opts", SINKHORN_CALLS)
def test_a_sinkhorn_backward_nests_at_most_three_pullbacks(fun, args, opts):
    """docs/architecture.md, "The Sinkhorn backward": below the NaN-row guard every core shares, ``rankops.vjp`` of a
    Sinkhorn operator on NumPy passes through at most three nested pullbacks (the squash's, a leaf, apart): the
    readout's, the line solver's and the registered backward's, the line solver's returning ``(dx, dlog_a, dlog_b,
    depsilon)``; unrolled (``implicit=False``), four: the solver's, which scales by epsilon, comes between; so does
    the dropping of the levels' axis for a quantile at a Python level."""
    x = np.random.default_rng(0).normal(size=(3, 8))
    out, back = rankops.vjp(getattr(rankops, fun), x, *args, **opts)
    deepest: list[str] = []

    def watch(frame):
        nonlocal deepest
        stack, f = [], frame
        while f is not None:
            code = f.f_code
            if ("<locals>" in code.co_qualname and "/rankops/" in code.co_filename
                    and not code.co_filename.endswith(("finite.py", "squash.py"))
                    and (code.co_name == "pullback" or code.co_name.endswith("_back"))):
                stack.append(code.co_qualname)
            f = f.f_back
        if len(stack) > len(deepest):
            deepest = stack

    _traced(lambda: back(np.ones_like(out)), watch)
    most = 4 if opts.get("implicit") is False or (fun == "soft_quantile" and isinstance(args[0], float)) else 3
    assert 2 <= len(deepest) <= most, deepest[::-1]


@pytest.mark.parametrize("fun, args, opts", SINKHORN_CALLS)
def test_a_sinkhorn_call_fetches_each_adapter_once_where_it_is_used(fun, args, opts):
    """The call's adapter is fetched by ``prepare`` and kept on the call; below it each function that needs one fetches
    it once and hands it to its private helpers (``eagerly`` passes only arrays and Python values, so the CG solve
    fetches its own): no frame fetches twice, and a forward call fetches at most a dozen times."""
    x = np.random.default_rng(0).normal(size=(3, 8))
    op = getattr(rankops, fun)
    op(x, *args, **opts)
    callers: list = []  # the frames themselves, kept alive so that no two share an identity

    def watch(frame):
        if frame.f_code.co_name == "get_adapter":
            callers.append(frame.f_back)

    _traced(lambda: op(x, *args, **opts), watch)
    twice = [f.f_code.co_qualname for f in callers if sum(g is f for g in callers) > 1]
    assert not twice, twice
    assert len(callers) <= 12, sorted(f.f_code.co_qualname for f in callers)
