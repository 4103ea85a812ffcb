"""The merge rounds' sums for the p-norm regularizer's isotonic fit (:mod:`.pnorm`, :func:`.isotonic.merge_rows`)."""

from __future__ import annotations

import math
from typing import Any

from .._lib._adapters import get_adapter
from .._lib._compat import cumulative_sum, device as _device, index_dtype
from .._lib._numerics import safe_divide
from . import isotonic
from .extensions import BlockRows, Extension
from .merges import merge_lengths, padded_length
from .powers import falling_newton, falling_start, moment_root, odd_power, power, stepped_signed_square_root
from . import stepped

__all__ = ["PowerSums", "falling_moment_root", "SteppedSignedSums", "merge_fit", "merge_blocks", "pool_blocks", "block_form", "centred", "centred_moments", "stepped_mean", "stepped_block_form", "stepped_blocks", "stepped_root", "stepped_second_moment", "pooled_blocks_length", "POOLED_BLOCKS_MOST", "POOLED_BLOCKS_FROM"]


class PowerSums:
    """The merge rounds' sums (:func:`.isotonic.merge_rows`) for this loss at an integer q (2 to 6): the derivative
    ``f'(t) = w - phi(y - t)`` summed over a set is, with ``phi(u) = u |u|^(q-2)``, a polynomial in t whose
    coefficients are the set's sums of ``w`` and of powers of ``y - c`` (``c`` the segment's boundary, so that the sums
    run outward from it and stay small where the tests read them); at q = 3 (``phi(u) = u |u|``), the part of the
    set whose data lie below t counts with the opposite sign (``signs``).

    An entry of the rows is one datum, ``data = (y, w)``, or a block of data already known to pool, ``data = (mean,
    W, m, M2, ..., M_k)`` (:attr:`form` numbers, k = max(3, q - 1)): its mean, its sums of weights and of entries,
    and its centred moments, whose power sums about any ``c`` follow by the binomial expansion. The merge rounds
    take blocks at q = 2 and 4 only: at q = 3 and 5 a test splits a set by its data, which a block's moments cannot
    do. Pooling rounds over blocks hold at any q (a pool of pool-adjacent-violators keeps its data above its value).
    From q = 5 on, a pool's root has no closed form: Newton's method on its moments' polynomial (:meth:`root`).
    """

    identity = 0.0
    centred = True
    whole_blocks = True  # the sums are of the data: an own block's derivative is 0 only when summed whole

    def __init__(self, q: float) -> None:
        self.degree = int(q) - 1
        self.signs = self.degree % 2 == 0
        self.form = max(3, self.degree) + 2  # the block form's length: mean, W, m and the moments M2 to M_max(3, q-1)
        # whether any range of blocks has its value from its moments (q = 2, 4: closed forms whatever its terms' signs)
        # or one bounded by its first datum (q = 3, 5: windows._pool_each_run); at q = 6 Newton's steps from above need
        # every term nonnegative at the root, which a range need not have
        self.ranges = self.degree <= 3 or self.signs

    def combined(self, xp: Any, data: tuple[Any, ...], first: Any, total: Any, spread: Any) -> tuple[Any, ...]:
        """The block form of segments of blocks (``data``: each block's, :attr:`form` numbers): a segment's mean as its
        first block's (``first``) plus the others' weighted offsets from it, its moments about that mean, summed.
        ``total(g)`` sums each row of ``g`` over each segment and ``spread(a)`` lays a segment's number out over its
        blocks, both in the layout of ``first`` (one number per segment, or per entry)."""
        mean, m = data[0], data[2]
        # a sum of m * mean rounds at its total (a soft sort's blocks of ranks near 5 x 10^4 by a few hundredths), the
        # offsets at their spread; a segment of padding alone (no weight) keeps its first mean
        offsets = total(xp.stack([m * (mean - spread(first)), m]))
        centre = first + safe_divide(xp, offsets[0, ...], offsets[1, ...])
        terms = self.stats(xp, None, data, spread(centre))  # (W, m, S1, S2, ...): about the mean, S1 is 0, S_k is M_k
        sums = xp.unstack(total(xp.stack([terms[0], terms[1], *terms[3:]])))
        # the moments past the loss's degree are not read: 0
        return (centre, *sums, *(xp.zeros_like(centre),) * (self.form - 1 - len(sums)))

    def stats(self, xp: Any, v: Any, data: tuple[Any, ...], centre: Any) -> tuple[Any, ...]:
        if len(data) == 2:
            y, w = data
            d = y - centre
            powers = [d]
            for _ in range(self.degree - 1):
                powers.append(powers[-1] * d)
            return (w, xp.ones_like(d), *powers)
        mean, w, m, m2, m3, *higher = data
        d = mean - centre
        if self.degree == 1:
            return w, m, m * d
        if self.degree == 2:  # the third moment is not read
            return w, m, m * d, m2 + m * d * d
        if self.degree == 3:
            return w, m, m * d, m2 + m * d * d, m3 + 3.0 * d * m2 + m * d * d * d
        # sum_B (y - c)^j = sum_i C(j, i) M_i d^(j - i) (M_0 = m, M_1 = 0), in Horner's form in d
        central = (m, 0.0, m2, m3, *higher)
        sums = [w, m]
        for j in range(1, self.degree + 1):
            total = central[0]
            for i in range(1, j + 1):
                total = total * d + (math.comb(j, i) * central[i] if i > 1 else 0.0)
            sums.append(total)
        return tuple(sums)

    # plain sums, scanned and combined as "l2"'s are
    cum = staticmethod(isotonic.KINDS["l2"].cum)
    comb = staticmethod(isotonic.KINDS["l2"].comb)

    def _powers(self, sums: tuple[Any, ...], s: Any) -> Any:
        """``sum_S (y - ref)^(q-1)`` from S's sums, ``s = ref - c`` (binomial expansion, in Horner's form)."""
        m, s1 = sums[1], sums[2]
        if self.degree == 1:
            return s1 - s * m
        if self.degree == 2:
            return sums[3] - s * (2.0 * s1 - s * m)
        if self.degree == 3:
            return sums[4] - s * (3.0 * sums[3] - s * (3.0 * s1 - s * m))
        return _about(sums[1:], s, self.degree)

    def below(self, xp: Any, sums: tuple[Any, ...], ref: Any, centre: Any, lower: Any) -> Any:
        """``sum_S f'(ref) = W_S - sum_S phi(y - ref)`` (positive for a set of blocks below ``ref``); ``lower``: the
        sums over S's entries with ``y < ref``, whose terms change sign at an even ``q - 1``."""
        s = ref - centre
        terms = self._powers(sums, s)
        if lower is not None:
            terms = terms - 2.0 * self._powers(lower, s)
        return sums[0] - terms

    def above(self, xp: Any, sums: tuple[Any, ...], ref: Any, centre: Any, lower: Any) -> Any:
        return -self.below(xp, sums, ref, centre, lower)

    def root(self, xp: Any, total_w: Any, m: Any, m2: Any, m3: Any, *higher: Any) -> Any:
        """The root ``t`` of :func:`.block_roots.shift` of a pool from its weight, size and centred moments ``m2``, ``m3``
        and (from q = 5 on) the ``higher`` ones (every entry of a pool above its value: the unsigned problem's
        blocks). A pool's value only places the blocks (the output is solved again on them): no tangent is read."""
        if self.degree == 1:
            return total_w / m
        if self.degree <= 3:
            return moment_root(xp, self.degree + 1.0, total_w, m, m2, m3 if self.degree == 3 else None, tangent=False)
        return falling_moment_root(xp, self.degree, total_w, m, (m2, m3, *higher))

    def value(self, xp: Any, sums: tuple[Any, ...], fallback: Any, centre: Any) -> Any:
        """A pool's value, ``mean - t`` (:meth:`root`), its moments centred on the pool's mean from the sums."""
        total_w, m, s1 = sums[:3]
        some = m > 0
        m = xp.where(some, m, xp.ones_like(m))
        mean = s1 / m
        if self.degree > 3:
            moments = tuple(_about(sums[1:k + 2], mean, k) for k in range(2, self.degree + 1))
            return xp.where(some, centre + mean - self.root(xp, total_w, m, *moments), fallback)
        m2 = xp.clip(sums[3] - mean * s1, 0.0, None) if self.degree > 1 else None
        m3 = sums[4] - 3.0 * mean * sums[3] + 2.0 * mean * mean * s1 if self.degree == 3 else None
        return xp.where(some, centre + mean - self.root(xp, total_w, m, m2, m3), fallback)

    def block_value(self, xp: Any, data: tuple[Any, ...]) -> Any:
        """The value of each block of :func:`block_form`'s ``data``: its mean less its :meth:`root`."""
        mean, total_w, m, *moments = data
        return mean - self.root(xp, total_w, m, *moments)

    def block_stats(self, xp: Any, adapter: Any, starts: Any, data: Any) -> tuple[Any, ...]:
        """Each entry's block in :func:`block_form` (``data``: the row and its weights), for :class:`.extensions.Extension`."""
        return block_form(xp, adapter, starts, data[0, ...], data[1, ...], highest=self.form - 2)

    def running(self, xp: Any, adapter: Any, blocks: tuple[Any, ...], inside: Any) -> tuple[Any, Any]:
        """``(totals, centre)`` for :class:`.extensions.Extension`'s windows: the running sums along each side of the
        blocks' moments about the mean of the first side's first block (a union's totals: the sum of its parts')."""
        terms = xp.stack(self.stats(xp, None, blocks, blocks[0][..., :1, :1]))
        return cumulative_sum(xp, xp.where(inside, terms, xp.zeros_like(terms))), blocks[0][..., :1, 0]

    joined = staticmethod(lambda xp, a, b: a + b)  # the totals of a union of blocks (:meth:`running`'s)

    def level(self, xp: Any, totals: Any, centre: Any) -> Any:
        """The value of the blocks whose :meth:`running` totals (joined) are ``totals``."""
        return self.value(xp, tuple(totals[i, ...] for i in range(totals.shape[0])), centre, centre)

    def pooled(self, xp: Any, adapter: Any, starts: Any, u: Any, data: Any, unit: bool) -> Any:
        """The pooling rounds' rule (:func:`.isotonic.pool_runs`) over rows of blocks, one entry each (``data`` stacks
        :func:`block_form`'s :attr:`form` rows): each segment's value from its blocks' moments combined about the segment's mean
        (exact where every entry of the segment lies above its value, as in every pool of pool-adjacent-violators
        here); a segment of padding alone (no entries) keeps its value ``u``."""
        mean, m = data[0, ...], data[2, ...]
        total = adapter.segment_sum(xp, starts, xp.stack([m * mean, m]))
        centre = total[0, ...] / xp.where(total[1, ...] > 0, total[1, ...], 1.0)
        terms = self.stats(xp, None, tuple(data[i, ...] for i in range(self.form)), centre)[:self.degree + 2]
        sums = adapter.segment_sum(xp, starts, xp.stack(terms))
        return self.value(xp, tuple(sums[i, ...] for i in range(len(terms))), u, centre)


