"""Two runs of the suite side by side: rankops' times in a new page against a base page.

    python -m benchmarks --groups softsort sinkhorn --output /tmp/base   # on the base commit
    python -m benchmarks --groups softsort sinkhorn --output /tmp/new    # on the change
    python -m benchmarks.compare /tmp/base/benchmarks.md /tmp/new/benchmarks.md

Reads the first (time) table of every section of both pages and prints, for
each (section, n, contender) found in both, the forward and forward+backward
times and their ratio new / base (below 1: the change is faster), then the
geometric mean of the ratios over the rankops rows. Run both pages in one
session on an idle machine: each contender's own reference is re-measured
in each run, but this table compares rankops with itself across runs.
"""

from __future__ import annotations

import argparse
import math
import re

# | n | contender | fwd (ms) | ratio | fwd+bwd (ms) | ratio | ...; a ratio is "n/a" without a reference
_ROW = re.compile(r"\| (\d+) \| ([\w-]+) \| ([\d.]+) \| (?:[\d.]+x|n/a) \| ([\d.]+) \|")


def read_times(path: str) -> dict[tuple[str, int, str], tuple[float, float]]:
    """``(section, n, contender) -> (fwd ms, fwd+bwd ms)`` from each section's first table."""
    times: dict[tuple[str, int, str], tuple[float, float]] = {}
    section = None
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("## "):
                section = line[3:].strip()
            row = _ROW.match(line)
            if row and section is not None:
                times.setdefault((section, int(row[1]), row[2]), (float(row[3]), float(row[4])))
    return times


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base", help="benchmarks.md of the base run")
    parser.add_argument("new", help="benchmarks.md of the new run")
    args = parser.parse_args(argv)
    base, new = read_times(args.base), read_times(args.new)
    common = sorted(set(base) & set(new))
    if not common:
        raise SystemExit("no (section, n, contender) row appears in both pages")
    print("| section | n | contender | fwd base (ms) | fwd new (ms) | new/base | fwd+bwd base (ms) | fwd+bwd new (ms) | new/base |")
    print("|---|---|---|---|---|---|---|---|---|")
    logs = []
    for key in common:
        (bf, bb), (nf, nb) = base[key], new[key]
        if key[2].startswith("rankops"):
            logs += [math.log(nf / bf), math.log(nb / bb)]
        print(f"| {key[0]} | {key[1]} | {key[2]} | {bf:g} | {nf:g} | {nf / bf:.2f} | {bb:g} | {nb:g} | {nb / bb:.2f} |")
    if logs:
        print(f"\ngeometric mean of new/base over {len(logs)} rankops times: {math.exp(sum(logs) / len(logs)):.3f}")


if __name__ == "__main__":
    main()
