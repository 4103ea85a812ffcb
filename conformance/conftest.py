"""Conformance fixtures; backend selection lives in the repository's root conftest."""

from __future__ import annotations

import pytest

from .operators import OPERATORS


@pytest.fixture(params=OPERATORS, ids=lambda op: op.name)
def op(request):
    """Every registered operator (tests may narrow it with their own parametrize)."""
    return request.param