def _about(sums: tuple[Any, ...], s: Any, degree: int) -> Any:
    """``sum_S (u - s)^degree`` from S's power sums ``sums = (sum u^0, sum u^1, ..., sum u^degree)`` (binomial
    expansion, in Horner's form in ``-s``)."""
    total = sums[0]
    for k in range(1, degree + 1):
        total = total * -s + math.comb(degree, k) * sums[k]
    return total


def falling_moment_root(xp: Any, degree: int, total_w: Any, m: Any, moments: tuple[Any, ...]) -> Any:
    """The root ``t`` of ``P(t) = sum_B (d_i + t)^degree = W`` from the block's size and centred moments ``moments =
    (M_2, ..., M_degree)`` (``M_1 = 0``): ``P(t) = m t^degree + sum_k C(degree, k) M_k t^(degree-k)``. Every term is
    nonnegative at the root, so P is convex and increasing from there, and Newton's method from an upper bound
    (:func:`.powers.falling_start`) falls to the root monotonically (:func:`.powers.newton_steps` steps, as for a
    block solved over its entries)."""
    adapter = get_adapter(xp)
    # P - W and P' by their coefficients from t^degree down, each t^(degree-1) term 0 (M_1 = 0): set once per root
    c = [m, 0.0, *(math.comb(degree, k) * mk for k, mk in zip(range(2, degree + 1), moments))]
    c[-1] = c[-1] - total_w
    slope = [(degree - k) * ck for k, ck in enumerate(c[:-1])]

    def horner(coefficients: list[Any], t: Any) -> Any:
        value = coefficients[0] * t
        for ck in coefficients[2:]:
            value = value * t + ck
        return value

    def step(t: Any) -> Any:
        return t - safe_divide(xp, horner(c, t), horner(slope, t))

    start = falling_start(xp, total_w / m, moments[0] / m, degree, tangent=False)
    return falling_newton(xp, adapter, step, start, degree + 1.0, like=(start,))


