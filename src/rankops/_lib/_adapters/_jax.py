"""JAX adapter: fused kernels, ``lax`` loops, ``custom_vjp``, explicit PRNG keys, a cached ``jit``."""

from __future__ import annotations

import functools
import numbers
from typing import Any

import jax
import jax.numpy as jnp
import jax.scipy.special

from .._compat import index_dtype
from ._generic import PortableAdapter, precise_segment_sum
from ._jax_autodiff import iterate, transposed, varying, with_forward_rule
from ._jax_scans import cumlogsumexp, linear_scan
from ._jax_segments import segment_slots, slot_max, slot_sums

__all__ = ["Jax", "ADAPTER"]


@functools.lru_cache(maxsize=512)
def _compiled(core: Any, opts: Any, static: tuple[tuple[str, Any], ...], outputs: tuple[str, ...]) -> Any:
    def run(x: Any, arrays: dict[str, Any], opt_arrays: dict[str, Any]) -> Any:
        return core.select(core(jnp, x, opts.merge(opt_arrays), **arrays, **dict(static)), outputs)

    return jax.jit(run)


@functools.lru_cache(maxsize=64)
def _jitted(fn: Any) -> Any:
    return jax.jit(fn, static_argnums=(0,))


class Jax(PortableAdapter):
    name = "jax"
    autodiff = True
    flushes_subnormals = True
    compiles_loops = True
    sums_products_by_dot = True

    # With XLA's optimisations off (jax_disable_most_optimizations, as this project's tests run),
    # XLA computed z once for the row's maximum and again, rounded differently (a fused
    # multiply-add in one place only), where the maximum is subtracted: at logits of 1e32
    # (NeuralSort of a row at 1e29, tau 1e-3) the largest z - max came out as +2e25 (exp: inf,
    # the row inf / inf) or as -1e26 (every exp 0, the row 0 / 0). There, z - max is clipped at
    # 0, and a row whose every term then underflows is the saturated one-hot (softmax) or the
    # maximum itself (logsumexp), as in exact arithmetic. Under the default compilation
    # jax.nn's forms are right on those rows and several times faster on CPU than the guarded
    # ones at (20, 1000, 1000), so they are kept there; the choice is made while tracing, from
    # JAX's configuration.

    @staticmethod
    def _guarded() -> bool:
        return bool(jax.config.read("jax_disable_most_optimizations"))

    def _shifted(self, z: Any, axis: int) -> tuple[Any, Any, Any]:
        """``(m, exp(z - m) clipped at 1, whether the row's maximum is finite)``; m is 0 where it is not."""
        top = jax.lax.stop_gradient(jnp.max(z, axis=axis, keepdims=True))
        finite = jnp.isfinite(top)
        m = jnp.where(finite, top, jnp.zeros_like(top))  # all -inf, or +inf: no shift (log 0 = -inf; inf)
        d = z - m
        # The clip is a constant shift of the entries above the maximum, so their gradient still flows:
        # XLA rounds z differently here and in the maximum for ordinary rows too (d = +1e-16 at the
        # maximum), and a clip through `where` then zeroed that entry's gradient (a NeuralSort
        # gradient off by 1.1 with XLA's legacy CPU emitters at -O0, tests/test_regressions.py).
        over = jnp.where(finite & (d > 0), d, jnp.zeros_like(d))
        return m, jnp.exp(d - jax.lax.stop_gradient(over)), finite

    def softmax(self, xp: Any, z: Any, axis: int = -1) -> Any:
        if not self._guarded():
            return jax.nn.softmax(z, axis=axis)
        _, e, finite = self._shifted(z, axis)
        total = jnp.sum(e, axis=axis, keepdims=True)
        lost = finite & (total == 0)
        first = jnp.argmax(z, axis=axis, keepdims=True)
        hard = jnp.astype(jax.lax.broadcasted_iota(jnp.int32, z.shape, axis % z.ndim) == first, z.dtype)
        return jnp.where(lost, hard, e / jnp.where(lost, jnp.ones_like(total), total))

    def ndtr(self, xp: Any, u: Any) -> Any:
        return jax.scipy.special.ndtr(u)

    def sigmoid(self, xp: Any, z: Any) -> Any:
        return jax.nn.sigmoid(z)

    def log_sigmoid(self, xp: Any, z: Any) -> Any:
        return jax.nn.log_sigmoid(z)

    def sum(self, xp: Any, a: Any, axis: int, *, keepdims: bool = False) -> Any:
        """In the input's dtype: XLA reduces in trees."""
        return jnp.sum(a, axis=axis, keepdims=keepdims)

    def cumulative_sum(self, xp: Any, z: Any, *, reverse: bool = False) -> Any:
        """In the input's dtype: XLA's prefix sum combines pairwise (a float32 row of 10^4 within 2 units in its last
        place), and float64 is there only under x64."""
        return jax.lax.cumsum(z, axis=z.ndim - 1, reverse=reverse)

    def logsumexp(self, xp: Any, z: Any, axis: int = -1) -> Any:
        if not self._guarded():
            return jax.nn.logsumexp(z, axis=axis)
        m, e, finite = self._shifted(z, axis)
        total = jnp.sum(e, axis=axis, keepdims=True)
        total = jnp.where(finite & (total == 0), jnp.ones_like(total), total)
        return jnp.squeeze(m + jnp.log(total), axis=axis)

    def stop_gradient(self, xp: Any, x: Any) -> Any:
        return jax.lax.stop_gradient(x)

    def cube_root(self, xp: Any, a: Any) -> Any:
        """``exp(log(a) / 3)`` and one Newton step on ``r^3 = a``: within about one unit in the last place (0, inf and
        NaN kept), where XLA's CPU power, which handles negative bases and every special case, costs three times it."""
        finite = (a > 0) & (a < jnp.inf)
        a1 = jnp.where(finite, a, 1.0)
        r = jnp.exp(jnp.log(a1) / 3.0)
        return jnp.where(finite, r - (r - a1 / (r * r)) / 3.0, a)

    def linear_scan(self, xp: Any, a: Any, b: Any, *, reverse: bool = False, overwrite_b: bool = False) -> Any:
        return linear_scan(a, b, reverse)  # in blocks: a program that does not grow with n (:mod:`._jax_scans`)

    def cumlogsumexp(self, xp: Any, z: Any, *, reverse: bool = False) -> Any:
        return cumlogsumexp(z, reverse)

    def searchsorted(self, xp: Any, sorted_seq: Any, values: Any, *, side: str = "left") -> Any:
        batch = values.shape[:-1]
        flat_seq = jnp.reshape(sorted_seq, (-1, sorted_seq.shape[-1]))
        flat_val = jnp.reshape(values, (-1, values.shape[-1]))
        idx = jax.vmap(functools.partial(jnp.searchsorted, side=side))(flat_seq, flat_val)
        return jnp.reshape(idx, batch + (values.shape[-1],))

    def take(self, xp: Any, a: Any, index: Any) -> Any:
        # indices are in range by construction: no clamping or wrapping in the gather
        return jnp.take_along_axis(a, index, axis=-1, mode="promise_in_bounds")

    def select(self, xp: Any, a: Any, index: Any, axis: int) -> Any:
        # in range by construction: clamping the (short) index costs less than the default fill's masking
        return jnp.take(a, index, axis=axis, mode="clip")

    def sort(self, xp: Any, x: Any) -> Any:
        # one packed sort and a gather, as :meth:`sort_order`: a sort of floats alone compares through a called
        # comparator too
        return self.sort_order(xp, x)[0] if _packs(x) else jnp.sort(x, axis=-1)

    def sort_order(self, xp: Any, x: Any, *, descending: bool = False) -> tuple[Any, Any]:
        """The stable order of each row and the row in it, as ``lax.sort`` orders floats (``-0`` and ``0`` equal,
        NaN last). Descending stable order is the ascending one of ``-x``.

        On a CPU, rows of floats of at most 32 bits sort as one array of 64-bit
        integers, each entry's order-preserving key above its position
        (:func:`_packed_order`): XLA's CPU sort takes a fast path for one
        operand of integers only, and a sort of (values, positions) compares
        through a called comparator (``benchmarks.jax_sort``). Elsewhere one
        ``lax.sort`` of (values, positions): ``argsort`` sorts the same pair and
        drops the values, which a gather then fetches back.
        """
        if _packs(x):
            order = _packed_order(-x if descending else x, index_dtype(xp, None))
            return jnp.take_along_axis(x, order, axis=-1), order
        iota = jax.lax.broadcasted_iota(index_dtype(xp, None), x.shape, x.ndim - 1)
        s, order = jax.lax.sort((-x if descending else x, iota), dimension=x.ndim - 1, is_stable=True, num_keys=1)
        return (-s if descending else s), order

    def merge_descending(self, xp: Any, a: Any, b: Any) -> tuple[Any, Any, Any]:
        # XLA's CPU sort of 2n costs more than two row-wise binary searches and a scatter: an entry's place is its
        # index plus the other row's entries that come before it (b_j > a_i before a_i; a_i >= b_j before b_j)
        n = a.shape[-1]
        index = jnp.arange(n, dtype=index_dtype(xp, None))
        top = index + self.searchsorted(xp, -b, -a, side="left").astype(index.dtype)
        bottom = index + self.searchsorted(xp, -a, -b, side="right").astype(index.dtype)
        order = self.invert_permutation(xp, jnp.concatenate([top, bottom], axis=-1))
        return self.take(xp, jnp.concatenate([a, b], axis=-1), order), top, bottom

    def invert_permutation(self, xp: Any, order: Any) -> Any:
        n = order.shape[-1]
        flat = jnp.reshape(order, (-1, n))
        inv = jax.vmap(lambda o: jnp.zeros_like(o).at[o].set(jnp.arange(n, dtype=o.dtype), unique_indices=True))(flat)
        return jnp.reshape(inv, order.shape)

    def compiled(self, fn: Any) -> Any:
        return _jitted(fn)

    def segment_sum(self, xp: Any, starts: Any, g: Any, *, precise: bool = False) -> Any:
        if precise:
            return precise_segment_sum(self.segment_sum, xp, starts, g)
        # one scatter-add into a slot per segment (4-5x XLA's two scans at n = 10^4), read back by gather
        ids, read = segment_slots(starts, g)
        return read(slot_sums(ids, g), exact=True)

    def segment_slots(self, xp: Any, starts: Any) -> tuple[Any, Any]:
        # the scatter-add's slots as they are: segment b of a row at its slot b (_jax_segments), read by one gather
        return (lambda g: jnp.reshape(slot_sums(segment_slots(starts, g)[0], g), g.shape),
                lambda a, exact=False: segment_slots(starts, a)[1](jnp.reshape(a, (-1,)), exact))

    def segment_totals(self, xp: Any, starts: Any, group: Any, heads: Any, g: Any) -> Any:
        # one scatter-add into a slot per segment, from the entries' segments as given (no running count)
        return jnp.zeros(g.shape[:-1] + (heads.shape[0],), dtype=g.dtype).at[..., group].add(g, mode="promise_in_bounds")

    def segment_max(self, xp: Any, starts: Any, g: Any) -> Any:
        ids, read = segment_slots(starts, g)
        return read(slot_max(ids, g), exact=True)

    def segment_logsumexp(self, xp: Any, starts: Any, g: Any) -> Any:
        ids, read = segment_slots(starts, g)
        top = slot_max(ids, g)
        top = jnp.where(top > -jnp.inf, top, 0.0)  # empty or -inf only: terms exp(-inf) = 0
        total = slot_sums(ids, jnp.exp(g - read(top, exact=True)))
        return read(jnp.log(total) + top)

    def segment_first(self, xp: Any, starts: Any, g: Any) -> Any:
        # each segment's sum of its first entry alone (exact: the rest add zeros), not a gather of it: XLA fuses a
        # gather with the expression that computes ``g`` and evaluates that again at each entry it writes, where its
        # vectorized loop and scalar tail may round it 1 ulp apart (contracted multiply-adds), and a segment's
        # entries would not all hold one value; a scatter's result is stored before it is read
        return self.segment_sum(xp, starts, jnp.where(starts, g, jnp.zeros_like(g)))

    def is_concrete(self, x: Any) -> bool:
        """False for tracers (``jit``, ``grad``, ``vmap``): their values do not exist yet."""
        return not isinstance(x, jax.core.Tracer)

    def cache_block(self, xp: Any, x: Any, core: int, width: int = 1, few_passes: bool = False) -> int | None:
        """None: XLA compiles a loop for the whole batch, and its fused iterations make fewer passes over memory."""
        return None

    def gumbel(self, xp: Any, key: Any, shape: tuple[int, ...], dtype: Any, device: Any) -> Any:
        """Gumbel(0, 1) noise from ``key``: a ``jax.random`` key or an int seed.

        JAX has no global generator, so a key is required (as in ``jax.random``).
        """
        if key is None:
            raise ValueError("key is required for JAX arrays: pass jax.random.key(seed) or an int seed")
        if isinstance(key, numbers.Integral) and not isinstance(key, bool):
            key = jax.random.key(int(key))
        elif not isinstance(key, jax.Array):
            raise TypeError(f"key must be a jax.random key or an int seed for JAX arrays, got {type(key).__name__}")
        return jax.random.gumbel(key, shape, dtype=dtype)

    def check_devices(self, arrays: tuple[Any, ...], names: tuple[str, ...]) -> None:
        """Nothing to compare: tracers have no concrete device under ``jit``, and JAX places arrays itself."""

    def iterate(
        self, xp: Any, step: Any, operands: Any, state: Any, *, error: Any, freeze: Any, max_iter: int, tol: float, check_every: int,
        whole_rounds: bool = False,
    ) -> Any:
        return iterate(xp, step, operands, state, error=error, freeze=freeze, max_iter=max_iter, tol=tol, check_every=check_every,
                       whole_rounds=whole_rounds)

    def repeat(self, xp: Any, body: Any, state: Any, count: Any, most: int, like: tuple[Any, ...] = (),
               differentiated: bool = True) -> Any:
        """One ``lax.fori_loop`` of ``most`` steps, those from ``count`` on masked: ``count`` may be traced.

        ``differentiated=False`` (a loop in a custom rule's forward, which no autodiff traces): a ``lax.while_loop``
        of ``count`` steps, which stops there. Partial evaluation (``jax.linearize``, ``jax.grad``) re-traces a
        fixed-count loop's (a ``scan``'s) body to hoist what does not change between steps, and so splits every loop
        nested in that body into one that stores its gathers' indices for all its steps and one that reads them
        back; it leaves a ``while_loop`` whole.
        """

        def one(i: Any, s: Any) -> Any:
            return tuple(jnp.where(i < count, new, old) for new, old in zip(body(s), s))

        if most <= 0:
            return tuple(state)
        start = varying(tuple(state), count, *like)
        if differentiated:
            return jax.lax.fori_loop(0, most, one, start)
        i0 = varying(jnp.zeros((), jnp.int32), *start)
        return jax.lax.while_loop(lambda c: (c[0] < most) & (c[0] < count), lambda c: (c[0] + 1, tuple(body(c[1]))),
                                  (i0, start))[1]

    def settle(self, xp: Any, body: Any, state: Any, moved: Any, most: int, every: int, like: tuple[Any, ...] = ()) -> Any:
        """One ``lax.while_loop`` of rounds of ``every`` steps, until a round moves nothing: under ``jit`` too (under
        ``vmap`` until every problem settles)."""

        def round_(carry: Any) -> Any:
            i, s, _ = carry
            new = self.repeat(xp, body, s, every, every, like=like)
            return i + every, new, moved(s, new)

        # the flag from the data, so that it varies over a shard_map's axes as the round's does
        going = jnp.any(state[0] == state[0]) | True
        start = varying((jnp.zeros((), jnp.int32), tuple(state), going), *like)
        return jax.lax.while_loop(lambda c: (c[0] < most) & c[2], round_, start)[1]

    def shortcut(self, xp: Any, holds: Any, fast: Any, general: Any) -> Any:
        """``lax.cond``: under ``jit`` one route runs (under ``vmap`` both). Under ``jax.shard_map`` each route's
        outputs vary as the flag (read from the data) does: a route may return constants (the one-block guess's
        "no row fitted"), where the other's vary with the shard."""
        return jax.lax.cond(holds, lambda: varying(fast(), holds), lambda: varying(general(), holds))

    def unless(self, xp: Any, skip: Any, fn: Any, operand: Any, in_loop: bool = False) -> Any:
        """``lax.cond``: under ``jit`` the skipped branch costs nothing (under ``vmap`` both run)."""
        return jax.lax.cond(skip, lambda o: o, fn, operand)

    def scan_blocks(self, xp: Any, body: Any, carry: Any, xs: tuple[Any, ...], block: int, *, looped: bool = False) -> Any:
        """:func:`rankops._lib._loops.scan_blocks` as one ``lax.scan`` over the whole blocks, then the remainder.

        The loop body is traced once (twice with a remainder), not once per block.
        """
        n = xs[0].shape[-1]
        whole, rest = divmod(n, block)
        parts = []
        if whole > 1:

            def split(x: Any) -> Any:
                x = jnp.reshape(x[..., : whole * block], x.shape[:-1] + (whole, block))
                return jnp.moveaxis(x, -2, 0)

            carry, ys = jax.lax.scan(body, varying(carry, xs), tuple(split(x) for x in xs))
            parts.append(tuple(jnp.reshape(jnp.moveaxis(y, 0, -2), y.shape[1:-1] + (whole * block,)) for y in ys))
        elif whole == 1:
            carry, ys = body(carry, tuple(x[..., :block] for x in xs))
            parts.append(ys)
        if rest:
            carry, ys = body(carry, tuple(x[..., whole * block :] for x in xs))
            parts.append(ys)
        return carry, tuple(p[0] if len(p) == 1 else jnp.concatenate(p, axis=-1) for p in zip(*parts))

    def linear_solve(self, xp: Any, matvec: Any, solve: Any, rhs: Any) -> Any:
        return jax.lax.custom_linear_solve(matvec, rhs, lambda _, b: solve(b), symmetric=True)

    def custom_vjp(
        self, xp: Any, fwd: Any, bwd: Any, arrays: tuple[Any, ...], n_diff: int, residuals: Any = None, linear: Any = True
    ) -> tuple[Any, ...]:
        """``fwd(xp, *arrays) -> (outputs, residuals)`` with the gradient ``bwd(xp, residuals, cotangents)``.

        ``linear=True`` (``bwd`` transposable in its cotangents): a
        ``jax.custom_jvp`` whose tangent map is the transpose of ``bwd``
        (``jax.linear_transpose``), so forward mode (``jacfwd``) works, and
        reverse mode transposes it back into ``bwd``. ``linear`` a function (a
        transposable version of ``bwd``): its transpose is the forward mode,
        ``bwd`` the reverse mode (:func:`._jax_autodiff.with_forward_rule`). Otherwise a
        ``jax.custom_vjp`` (reverse mode only). All compose with ``jit``,
        ``vmap`` and ``grad``; only the first ``n_diff`` outputs carry
        gradients.
        """
        if linear is True and n_diff == 1:
            return transposed(xp, fwd, bwd, arrays)
        if callable(linear):
            return with_forward_rule(xp, fwd, bwd, linear, arrays, n_diff)

        @jax.custom_vjp
        def fn(*args: Any) -> Any:
            return tuple(fwd(xp, *args)[0])

        def fn_fwd(*args: Any) -> Any:
            outs, res = fwd(xp, *args)
            return tuple(outs), tuple(res)

        def fn_bwd(res: Any, cts: Any) -> Any:
            return tuple(bwd(xp, res, tuple(cts[:n_diff])))

        fn.defvjp(fn_fwd, fn_bwd)
        return fn(*arrays)


    def autodiff_vjp(self, f: Any, leaves: list[Any], outputs: Any) -> tuple[Any, tuple[Any, ...], Any]:
        """``rankops.vjp`` on JAX: ``(value, outs, pull)`` from ``jax.vjp``; a None cotangent is a zero one."""

        def with_outputs(*arrays: Any) -> Any:
            value = f(*arrays)
            return tuple(outputs(value)), value

        outs, vjp_fn, value = jax.vjp(with_outputs, *leaves, has_aux=True)

        def pull(cts: tuple[Any, ...]) -> tuple[Any, ...]:
            return tuple(vjp_fn(tuple(jnp.zeros_like(o) if c is None else jnp.asarray(c, dtype=o.dtype) for o, c in zip(outs, cts))))

        return value, outs, pull

    def run(self, call: Any) -> tuple[Any, ...]:
        """The core through a cached ``jax.jit``.

        Eager JAX would otherwise re-trace and re-compile the solver's ``lax``
        loops at every call. Python-valued parameters and options are static
        (part of the cache key); arrays, among them array-valued options (a
        learnable ``tau``), are traced arguments. Inside a caller's own ``jit``
        / ``vmap`` / ``grad`` the inner ``jit`` is inlined into the caller's
        program. Under a caller's ``jit`` of ``grad`` it costs tracing, not
        compiling: the inner ``jit`` traces the core's forward for its primal
        program and the ``custom_jvp`` rule inside traces it again when the
        caller's ``grad`` linearizes that program. Calling the core directly
        where its arguments are tracers would trace it once, but an eager
        ``grad`` or ``vmap`` has tracers too, and there the inner ``jit`` is
        what keeps each call one cached program.
        """
        opts, opt_arrays = call.opts.split()
        arrays = {k: v for k, v in call.params.items() if isinstance(v, jax.Array)}
        static = tuple(sorted((k, v) for k, v in call.params.items() if k not in arrays))
        return _compiled(call.core, opts, static, call.outputs)(call.x, arrays, opt_arrays)


