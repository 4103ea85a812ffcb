"""Every backend rankops knows: usable here, or one skip that says why.

Backend-parametrised tests run on the usable backends only (the root
conftest.py), so a backend that is not usable here (CuPy without a GPU, a
framework not installed) shows up here once instead of as a skip in each of
them. ``RANKOPS_REQUIRE_BACKENDS`` turns such a backend into an error.
"""

from __future__ import annotations

import numpy as np
import pytest
from numpy.testing import assert_array_equal

import rankops
from rankops._lib._backends import BACKENDS


@pytest.mark.parametrize("known", BACKENDS, ids=lambda b: b.name)
def test_backend_usable(known):
    reason = known.unavailable_reason()
    if reason is not None:
        pytest.skip(f"{known.name}: {reason}")
    x = np.array([[0.5, -1.0, 2.0]])
    for device in known.devices():
        got = known.to_numpy(rankops.soft_rank(known.asarray(x, device=device), method="permutahedron", strength=1e-3))
        assert_array_equal(got, [[2.0, 1.0, 3.0]])