class SteppedSignedSums(PowerSums):
    """:class:`PowerSums` for the soft sort's data at q = 3 and :func:`.stepped.solves`' q, whose ``y`` (the ranks) step
    evenly along a row and whose weights have either sign: any run of entries is a block of evenly stepped data, so its
    size, weight and second moment give its pool value (:func:`stepped_root`, the step ``c`` from ``M2 = c^2 m (m^2 -
    1) / 12``) wherever its terms change sign, and the rounds
    over blocks, the passes and the windows (:mod:`.windows`) take it as the unsigned problem's blocks. Its sums and
    block form are q = 3's (up to the second moment) at every q."""

    def __init__(self, q: float = 3.0) -> None:
        super().__init__(3.0)
        self.q = q
        self.signs = False  # a range's moments give its value: the min-max passes hold

    def root(self, xp: Any, total_w: Any, m: Any, m2: Any, m3: Any) -> Any:
        if self.q == 3.0:
            return stepped_signed_square_root(xp, total_w, m, m2)
        mm = xp.where(m > 1, m, 2.0 * xp.ones_like(m))
        return stepped_root(xp, self.q, total_w, m, xp.sqrt(xp.clip(12.0 * m2 / (mm * (mm * mm - 1.0)), 0.0, None)))

    def block_stats(self, xp: Any, adapter: Any, starts: Any, data: Any) -> tuple[Any, ...]:
        return stepped_block_form(xp, adapter, starts, data[0, ...], data[1, ...])


