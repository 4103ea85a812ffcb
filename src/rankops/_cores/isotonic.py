r"""Exact isotonic regression as array operations: run pooling, then ``ceil(log2 n)`` rounds of parallel merges.

Pool-adjacent-violators is sequential. Here, first, every maximal run of strictly decreasing blocks pools at once,
for at most ``4 ceil(log2 n)`` rounds: most rows settle well within them (:func:`pool_runs`). Rows left unsettled go
through merge rounds: the row is split into segments of 1, 2, 4, ... entries; at every round each pair of
neighbouring segments, both already solved, is merged. Merging two increasing solutions ``L`` (left) and ``R``
(right) changes exactly one block: a suffix of ``L`` and a prefix of ``R`` pool into one value ``v*``, and the
merged solution is ``min(L, v*)`` on the left, ``max(R, v*)`` on the right. ``L_j`` pools iff ``sum_(R_i < L_j) w
(L_j - R_i) > sum_(k > j) w (L_k - L_j)`` (the merged objective decreases past ``L_j``), ``R_i`` iff the mirror
inequality holds; the left-hand side must also be above the empty sum, so an entry with nothing to violate never
pools on the rounding of the right. One search per entry into the other half and sums within the halves evaluate
every test at once (:mod:`.merges`): a round costs O(n log n) work in a fixed number of array operations
(``jax.jit`` sees a static graph). Sums run outward from the segment boundary, so a small pool is never the
difference of two large prefix sums. The KL fit's rows (and the l2 soft sort's) end on chains that take one
neighbour per round for tens of rounds: :mod:`.windows` fits their last drops on a CPU, :mod:`.extensions` elsewhere.

Two losses share the rounds, each block taking the value that minimises it:

- ``"l2"``: ``sum_i w_i (v_i - y_i)^2``, block value ``sum w y / sum w``
  (weights ``w > 0``; ``scipy.optimize.isotonic_regression``);
- ``"kl"``: ``sum_i exp(y_i - v_i) + exp(w_i) v_i`` (Blondel et al. 2020,
  Eq. 9, weights given as logs), block value ``LSE(y_B) - LSE(w_B)``: a
  Bregman isotonic problem whose blocks pool by the same rule, in logs.

The merge rounds serve a third family, the p-norm loss of :mod:`.pnorm`,
whose tests sum the data (:mod:`.power_sums`, through :func:`merge_rows`).

The Jacobian is block-wise (Blondel et al. 2020, Lemma 1): for ``"l2"``, ``dv_B
/ dy_i = w_i / W_B``; for ``"kl"``, ``softmax(y_B)_i``. Blocks are the runs of
equal values of the solution, as in torchsort; their sums are the adapter's
segmented sums (a scatter-add on torch, scans elsewhere): no n x n anything."""

from __future__ import annotations

import math
from typing import Any, Callable

from .._lib._compat import broadcast_arrays, device as _device
from .._lib._adapters import get_adapter
from .._lib._loops import freeze_rows
from .._lib._numerics import logaddexp, safe_divide, safe_log_divide
from . import windows
from .extensions import Extension, InSlots, LogSums, MeanSums
from .merges import merge_rounds, padded_length
from .subsets import ChangedSegments

__all__ = ["fit", "decreasing", "pool_runs", "traced_slots", "pool_then_merge", "merge_rows", "block_starts", "block_sums", "block_first"]


