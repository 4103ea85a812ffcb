r"""p-norm regularized projections onto a permutahedron (Sander, Puigcerver, Djolonga, Peyre & Blondel 2023).

For ``p`` in (1, 2], ``q = p / (p - 1)`` its conjugate exponent (q >= 2),
a score row ``z`` sorted decreasing and a weight row ``w`` decreasing and
non-negative, the projection

    mu = argmax over mu in P(w) of  <mu, z> - (1/p) sum_i |mu_i|^p

(``P(w)``: the permutahedron of ``w``, the convex hull of its permutations)
is, by Blondel et al. 2020 (Prop. 3) with the regularizer's conjugate
``(1/q) |y|^q``, ``mu_i = (z_i - v_i)^(q - 1)`` with ``v`` the decreasing
fit

    v = argmin over v_1 >= ... >= v_n of  sum_i (1/q) |z_i - v_i|^q + w_i v_i.

Each block B of ``v`` holds the root of ``sum_(i in B) (z_i - v)^(q-1) =
W_B`` (``W_B = sum_B w``). Every block that pooling adjacent violators
forms keeps all its entries at or above its value (a one-entry block sits at
``z_i - w_i^(1/(q-1)) <= z_i``; a pooled run's value lies below its last
block's, whose entries are the run's smallest), so the equation has no
sign changes and, with ``t = mean_B(z) - v`` and ``d_i = z_i - mean_B(z)``
(centred moments ``M2``, ``M3``), it is

- ``q = 2`` (``p = 2``, the ``l2`` projection): ``t = W_B / |B|``;
- ``q = 3`` (``p = 3/2``): ``M2 + |B| t^2 = W_B``, a square root;
- ``q = 4`` (``p = 4/3``): ``|B| t^3 + 3 M2 t + M3 - W_B = 0``, a cubic
  with one real root (Cardano's, in a form free of cancellation);
- any other q: Newton's method from the upper bound ``(W_B / |B|)^(1/(q-1))``
  (Jensen): the equation is convex and increasing in t there, so the
  iterates decrease monotonically to the root; for the soft sort at q = 5,
  6 and any q in (2, 6) that is no integer, whose terms change sign, on
  one number per block (:mod:`.stepped`).

:func:`project` (the soft rank and sort) runs the pooling rounds of :mod:`.isotonic` (whole decreasing runs at
once). Rows whose blocks form by long chains would take up to n of them: at q = 2 and 4 (and 3 for the rank) they go
on, after at most ``4 ceil(log2 n)`` rounds, to the merge rounds of :func:`.isotonic.merge_rows`
(:func:`.isotonic.pool_then_merge`), whose tests are the loss's derivative ``f'(t) = w - phi(y - t)`` summed over a
set of entries: a polynomial in t whose coefficients are the set's sums of ``w`` and of powers of the data
(:class:`.power_sums.PowerSums`). At q = 2 and 4 those rounds take each pooled block as one entry, so a row leaves
the pooling rounds as soon as its chains snowball (:func:`.isotonic.pool_runs`' ``merge_cost``; under ``jax.jit``,
where the rounds cannot count the blocks, once it has pooled for ``log2 n`` rounds: ``merge_all``); at q = 3 they
start from the one-entry values (:func:`.power_sums.merge_fit`). A rank's row that is one block between short end
blocks (strength 1) is guessed and proved so (:mod:`.one_block`; under ``jax.jit`` and on a GPU with a fixed search,
the rounds skipped where every row passes). Where values can be read now, on a CPU, the rounds run over the blocks
in their moment form, shrinking to the blocks left (:func:`.blocks.pool_rounds`), a row stops once its last drops
stop halving, and :mod:`.windows` finishes it (q = 2 to 6): each run of drops pooled to its end in one pass (the
min-max formula over the blocks near it; at q = 3 and 5, whose moments give a range's value only where its data lie
above it, bounded by its first datum; none at q = 6), then windows around the drops left, fitted by merge rounds at
q = 2, 4 and 6, by pooling rounds at q = 3 and 5 (whose merge tests split a block by its data). The soft sort's data
are its ranks, which step evenly, so at q = 3 and any other q in (2, 6] but 4 (:func:`stepped_sort`) any range of
its blocks has its value from size, weight and second moment (:class:`.power_sums.SteppedSignedSums`; past q = 3 by
:mod:`.stepped`'s roots), and its rows finish as the unsigned problem's (pooling rounds over the blocks, min-max
passes, windows). Elsewhere rows of the rank at q = 5 and 6 go on to merge rounds over the entries
(``ENTRY_MERGES``), each pool's root by Newton's method on its moments; at any other q (no such sums) to threshold
splits (:mod:`.splits`). Where the rounds cannot read values (``jax.jit``, a GPU), at every integer q from 3 to 6
and for the sort at :func:`stepped_sort`'s q (its evenly stepped ranks) a round after one in which a row's drops
stopped halving pools its first drops on, block by block to either side (:mod:`.extensions`; rows of
``EXTENDED_FROM`` entries or more): a snowballing chain ends within a few rounds; under ``jax.jit`` at q = 3 to 6 a
round solves each block once, in the adapter's slots (:func:`.block_roots.slotted`). The output is written from ``d + t`` per block, never
as ``z - v``.

:func:`capped` (the top-k mask, ``w = (1, ..., 1, k - floor k, 0, ...)``)
needs no rounds: the top-k polytope's projection has one free block (its
docstring), found by a binary search, and its fixed entries are exactly 0
and 1 (the masks' sparsity).

The Jacobian is block-wise: with ``phi'_i = (q - 1)(z_i - v_B)^(q-2)``,
``d mu_i / d z_j = phi'_i (delta_ij - phi'_j / sum_B phi')`` and
``d mu_i / d W_B = phi'_i / sum_B phi'`` (both 0 on a block where
``mu`` is 0, for q > 2).
"""