def stepped_root(xp: Any, q: float, total_w: Any, m: Any, c: Any) -> Any:
    """The root ``t`` of ``sum_B phi(d_j + t) = W`` for blocks of ``m`` data stepping by ``c`` (the soft sort's ranks),
    terms of either sign: at q = 3 the stepped square root, at q = 4 the cubic (``phi(u) = u^3``; odd moments 0), at
    :func:`.stepped.solves`' q ``c tau`` for :func:`.stepped.unit_root`'s ``tau``; one entry, or equal data (every term
    shares t's sign), ``sign(W) |W / m|^(1/(q-1))``."""
    if q == 3.0:
        return stepped_signed_square_root(xp, total_w, m, stepped_second_moment(m, c))
    several = (m > 1) & (c > 0)
    alone = odd_power(xp, total_w / m, 1.0 / (q - 1.0))
    if q == 4.0:
        return xp.where(several, moment_root(xp, q, total_w, m, stepped_second_moment(m, c), xp.zeros_like(m)), alone)
    c = xp.where(several, c, xp.ones_like(c))
    tau = stepped.unit_root(xp, q, total_w / power(xp, c, q - 1.0), xp.where(several, m, xp.ones_like(m)))
    return xp.where(several, c * tau, alone)


def stepped_blocks(xp: Any, adapter: Any, starts: Any, y: Any, w: Any, slots: Any = None) -> tuple[Any, Any, Any, Any]:
    """``(m, W, first, c)`` per entry for blocks whose data ``y`` step evenly (the soft sort's ranks): each block's
    size, weight, first datum and step (the difference of its first two data, exact for ranks times a power of two; 0
    on a one-entry block). ``slots`` (an adapter's ``segment_slots``): per block in its slot, from one scatter (a
    block's first datum and step the sums of its first entry's and zeros: exact), an empty slot of size 1."""
    goes_on = xp.concat([~starts[..., 1:], xp.zeros_like(starts[..., :1])], axis=-1)  # the next entry is of this block
    steps = xp.where(goes_on, xp.concat([y[..., 1:] - y[..., :-1], xp.zeros_like(y[..., :1])], axis=-1), 0.0)
    if slots is not None:
        sums = slots[0](xp.stack([xp.ones_like(y), w, xp.where(starts, y, 0.0), xp.where(starts, steps, 0.0)]))
        return xp.where(sums[0, ...] > 0, sums[0, ...], 1.0), sums[1, ...], sums[2, ...], sums[3, ...]
    sums = adapter.segment_sum(xp, starts, xp.stack([xp.ones_like(y), w]))
    firsts = isotonic.block_first(xp, adapter, starts, xp.stack([y, steps]))
    return sums[0, ...], sums[1, ...], firsts[0, ...], firsts[1, ...]