class _L2:
    identity = 0.0
    # windows for the soft sort's long rows, chains past 4 log2 n rounds: from 4096 entries, after log2 n rounds
    snowballs, shortest, patient = True, 4096, True
    centred = False  # the merge rounds' sums are of solved values: no boundary to centre them on
    whole_blocks = False  # an equal neighbour adds exactly 0 to a test
    signs = False  # the tests' terms keep their sign across a set
    uniform = True  # :meth:`pooled` gives a segment's entries the same bits (:func:`pool_runs`)
    forms = True  # :meth:`pooled_blocks` hands the extension of chains its statistics

    @staticmethod
    def single(xp: Any, y: Any, w: Any) -> Any:
        """The value of a one-entry block."""
        return y

    @staticmethod
    def stats(xp: Any, v: Any, data: tuple[Any], centre: None) -> tuple[Any, Any]:
        # block totals of w v equal those of w y: every block holds its mean
        return data[0] * v, data[0]

    @staticmethod
    def cum(xp: Any, adapter: Any, a: Any, reverse: bool) -> Any:
        return adapter.cumulative_sum(xp, a, reverse=reverse)

    @staticmethod
    def comb(xp: Any, a: Any, b: Any) -> Any:
        return a + b

    @staticmethod
    def value(xp: Any, sums: tuple[Any, Any], fallback: Any, centre: Any = None) -> Any:
        return safe_divide(xp, *sums, fallback)

    @staticmethod
    def pooled(xp: Any, adapter: Any, starts: Any, u: Any, yw: Any, unit: bool) -> Any:
        """Each entry's segment value from the data (as :meth:`_KL.pooled`), ``sum_S w y / sum_S w`` (``yw`` stacks
        the row and its weights; ``unit``: they are ones, and the totals are sums and counts)."""
        return _L2.pooled_blocks(xp, adapter, starts, u, yw, unit)[0]

    @staticmethod
    def pooled_blocks(xp: Any, adapter: Any, starts: Any, u: Any, yw: Any, unit: bool) -> tuple[Any, tuple[Any, Any]]:
        """``(values, (values, W))``: :meth:`pooled`'s values and each entry's segment weight ``sum_S w``, the
        statistics that the rounds' extension of chains reads (:class:`.extensions.MeanSums`), from the same sums;
        where values are not read now (``jax.jit``), each segment's in the adapter's slots (:class:`.extensions.InSlots`:
        the mean divided once per segment, and read back alone)."""
        slots = traced_slots(xp, adapter, starts)
        y, w = yw[0, ...], yw[1, ...]
        # a block of zero weights may take any value: its plain mean keeps it one block, quietly (no 0 / 0)
        g = yw if unit else xp.stack([w * y, w, y, xp.ones_like(y)])
        tot = adapter.segment_sum(xp, starts, g) if slots is None else slots[0](g)
        count = tot[1 if unit else 3, ...]
        count = count if slots is None else xp.where(count > 0, count, 1.0)  # an empty slot: no 0 / 0
        mean = tot[0, ...] / count if unit else _L2.value(xp, (tot[0, ...], tot[1, ...]), tot[2, ...] / count)
        if slots is None:
            return mean, (mean, tot[1, ...])
        return slots[1](mean, exact=True), InSlots((mean, tot[1, ...]))

    @staticmethod
    def block_data(xp: Any, adapter: Any, starts: Any, yw: Any, v: Any) -> tuple[Any, Any]:
        """``(each entry's block value, its total weight sum_B w)``, as 2-D rows (:mod:`.windows`): a block as one entry."""
        return windows.rows_of(xp, v, v), adapter.segment_sum(xp, starts, windows.rows_of(xp, yw[1, ...], v))

    @staticmethod
    def pad(xp: Any, low: Any, data: tuple[Any, ...]) -> tuple[Any, tuple[Any, float]]:
        """An entry before a row whose values are at least ``low`` (its first block's statistics ``data``) that never
        moves a fit: that value, of no weight."""
        return low, (low, 0.0)

    @staticmethod
    def above(xp: Any, sums: tuple[Any, Any], ref: Any, centre: None, lower: None) -> Any:
        """``sum_S w (v - ref)`` from S's totals, for a set S of values above ``ref`` (0 for an empty S)."""
        return sums[0] - ref * sums[1]

    @staticmethod
    def below(xp: Any, sums: tuple[Any, Any], ref: Any, centre: None, lower: None) -> Any:
        """``sum_S w (ref - v)`` for a set S of values below ``ref``."""
        return ref * sums[1] - sums[0]


def traced_slots(xp: Any, adapter: Any, starts: Any) -> Any:
    """The adapter's ``segment_slots`` for a round that solves each segment once in them: where values are not read
    now (``jax.jit``; a backend that reads them solves only what changed, or per entry), else None."""
    return None if adapter.is_concrete(starts) else adapter.segment_slots(xp, starts)


