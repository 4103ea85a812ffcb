"""The portable fixed-point driver used by the Sinkhorn solver.

``iterate`` runs ``step`` in blocks of ``check_every`` iterations. After
each block it measures the per-problem ``error``; a problem within ``tol``
is frozen (``freeze`` keeps its state from then on), and the loop stops once
every problem is. Freezing makes each problem's result depend on that
problem alone, not on when the rest of the batch converges, so a batch, its
rows one by one, Dask blocks and ``jax.vmap`` all give the same numbers.
Problems whose error is NaN cannot improve and count as settled.
The stopping test reads one boolean per block: fine for eager backends;
JAX replaces this driver with ``lax`` control flow (see the JAX adapter).
"""

from __future__ import annotations

from typing import Any, Callable


def settled(xp: Any, err: Any, tol: float) -> Any:
    return (err <= tol) | xp.isnan(err)


def freeze_rows(xp: Any, done: Any, old: tuple[Any, ...], new: tuple[Any, ...]) -> tuple[Any, ...]:
    """Keep ``old`` for the problems flagged in ``done`` (shape: the batch)."""
    return tuple(xp.where(done[..., None], o, w) for o, w in zip(old, new))


def iterate(
    xp: Any,
    step: Callable[[Any, Any], Any],
    operands: Any,
    state: Any,
    *,
    error: Callable[[Any, Any], Any],
    freeze: Callable[[Any, Any, Any, Any], Any],
    max_iter: int,
    tol: float,
    check_every: int,
    block: Callable[[Callable[[Any], Any], Any], Any] | None = None,
    blocked: bool = False,
) -> tuple[Any, int, Any]:
    """Return ``(state, n_iter, error)``.

    ``step(operands, state)`` is one iteration, or with ``blocked=True``
    ``step(operands, state, count)`` runs a whole block of ``count <=
    check_every`` iterations; ``error(operands, state)`` is the per-problem
    error; ``freeze(xp, done, old, new)`` returns ``new`` with the problems
    flagged in ``done`` reset to ``old``; ``block(run, state)`` may wrap each
    block (checkpointing).
    """

    def run_block(k: int) -> Callable[[Any], Any]:
        def run(s: Any) -> Any:
            if blocked:
                return step(operands, s, k)
            for _ in range(k):
                s = step(operands, s)
            return s

        return run

    n_iter = 0
    err = done = None
    while n_iter < max_iter:
        k = min(check_every, max_iter - n_iter)
        new = run_block(k)(state) if block is None else block(run_block(k), state)
        state = new if done is None else freeze(xp, done, state, new)
        n_iter += k
        err = error(operands, state)
        done = settled(xp, err, tol)
        if bool(xp.all(done)):
            break
    return state, n_iter, err


def scan_blocks(xp: Any, body: Callable[[Any, Any], Any], carry: Any, xs: tuple[Any, ...], block: int) -> tuple[Any, tuple[Any, ...]]:
    """Run ``body(carry, blocks) -> (carry, ys)`` over consecutive ``block``-long slices of the last axis of ``xs``.

    Returns the final carry and each of ``ys`` concatenated along the last
    axis. The eager loop of NumPy, CuPy, torch and array-api-strict; JAX
    replaces it with ``lax.scan`` (see the JAX adapter).
    """
    n = xs[0].shape[-1]
    outs = []
    for start in range(0, n, block):
        # the standard leaves out-of-bounds slice stops unspecified: clamp
        carry, ys = body(carry, tuple(x[..., start : min(start + block, n)] for x in xs))
        outs.append(ys)
    return carry, tuple(parts[0] if len(parts) == 1 else xp.concat(parts, axis=-1) for parts in zip(*outs))