def stepped_block_form(xp: Any, adapter: Any, starts: Any, y: Any, w: Any) -> tuple[Any, ...]:
    """:func:`block_form` (up to the third moment) of blocks whose data ``y`` step evenly (the soft sort's ranks), in
    closed form from each block's first datum and step (:func:`stepped_blocks`): mean ``first + c (m - 1) / 2``,
    ``M2 = c^2 m (m^2 - 1) / 12``, ``M3 = 0``. A sum of the data rounds at its total (a float32 block of 800 ranks
    near 5 x 10^4: its mean by about 0.03, where two blocks' values of a p = 1.25 sort of 10^5 stood 0.028 apart), the
    closed form by one rounding of the mean."""
    m, total_w, first, c = stepped_blocks(xp, adapter, starts, y, w)
    return first + c * ((m - 1.0) / 2.0), total_w, m, stepped_second_moment(m, c), xp.zeros_like(m)


def stepped_second_moment(m: Any, c: Any) -> Any:
    """``M2 = c^2 m (m^2 - 1) / 12``: the centred second moment of ``m`` data stepping by ``c``."""
    return (c * c) * (m * (m * m - 1.0) / 12.0)


def centred(xp: Any, adapter: Any, starts: Any, y: Any, w: Any, step: float | None = None, about_first: bool = False,
            precise: bool = False) -> tuple[Any, Any, Any, Any]:
    """``(|B|, W_B, mean_B(y), d = y - mean_B(y))`` per entry of each block B (``starts``: True where one begins),
    from one segmented sum (``d`` exactly 0 on a one-entry block; ``precise`` as ``adapter.segment_sum``'s). ``step``:
    ``w`` changes by it from each entry of a block to the next (the rank's weights, ``rho`` reversed), and ``W_B`` is
    in closed form (:func:`stepped_mean`).

    ``about_first`` (a solve whose output is written from ``d``): the sums
    run over ``y`` less its block's first entry, so that ``d`` is as exact
    as the entries' differences. A block of equal entries then has ``d = 0``
    and its mean their value, where a mean of the entries themselves rounds
    by a unit in their last place, which the output ``(d + t)^(q-1)``
    amplifies by ``(q - 1) t^(q-2)``: a float32 p = 4/3 rank of tied rows
    at ``x / strength`` near 9e4 was off by six positions.
    """
    if about_first:
        firsts = isotonic.block_first(xp, adapter, starts, xp.stack([y, w]))
        first, w_first = firsts[0, ...], firsts[1, ...]
        y = y - first
    elif step is not None:
        w_first = isotonic.block_first(xp, adapter, starts, w)
    sums = adapter.segment_sum(xp, starts, xp.stack([xp.ones_like(y), y] + ([w] if step is None else [])), precise=precise)
    m = sums[0, ...]
    total_w = sums[2, ...] if step is None else m * stepped_mean(w_first, m, step)
    shift = sums[1, ...] / m
    return m, total_w, first + shift if about_first else shift, y - shift


def stepped_mean(first: Any, m: Any, step: float) -> Any:
    """The mean of a block's ``m`` numbers that change by ``step`` from each to the next, ``first`` the first:
    ``first + step (m - 1) / 2``. Exact for ranks, where a running sum rounds: the segmented sums of torch and JAX
    (scatter-adds) add one entry at a time, and in float32 a total of ranks above 2^24 rounds (at n = 10^5, a
    third of a rank in the block's mean)."""
    return first + (0.5 * step) * (m - 1.0)


def centred_moments(xp: Any, adapter: Any, starts: Any, d: Any, highest: int, precise: bool = False) -> tuple[Any, ...]:
    """``(M2, ..., M_highest)`` per entry: its block's sums of ``d^2`` to ``d^highest`` (``d`` centred on each block,
    ``starts`` True where one begins), in one segmented sum (``precise`` as ``adapter.segment_sum``'s)."""
    powers = [d * d]
    for _ in range(highest - 2):
        powers.append(powers[-1] * d)
    moments = adapter.segment_sum(xp, starts, xp.stack(powers), precise=precise)
    return tuple(moments[i, ...] for i in range(highest - 1))