def _log1mexp(xp: Any, d: Any) -> Any:
    """``log(1 - exp(d))`` for ``d <= 0``, -inf at ``d >= 0`` (rounding may push d past 0)."""
    t = -xp.expm1(xp.minimum(d, xp.zeros_like(d)))
    some = t > 0
    return xp.where(some, xp.log(xp.where(some, t, xp.ones_like(t))), xp.full_like(t, -math.inf))


class _KL:
    identity = -math.inf
    snowballs = True  # rows end on chains that take one neighbour per round for tens of rounds: finished in windows
    centred = False
    whole_blocks = False
    signs = False
    uniform = True
    forms = True

    @staticmethod
    def single(xp: Any, y: Any, w: Any) -> Any:
        return y - w

    @staticmethod
    def stats(xp: Any, v: Any, data: tuple[Any], centre: None) -> tuple[Any, Any]:
        # log of exp(v_B) * sum_B exp(w): the block's LSE(y_B)
        return v + data[0], data[0]

    @staticmethod
    def cum(xp: Any, adapter: Any, a: Any, reverse: bool) -> Any:
        return adapter.cumlogsumexp(xp, a, reverse=reverse)

    @staticmethod
    def comb(xp: Any, a: Any, b: Any) -> Any:
        return logaddexp(xp, a, b)

    @staticmethod
    def value(xp: Any, sums: tuple[Any, Any], fallback: Any, centre: Any = None) -> Any:
        return safe_log_divide(xp, *sums, fallback)

    @staticmethod
    def pooled(xp: Any, adapter: Any, starts: Any, u: Any, yw: Any, unit: bool) -> Any:
        """Each entry's segment value from the data, ``LSE_S(y) - LSE_S(w)`` (``yw`` stacks the row and its
        log-weights), both in one segmented log-sum-exp (from each segment's maximum: no overflow).

        Not from the blocks' values (``LSE_S(u + w)``, equal in exact arithmetic): a value that pools again in every
        round would carry the roundings of all the rounds before, which in float32 move a long row's blocks.
        """
        return _KL.pooled_blocks(xp, adapter, starts, u, yw, unit)[0]

    @staticmethod
    def pooled_blocks(xp: Any, adapter: Any, starts: Any, u: Any, yw: Any, unit: bool) -> tuple[Any, tuple[Any, Any]]:
        """``(values, (LSE_S(y), LSE_S(w)))``: :meth:`pooled`'s values and the log-sums they come from, the statistics
        that the rounds' extension of chains reads (:class:`.extensions.LogSums`)."""
        lse = adapter.segment_logsumexp(xp, starts, yw)
        sums = (lse[0, ...], lse[1, ...])
        return _KL.value(xp, sums, u), sums

    @staticmethod
    def block_data(xp: Any, adapter: Any, starts: Any, yw: Any, v: Any) -> tuple[Any, Any]:
        """``(LSE_B(y), LSE_B(w))`` of each entry's block, as 2-D rows (:mod:`.windows`): a block as one entry."""
        lse = adapter.segment_logsumexp(xp, starts, xp.stack([windows.rows_of(xp, yw[i, ...], v) for i in (0, 1)]))
        return lse[0, ...], lse[1, ...]

    @staticmethod
    def pad(xp: Any, low: Any, data: tuple[Any, ...]) -> tuple[float, tuple[float, float]]:
        """An entry out of the objective (value and data -inf, log-weight 0): first in an increasing fit, it never pools."""
        return -math.inf, (-math.inf, 0.0)

    # the same sums as _L2's, as logs: sum_S exp(w) (exp(v) - exp(ref)) and its mirror. An empty S
    # gives -inf, and so does a sum of entries at -inf (out of the objective: a masked entry's); their
    # terms are zeroed first, which would otherwise make -inf - -inf
    @staticmethod
    def above(xp: Any, sums: tuple[Any, Any], ref: Any, centre: None, lower: None) -> Any:
        a, b = sums
        some = (b > -math.inf) & (a > -math.inf)
        a, b, ref = (xp.where(some, u, xp.zeros_like(u)) for u in (a, b, ref))
        return xp.where(some, a + _log1mexp(xp, ref + b - a), xp.full_like(a, -math.inf))

    @staticmethod
    def below(xp: Any, sums: tuple[Any, Any], ref: Any, centre: None, lower: None) -> Any:
        a, b = sums
        some = (b > -math.inf) & (ref > -math.inf)
        a, b, ref = (xp.where(some, u, xp.zeros_like(u)) for u in (a, b, ref))
        return xp.where(some, ref + b + _log1mexp(xp, a - ref - b), xp.full_like(b, -math.inf))


