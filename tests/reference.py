"""Independent float64 NumPy references: the papers' formulas, written literally.

Nothing here calls rankops. NeuralSort is the original O(n^3) matrix product
of Grover et al. (SoftSort paper, appendix Fig. 5); ascending orders are
obtained by reversing rows rather than by the sign trick the library uses.
"""

from __future__ import annotations

import numpy as np
from scipy.special import softmax


def softsort(s, tau, power=1.0, descending=True):
    """SoftSort, Prillo & Eisenschlos 2020, Eq. 4."""
    s = np.asarray(s, dtype=np.float64)
    s_sorted = np.sort(s, axis=-1)
    if descending:
        s_sorted = s_sorted[..., ::-1]
    logits = -np.abs(s_sorted[..., :, None] - s[..., None, :]) ** power / tau
    return softmax(logits, axis=-1)


def neuralsort(s, tau, descending=True):
    """NeuralSort, Grover et al. 2019 (Prillo & Eisenschlos Eq. 3), O(n^3) as published."""
    s = np.asarray(s, dtype=np.float64)
    n = s.shape[-1]
    one = np.ones((n, 1))
    a_s = np.abs(s[..., :, None] - s[..., None, :])
    b = a_s @ (one @ one.T)  # the O(n^3) association of the original code
    scaling = n + 1 - 2 * (np.arange(n) + 1.0)
    c = s[..., :, None] * scaling[None, :]
    p_max = np.swapaxes(c - b, -1, -2)
    p = softmax(p_max / tau, axis=-1)
    return p if descending else p[..., ::-1, :]


def sort_from(p, x):
    return np.einsum("...ij,...j->...i", p, np.asarray(x, dtype=np.float64))


def rank_from(p):
    n = p.shape[-1]
    return np.einsum("...ij,i->...j", p, np.arange(1, n + 1, dtype=np.float64))


def permutation_matrix(s, descending=True):
    """Exact P: row i is one-hot at the item in position i."""
    s = np.asarray(s)
    order = np.argsort(-s if descending else s, axis=-1, kind="stable")
    n = s.shape[-1]
    return (order[..., :, None] == np.arange(n)).astype(np.float64)


def central_difference(f, x, direction, h=1e-6):
    """Directional derivative of scalar ``f`` at ``x`` along ``direction``."""
    return (f(x + h * direction) - f(x - h * direction)) / (2 * h)
