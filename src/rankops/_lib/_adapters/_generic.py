"""The adapter protocol, and its portable implementation (NumPy, CuPy, array-api-strict, any other namespace).

An adapter supplies, for one kind of array, what the array API standard
lacks or leaves to each framework:

- numerics: fused ``softmax`` / ``logsumexp``, ``stop_gradient``, row-wise scans,
  segmented sums, ``searchsorted``, gathers and permutation inverses
  (:mod:`.._loops`; scatters where the backend has them), Gumbel noise
  from the framework's own generator, whether values can be read now;
- loops: ``iterate`` (the Sinkhorn / CG fixed-point driver, also isotonic
  run pooling), ``scan_blocks`` (SoftSort / NeuralSort row blocks) and
  ``unless`` (work skipped when the backend can tell it is not needed);
- autodiff: ``custom_vjp`` registers a hand-written backward with the backend's
  reverse mode, ``autodiff_vjp`` is ``rankops.vjp`` through it;
- execution: ``run`` and ``rule_vjp`` apply an operator's core to a
  prepared call (directly here; through a cached ``jax.jit`` on JAX; block by
  block on Dask).

Here there is no autodiff: ``stop_gradient`` is the identity, ``custom_vjp``
runs the forward only (``rankops.vjp`` calls the rule itself), and random
numbers come from a NumPy ``Generator`` copied onto the array's device.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Callable

import numpy as np

from .. import _loops, _numerics
from .._compat import accumulation_dtype, device as _device, on_cpu, wide_dtype

__all__ = ["PortableAdapter", "PORTABLE", "REQUIRED", "SPEED_UPS", "precise_segment_sum", "scatter"]


def scatter(cts: tuple[Any, ...], wanted: tuple[str, ...], names: tuple[str, ...]) -> tuple[Any, ...]:
    """Cotangents of the ``wanted`` outputs laid out over all of a core's outputs (None: zero)."""
    by_name = dict(zip(wanted, cts))
    return tuple(by_name.get(name) for name in names)


def precise_segment_sum(scattered: Any, xp: Any, starts: Any, g: Any) -> Any:
    """A scatter-add's segmented sum (``scattered(xp, starts, g)``) made ``precise`` (:meth:`PortableAdapter.segment_sum`).

    A scatter-add adds a segment's entries one at a time (a GPU's atomics, in
    any order), so its error grows with the segment's length: a float32 soft
    block of 10^5 ranks, summed so, moves every rank by 0.15. Here the sum
    runs in float64 where the device has it (:func:`.._compat.wide_dtype`: a
    scatter is bound by memory, not arithmetic, on a GPU as well), else in
    two levels: each segment's pieces within chunks of about sqrt(n) entries,
    then the pieces' totals, so that no running sum takes more than about
    2 sqrt(n) terms (two scatters, where scans by doubling would unroll log2 n
    steps into a compiled program).
    """
    wide = wide_dtype(xp, g)
    if wide != g.dtype:
        return xp.astype(scattered(xp, starts, xp.astype(g, wide)), g.dtype)
    n = g.shape[-1]
    chunk = 1 << ((n - 1).bit_length() + 1) // 2
    cut = starts | (xp.arange(n, device=_device(g)) % chunk == 0)  # a piece: a segment's entries in one chunk
    pieces = scattered(xp, cut, g)
    return scattered(xp, starts, xp.where(cut, pieces, xp.zeros_like(pieces)))  # each piece's total once: zeros add exactly


# The protocol in two parts. REQUIRED: what a backend whose arrays differ from an eager, autodiff-free library's
# (its own reverse mode, tracing or compiling, lazy values, its own random generator) must override for correct
# values and gradients; the portable versions below are right for NumPy, CuPy and array-api-strict. SPEED_UPS:
# numerics whose portable versions are right on every backend, overridden where the backend has a faster kernel.
REQUIRED = (
    "stop_gradient", "custom_vjp", "autodiff_vjp", "linear_solve",  # autodiff
    "is_concrete", "iterate", "repeat", "repeat_while", "settle", "unless", "scan_blocks", "eagerly", "reads_in_eager_node",
    "replays_loops", "compiled",  # loops
    "run", "rule_vjp", "rows", "check_devices", "gumbel",  # execution, devices, randomness
    "sign",  # torch.func.vmap cannot batch torch's array-API sign (it indexes by a boolean mask)
    "clip",  # torch.compile cannot trace array-api-compat's NaN test of a symbolic bound
)
SPEED_UPS = (
    "sum", "softmax", "logsumexp", "ndtr", "sigmoid", "log_sigmoid", "linear_scan", "scan_links", "cumlogsumexp",
    "cumulative_sum", "searchsorted", "take", "select", "sort", "sort_order", "invert_permutation", "merge_descending",
    "segment_sum", "segment_totals", "segment_first", "segment_max", "segment_logsumexp", "segment_slots", "shortcut",
    "cube_root", "cache_block",
)