KINDS = {"l2": _L2, "kl": _KL}

PER_LEVEL = 4  # pooling rounds per ceil(log2 n) before the merge rounds (:func:`pool_then_merge`)


def pool_runs(xp: Any, adapter: Any, rules: Any, v: Any, w: Any, max_rounds: int, merge_cost: float = 0.0, leave: int = 0,
              merge_all: bool = False, starts: Any = None, stall_blocks: int = 0, unit: bool = False,
              patience: int = 0, extend: Any = None) -> tuple[Any, Any, bool]:
    """Pool every maximal run of strictly decreasing blocks at once, for up to ``max_rounds`` rounds.

    Adjacent violators end in one block of the solution (the PAV argument), so a whole decreasing run of blocks may
    pool at once (for either loss: the lemma holds for any separable convex one whose blocks take their minimising
    value, Best & Chakravarti 1990); a row is settled when no block is above its successor. Soft ranks at
    ``strength=1`` settle in 1-2 rounds, at the default softness in about ``log2 n`` (l2) or up to twice that (kl);
    adversarial rows need O(n): those go on to the merge rounds. The result is blocks of pooled values with the same
    isotonic fit as ``v``.

    ``merge_cost`` > 0 (a caller whose merge rounds run over the blocks, one entry each) also stops a row once its
    drops stop halving each round and its rounds have cost ``merge_cost K log2 K / n`` rounds' worth (``K`` its
    blocks): what the merge rounds over its blocks would cost, in pooling rounds. A chain that snowballs (a block
    taking one neighbour per round) leaves a few drops for up to n rounds; the drops of a row that is settling fall
    geometrically. ``merge_all``: the merge rounds cannot count the blocks (``jax.jit``), and a row pools ``merge_cost
    log2 n`` rounds before it stalls out, whatever its blocks (the p = 4/3 rank of 10^5 entries settles in about 16 at
    the default softness). ``stall_blocks`` > 0: only with at most that many blocks.

    ``leave`` > 0 (a caller that finishes the last drops itself, :mod:`.windows`): a row also stops once it holds at
    most ``leave`` drops and they stopped halving (a snowballing chain; a settling row goes on), after at least
    ``patience`` rounds. ``extend`` (:class:`.extensions.Extension`): pools chains that snowball on, after each round
    (from the blocks' statistics of the round's solve, ``rules.pooled_blocks``, where ``rules.forms``). ``starts``:
    True where a segment of ``v`` begins (default: every entry). ``w``: the data ``rules.pooled`` reads (``"l2"``,
    ``"kl"``: the row and its weights stacked; ``unit``: those are ones).

    Returns ``(v, unsettled, stopped_early)``: ``unsettled`` is True on the
    rows that still hold a drop, and ``stopped_early`` True when the loop was
    seen to stop before ``max_rounds`` with every row settled (eager backends,
    no ``merge_cost``): nothing left to read.
    """

    def drops(u: Any) -> Any:  # between neighbours (n - 1 of them): True where a block is above its successor
        return u[..., :-1] > u[..., 1:]

    def count(a: Any) -> Any:
        return xp.sum(xp.astype(a, v.dtype), axis=-1, keepdims=True)

    def stopped_halving(before: Any, now: Any) -> Any:  # per row: drops after the last round, the round before
        return 2.0 * now > before

    counted = bool(merge_cost or leave or extend)  # the state carries the drops of the last two rounds and the rounds spent

    # on a CPU, where values can be read now, a round solves only the segments that took in a block (rules whose solve
    share = getattr(rules, "compact_share", 0.0)  # costs enough per entry; ``compact_share``: the share where it pays)
    changed = ChangedSegments(rules, share) if share > 0 and windows.readable_on_cpu(adapter, v, w) else None

    def step(weights: Any, state: tuple[Any, ...]) -> tuple[Any, ...]:
        u, starts, down = state[:3]
        starts = xp.concat([starts[..., :1], starts[..., 1:] & ~down], axis=-1)  # a block after a drop joins the run before it
        if changed is not None:
            joined = xp.concat([xp.zeros_like(down[..., :1]), down], axis=-1)
            u, form = changed.pooled(xp, adapter, starts, joined, u, weights, unit), None
        elif extend is not None and getattr(rules, "forms", False):  # the statistics the extension reads, from the solve
            u, form = rules.pooled_blocks(xp, adapter, starts, u, weights, unit)
        else:  # the totals in one segmented sum (one scatter on torch)
            u, form = rules.pooled(xp, adapter, starts, u, weights, unit), None
        # one value per segment, its first entry's: a power may round apart at two entries of equal input (torch's CPU
        # kernels: vectorized body, scalar tail), and a segment split 1 ulp apart stays two; not where none can (``uniform``)
        u = u if getattr(rules, "uniform", False) else adapter.segment_first(xp, starts, u)
        if extend is not None:  # after a round in which some row's drops stopped halving
            before, now, spent = state[3:]
            chains = xp.any((spent > 0) & (now > 0) & stopped_halving(before, now))
            u, starts = extend.after_round(xp, adapter, u, starts, weights, chains, form)
        down = drops(u)
        if not counted:
            return u, starts, down
        _, _, _, _, now, spent = state
        return u, starts, down, now, count(down), spent + 1.0

    def error(weights: Any, state: tuple[Any, ...]) -> Any:
        # a boolean error: True while a row goes on
        if not counted:
            return xp.any(state[2], axis=-1)
        _, starts, _, before, now, spent = state
        stalled = stopped_halving(before, now)
        if merge_cost:
            blocks = xp.full_like(spent, n) if merge_all else count(starts)
            stalled = stalled & (spent * n >= merge_cost * blocks * xp.log2(blocks))
            stalled = stalled & (count(starts) <= stall_blocks) if stall_blocks else stalled
        else:
            stalled = stalled & (now <= leave) & (spent >= patience)
        return ((now > 0) & ~stalled)[..., 0]

    n = v.shape[-1]
    starts = xp.ones(v.shape, dtype=xp.bool, device=_device(v)) if starts is None else starts
    down = drops(v)
    if rules is _L2 and not unit:
        # an entry of zero weight (free: any value fits it) joins its predecessor's block in the first round, as a drop
        # would make it (a masked tail of equal values would pool one entry per round); a drop from it waits a round
        free = w[1, ...] == 0
        down = free[..., 1:] | (down & ~free[..., :-1])
    state: tuple[Any, ...] = (v, starts, down)
    if counted:
        zero = xp.zeros(v.shape[:-1] + (1,), dtype=v.dtype, device=_device(v))
        state += (zero, count(down), zero)
    state, rounds, err = adapter.iterate(xp, step, w, state, error=error, freeze=freeze_rows, max_iter=max_rounds, tol=0.0, check_every=1)
    if not counted:  # the error is the flag, and a loop that stopped early stopped with every row settled
        return state[0], err, isinstance(rounds, int) and rounds < max_rounds
    return state[0], xp.any(state[2], axis=-1), False