from __future__ import annotations

from typing import Any

from .._lib._adapters import get_adapter
from .._lib._compat import broadcast_arrays
from .._lib._numerics import centred_within, safe_divide
from . import block_roots, isotonic, one_block, splits, stepped, windows
from .breakpoints import search_breakpoints
from .extensions import Extension, InSlots
from .power_sums import PowerSums, SteppedSignedSums, block_form, stepped_block_form, merge_blocks, merge_fit, pool_blocks, pooled_blocks_length
from .powers import falling_root, moment_root, odd_power, phi_and_slope, power, power_sum
from .subsets import Subset, one_entry_blocks

__all__ = ["exponent", "project", "capped", "slope", "exponent_of", "ENTRY_MERGES", "EXTENDED_FROM"]


def exponent(p: float) -> float:
    """``q = p / (p - 1)``, the conjugate exponent of ``p``; snapped to an integer within rounding (4/3 in floating
    point gives 4.000000000000001), so that the closed forms serve the p that name them."""
    q = p / (p - 1.0)
    return float(round(q)) if abs(q - round(q)) < 1e-9 else q


def exponent_of(opts: Any) -> float:
    """The ``q`` of a permutahedron option set: :func:`exponent` of its ``p`` for ``regularization="lp"``, 2 (the
    l2 case) else."""
    return exponent(opts.p) if opts.regularization == "lp" else 2.0


# rows of fewer entries pool to the end without the rounds' extensions (:func:`_extension`): their few rounds more
# cost less than the extensions' operations in each, and the program compiles without the extensions' branch
EXTENDED_FROM = 64
# q past 4 whose rows go on to merge rounds over the entries' power sums where no windows finish them (p = 1.25, 1.2;
# higher degrees cancel too much), costing about 1.5 log2 n pooling rounds (``merge_cost`` 3 at K ~ n / 2 blocks)
ENTRY_MERGES, ENTRY_MERGE_COST = (5.0, 6.0), 3.0


def stepped_sort(q: float) -> bool:
    """Whether the soft sort's blocks at ``q``, evenly stepped ranks, take a pool value from their size, weight and
    second moment (:class:`.power_sums.SteppedSignedSums`: rounds over blocks, passes and windows on a CPU, extensions
    elsewhere): at q = 3 and where :func:`.stepped.solves` (q = 5, 6 and any q in (2, 6] that is no integer; q = 4's
    sort merges over its blocks)."""
    return q == 3.0 or stepped.solves(q)


