"""Every public operator's Examples section runs and prints what it shows (numpydoc, doctested here)."""

from __future__ import annotations

import doctest

import numpy as np
import pytest

import rankops
from rankops._registry import OPERATORS

PUBLIC = [*OPERATORS, rankops.vjp, rankops.kendall_kernel, rankops.mallows_kernel, rankops.suquan_targets,
          *(getattr(rankops.losses, name) for name in rankops.losses.__all__),
          *(getattr(rankops.metrics, name) for name in rankops.metrics.__all__)]


@pytest.mark.parametrize("fun", PUBLIC, ids=lambda f: f.__name__)
def test_examples_run(fun):
    doc = fun.__doc__ or ""
    assert "Examples\n    --------" in doc, f"{fun.__name__} has no numpydoc Examples section"
    test = doctest.DocTestParser().get_doctest(doc, {"np": np, "rankops": rankops}, fun.__name__, None, 0)
    assert test.examples, f"{fun.__name__}: Examples section has no >>> lines"
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
    runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{fun.__name__}: {result.failed} of {result.attempted} examples failed"


@pytest.mark.parametrize("fun", PUBLIC, ids=lambda f: f.__name__)
def test_docstring_sections(fun):
    """numpydoc sections a reader relies on; template markers must all have been filled."""
    doc = fun.__doc__ or ""
    for section in ("Parameters", "Returns"):
        assert f"{section}\n    ----" in doc, f"{fun.__name__} lacks {section}"
    assert "%(" not in doc, f"{fun.__name__} has an unfilled docstring template"


@pytest.mark.parametrize("fun", [rankops.soft_sort, rankops.soft_rank])
def test_default_method_options_documented(fun):
    """The default method is Sinkhorn: every option it accepts is described."""
    doc = fun.__doc__
    for name in ("epsilon", "max_iter", "tol", "implicit", "squash", "power", "num_targets", "return_info",
                 "tau", "hard", "block"):
        assert f"{name} :" in doc or f"{name}," in doc, f"{fun.__name__} does not document {name!r}"