def merge_rows(xp: Any, adapter: Any, kind: Any, v: Any, data: tuple[Any, ...], pads: tuple[float, ...]) -> Any:
    """All ``ceil(log2 n)`` merge rounds of ``kind`` (:func:`.merges.merge_rounds`), from one-entry segments to the
    whole row; ``data`` shaped like ``v``, each padded at the right with its entry of ``pads`` (None: the array's own
    largest value in the row, which keeps a sorted row sorted)."""
    n = v.shape[-1]
    big = padded_length(n)
    if big > n:
        # padding at the right: the row's largest value with no weight, which never
        # pools (a pool's value is at most the row's maximum) and never moves a mean
        pad_shape = v.shape[:-1] + (big - n,)
        def padded(a: Any, pad: Any) -> Any:
            fill = xp.broadcast_to(xp.max(a, axis=-1, keepdims=True), pad_shape) if pad is None else \
                xp.full(pad_shape, pad, dtype=a.dtype, device=_device(a))
            return xp.concat([a, fill], axis=-1)

        v = padded(v, None)
        data = tuple(padded(a, pad) for a, pad in zip(data, pads))
    v = merge_rounds(xp, adapter, kind, v, data)
    return v[..., :n] if big > n else v


def _merged(xp: Any, v: Any, w: Any, *, kind: str) -> tuple[Any]:
    """``(merge rounds of v,)``, called by name (:meth:`~.._lib._adapters.PortableAdapter.eagerly`)."""
    return (merge_rows(xp, get_adapter(xp), KINDS[kind], v, (w,), (KINDS[kind].identity,)),)