# cache_block: a block's bytes of one (n, m) array per problem (its iterations keep a few alive; a core's cache is a
# few MiB); the batches run whole (the cores' shared cache holds them), and the problems too small for blocks (a block
# pays the loop's dispatch again): below SMALL_PROBLEM_BYTES for hundreds of passes, below CACHE_BYTES for tens
CACHE_BYTES, WHOLE_BYTES, SMALL_PROBLEM_BYTES = 1 << 20, 1 << 21, 1 << 17


class PortableAdapter:
    """The adapter protocol, with portable implementations; framework adapters subclass it.

    A new backend is one adapter file (a subclass overriding what :data:`REQUIRED` names where the backend differs
    from an eager, autodiff-free array library, and any of :data:`SPEED_UPS`) plus its line in
    :func:`.get_adapter` (docs/architecture.md, "Adding a backend").
    """

    name = "generic"
    autodiff = False  # the backend has its own reverse mode (rankops.vjp uses it)
    # Values exist only once computed, and cores run block by block in the chunks'
    # namespace (Dask): nothing may read values, and hyper-parameters must be numbers.
    lazy = False
    # SoftSort / NeuralSort with block="auto": the largest (..., n, n) matrix (bytes, over the
    # whole batch) built whole and differentiated by the backend rather than streamed in row blocks.
    # Streaming bounds memory; the whole matrix is faster only where the backend's own backward of
    # it beats recomputing the rows (torch; not XLA, which fuses the streamed blocks).
    dense_matrix_bytes = 0
    # XLA on CPU flushes subnormal operands of arithmetic to zero but not of abs / max / compares,
    # so a scale read off a subnormal row is positive and yet divides as 0 (0 / 0 = NaN).
    flushes_subnormals = False
    # the backend compiles a loop's body once (lax loops), so a loop costs its body, not its steps: loops whose
    # every step differs in shape are then better run as one loop over position arithmetic (_cores/merges.py)
    compiles_loops = False
    # a row's sum of products is faster as a dot (XLA's CPU reduces a fused product over one long row as one chain of
    # additions, and vectorizes its dot); elsewhere the sum of the products, which a dot would only add kernels to
    sums_products_by_dot = False

    # -- numerics ------------------------------------------------------------------------

    def softmax(self, xp: Any, z: Any, axis: int = -1) -> Any:
        return _numerics.softmax(xp, z, axis)

    def logsumexp(self, xp: Any, z: Any, axis: int = -1) -> Any:
        return _numerics.logsumexp(xp, z, axis, total=lambda e: self.sum(xp, e, axis, keepdims=True))

    def sign(self, xp: Any, x: Any) -> Any:
        """``xp.sign`` (NaN stays NaN)."""
        return xp.sign(x)

    def ndtr(self, xp: Any, u: Any) -> Any:
        """The standard normal CDF (the standard has no ``erf``)."""
        return _numerics.ndtr(xp, u)

    def sigmoid(self, xp: Any, z: Any) -> Any:
        """The logistic function; a backend's own kernel where it has one."""
        return _numerics.sigmoid(xp, z)

    def log_sigmoid(self, xp: Any, z: Any) -> Any:
        """``log(sigmoid(z))``; a backend's own kernel where it has one."""
        return _numerics.log_sigmoid(xp, z)

    def stop_gradient(self, xp: Any, x: Any) -> Any:
        return x

    def cube_root(self, xp: Any, a: Any) -> Any:
        """``a^(1/3)`` for ``a > 0`` (0, inf and NaN kept): the power, whose exponent rounds (12 units in the last place
        at ``a = 10^30`` in float32), as the cubic's scale may (:func:`rankops._cores.powers.cubic_root`) and as
        :func:`rankops._cores.powers.power` of a third is."""
        return a ** (1.0 / 3.0)

    def linear_scan(self, xp: Any, a: Any, b: Any, *, reverse: bool = False, overwrite_b: bool = False) -> Any:
        """:func:`.._loops.linear_scan`; ``overwrite_b``: the caller gives ``b`` up (a backend may scan in it)."""
        return _loops.linear_scan(xp, a, b, reverse=reverse)

    def scan_links(self, xp: Any, a: Any) -> Any:
        """``a``, the links of :meth:`linear_scan`, readied for several scans over the same links: a backend may
        precompute what each scan would rebuild. Only :meth:`linear_scan` reads the result."""
        return a

    def cumlogsumexp(self, xp: Any, z: Any, *, reverse: bool = False) -> Any:
        return _loops.cumlogsumexp(xp, z, reverse=reverse)

    def sum(self, xp: Any, a: Any, axis: int, *, keepdims: bool = False) -> Any:
        """``xp.sum`` along ``axis``, accumulated in float64 where ``a`` is a narrower float on a CPU device that has
        float64 (:func:`.._compat.accumulation_dtype`), rounded back once: NumPy sums over any axis but the last one
        entry at a time in the input's dtype (a float32 plan's column sums over 2000 rows: Sinkhorn's float32 quantiles
        8e-6 off, top-k masks of rows spread over 10^-2..10^2 1.5e-3, where torch's were 5e-7 and 7e-6)."""
        wide = accumulation_dtype(xp, a)
        if wide == a.dtype:
            return xp.sum(a, axis=axis, keepdims=keepdims)
        return xp.astype(xp.sum(a, axis=axis, keepdims=keepdims, dtype=wide), a.dtype)

    def cumulative_sum(self, xp: Any, z: Any, *, reverse: bool = False) -> Any:
        """``xp.cumulative_sum`` along the last axis; ``reverse``: from the end. Accumulated in float64 where ``z`` is
        a narrower float on a CPU device that has float64 (:func:`.._compat.accumulation_dtype`), rounded back once:
        NumPy's prefix sum (Dask's and array-api-strict's are NumPy's) adds one entry at a time in the input's dtype,
        and its last entries drift by units in their last place (a float32 row of 10^4: 12; Sinkhorn's CDF readout
        took its ranks 0.5 off)."""
        wide = accumulation_dtype(xp, z)
        u = z if wide == z.dtype else xp.astype(z, wide)
        out = xp.flip(xp.cumulative_sum(xp.flip(u, axis=-1), axis=-1), axis=-1) if reverse else xp.cumulative_sum(u, axis=-1)
        return out if wide == z.dtype else xp.astype(out, z.dtype)

    def searchsorted(self, xp: Any, sorted_seq: Any, values: Any, *, side: str = "left") -> Any:
        return _loops.searchsorted(xp, sorted_seq, values, side=side)

    def clip(self, xp: Any, x: Any, low: Any = None, high: Any = None) -> Any:
        """``x`` clipped to ``[low, high]`` (either None). Not ``xp.clip`` wherever a bound is a row's length, or a
        float read from a module, in a loop's body: under ``torch.compile`` such a bound may be a symbol, which
        array-api-compat's ``clip`` tests with ``math.isnan`` (a trace refuses that)."""
        return xp.clip(x, low, high)

    def take(self, xp: Any, a: Any, index: Any) -> Any:
        """``a[..., index]`` row by row (``index`` has ``a``'s batch shape)."""
        return _loops.take(xp, a, index)

    def select(self, xp: Any, a: Any, index: Any, axis: int) -> Any:
        """``take(a, index, axis=axis)``: one 1-D ``index`` (in range, non-negative) for every slice along ``axis``."""
        return xp.take(a, index, axis=axis)

    def sort(self, xp: Any, x: Any) -> Any:
        """Each row (last axis) sorted ascending, NaN last: ``xp.sort``."""
        return xp.sort(x, axis=-1)

    def sort_order(self, xp: Any, x: Any, *, descending: bool = False) -> tuple[Any, Any]:
        """``(take(x, order), order)`` with ``order`` the stable ``argsort`` of each row (last axis)."""
        # ``descending`` only where asked: NumPy's own argsort (a solver called with ``numpy`` itself) has no such argument
        order = xp.argsort(x, axis=-1, descending=True, stable=True) if descending else xp.argsort(x, axis=-1, stable=True)
        return self.take(xp, x, order), order

    def invert_permutation(self, xp: Any, order: Any) -> Any:
        """The inverse of each row's permutation ``order`` (a sort here; a scatter where the backend has one)."""
        return xp.argsort(order, axis=-1)

    def merge_descending(self, xp: Any, a: Any, b: Any) -> tuple[Any, Any, Any]:
        """Two rows sorted decreasing, merged as a stable sort of their concatenation (``a``'s entry first on a tie):
        ``(merged, where a's entries went, where b's went)``. Here that sort."""
        n = a.shape[-1]
        merged, order = self.sort_order(xp, -xp.concat([a, b], axis=-1))
        place = self.invert_permutation(xp, order)
        return -merged, place[..., :n], place[..., n:]

    def segment_sum(self, xp: Any, starts: Any, g: Any, *, precise: bool = False) -> Any:
        """Each entry's segment total of ``g`` along the last axis; ``starts`` (True where a segment begins) broadcasts
        against ``g``. ``precise``: an error that does not grow with the segment's length, for a sum that writes an
        output (:func:`precise_segment_sum`); the scans here always round so."""
        return _loops.segment_sum(xp, starts, g)

    def segment_totals(self, xp: Any, starts: Any, group: Any, heads: Any, g: Any) -> Any:
        """Each segment's total of ``g`` along the last axis, one per segment, in order: ``starts`` (1-D) True where
        one begins, ``group`` each entry's segment (counted from 0), ``heads`` the segments' first entries."""
        return xp.take(self.segment_sum(xp, starts, g), heads, axis=-1)

    def segment_first(self, xp: Any, starts: Any, g: Any) -> Any:
        return _loops.segment_first(xp, starts, g)

    def segment_slots(self, xp: Any, starts: Any) -> tuple[Callable[[Any], Any], Callable[[Any], Any]] | None:
        """``(total, read)`` where the backend sums segments into slots, one per segment (``starts`` True where one
        begins): ``total(g)``, an array of ``g``'s shape whose last axis holds each segment's total of ``g`` in order,
        from 0 (then zeros), and ``read(a, exact=False)``, each entry's segment's value of ``a`` (slots of ``starts``'
        shape), so that a function of the totals is evaluated once per segment and every entry of a segment holds the
        same bits (``exact``: ``a`` comes from the totals by correctly rounded operations alone, a quotient, which a
        compiler may evaluate again at each entry to the same bits; else it is stored first). None here: the scans sum
        per entry."""
        return None

    def segment_max(self, xp: Any, starts: Any, g: Any) -> Any:
        """Each entry's segment maximum of ``g`` along the last axis; ``starts`` broadcasts against ``g``."""
        return _loops.segment_max(xp, starts, g)

    def segment_logsumexp(self, xp: Any, starts: Any, g: Any) -> Any:
        """Each entry's segment ``log(sum(exp(g)))``, from the segment's maximum (-inf for a segment of -inf only);
        ``starts`` broadcasts against ``g``."""
        return _loops.segment_logsumexp(xp, starts, g)

    def rows(self, xp: Any, fn: Callable[..., Any], *arrays: Any, dtype: Any) -> Any:
        """``fn(xp, *arrays)``, an array of ``arrays[0]``'s shape and ``dtype`` computed from whole rows (last axis).

        For the row helpers outside a :class:`~.._calls.Call` that need a sort or
        a gather (the losses' hard ranks of targets): a lazy backend maps ``fn``
        over blocks of whole rows in its chunks' own namespace.
        """
        return fn(xp, *arrays)

    def is_concrete(self, x: Any) -> bool:
        """Whether ``x`` holds values that may be read now."""
        return not self.lazy

    def cache_block(self, xp: Any, x: Any, core: int, width: int = 1, few_passes: bool = False) -> int | None:
        """How many problems an eager loop over ``x`` runs at once on a CPU, or None: the batch whole.

        A problem is ``x``'s last ``core`` axes, times ``width`` (a loop over ``(..., n, width)`` arrays
        built from ``x``). An iteration passes over each problem's arrays a few times: once a batch's outgrow
        a core's cache, every pass streams them from memory, and the batch took 2-5x the time of its blocks
        one after another (``benchmarks/batch_blocks.py``). A device's memory is fast and its parallelism
        wants the whole batch; a traced loop is one program, which blocks would copy. ``few_passes``: a
        loop of tens of passes (the implicit backward), whose blocks pay back from 1 MiB problems only.
        """
        if not self.is_concrete(x) or not on_cpu(x):
            return None
        size = xp.finfo(x.dtype).bits // 8 * width
        problem = math.prod(x.shape[x.ndim - core :]) * size
        if math.prod(x.shape) * size <= WHOLE_BYTES or problem < (CACHE_BYTES if few_passes else SMALL_PROBLEM_BYTES):
            return None
        return max(1, CACHE_BYTES // problem)

    def gumbel(self, xp: Any, key: Any, shape: tuple[int, ...], dtype: Any, device: Any) -> Any:
        """Standard Gumbel(0, 1) noise; ``key`` is None, an int seed or a NumPy Generator."""
        if key is None or (isinstance(key, numbers.Integral) and not isinstance(key, bool)):
            rng = np.random.default_rng(None if key is None else int(key))
        elif isinstance(key, np.random.Generator):
            rng = key
        else:
            raise TypeError(
                f"key must be None, an int seed or a numpy.random.Generator for this backend, got {type(key).__name__}"
            )
        return xp.asarray(rng.gumbel(size=shape), dtype=dtype, device=device)

    # -- loops -------------------------------------------------------------------------------

    def iterate(self, xp: Any, step: Any, operands: Any, state: Any, **kwargs: Any) -> Any:
        return _loops.iterate(xp, step, operands, state, **kwargs)

    def scan_blocks(self, xp: Any, body: Any, carry: Any, xs: tuple[Any, ...], block: int, *, looped: bool = False) -> Any:
        """:func:`rankops._lib._loops.scan_blocks`; ``looped``: a forward computation (no gradient traced through it)
        that a compiling backend may run as one loop op, its body traced once."""
        return _loops.scan_blocks(xp, body, carry, xs, block)

    def repeat(self, xp: Any, body: Callable[[Any], Any], state: Any, count: Any, most: int, like: tuple[Any, ...] = (),
               differentiated: bool = True) -> Any:
        """``body`` applied ``count`` times to ``state`` (a tuple of arrays); ``count <= most``.

        ``count`` is a Python int here; under ``jax.jit`` it may be traced
        (see the JAX adapter), which is why ``most`` bounds it. ``like``: the
        arrays the body reads besides the state (JAX's ``shard_map`` makes
        the state vary as they do). ``differentiated=False``: no autodiff traces
        through the loop (it runs in a custom rule's forward), which lets a
        compiling backend pick a loop form that autodiff cannot follow.
        """
        for _ in range(count):
            state = body(state)
        return state

    def repeat_while(self, xp: Any, going: Callable[[Any], Any], body: Callable[[Any], Any], state: Any, most: int) -> Any:
        """``body`` applied to ``state`` while ``going(state)`` (a 0-d bool) holds, at most ``most`` times.

        As for :meth:`unless`, ``body`` must leave the state as it was wherever
        it could have been skipped: a backend that cannot read the flag runs
        the steps with each one guarded (JAX: a ``lax.cond`` in a fixed loop,
        whose reverse mode needs the trip count).
        """
        return self.repeat(xp, lambda s: self.unless(xp, ~going(s), body, s), state, most, most)

    def settle(self, xp: Any, body: Callable[[Any], Any], state: Any, moved: Callable[[Any, Any], Any], most: int, every: int,
               like: tuple[Any, ...] = ()) -> Any:
        """``body`` applied to ``state`` until ``moved(old, new)`` (a 0-d bool: whether ``every`` more steps changed
        anything) is False, or ``most`` steps; where values cannot be read now, all ``most`` steps."""
        if not self.is_concrete(state[0]):
            return self.repeat(xp, body, state, most, most, like=like)
        for _ in range(0, most, every):
            new = self.repeat(xp, body, state, every, every, like=like)
            going, state = bool(moved(state, new)), new
            if not going:
                break
        return state

    def compiled(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn(xp, *arrays)`` compiled once per shape where the backend compiles (JAX), else ``fn`` itself.

        For kernels called outside a :class:`~.._calls.Call` (the permutation
        kernels): eager JAX would otherwise compile every operation on its own.
        """
        return fn

    def eagerly(self, xp: Any, fn: Callable[..., Any], arrays: tuple[Any, ...], *, like: tuple[int, ...], **params: Any) -> tuple[Any, ...]:
        """``fn(xp, *arrays, **params)``: a tuple of arrays, the i-th shaped and typed like ``arrays[like[i]]``.

        A compiling backend runs ``fn`` outside the compiled graph, eagerly, so its
        data-dependent loops keep their early exit (the torch adapter, under
        ``torch.compile``): ``fn`` must be a module-level function and
        ``params`` literals (numbers, strings, booleans, tuples of them).
        """
        return tuple(fn(xp, *arrays, **params))

    def reads_in_eager_node(self, x: Any) -> bool:
        """Whether a function that :meth:`eagerly` runs on ``x`` reads its values (and so may size its arrays by
        them): where ``x``'s values can be read now."""
        return self.is_concrete(x)

    def replays_loops(self, arrays: tuple[Any, ...]) -> bool:
        """Whether autodiff of a data-dependent loop over ``arrays`` must replay it eagerly (see :meth:`eagerly`).

        True only where the backend traces the loop and differentiates it: then its
        backward cannot be traced (the torch adapter under ``torch.compile``).
        """
        return False

    def shortcut(self, xp: Any, holds: Any, fast: Callable[[], Any], general: Callable[[], Any]) -> Any:
        """``fast()`` where the 0-d boolean ``holds`` is True, else ``general()``.

        ``fast`` is a cheaper route to ``general``'s result that is valid only
        where ``holds`` (arrays sized for a bound the data may exceed): a
        backend that cannot read the flag now runs ``general``.
        """
        if self.is_concrete(holds) and bool(holds):
            return fast()
        return general()

    def unless(self, xp: Any, skip: Any, fn: Callable[[Any], Any], operand: Any, in_loop: bool = False) -> Any:
        """``fn(operand)``, or ``operand`` when the 0-d boolean ``skip`` is True.

        ``fn`` must return ``operand`` unchanged wherever it could have been
        skipped: the flag only saves work, so a backend that cannot read it yet
        (lazy arrays, traced code) may run ``fn`` anyway. ``in_loop``: the
        call may run inside a traced loop's body, where a compiled torch graph
        cannot branch (it runs ``fn``).
        """
        if self.is_concrete(skip) and bool(skip):
            return operand
        return fn(operand)

    # -- autodiff ----------------------------------------------------------------------------

    def linear_solve(self, xp: Any, matvec: Callable[[Any], Any], solve: Callable[[Any], Any], rhs: Any) -> Any:
        """``solve(rhs)``, the solution of ``matvec(y) = rhs`` for a symmetric ``matvec``; JAX declares it one
        linear solve (``lax.custom_linear_solve``), whose transpose is the same solve."""
        return solve(rhs)

    def custom_vjp(
        self, xp: Any, fwd: Any, bwd: Any, arrays: tuple[Any, ...], n_diff: int, residuals: Any = None, linear: Any = True
    ) -> tuple[Any, ...]:
        """``fwd(xp, *arrays) -> (outputs, residuals)`` with the gradient ``bwd(xp, residuals, cotangents)``.

        Only the first ``n_diff`` outputs carry gradients; ``residuals(xp,
        *arrays)``, when given, rebuilds the residuals from the inputs (for
        higher derivatives). Without autodiff: the forward only.
        """
        return fwd(xp, *arrays)[0]

    def autodiff_vjp(self, f: Callable[..., Any], leaves: list[Any], outputs: Callable[[Any], Any]) -> Any:
        raise NotImplementedError(f"the {self.name} adapter has no autodiff: rankops.vjp applies the operators' rules")

    # -- arrays ------------------------------------------------------------------------------

    def check_devices(self, arrays: tuple[Any, ...], names: tuple[str, ...]) -> None:
        """``ValueError`` unless every array lives on the first one's device."""
        dev = _device(arrays[0])
        for name, a in zip(names[1:], arrays[1:]):
            other = _device(a)
            if other != dev:
                raise ValueError(f"{name} is on device {other!r} but {names[0]} is on {dev!r}; move them to one device")

    # -- execution -----------------------------------------------------------------------------

    def run(self, call: Any) -> tuple[Any, ...]:
        """The outputs ``call.outputs`` of ``call.core`` on the call's prepared arrays."""
        outs = call.core(call.xp, call.x, call.opts, **call.params)
        return call.core.select(outs, call.outputs)

    def rule_vjp(self, call: Any) -> tuple[tuple[Any, ...], Callable[[tuple[Any, ...]], dict[str, Any]]]:
        """The outputs and the core's own pullback: cotangents of ``call.outputs`` -> gradients by input name."""
        outs, pullback = call.core.vjp(call.xp, call.x, call.opts, **call.params)
        names = call.core.outputs
        return call.core.select(outs, call.outputs), lambda cts: pullback(scatter(cts, call.outputs, names))


PORTABLE = PortableAdapter()
