r"""Multivariate CDF and quantile maps by entropic optimal transport to a reference measure on [0, 1]^d.

After Chernozhukov, Galichon, Hallin & Henry (2017, "Monge-Kantorovich depth,
quantiles, ranks and signs"), as OTT-JAX's ``soft_sort.multivariate_cdf_quantile_maps``:
the CDF of a sample ``x`` (n points of R^d, weights ``a``) is the transport
map onto a reference measure ``mu`` on [0, 1]^d (m points ``y``, weights
``b``; uniform by default), and its quantile map is the inverse transport.
With ``C_ij = |x_i - y_j|^2``, the entropic plan ``P_ij = exp((f_i + g_j -
C_ij) / epsilon)`` (:func:`rankops.sinkhorn`) and its potentials, the two
entropic maps (the conditional means of the plan, extended to any point):

    cdf(z)      = sum_j y_j softmax_j((g_j - |z - y_j|^2) / epsilon),
    quantile(u) = sum_i x_i softmax_i((f_i - |x_i - u|^2) / epsilon).

In one dimension, with ``epsilon -> 0``, ``cdf`` tends to the sample's
empirical CDF (as a transport onto the uniform points) and ``quantile`` to
its inverse. The default reference sample is deterministic and symmetric:
the first m/2 points of the R_d low-discrepancy sequence (Roberts 2018,
``frac(1/2 + k alpha)``, ``alpha_j = phi_d^-(j + 1)``, ``phi_d`` the root of
``phi^(d + 1) = phi + 1``) and their reflections ``1 - y``, so that a sample
symmetric about a point c sends c to ``(1/2, ..., 1/2)``.
"""

from __future__ import annotations

from typing import Any, Callable

from ._lib._adapters import get_adapter
from ._lib._compat import Array, namespace, real_float_dtypes, device as _device
from ._lib._options import positive_count
from .sinkhorn import sinkhorn

__all__ = ["multivariate_cdf_quantile_maps", "reference_points"]

DEFAULT_EPSILON_SCALE = 0.05  # epsilon = 0.05 mean(C) by default (OTT-JAX's default for point clouds)


def _golden(d: int) -> float:
    """``phi_d``: the positive root of ``phi^(d + 1) = phi + 1`` (Newton, from 2)."""
    phi = 2.0
    for _ in range(60):
        phi -= (phi ** (d + 1) - phi - 1) / ((d + 1) * phi**d - 1)
    return phi


