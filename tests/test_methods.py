"""Every method is declared once (``rankops.sorting.METHODS``), with all that the operators, docs and suites read from it.

A method declared without one of these fails here: an option set with
its temperature and ``softness`` (API.md: every method accepts it), every
option described in the docstring sections it names, the operators it
serves registered with it (so ``rankops.vjp`` and the conformance
registry, ``conformance/test_registry.py``, see it), and a row in
docs/api.md's method table naming each option.
"""

from __future__ import annotations

import dataclasses
import pathlib
import re

import numpy as np
import pytest

import rankops
from rankops._docstrings import SECTIONS
from rankops._lib._options import Options
from rankops._registry import OPERATORS
from rankops.sorting import METHODS, TOPK_METHODS, Method

API_MD = pathlib.Path(__file__).resolve().parents[1] / "docs" / "api.md"


def _documented(name: str, text: str) -> bool:
    """Whether a numpydoc parameter line of ``text`` describes ``name`` (alone or in a list such as ``x, y :``)."""
    return re.search(rf"^\s*(\w+, )*{name}(, \w+)* :", text, re.MULTILINE) is not None


@pytest.mark.parametrize("name", METHODS)
def test_a_method_has_an_option_set_with_its_temperature_and_softness(name):
    method = METHODS[name]
    assert isinstance(method, Method)
    assert issubclass(method.options, Options) and dataclasses.is_dataclass(method.options)
    fields = {f.name for f in dataclasses.fields(method.options)}
    assert set(method.option_names) <= fields, set(method.option_names) - fields
    assert "softness" in method.option_names
    assert method.options.temperature() in method.option_names


@pytest.mark.parametrize("name", METHODS)
def test_every_option_of_a_method_is_described_where_it_says(name):
    method = METHODS[name]
    assert method.documented_in and set(method.documented_in) <= set(SECTIONS), method.documented_in
    text = "\n".join(SECTIONS[s] for s in ("softness", *method.documented_in))
    missing = [o for o in method.option_names if not _documented(o, text)]
    assert not missing, f"method {name!r}: {missing} not described in {method.documented_in}"
    for fn in (rankops.soft_sort, rankops.soft_rank):  # and the sections reach the operators' docstrings
        assert all(_documented(o, fn.__doc__) for o in method.option_names)


def test_the_operators_take_exactly_the_declared_methods():
    assert OPERATORS[rankops.soft_sort] == OPERATORS[rankops.soft_rank] == tuple(METHODS)
    assert OPERATORS[rankops.soft_topk_mask] == TOPK_METHODS
    assert TOPK_METHODS == tuple(n for n, m in METHODS.items() if "soft_topk_mask" in m.operators)
    # the default of each is the first declared: what soft_sort / soft_rank / soft_topk_mask's signatures say
    assert TOPK_METHODS[0] == tuple(METHODS)[0] == "sinkhorn"


@pytest.mark.parametrize("name", METHODS)
def test_a_declared_method_binds_each_operator_it_serves(name):
    """Dispatch goes through the declaration: each operator it serves computes with it, near the hard values."""
    x = np.array([[0.3, -1.2, 2.5]])
    np.testing.assert_allclose(rankops.soft_rank(x, method=name, softness=0.05), [[2.0, 1.0, 3.0]], atol=0.05)
    np.testing.assert_allclose(rankops.soft_sort(x, method=name, softness=0.05), [[-1.2, 0.3, 2.5]], atol=0.05)
    if "soft_topk_mask" in METHODS[name].operators:
        mask = rankops.soft_topk_mask(x, 1, method=name, softness=0.05)
        assert int(np.argmax(mask[0])) == 2 and abs(float(mask.sum()) - 1) < 1e-6


def test_an_undeclared_method_is_refused_with_the_declared_list():
    with pytest.raises(ValueError, match="'sinkhorn', 'softsort'.*got 'nope'"):
        rankops.soft_rank(np.ones(3), method="nope")
    with pytest.raises(ValueError, match=r"'sinkhorn', 'permutahedron', 'lapsum' for soft_topk_mask, got 'softsort'"):
        rankops.soft_topk_mask(np.ones(3), 1, method="softsort")


def test_docs_method_table_names_every_declared_option():
    """docs/api.md's soft_sort / soft_rank table: a row per declared method naming each of its options."""
    text = API_MD.read_text()
    table = text[text.index("| method | options (defaults) |"):].split("\n\n")[0]
    rows = dict(re.findall(r'^\| `"(\w+)"`[^|]*\| (.*) \|$', table, re.MULTILINE))
    assert set(METHODS) <= set(rows), set(METHODS) - set(rows)
    for name, method in METHODS.items():
        # Sinkhorn's row points to the Sinkhorn options table for its solver options
        names = ("epsilon", "softness") if name == "sinkhorn" else method.option_names
        missing = [o for o in names if f"`{o}" not in rows[name]]
        assert not missing, f"docs/api.md: the {name!r} row does not name {missing}"
