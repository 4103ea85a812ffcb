"""One registry: every (operator, method) of ``rankops._registry.OPERATORS`` is covered here.

``rankops.vjp`` accepts exactly the operators of that registry; this module
fails when one of them, or one of its methods, has no conformance variant
(``operators.CASES``) or no property spec (``operators.SPECS``), so a
new operator or method cannot land untested.
"""

from __future__ import annotations

import pytest

import rankops
from rankops._registry import OPERATORS as REGISTRY

from .operators import CASES, SPECS

PAIRS = [(fn, method) for fn, methods in REGISTRY.items() for method in methods]


def _id(pair):
    return f"{pair[0].__name__}[{pair[1]}]"


@pytest.mark.parametrize("pair", PAIRS, ids=_id)
def test_conformance_covers(pair):
    fn, method = pair
    names = [op.name for op in CASES if op.public is fn and op.method == method]
    assert names, f"no conformance Case exercises {_id(pair)}"


@pytest.mark.parametrize("pair", PAIRS, ids=_id)
def test_properties_cover(pair):
    fn, method = pair
    names = [s.name for s in SPECS if s.public is fn and s.method == method]
    assert len(names) == 1, f"{_id(pair)} needs exactly one property Spec, has {names}"


def test_entries_name_registered_pairs():
    """No entry points outside the registry (a stale or misspelt method would test nothing new)."""
    for entry in [*CASES, *SPECS]:
        assert (entry.public, entry.method) in PAIRS, entry.name


def test_registry_is_the_public_api():
    """Every public callable that takes arrays is registered, and rankops.vjp accepts exactly those."""
    public = {getattr(rankops, name) for name in rankops.__all__ if name != "__version__"}
    assert set(REGISTRY) <= public
    helpers = {rankops.vjp, rankops.ConvergenceWarning, rankops.PerformanceWarning, rankops.SinkhornInfo, rankops.SinkhornResult}
    # functions of arrays outside rankops.vjp: the permutation kernels are piecewise constant (no
    # gradient to give), suquan_targets is plain array operations (the caller's autodiff); tests/test_kernels.py.
    # multivariate_cdf_quantile_maps returns callables, not an array (tests/test_multivariate.py, every backend)
    helpers |= {rankops.kendall_kernel, rankops.mallows_kernel, rankops.suquan_targets, rankops.multivariate_cdf_quantile_maps}
    assert public - set(REGISTRY) <= helpers, public - set(REGISTRY) - helpers