def reference_points(xp: Any, m: int, d: int, *, dtype: Any, device: Any) -> Any:
    """``m`` (even) points of [0, 1]^d, uniform in the limit: m/2 of the R_d sequence and their reflections ``1 - y``."""
    if m < 2 or m % 2:
        raise ValueError(f"num_targets must be an even number >= 2 (the points and their reflections), got {m}")
    phi = _golden(d)
    alpha = xp.asarray([phi ** -(j + 1) for j in range(d)], dtype=dtype, device=device)
    k = xp.arange(1, m // 2 + 1, dtype=dtype, device=device)[:, None] * alpha + 0.5
    half = k - xp.floor(k)
    return xp.concat([half, 1.0 - half], axis=0)


def _squared_distances(xp: Any, p: Any, q: Any) -> Any:
    """``|p_i - q_j|^2`` for points ``p`` (..., k, d) and ``q`` (m, d): shape (..., k, m)."""
    diff = p[..., :, None, :] - q
    return xp.sum(diff * diff, axis=-1)


def _entropic_map(xp: Any, points: Any, potential: Any, epsilon: Any, d: int) -> Callable[[Any], Any]:
    """``z -> sum_j points_j softmax_j((potential_j - |z - points_j|^2) / epsilon)`` for z of shape (..., d)."""

    def apply(z: Any) -> Any:
        namespace(z, points, names=("z", "the sample"))  # one namespace: raises TypeError otherwise
        if z.ndim < 1 or z.shape[-1] != d:
            raise ValueError(f"the map takes points of shape (..., {d}), got {tuple(z.shape)}")
        single = z.ndim == 1
        zz = xp.astype(z, points.dtype)
        if single:
            zz = zz[None, :]
        w = get_adapter(xp).softmax(xp, (potential - _squared_distances(xp, zz, points)) / epsilon)
        out = w @ points
        return out[0, :] if single else out

    return apply


def multivariate_cdf_quantile_maps(
    x: Array,
    /,
    *,
    targets: Array | None = None,
    num_targets: int | None = None,
    weights: Array | None = None,
    target_weights: Array | None = None,
    epsilon: Any = None,
    max_iter: int = 2000,
    tol: float = 1e-3,
) -> tuple[Callable[[Array], Array], Callable[[Array], Array]]:
    """Entropic multivariate CDF and quantile maps of the sample ``x`` (Chernozhukov et al. 2017), as two callables.

    Parameters
    ----------
    x : array, shape (n, d)
        The sample: n points of R^d (a 1-D array is n points of R).
    targets : array, shape (m, d), optional
        The reference sample on [0, 1]^d (for instance the caller's own
        uniform draws); default: ``num_targets`` deterministic uniform points
        (module docstring), symmetric about ``(1/2, ..., 1/2)``.
    num_targets : int, optional
        m for the default reference sample (even; default n rounded up to even).
    weights, target_weights : array, optional
        Weights of the sample's and the reference's points (uniform by default).
    epsilon : float or 0-d array, optional
        Entropic regularisation in the units of the squared distances;
        default 0.05 times their mean.
    max_iter, tol : Sinkhorn's budget (:func:`rankops.sinkhorn`).

    Returns
    -------
    (cdf_map, quantile_map)
        ``cdf_map(z)`` for points z of shape (..., d) of x's namespace gives
        their ranks in [0, 1]^d; ``quantile_map(u)`` for u of shape (..., d)
        gives points of R^d. Both differentiate in their argument and in x
        under the backend's autodiff.

    Examples
    --------
    >>> import numpy as np, rankops
    >>> rng = np.random.default_rng(0)
    >>> z = rng.normal(size=(100, 2))
    >>> x = np.concatenate([z, -z]) + 3.0            # symmetric about (3, 3)
    >>> cdf, quantile = rankops.multivariate_cdf_quantile_maps(x)
    >>> np.round(cdf(np.array([3.0, 3.0])), 2)
    array([0.5, 0.5])
    >>> np.round(quantile(np.array([0.5, 0.5])), 2)
    array([3., 3.])
    """
    xp = namespace(x, names=("x",))
    if x.ndim == 1:
        x = x[:, None]
    if x.ndim != 2 or x.shape[0] == 0 or x.shape[1] == 0:
        raise ValueError(f"x must be a non-empty sample of shape (n, d), got {tuple(x.shape)}")
    dtype = real_float_dtypes(xp, x, "x")[0]
    x = xp.astype(x, dtype)
    n, d = x.shape
    if targets is None:
        m = n + n % 2 if num_targets is None else positive_count(num_targets, "num_targets")
        y = reference_points(xp, m, d, dtype=dtype, device=_device(x))
    else:
        if num_targets is not None:
            raise ValueError("pass targets or num_targets, not both")
        namespace(x, targets, names=("x", "targets"))
        if targets.ndim != 2 or targets.shape[0] == 0 or targets.shape[1] != d:
            raise ValueError(f"targets must have shape (m, {d}), got {tuple(targets.shape)}")
        y = xp.astype(targets, dtype)
    cost = _squared_distances(xp, x, y)
    if epsilon is None:
        if get_adapter(xp).lazy:
            raise TypeError("epsilon must be given as a number for Dask inputs (its default reads the distances)")
        # an array on every backend (NumPy's mean is a scalar, which would be checked as a number): a sample holding a
        # NaN, or of one point, then gives NaN maps rather than an error about an epsilon the caller did not pass
        epsilon = xp.asarray(DEFAULT_EPSILON_SCALE * xp.mean(cost), dtype=dtype, device=_device(x))
    res = sinkhorn(cost, weights, target_weights, epsilon=epsilon, max_iter=max_iter, tol=tol, implicit=True)
    return _entropic_map(xp, y, res.g, epsilon, d), _entropic_map(xp, x, res.f, epsilon, d)