def fit(xp: Any, adapter: Any, y: Any, w: Any = None, kind: str = "l2", chains: bool = False) -> Any:
    """The increasing isotonic fit of ``y`` with weights ``w`` along the last axis (see the module docstring).

    ``w`` broadcasts against ``y`` (None: unit weights, ``"l2"`` only); for ``"kl"`` it holds log-weights.
    Rounds that pool whole decreasing runs come first (cheap, and enough for most rows); the merge rounds then
    finish any row they left unsettled, and are skipped where the backend can tell that none is. ``chains``: rows
    that end on chains that snowball (the KL's, the l2 soft sort's), pooled on where values are not read (:mod:`.extensions`).
    """
    if w is not None:
        y, w = broadcast_arrays(xp, y, w)
    v, yw = KINDS[kind].single(xp, y, w), xp.stack([y, xp.ones_like(y) if w is None else w])
    return v if y.shape[-1] == 1 else windows.eager_on_cpu(xp, adapter, _pooled_fit, (v, yw), kind=kind, unit=w is None,
                                                           chains=chains or kind == "kl")[0]


def _pooled_fit(xp: Any, v: Any, yw: Any, *, kind: str, rounds: int = 0, windows_first: bool = True,
                unit: bool = False, chains: bool = False) -> tuple[Any]:
    """``(the fit,)`` from the one-entry values ``v`` (or pooled blocks of them): pooling rounds, then either windows
    around the last drops (:mod:`.windows`: the KL loss, on a CPU backend that reads values now) or the merge rounds;
    elsewhere the rounds pool snowballing ``chains`` on (:mod:`.extensions`). ``yw`` stacks the row and its weights
    (``unit``: ones). Called by name (:meth:`eagerly`)."""
    adapter = get_adapter(xp)
    # the windows pool for as many rounds as their whole rows would: a chain the rounds finish there, they finish here
    rounds = rounds or PER_LEVEL * (v.shape[-1] - 1).bit_length()
    # the merge rounds, a fallback few rows take, are one eager op of a compiled graph even where the fit is not
    return (pool_then_merge(xp, adapter, KINDS[kind], v, yw, lambda u, unsettled: adapter.eagerly(
        xp, _merged, (u, yw[1, ...]), like=(0,), kind=kind)[0], rounds=rounds, unit=unit,
        finish=(lambda values, data: _pooled_fit(xp, values, xp.stack(data), kind=kind, rounds=rounds, windows_first=False)[0])
        if windows_first and KINDS[kind].snowballs else None,
        extend=Extension(LogSums if kind == "kl" else MeanSums) if chains else None),)