class _Rules:
    """The pooling rounds' rule (:func:`.isotonic.pool_runs`) for this loss: a segment's value from its entries
    (``yw`` stacks the row and its weights: the value is no function of the segments' own values)."""

    def __init__(self, q: float) -> None:
        self.q = q
        # the cubic's root (q = 4) and Newton's steps (no closed form) cost enough per entry that a pooling round
        # solves only the segments that changed once they are at most a quarter of the entries; a mean (q = 2) or a
        # square root (q = 3) costs less than the gathers (:func:`.isotonic.pool_runs`)
        self.compact_share = 0.0 if q in (2.0, 3.0) else 0.25
        self.block_share = 0.55 if q in (2.0, 3.0) else 0.7  # where rounds over blocks pay (windows.few_blocks)
        # a segment's value from its sums by division, subtraction and a square root at q = 2 and 3, each correctly
        # rounded (IEEE 754) in a kernel's vector body and its scalar tail alike, gives its entries the same bits
        # (``exact``); elsewhere :meth:`pooled` reads each segment's first value, or solves it once (``uniform``)
        self.exact, self.uniform = q in (2.0, 3.0), True
        # the blocks' first data bound the min-max passes' ranges at an even power (windows._pool_each_run: q = 3, 5), and
        # the blocks carry the moments their sums read (read where blocks have a form: an integer q)
        sums = PowerSums(q)
        self.lows, self.highest = sums.signs, sums.form - 2
        # whether the rounds' extension reads :meth:`pooled_blocks`' form (:func:`_extension`'s rule is PowerSums(q)): where
        # the round's root reads every moment in it (at q = 3 the form holds M3, which the square root does not read)
        self.forms = q in block_roots.MOMENT_ROOTS and self.highest == int(q) - 1

    def pooled(self, xp: Any, adapter: Any, starts: Any, u: Any, yw: Any, unit: bool) -> Any:
        # these values only place the blocks (the output is solved again on them): no tangent is read
        if self.q in block_roots.MOMENT_ROOTS:
            return self._pooled_form(xp, adapter, starts, yw, int(self.q) - 1)[0]
        mean, _, t = block_roots.shift(xp, adapter, starts, yw[0, ...], yw[1, ...], self.q, tangent=False)
        return adapter.segment_first(xp, starts, mean - t)  # Newton's steps: see _pooled_form

    def pooled_blocks(self, xp: Any, adapter: Any, starts: Any, u: Any, yw: Any, unit: bool) -> tuple[Any, tuple[Any, ...]]:
        """``(values, form)``: :meth:`pooled`'s values (the same numbers) and the blocks in
        :func:`.power_sums.block_form`, from which they come: the statistics that the rounds' extension of chains
        (:class:`.extensions.Extension`) reads, summed once a round where it would sum them again."""
        return self._pooled_form(xp, adapter, starts, yw, self.highest)

    def _pooled_form(self, xp: Any, adapter: Any, starts: Any, yw: Any, highest: int) -> tuple[Any, tuple[Any, ...]]:
        """``(values, form)`` at a q of :data:`.block_roots.MOMENT_ROOTS`, the form up to ``M_highest``: each block
        solved once in the adapter's slots where values are not read now (``jax.jit``; the form
        :class:`.extensions.InSlots`), else at each entry (on a CPU that reads values, the rounds solve only the
        blocks that changed), its block then taking its first entry's value: a power may round apart at two entries of
        equal input (a kernel's vector body and its scalar tail), which would split the block (not where every
        operation is correctly rounded, ``exact``)."""
        y, w = yw[0, ...], yw[1, ...]
        slots = isotonic.traced_slots(xp, adapter, starts)
        if slots is not None:
            values, form = block_roots.slotted(xp, adapter, slots, y, w, self.q, highest)
            return values, InSlots(form)
        form = block_form(xp, adapter, starts, y, w, highest=highest)
        mean, total_w, m, *moments = form
        values = mean - block_roots.moment_shift(xp, adapter, starts, total_w, m, tuple(moments), self.q, tangent=False)
        return values if self.exact else adapter.segment_first(xp, starts, values), form

    def block_data(self, xp: Any, adapter: Any, starts: Any, yw: Any, v: Any) -> tuple[Any, ...]:
        """Each entry's block in :func:`.power_sums.block_form`, as 2-D rows (:mod:`.windows`: block-compressible)."""
        return block_form(xp, adapter, starts, *(windows.rows_of(xp, yw[i, ...], v) for i in (0, 1)), highest=self.highest)

    def block_low(self, xp: Any, yw: Any, v: Any) -> Any:
        """Each entry's datum as 2-D rows (at q = 3 and 5, :class:`.blocks.Blocks`' ``low``), else None."""
        return windows.rows_of(xp, yw[0, ...], v) if self.lows else None

    @staticmethod
    def pad(xp: Any, low: Any, data: tuple[Any, ...]) -> tuple[Any, tuple[Any, ...]]:
        """An entry before a row whose values are at least ``low`` (its first block's statistics ``data``) that never
        moves a fit: that value (no drop), with all its sums 0, at the first block's mean (the sums' centre)."""
        return low, (data[0],) + (0.0,) * (len(data) - 1)


