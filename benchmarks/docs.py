"""``python -m benchmarks.docs``: regenerate every measured table and figure of the docs with one command.

A page declares what is generated, where it is, with a pair of comments::

    <!-- generated: python -m benchmarks.methods --plot-scale docs/img/methods-scale.png | table 2 -->
    ...
    <!-- /generated -->

The command (run from the repository root, ``python`` meaning this
interpreter) prints Markdown; its tables are the maximal runs of lines that
start with ``|``, numbered from 1, and ``| table N`` (or ``| tables N-M``)
picks which of them fill the region, under a line stating the date, the
commit, the machine and the command. Figures are the files the command
writes itself (its ``docs/...`` arguments). A page that a command writes
whole (``python -m benchmarks``, the suite) says so on its first comment
line: ``<!-- generated page: COMMAND -->``. Each distinct command runs
once, in the order the pages list them.

``--quick`` runs every command in its own quick mode (``--quick`` appended)
with every ``docs/...`` path redirected into ``--output`` (a temporary
directory by default): it checks that every command runs and fills every
region, in minutes, without touching docs/. ``.ci/run``'s second step runs it
(the ``generated_docs`` fixture of tests/conftest.py, marker ``scripts``). Without ``--quick``
the pages and figures in docs/ are rewritten: hours on a 2-core CPU, so
``--only REGEX`` picks the commands to run (the others' regions are kept).

Usage: python -m benchmarks.docs [--quick] [--only REGEX] [--output DIR] [--jobs N] [--list]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import shlex
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from ._common import ROOT, git_state, package_version

# Markers start a line: an example quoted in a page (indented, or inline code) is not a region.
REGION = re.compile(r"^<!-- generated: (?P<command>.+?)(?: \| tables? (?P<first>\d+)(?:-(?P<last>\d+))?)? -->\n"
                    r"(?P<body>.*?)^<!-- /generated -->", re.S | re.M)
PAGE = re.compile(r"^<!-- generated page: (?P<command>.+?) -->", re.M)
QUICK_TIMEOUT = 900  # seconds per command in --quick mode; full runs are not limited


@dataclass(frozen=True)
class Region:
    page: Path
    command: str
    tables: tuple[int, int] | None  # (first, last), 1-based; None: the whole page is the command's

    def describe(self) -> str:
        where = "whole page" if self.tables is None else f"table {self.tables[0]}" + (
            f"-{self.tables[1]}" if self.tables[1] != self.tables[0] else "")
        return f"{self.page.relative_to(ROOT)} ({where})"


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def regions() -> list[Region]:
    """Every generated region of every page, in page order."""
    found = []
    for page in pages():
        text = page.read_text()
        whole = PAGE.search(text)
        if whole:
            found.append(Region(page, whole["command"], None))
        for m in REGION.finditer(text):
            first = int(m["first"] or 1)
            found.append(Region(page, m["command"], (first, int(m["last"] or first))))
    return found


def tables(stdout: str) -> list[str]:
    """The Markdown tables of a command's output: maximal runs of lines starting with ``|``."""
    found, current = [], []
    for line in [*stdout.splitlines(), ""]:
        if line.startswith("|"):
            current.append(line)
        elif current:
            found.append("\n".join(current))
            current = []
    return found


def argv(command: str, quick: bool, output: Path) -> list[str]:
    """The command's arguments, ``python`` as this interpreter; quick: ``--quick`` and docs/ paths under ``output``."""
    words = shlex.split(command)
    if words[0] != "python":
        raise ValueError(f"a generating command starts with 'python': {command!r}")
    args = [sys.executable, *words[1:]]
    if not quick:
        return args
    redirected = []
    for word in args:
        if word == "docs" or word.startswith("docs/"):
            word = str(output / word)
            Path(word if word.endswith("docs") else os.path.dirname(word)).mkdir(parents=True, exist_ok=True)
        redirected.append(word)
    return [*redirected, "--quick"]