def pool_then_merge(xp: Any, adapter: Any, rules: Any, v: Any, w: Any, merge: Callable[[Any, Any], Any], per_level: int = PER_LEVEL,
                    merge_cost: float = 0.0, finish: Callable[[Any, Any], Any] | None = None, rounds: int | None = None,
                    sums: Any = None, stall_blocks: int = 0, unit: bool = False, extend: Any = None, starts: Any = None) -> Any:
    """``v`` pooled by :func:`pool_runs` for up to ``rounds`` (default ``per_level ceil(log2 n)``) rounds
    (``merge_cost``, ``stall_blocks``, ``unit``, ``extend``, ``starts`` as there), then ``merge(v, unsettled)`` (the caller's
    merge rounds; ``unsettled`` True on the rows the pooling left) unless every row settled, which a backend that
    reads the flag skips.

    ``finish(values, data)`` (a fit of 2-D rows of block values and their statistics, ``rules.block_data``): on a
    backend that reads values now, on a CPU (:func:`.windows.pays`), the rounds stop where a row holds few drops,
    and :func:`.windows.finish` fits the rest with it (``sums`` as there; with them the rounds may run over the
    blocks, :func:`.windows.pool_and_finish`).
    """
    # A pooling round costs O(n), a merge round O(n log n) in several times the operations, and a batch runs the
    # merge rounds for all its rows as soon as one needs them: at the default softness ranks need up to about 1.5
    # (l2) and 2.2 (kl) times ceil(log2 n) pooling rounds (the l2 sort's long rows more: windows, ``rules.shortest``)
    n = v.shape[-1]
    rounds = rounds or per_level * (n - 1).bit_length()
    if finish is not None and windows.readable_on_cpu(adapter, v) and n >= getattr(rules, "shortest", windows.SHORTEST):
        begun = starts
        if sums is not None:  # a round, then over the blocks where few are left
            v, unsettled, _ = pool_runs(xp, adapter, rules, v, w, 1, starts=starts)
            rounds, begun = rounds - 1, block_starts(xp, v)
            if bool(xp.any(unsettled)) and windows.few_blocks(xp, rules, begun):
                return windows.pool_and_finish(xp, adapter, rules, v, w, finish, sums, rounds)
        v, unsettled, _ = pool_runs(xp, adapter, rules, v, w, rounds, leave=windows.drops_left(n), starts=begun, unit=unit,
                                    patience=(n - 1).bit_length() if getattr(rules, "patient", False) else 0)
        if not bool(xp.any(unsettled)):
            return v
        return windows.finish(xp, adapter, rules, v, w, finish, sums)
    # the merge rounds take each block as one entry where they read how many there are (an eager node of a
    # compiled torch graph does): elsewhere they run over every entry of the row
    merge_all = bool(merge_cost) and not adapter.reads_in_eager_node(v)
    v, unsettled, stopped_early = pool_runs(xp, adapter, rules, v, w, rounds, merge_cost, merge_all=merge_all,
                                            starts=starts, stall_blocks=stall_blocks, unit=unit, extend=extend)
    if stopped_early:  # the loop read that every row settled: no second read
        return v
    return adapter.unless(xp, ~xp.any(unsettled), lambda u: merge(u, unsettled), v)


def decreasing(xp: Any, adapter: Any, y: Any, w: Any = None, kind: str = "l2", chains: bool = False) -> Any:
    """The decreasing fit (``chains`` as :func:`fit`'s): for ``"l2"`` the negated increasing fit of ``-y``; for
    ``"kl"`` (not symmetric under negation) the increasing fit of the reversed row, reversed back."""
    if kind == "l2":
        return -fit(xp, adapter, -y, w, chains=chains)
    y, w = broadcast_arrays(xp, y, w)
    return xp.flip(fit(xp, adapter, xp.flip(y, axis=-1), xp.flip(w, axis=-1), kind), axis=-1)


def block_starts(xp: Any, v: Any) -> Any:
    """True where a block of the solution ``v`` starts (a run of equal values, as torchsort partitions it)."""
    first = xp.ones(v.shape[:-1] + (1,), dtype=xp.bool, device=_device(v))
    return xp.concat([first, v[..., 1:] != v[..., :-1]], axis=-1)


def block_sums(xp: Any, adapter: Any, starts: Any, g: Any, *, precise: bool = False) -> Any:
    """Each entry's block total of ``g`` (the adapter's segmented sum, ``precise`` as its: no cancellation between blocks)."""
    return adapter.segment_sum(xp, starts, g, precise=precise)


def block_first(xp: Any, adapter: Any, starts: Any, g: Any) -> Any:
    """Each entry's block's first value of ``g``."""
    return adapter.segment_first(xp, starts, g)
