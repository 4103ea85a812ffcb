"""Dask: map the NumPy implementation over blocks of the batch axes.

The operator axis is rechunked into one chunk (sorting needs the whole row),
batch axes keep the caller's chunking, so the task graph grows with the
number of chunks and never with the work done inside a block.
"""

from __future__ import annotations

from typing import Any, Callable

import array_api_compat.numpy as np_xp
import dask.array as da
import numpy as np


def map_last_axis(impl: Callable[..., Any], x: Any, tail: tuple[int, ...], dtype: Any, **params: Any) -> Any:
    last = x.ndim - 1
    x = x.rechunk({last: -1})
    batch_chunks = x.chunks[:-1]

    def block(b: np.ndarray) -> np.ndarray:
        return np.asarray(impl(np_xp, b, **params))

    kwargs: dict[str, Any] = {"dtype": dtype, "meta": np.empty((0,) * (len(batch_chunks) + len(tail)), dtype=dtype)}
    if len(tail) == 0:
        kwargs["drop_axis"] = [last]
    elif len(tail) > 1:
        kwargs["new_axis"] = list(range(x.ndim, x.ndim + len(tail) - 1))
    chunks = batch_chunks + tuple((t,) for t in tail)
    return da.map_blocks(block, x, chunks=chunks, **kwargs)