class _SignedRules(_Rules):
    """:class:`_Rules` for weights of either sign, the soft sort's (:func:`.block_roots.sort_shift`: Newton's steps where
    q is not 2, 3 or 4, over a block's entries, or on its size and weight alone where its ranks step evenly), whose
    blocks at :func:`stepped_sort` carry :func:`.power_sums.stepped_block_form`."""

    def __init__(self, q: float) -> None:
        super().__init__(q)
        self.compact_share = 0.0 if q == 2.0 else 0.25
        self.exact = q == 2.0  # the signed square root's sums of products may be contracted differently per entry
        self.lows = False  # the sort's sums (power_sums.SteppedSignedSums) give any range's value: no bound needed
        # its blocks' values come from their steps (block_roots.sort_shift), not their moments; in the adapter's slots
        # the round hands the extension (SteppedSignedSums') their stepped form
        self.forms = stepped_sort(q) and q in block_roots.MOMENT_ROOTS
        if stepped_sort(q):  # its blocks carry q = 3's form at every q (up to the second moment, whence the step)
            self.highest = SteppedSignedSums(q).form - 2

    def pooled(self, xp: Any, adapter: Any, starts: Any, u: Any, yw: Any, unit: bool) -> Any:
        return self.pooled_blocks(xp, adapter, starts, u, yw, unit)[0]

    def pooled_blocks(self, xp: Any, adapter: Any, starts: Any, u: Any, yw: Any, unit: bool) -> tuple[Any, Any]:
        """``(values, form)``: under ``jax.jit`` at q = 3 to 6 each block solved once in the adapter's slots
        (:func:`.block_roots.slotted_sort`, the form :class:`.extensions.InSlots`), else at each entry (form None)."""
        slots = isotonic.traced_slots(xp, adapter, starts) if self.q in block_roots.MOMENT_ROOTS else None
        if slots is not None:
            values, form = block_roots.slotted_sort(xp, adapter, slots, starts, yw[0, ...], yw[1, ...], self.q)
            return values, InSlots(form)
        mean, _, t = block_roots.sort_shift(xp, adapter, starts, yw[0, ...], yw[1, ...], self.q)
        return (mean - t if self.exact else adapter.segment_first(xp, starts, mean - t)), None

    def block_data(self, xp: Any, adapter: Any, starts: Any, yw: Any, v: Any) -> tuple[Any, ...]:
        if not stepped_sort(self.q):
            return super().block_data(xp, adapter, starts, yw, v)
        return stepped_block_form(xp, adapter, starts, *(windows.rows_of(xp, yw[i, ...], v) for i in (0, 1)))


def _rules(q: float, signed: bool) -> _Rules:
    """The pooling rounds' rule for weights of one sign (the rank's, whose blocks hold no entry below their value), or
    of either sign (``signed``: the sort's)."""
    return (_SignedRules if signed else _Rules)(q)


