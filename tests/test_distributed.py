"""Dask beyond one process: a real ``distributed`` cluster, and the shape of the task graph.

On Dask every operator runs its core once per block of batch rows, in the
chunks' namespace (NumPy here) (``rankops/_lib/_adapters/_dask.py``), so a cluster result must equal
the NumPy result on the same data to rounding, the task graph must grow with
the number of chunks and never with the Sinkhorn iterations, and an operator
axis split over several chunks must be merged into one first.
"""

from __future__ import annotations

import numpy as np
import pytest
from numpy.testing import assert_allclose

import rankops

da = pytest.importorskip("dask.array")

SEED = 20240817


def _operator_tasks(out, *inputs) -> int:
    """Tasks the operator call added on top of the graphs of its inputs."""
    return len(out.__dask_graph__()) - sum(len(a.__dask_graph__()) for a in inputs)


def test_graph_grows_with_chunks_not_iterations():
    xn = np.random.default_rng(SEED).standard_normal((64, 50))
    targets = da.asarray(np.linspace(-1.0, 1.0, 5))
    sizes = {}
    for n_chunks in (2, 8):
        x = da.from_array(xn, chunks=(64 // n_chunks, 50))
        for max_iter in (10, 500):
            out = rankops.soft_quantile_normalize(x, targets, epsilon=0.1, max_iter=max_iter)
            sizes[n_chunks, max_iter] = (len(out.__dask_graph__()), _operator_tasks(out, x, targets))
    # max_iter changes nothing in the graph: the iterations run inside each task.
    assert sizes[2, 10] == sizes[2, 500]
    assert sizes[8, 10] == sizes[8, 500]
    # One task per block of rows, whatever the number of iterations.
    assert sizes[2, 10][1] == 2
    assert sizes[8, 10][1] == 8
    assert sizes[8, 10][0] > sizes[2, 10][0]


@pytest.mark.parametrize("axis", [-1, 0])
def test_operator_axis_split_over_chunks_is_rechunked(axis):
    rng = np.random.default_rng(SEED)
    xn = rng.standard_normal((12, 40))
    tn = np.sort(rng.standard_normal(7))
    if axis == 0:
        xn = xn.T
    # Uneven chunks on both axes; the targets are chunked too.
    x = da.from_array(xn, chunks=(5, 15) if axis == -1 else (15, 5))
    targets = da.from_array(tn, chunks=3)
    assert x.numblocks[axis] > 1

    out = rankops.soft_quantile_normalize(x, targets, axis=axis, epsilon=0.1)
    assert isinstance(out, da.Array)
    assert out.shape == xn.shape and out.dtype == np.float64
    assert len(out.chunks[axis]) == 1  # whole rows in each block
    batch = 1 + axis  # the other axis (0 for axis=-1, 1 for axis=0)
    assert out.chunks[batch] == x.chunks[batch]  # batch chunking kept

    got = out.compute()
    expected = rankops.soft_quantile_normalize(xn, tn, axis=axis, epsilon=0.1)
    assert isinstance(got, np.ndarray)
    assert_allclose(got, expected, rtol=1e-12, atol=1e-12)


def test_local_cluster_matches_numpy():
    """(2000, 1000) rows in eight blocks on two worker processes: same numbers as one NumPy call."""
    pytest.importorskip("distributed")
    import dask
    import psutil  # a dependency of distributed
    from dask.distributed import Client, LocalCluster

    rows, n, n_blocks = 2_000, 1_000, 8
    block_rows = rows // n_blocks
    tn = np.array([-1.0, 0.0, 1.0])  # m = 3 target values
    options = {"epsilon": 0.1}

    def make_block(i: int) -> np.ndarray:
        # Each block is drawn where it is computed (as if read from storage),
        # so the input never travels through the scheduler.
        return np.random.default_rng([SEED, i]).standard_normal((block_rows, n))

    x = da.concatenate(
        [da.from_delayed(dask.delayed(make_block)(i), shape=(block_rows, n), dtype=np.float64) for i in range(n_blocks)]
    )
    assert x.chunks == ((block_rows,) * n_blocks, (n,))
    out = rankops.soft_quantile_normalize(x, da.asarray(tn), **options)
    assert isinstance(out, da.Array)
    assert out.shape == (rows, n) and out.dtype == np.float64
    assert out.chunks == x.chunks

    before = {p.pid for p in psutil.Process().children(recursive=True)}
    with LocalCluster(
        n_workers=2, processes=True, threads_per_worker=1, host="127.0.0.1", dashboard_address=None
    ) as cluster, Client(cluster) as client:
        assert len(client.scheduler_info()["workers"]) == 2
        # multiprocessing's resource tracker lives as long as this interpreter: not a worker.
        workers = [
            p
            for p in psutil.Process().children(recursive=True)
            if p.pid not in before and "resource_tracker" not in " ".join(p.cmdline())
        ]
        assert len(workers) >= 2
        got = client.compute(out).result(timeout=300)
    _, alive = psutil.wait_procs(workers, timeout=30)
    assert not alive, f"worker processes still running after the cluster closed: {alive}"

    assert isinstance(got, np.ndarray)
    assert got.shape == (rows, n) and got.dtype == np.float64
    # Rows are independent problems (each row's solver stops on its own error),
    # so NumPy on the first and last rows of every block checks every task.
    sample = np.r_[0:40, block_rows - 40 : block_rows]
    xn = np.concatenate([make_block(i)[sample] for i in range(n_blocks)])
    expected = rankops.soft_quantile_normalize(xn, tn, **options)
    picked = np.concatenate([got[i * block_rows + sample] for i in range(n_blocks)])
    assert_allclose(picked, expected, rtol=1e-12, atol=1e-12)
    # Each output is a convex combination of the targets.
    assert got.min() >= tn[0] - 1e-12 and got.max() <= tn[-1] + 1e-12
