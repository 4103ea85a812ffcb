"""The public API's annotations say which arguments and results are arrays: ``Array``, the one alias for any
array-API array (``rankops._lib._compat.Array``), never a bare ``Any``."""

from __future__ import annotations

import inspect

import pytest

import rankops
import rankops.losses

# parameters that take an array wherever they appear in a public signature
ARRAY_PARAMETERS = {"x", "y", "pred", "target", "scores", "labels", "relevance", "mask", "weights", "h", "targets",
                    "target_weights"}
PUBLIC = [(mod, name) for mod in (rankops, rankops.losses) for name in mod.__all__
          if inspect.isfunction(inspect.unwrap(getattr(mod, name)))]


@pytest.mark.parametrize("mod, name", PUBLIC, ids=[f"{m.__name__}.{n}" for m, n in PUBLIC])
def test_array_arguments_and_results_are_annotated_array(mod, name):
    fn = inspect.unwrap(getattr(mod, name))
    annotations = fn.__annotations__  # strings: every public module uses postponed evaluation
    loose = {p: a for p, a in annotations.items() if p in ARRAY_PARAMETERS and "Array" not in a}
    assert not loose, f"{mod.__name__}.{name}: {loose}"
    ret = annotations.get("return", "")
    # every public function returns arrays, a lazy call of them, or a result object holding them
    assert "Array" in ret or "SinkhornResult" in ret, f"{mod.__name__}.{name} returns {ret!r}"
    assert "Any" not in ret.replace("Callable[..., Any]", ""), f"{mod.__name__}.{name} returns {ret!r}"