def project(xp: Any, adapter: Any, z: Any, w: Any, q: float, valid: Any = None, signed: bool = False) -> tuple[Any, Any, Any]:
    """``(mu, share, starts)`` along the last axis, in the sorted order of ``z`` (decreasing; ``w`` the rank's rho,
    ``(n_v, ..., 1)`` then 0, unless ``signed``).

    ``share``: ``phi' / sum_B phi'`` per entry (the Jacobian's weights, 0 on a
    block where mu is 0); ``starts``: True where a block begins. ``valid``:
    False on a masked tail (sorted last, ``w`` 0 there), whose entries are
    set below every block value of the valid ones: each stays a block of its
    own (no drop among equal values, none from the last valid block) with mu 0.
    ``signed``: ``w`` of either sign (the soft sort's data, ``z`` its ranks), each
    block's equation solved by :func:`.block_roots.sort_shift`, and ``mu = phi(z - v)`` signed.
    """
    z, w = broadcast_arrays(xp, z, w)
    if valid is not None:
        # every block value of the valid entries is at least min z - W^(1/(q-1)) (t_B <= (W_B / |B|)^(1/(q-1))),
        # with signed weights at least min z - spread(z) - (sum |w|)^(1/(q-1)) (the bracket of block_roots.signed_shift)
        big, small = xp.full_like(z, float("inf")), xp.full_like(z, -float("inf"))
        far = xp.min(xp.where(valid, z, big), axis=-1, keepdims=True)
        top = xp.max(xp.where(valid, z, small), axis=-1, keepdims=True)
        spread = xp.where(xp.isfinite(top - far), top - far, xp.zeros_like(far))
        far = xp.where(xp.isfinite(far), far, xp.zeros_like(far))
        total = xp.sum(xp.abs(xp.where(valid, w, 0.0)), axis=-1, keepdims=True)
        below = far - power(xp, total, 1.0 / (q - 1.0)) - (2.0 * spread if signed else 0.0) - 1.0
        z = xp.where(valid, z, below)
        w = xp.where(valid, w, 0.0)
    # the decreasing fit is the increasing fit of the reversed row, reversed
    y, wf = xp.flip(z, axis=-1), xp.flip(w, axis=-1)
    e = 1.0 / (q - 1.0)
    v0 = y - (odd_power(xp, wf, e) if signed else power(xp, wf, e))  # one-entry blocks
    v, d, t = windows.eager_on_cpu(xp, adapter, fitted_blocks, (v0, y, wf), like=(0, 0, 0), q=q, signed=signed,
                                   masked=valid is not None)
    starts = isotonic.block_starts(xp, v)
    a = d + t if signed else xp.clip(d + t, 0.0, None)
    mu, slope = phi_and_slope(xp, a, q, signed=signed)
    dphi = (q - 1.0) * slope
    share = safe_divide(xp, dphi, isotonic.block_sums(xp, adapter, starts, dphi))
    # back in z's order: a block's start is its first entry in that order (the reversed block's last)
    ends = isotonic.block_starts(xp, xp.flip(v, axis=-1))
    return xp.flip(mu, axis=-1), xp.flip(share, axis=-1), ends


def fitted_blocks(xp: Any, v0: Any, y: Any, wf: Any, *, q: float, signed: bool, masked: bool) -> tuple[Any, Any, Any]:
    """``(v, d, t)``: the isotonic fit of :func:`project`'s one-entry values ``v0`` (rows ``y``, weights ``wf``,
    increasing order; ``masked``: a masked tail), by pooling rounds, windows or merge rounds as the backend allows
    (after a guess: :func:`.one_block.guessed_first` where values can be read now, else
    :func:`.one_block.guessed_in_graph`), and its blocks' roots; by name."""
    adapter, rules = get_adapter(xp), _rules(q, signed)
    if signed or masked or 0 in v0.shape:
        return _fitted(xp, adapter, rules, v0, y, wf, q, signed, masked)
    guess = one_block.guessed_first if windows.readable_on_cpu(adapter, v0, y, wf) else one_block.guessed_in_graph
    # a fit from values that a guess pooled starts from their blocks; from one-entry values, from every entry
    return guess(xp, adapter, v0, y, wf, q, lambda v, y, wf, pooled=True: _fitted(
                     xp, adapter, rules, v, y, wf, q, False, False, isotonic.block_starts(xp, v) if pooled else None),
                 lambda s, y, wf: _solved(xp, adapter, rules, s, y, wf, False), lambda *b: _free_root(xp, adapter, *b, q))