def _packs(x: Any) -> bool:
    """Whether :func:`_packed_order` sorts ``x``: real floats or integers of at most 32 bits, rows of fewer than 2^32
    entries, on a CPU (where the packed sort was measured; under ``jit`` the default backend's)."""
    kind = jnp.issubdtype(x.dtype, jnp.floating) or jnp.issubdtype(x.dtype, jnp.integer)
    return (kind and jnp.dtype(x.dtype).itemsize <= 4 and x.ndim > 0 and x.shape[-1] < 1 << 32
            and jax.default_backend() == "cpu")


def _packed_order(x: Any, idx: Any) -> Any:
    """Each row's stable ascending order (``idx`` entries) as ``lax.sort`` orders its values: one sort of ``key << 32
    | position``, 64-bit integers (traced with 64-bit types on, whatever the caller's setting).

    ``key``: an unsigned 32-bit integer that orders as the entry. A float's
    bits, a negative float's inverted and a positive one's sign bit set, after
    ``-0`` becomes ``0`` and every NaN one NaN, as ``lax.sort``'s comparator
    makes them; a signed integer's bits with the sign bit flipped. Equal
    entries have equal keys, and their positions keep them in row order. No
    gradient flows through an order.
    """
    if jnp.dtype(x.dtype) == jnp.uint32:
        key = x
    elif jnp.issubdtype(x.dtype, jnp.integer):
        key = jax.lax.bitcast_convert_type(jnp.astype(x, jnp.int32), jnp.uint32) ^ jnp.uint32(1 << 31)
    else:
        x = jax.lax.stop_gradient(jnp.astype(x, jnp.float32))
        x = jnp.where(x == 0, jnp.zeros_like(x), jnp.where(jnp.isnan(x), jnp.full_like(x, jnp.nan), x))
        bits = jax.lax.bitcast_convert_type(x, jnp.uint32)
        key = jnp.where(bits >> 31 == 1, ~bits, bits | jnp.uint32(1 << 31))
    with _x64():
        wide = jnp.uint64
        position = jax.lax.broadcasted_iota(wide, x.shape, x.ndim - 1)
        packed = jax.lax.sort(jax.lax.shift_left(jnp.astype(key, wide), wide(32)) | position, dimension=x.ndim - 1)
        return jnp.astype(packed & wide(0xFFFFFFFF), idx)


def _x64() -> Any:
    """A context in which JAX traces 64-bit types (``jax.enable_x64``; ``jax.experimental.enable_x64`` before it)."""
    enable = getattr(jax, "enable_x64", None)
    if enable is None:  # pragma: no cover - jax < 0.6
        from jax.experimental import enable_x64 as enable
    return enable(True)


ADAPTER = Jax()
