"""Docstring sections of the learning-to-rank losses and metrics (filled by ``_lib._docs.fill_doc``)."""

from __future__ import annotations

LIST_ARGS = """
pred : array
    Scores of the items of each list along ``axis``; every other axis is a
    batch axis. Differentiable.
target : array
    Same shape, namespace and device: graded relevance labels (data, no
    gradient); any real dtype.
mask : bool array, optional
    True for the valid entries (broadcastable to ``pred``): each list's
    value is that of its valid entries alone, the others get no gradient;
    a list with no valid entry is NaN (docs/api.md, "Ragged rows"). allRank
    marks padding with the label -1: ``mask = target != -1``.
axis : int, default -1
    The list axis.
"""

EPS = """
eps : float, default 1e-10
    Added to the predicted probabilities before the log, as in allRank.
"""


def list_returns(values: str, module: str = "rankops.losses") -> str:
    """The Returns section of a per-list value and the first line of its Examples."""
    return f"""
Returns
-------
array
    One value per list: ``pred``'s shape without ``axis``; {values}.

Examples
--------
>>> import numpy as np, {module}
"""