def block_form(xp: Any, adapter: Any, starts: Any, y: Any, w: Any, highest: int = 3) -> tuple[Any, ...]:
    """Each entry's block (``starts``: True where one begins) in :class:`PowerSums`' block form ``(mean, W, m, M2,
    ..., M_highest)``: the block's mean, total weight, size and centred moments (``highest``: its :attr:`PowerSums.form`
    less 2)."""
    m, total_w, mean, d = centred(xp, adapter, starts, y, w)
    return (mean, total_w, m, *centred_moments(xp, adapter, starts, d, highest))


def merge_blocks(xp: Any, adapter: Any, values: Any, data: tuple[Any, ...], q: float) -> Any:
    """The merge rounds' fit of rows of blocks, one entry each (``values``, ``data`` in :func:`block_form`)."""
    return isotonic.merge_rows(xp, adapter, PowerSums(q), values, data, (None,) + (0.0,) * (len(data) - 1))


def pool_blocks(xp: Any, adapter: Any, values: Any, data: tuple[Any, ...], sums: PowerSums) -> Any:
    """The pooling rounds' fit of rows of blocks, one entry each (``values``, ``data`` in :func:`block_form`), to the
    end: each round with a drop pools at least two blocks into one, so a row of L settles within L - 1 rounds, and a
    chain that snowballs is pooled on by the rounds' extensions (:class:`.extensions.BlockRows`) once its row's drops
    stop halving. For the unsigned problem at any integer q, q = 3 included (whose merge rounds' tests split a block
    by its data), and the soft sort's where its blocks step evenly (``sums``: :class:`SteppedSignedSums`)."""
    length = values.shape[-1]
    extend = Extension(BlockRows(sums)) if length > 1 else None
    return isotonic.pool_runs(xp, adapter, sums, values, xp.stack(data), max(length - 1, 1), extend=extend)[0]


def _one_per_block(xp: Any, adapter: Any, v: Any, y: Any, blocks: tuple[Any, ...], ordinal: Any, count: int) -> tuple[Any, tuple[Any, ...], Any]:
    """The blocks of ``v`` (runs of equal values, ``blocks`` each entry's block in :func:`block_form`, ``ordinal`` each
    entry's block counted from 1) as entries of rows of ``count`` (at least as many as the row with most blocks):
    ``(values, data, index)``, ``data`` :class:`PowerSums`' block form, ``index`` each entry's block
    (``take(values, index)`` spreads a row of blocks back). A row's blocks come first, then entries that weigh
    nothing and sit at the row's largest value (they never pool, :func:`.isotonic.merge_rows`)."""
    n = v.shape[-1]
    dev = _device(v)
    mean, *sums = blocks
    # each block's first entry (n past the row's last block)
    wanted = xp.broadcast_to(xp.arange(1, count + 1, dtype=ordinal.dtype, device=dev), v.shape[:-1] + (count,))
    first = adapter.searchsorted(xp, ordinal, wanted, side="left")
    real = first < n
    at = xp.where(real, first, n - 1)

    def gather(a: Any, pad: Any) -> Any:
        return xp.where(real, adapter.take(xp, a, at), pad)

    zero = xp.zeros((), dtype=v.dtype, device=dev)
    values = gather(v, xp.max(v, axis=-1, keepdims=True))
    data = (gather(mean, xp.max(y, axis=-1, keepdims=True)), *(gather(a, zero) for a in sums))
    return values, data, ordinal - 1


POOLED_BLOCKS_MOST = 2048  # at q = 3 under ``jax.jit``, rows of at most this many blocks pool over them (:func:`merge_fit`)
POOLED_BLOCKS_FROM = 8192  # from this padded length on: below it a round over a quarter of the entries saves little