def stamp(command: str, seconds: float) -> str:
    versions = ", ".join(f"{p} {package_version(p)}" for p in ("numpy", "torch", "jax") if package_version(p) != "not installed")
    return (f"*Generated on {datetime.date.today():%Y-%m-%d} at {git_state()} by `{command}` ({seconds / 60:.1f} min; "
            f"{os.cpu_count()}-core {platform.machine()} CPU, Python {platform.python_version()}, {versions}).*")


def _subject(table: str) -> str:
    return table.split("|")[1].split()[0]


def fill(text: str, command: str, stdout: str, header: str) -> tuple[str, list[str]]:
    """``text`` with the regions of ``command`` refilled from ``stdout``; the problems found."""
    found, problems = tables(stdout), []

    def refill(m: re.Match) -> str:
        if m["command"] != command:
            return m[0]
        first = int(m["first"] or 1)
        last = int(m["last"] or first)
        if last > len(found):
            problems.append(f"`{command}` printed {len(found)} table(s); a region asks for table {last}")
            return m[0]
        # The first word of each table's first column names what its rows are: another one means the region
        # names the wrong table (other columns, or sizes in the headings, are what quick modes and new runs change).
        old_heads = [_subject(t) for t in tables(m["body"])]
        new_heads = [_subject(t) for t in found[first - 1:last]]
        if old_heads != new_heads:
            problems.append(f"`{command}` table(s) {first}-{last}: rows of {new_heads} where the page has {old_heads}")
        # blank lines around the body: Markdown must not read the comments as table rows
        return m[0][: m.start("body") - m.start()] + "\n" + header + "\n\n" + "\n\n".join(found[first - 1:last]) + "\n\n<!-- /generated -->"

    return REGION.sub(refill, text), problems


def main(argv_: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="every command in its quick mode, writing under --output, never docs/")
    ap.add_argument("--only", help="run only the commands matching this regular expression")
    ap.add_argument("--output", type=Path, help="quick mode: where the pages, figures and outputs.json go (default: a temp dir)")
    ap.add_argument("--list", action="store_true", help="list the commands and their regions, run nothing")
    ap.add_argument("--jobs", type=int, default=1, help="commands run at once (timings of full runs want 1)")
    args = ap.parse_args(argv_)
    found = regions()
    commands = list(dict.fromkeys(r.command for r in found))
    if args.only:
        commands = [c for c in commands if re.search(args.only, c)]
    if args.list:
        for c in commands:
            print(c)
            for r in found:
                if r.command == c:
                    print(f"    {r.describe()}")
        return 0
    output = args.output or Path(tempfile.mkdtemp(prefix="rankops-docs-"))
    texts = {p: t for p in pages() if REGION.search(t := p.read_text())}  # pages a command writes whole hold no region
    outputs, failures = {}, []

    def run(command: str) -> tuple[subprocess.CompletedProcess, float]:
        t0 = time.perf_counter()
        proc = subprocess.run(argv(command, args.quick, output), cwd=ROOT, capture_output=True, text=True,
                              timeout=QUICK_TIMEOUT if args.quick else None)
        return proc, time.perf_counter() - t0

    with ThreadPoolExecutor(args.jobs) as pool:  # results in order, each as soon as it and those before it are done
        for command, (proc, seconds) in zip(commands, pool.map(run, commands)):
            print(f"+ {command}\n  {seconds:.0f} s, exit {proc.returncode}, {len(tables(proc.stdout))} table(s)", flush=True)
            outputs[command] = {"returncode": proc.returncode, "stdout": proc.stdout, "seconds": seconds}
            if proc.returncode != 0:
                failures.append(f"`{command}` exited {proc.returncode}:\n{proc.stderr[-3000:]}")
                continue
            header = stamp(command, seconds)
            for page, text in texts.items():
                texts[page], problems = fill(text, command, proc.stdout, header)
                failures += problems
                if texts[page] != text:  # written at once: an interrupted full run keeps what it measured
                    target = output / page.relative_to(ROOT) if args.quick else page
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_text(texts[page])
    if args.quick:
        (output / "outputs.json").write_text(json.dumps(outputs))
        print(f"quick run: pages, figures and outputs.json under {output}")
    for f in failures:
        print(f"FAILED: {f}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