def _fitted(xp: Any, adapter: Any, rules: _Rules, v0: Any, y: Any, wf: Any, q: float, signed: bool, masked: bool,
            starts: Any = None) -> tuple[Any, Any, Any]:
    """:func:`fitted_blocks` by the rounds from the segments ``starts`` begins (default: one entry each), placed without
    derivatives (a partition is constant almost everywhere; JAX cannot transpose a round's Newton's steps): only the
    solve on the blocks is differentiated, once or twice."""
    ys, ws, v = (adapter.stop_gradient(xp, a) for a in (y, wf, v0))
    yw, n = xp.stack([ys, ws]), v0.shape[-1]
    extend = _extension(q, signed) if n >= EXTENDED_FROM else None
    if n > 1:
        # rows whose blocks form by long chains would take up to n pooling rounds: the rows the pooling leaves go to merge
        # rounds (or windows) where the loss has power sums (q = 2 to 6, 3 with blocks above their values), else to splits
        entries_only = q in ENTRY_MERGES and not signed
        if q in (2.0, 4.0) or (q == 3.0 and not signed) or entries_only:
            # over blocks, merge rounds finish a snowballing chain (rows at q = 4 form them at n = 1000) for less than
            # its pooling; at q = 3 under jax.jit a row whose blocks fit in a short row stalls out to pool over them
            blocks = q in (2.0, 4.0)
            short = pooled_blocks_length(n) if q == 3.0 and not adapter.reads_in_eager_node(v0) else n
            # on a CPU the few drops the pooling leaves are fitted in windows of blocks (:mod:`.windows`) by the same merge
            # rounds (q = 3, 5: pooling rounds over the blocks' moments): a row of 1000 leaves about one drop
            sums = PowerSums(q)
            v = isotonic.pool_then_merge(xp, adapter, rules, v, yw, lambda u, unsettled: xp.where(
                unsettled[..., None], adapter.eagerly(xp, merge_fit, (u, ys, ws), like=(0,), q=q, short_rows=extend is None)[0], u),
                merge_cost=ENTRY_MERGE_COST if entries_only else 1.0 if blocks or short < n else 0.0, stall_blocks=0 if blocks else short,
                finish=lambda values, data: (pool_blocks(xp, adapter, values, data, sums) if sums.signs
                                             else merge_blocks(xp, adapter, values, data, q)),
                sums=sums, extend=extend, starts=starts)
        elif signed and stepped_sort(q) and not masked and windows.readable_on_cpu(adapter, v0, yw):
            # the sort's ranks step evenly, so its blocks have a block form after all: on a CPU the rounds over blocks,
            # the passes and the windows finish its chains (:class:`.power_sums.SteppedSignedSums`); elsewhere it pools
            sums = SteppedSignedSums(q)
            v = isotonic.pool_then_merge(xp, adapter, rules, v, yw, lambda u, unsettled: u, rounds=n, sums=sums,
                                         finish=lambda values, data: pool_blocks(xp, adapter, values, data, sums), starts=starts)
        else:  # a compiled torch graph runs the splits in one eager node, whose levels solve only the segments left
            v = isotonic.pool_then_merge(xp, adapter, rules, v, yw, lambda u, left: adapter.eagerly(
                xp, _split_fit, (u, ys, ws, left), like=(0,), q=q, signed=signed)[0], merge_cost=splits.cost(adapter, v), starts=starts,
                extend=extend)
    _, d, t = _solved(xp, adapter, rules, isotonic.block_starts(xp, v), y, wf, signed)
    return v, d, t


def _extension(q: float, signed: bool) -> Extension | None:
    """The extension of the pooling rounds (:mod:`.extensions`) at every integer q from 3 to 6, and for the sort at
    :func:`stepped_sort`'s q (:func:`_fitted` takes it on rows of :data:`EXTENDED_FROM` entries or more): a range of
    blocks' size, weight, mean and centred moments give its pool's value along the steps of pool-adjacent-violators
    (for the sort, whose weights have either sign, by its evenly stepped ranks; at q = 4, ``phi(u) = u^3``, the cubic
    in the range's moments whatever their signs; at q = 5 and 6 Newton's steps on them, each such pool's data above
    its value). At q = 3, 5 and 6 the merge rounds take no blocks (at 3 and 5 a test splits a block by its data; at
    5 and 6 they run over the entries, :data:`ENTRY_MERGES`, about 1.5 log2 n pooling rounds' cost); at q = 4 they
    do, but a chain pooled on by the extensions ends within a few rounds, each O(n), where the merge rounds over the
    blocks take O(K log^2 K) for K blocks, which under ``jax.jit`` they cannot count (rows of a fifth or half of n).
    At q = 2 the merge rounds over the blocks finish such rows."""
    if signed and stepped_sort(q):
        return Extension(SteppedSignedSums(q))
    return Extension(PowerSums(q)) if q in (3.0, 4.0, *ENTRY_MERGES) else None