def pooled_blocks_length(n: int) -> int:
    """At q = 3 where the blocks cannot be counted, the rows' length over which rows of ``n`` entries whose blocks fit
    pool over them (:func:`merge_fit`): a quarter of the padded length, at most :data:`POOLED_BLOCKS_MOST`, from
    :data:`POOLED_BLOCKS_FROM` on; n where none does."""
    big = padded_length(n)
    return min(POOLED_BLOCKS_MOST, big // 4) if big >= POOLED_BLOCKS_FROM else n


def merge_fit(xp: Any, v: Any, y: Any, w: Any, *, q: float, short_rows: bool = True) -> tuple[Any]:
    """``(the fit,)`` from ``v``, any pooling of the one-entry values (blocks that the fit keeps whole), called by name
    (:meth:`eagerly`).

    At q = 2 and 4 the merge rounds take each block as one entry. A backend that reads values now sizes the rows of
    blocks by the row with most blocks; one that cannot (``jax.jit``) by the first of :func:`.merges.merge_lengths`
    that holds every row's blocks (:meth:`shortcut`), or with ``short_rows`` False by the padded length alone (one
    program to compile): where the pooling rounds carried extensions (:func:`.pnorm._extension`), which finish the
    snowballing chains and leave few rows to merge.

    At q = 5 and 6 the merge rounds run over the entries (one-entry values): at q = 5 a test splits a block by its
    data, and blocks of q = 6 would carry moments up to the fifth, which cancel more.
    At q = 3 a merge test splits a block by its data, so the merge rounds start from the one-entry values. Where
    the blocks cannot be counted, rows of :func:`pooled_blocks_length` or fewer blocks pool over their blocks to
    the end instead (:func:`pool_blocks`, which their moments allow at any q): at most ``L - 1`` rounds over rows
    of ``L`` blocks. A chain that takes one block per round (the p = 3/2 rank of 10^5 entries at strength 0.1 ends
    on one over 1,200 blocks) takes a round per block there, and the merge rounds O(n log^2 n) over all n entries.
    """
    adapter = get_adapter(xp)
    kind = PowerSums(q)
    n = v.shape[-1]
    empty, concrete = 0 in v.shape, adapter.is_concrete(v)

    def entries() -> Any:
        return isotonic.merge_rows(xp, adapter, kind, y - power(xp, w, 1.0 / (q - 1.0)), (y, w), (None, 0.0))

    if kind.degree > 3 or (kind.signs and (empty or concrete or pooled_blocks_length(n) == n)):
        return (entries(),)
    starts = isotonic.block_starts(xp, v)
    ordinal = cumulative_sum(xp, xp.astype(starts, index_dtype(xp, _device(v))))
    # the blocks' moments: at q = 2 and 4 before the choice between the rows' lengths below, whose branches would each
    # compute them; at q = 3 in the one branch that pools over blocks (the other merges the entries)
    shared = None if kind.signs else block_form(xp, adapter, starts, y, w)

    def rows(count: int) -> tuple[Any, tuple[Any, ...], Any]:
        blocks = shared if shared is not None else block_form(xp, adapter, starts, y, w)
        return _one_per_block(xp, adapter, v, y, blocks, ordinal, count)

    def fit(count: int) -> Any:
        values, data, index = rows(count)
        fitted = pool_blocks(xp, adapter, values, data, kind) if kind.signs else merge_blocks(xp, adapter, values, data, q)
        return adapter.take(xp, fitted, index)

    if empty:
        return (fit(n),)
    most = xp.max(ordinal[..., -1])
    if concrete:
        return (fit(int(most)),)
    if kind.signs:
        short = pooled_blocks_length(n)
        return (adapter.shortcut(xp, most <= short, lambda: fit(short), entries),)
    # the rows of blocks are built once, at the longest length, and each length's program merges their first
    # entries: the rest are padding (past every row's last block), which the program hands back as it found it
    big = merge_lengths(n)[-1]
    values, data, index = rows(big)

    def merged(count: int) -> Any:
        if count == big:
            return merge_blocks(xp, adapter, values, data, q)
        fitted = merge_blocks(xp, adapter, values[..., :count], tuple(a[..., :count] for a in data), q)
        return xp.concat([fitted, values[..., count:]], axis=-1)

    def shortest(lengths: tuple[int, ...]) -> Any:
        """The fit over rows of the first of ``lengths`` that holds the blocks (the last holds any)."""
        if len(lengths) == 1:
            return merged(lengths[0])
        return adapter.shortcut(xp, most <= lengths[0], lambda: merged(lengths[0]), lambda: shortest(lengths[1:]))

    return (adapter.take(xp, shortest(merge_lengths(n) if short_rows else (big,)), index),)