def _split_fit(xp: Any, v: Any, y: Any, w: Any, left: Any, *, q: float, signed: bool) -> tuple[Any]:
    """:func:`.splits.fit_left` of the rows ``left`` of :func:`_fitted`'s rounds, each segment's root by
    :func:`.block_roots.signed_shift` (the sort's: :func:`.block_roots.sort_shift`), the pooling after them by the
    rounds' own rule (``signed``: the sort's, whose blocks may hold entries below their value)."""
    shift = block_roots.sort_shift if signed else block_roots.signed_shift
    return (splits.fit_left(xp, get_adapter(xp), _rules(q, signed), lambda *a, **k: shift(*a, q, **k), v, y, w, q,
                            left),)


def _solved(xp: Any, adapter: Any, rules: _Rules, starts: Any, y: Any, w: Any, signed: bool) -> tuple[Any, Any, Any]:
    """:func:`.block_roots.shift` (``signed``: :func:`.block_roots.sort_shift`) over the blocks that ``starts``
    begins. Where values can be read now, on a CPU, and at most ``rules.compact_share`` of the entries lie in blocks
    of several, the root is solved over those alone (:class:`.subsets.Subset`), a one-entry block in closed form
    (``mean = y``, ``d = 0``, ``t = phi^-1(w)``): a soft sort's rows are mostly one-entry blocks, whose roots would
    otherwise take Newton's steps."""
    # precise: the output's moments (a float32 scatter-add's running sums moved ranks of tied rows of 3 x 10^4 by 0.24)
    # w: rho reversed
    q, shift = rules.q, block_roots.sort_shift if signed else lambda *a: block_roots.shift(*a, step=1.0, about_first=True, precise=True)
    # both arrays: a soft sort's y (the ranks) is a constant even where its weights (the data) are traced
    if not (rules.compact_share > 0 and windows.readable_on_cpu(adapter, y, w)):
        return shift(xp, adapter, starts, y, w, q)
    several = Subset(xp, ~one_entry_blocks(xp, starts))
    if several.share() > rules.compact_share:
        return shift(xp, adapter, starts, y, w, q)
    alone = (odd_power if signed else power)(xp, w, 1.0 / (q - 1.0))
    if several.size == 0:
        return y, xp.zeros_like(y), alone
    mean, d, t = shift(xp, adapter, several.take(starts), several.take(y), several.take(w), q)
    return several.put(mean, y), several.put(d, xp.zeros_like(y)), several.put(t, alone)


def slope(xp: Any, mu: Any, q: float) -> Any:
    """``phi' = (q - 1) mu^((q-2)/(q-1))``, the derivative of ``mu = (z - v)^(q-1)`` in z at fixed v."""
    if q == 2.0:
        return xp.ones_like(mu)
    return (q - 1.0) * power(xp, xp.abs(mu), (q - 2.0) / (q - 1.0))


def capped(xp: Any, adapter: Any, s: Any, k: Any, q: float, valid: Any = None) -> tuple[Any, Any, Any]:
    """The projection onto the top-k polytope ``{mu in [0, 1]^n : sum mu = k}`` (capped simplex) by its threshold.

    That polytope is the permutahedron of ``(1, ..., 1, k - floor k, 0, ...)``,
    and its projection has one free block: ``mu_i = clip((s_i - tau)^(q-1), 0, 1)``
    with ``sum mu = k`` (the KKT conditions of the box and the sum; the same
    solution as :func:`project`, found without its pooling rounds). ``S(tau)
    = sum clip(...)`` decreases through the breakpoints ``s_i`` and ``s_i - 1``:
    a binary search over them (``ceil(log2 2n)`` evaluations of S, O(n)
    each) finds the interval holding ``tau``, on which the free entries are
    fixed; their equation ``sum_free (s_i - tau)^(q-1) = k - #ones`` is
    :func:`.block_roots.shift`'s (closed forms, or Newton). ``s`` sorted decreasing; ``k``
    of shape ``(..., 1)``, in (0, n_v]; ``valid``: False on a masked tail.
    Returns ``(mu, share, starts)`` as :func:`project` (the free entries one
    block, every other entry a block of its own).

    ``tau`` lies in ``(s_c - 1, s_c)`` for ``c = ceil k`` (at or above ``s_c``
    fewer than ``c`` entries are above 0, sum below k; at or below ``s_c - 1``
    the first ``c`` are 1, sum above k; a k whose free set is empty excepted):
    ``s`` taken from its ``c``-th entry (the caller's, before any rescaling)
    holds the entries that blend within 1 of 0, where ``s`` and ``s - 1`` stay
    apart and their differences exact, whatever the row's scale.
    """
    if valid is not None:
        # below every threshold: tau >= min(valid s) - 1 (there S = n_v >= k), so a masked entry stays at 0
        low = xp.min(xp.where(valid, s, xp.full_like(s, float("inf"))), axis=-1, keepdims=True)
        low = xp.where(xp.isfinite(low), low, xp.zeros_like(low))
        s = xp.where(valid, s, low - 2.0)
    # the breakpoints in decreasing order, and where each entry's own two went: an entry is 1 once tau is past its
    # s - 1, free between, 0 above its s. Read from these positions, not from s - tau, the status survives s - 1
    # rounding to s at large s
    breaks, top, bottom = adapter.merge_descending(xp, s, s - 1.0)
    top, bottom = xp.asarray(top, copy=True), xp.asarray(bottom, copy=True)  # not views of one array: see the search

    def total(j: Any) -> Any:
        """S at tau = breaks[j]: the entries whose s - 1 is at or above it count 1 (there exactly), those between theirs
        their share."""
        tau = adapter.take(xp, breaks, j)
        between = (top < j) & (bottom > j)
        a = xp.where(bottom <= j, 1.0, xp.where(between, xp.clip(s - tau, 0.0, 1.0), 0.0))
        return power_sum(xp, a, q - 1.0)

    upper, free, whole = search_breakpoints(xp, adapter, top, bottom, total, k)  # whole: every valid entry is 1
    ones = upper | (whole & (True if valid is None else valid))
    # the free entries' block: their mean, centred moments and the root t = mean - tau
    count = xp.sum(xp.astype(free, s.dtype), axis=-1, keepdims=True)
    m = xp.where(count > 0, count, xp.ones_like(count))
    mean, d = centred_within(xp, s, free, m)
    rest = k - xp.sum(xp.astype(ones, s.dtype), axis=-1, keepdims=True)
    starts = ~free | xp.concat([xp.ones_like(free[..., :1]), ~free[..., :-1]], axis=-1)
    t = _free_root(xp, adapter, d, free, rest, m, q)
    a = xp.where(free, xp.clip(d + t, 0.0, None), xp.astype(ones, s.dtype))
    phi, slope = phi_and_slope(xp, a, q, signed=False)
    mu = xp.where(free, phi, a)
    dphi = xp.where(free, (q - 1.0) * slope, 0.0)
    # a fixed entry is a block of its own, whose share is 1 (its Jacobian row is then 0)
    share = xp.where(free, safe_divide(xp, dphi, xp.sum(dphi, axis=-1, keepdims=True)), 1.0)
    return mu, share, starts


def _free_root(xp: Any, adapter: Any, d: Any, free: Any, total_w: Any, m: Any, q: float) -> Any:
    """:func:`.block_roots.shift`'s root for the one free block of :func:`capped` (``d`` centred on the free entries, 0
    elsewhere): the same closed forms and Newton steps, as reductions over the row: one block needs no segmented sums
    (a scatter on torch), which cost more than a reduction on every step."""
    if q == 2.0:
        return total_w / m
    m2 = xp.sum(d * d, axis=-1, keepdims=True)
    if q == 3.0:
        return moment_root(xp, q, total_w, m, m2)
    if q == 4.0:
        return moment_root(xp, q, total_w, m, m2, xp.sum(d * d * d, axis=-1, keepdims=True))
    return falling_root(xp, adapter, free, d, total_w, 0.0, power(xp, xp.clip(total_w, 0.0, None) / m, 1.0 / (q - 1.0)), q)

