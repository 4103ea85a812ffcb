"""The benchmark child process: runs a list of jobs, printing one JSON line per result.

- "memory" job, one contender at one size: builds the case
  (:mod:`benchmarks._contenders`: inputs, warm-up, JAX compilation), then
  measures one call of each of its passes ("fwd", "fb") with
  :func:`benchmarks._common.measure`: growth of the peak RSS over the RSS
  just before the call, and its wall time. The forward's output is saved as
  ``.npy`` for the parent's agreement check.
- "timing" job, several contenders at one size: medians of interleaved
  calls of every contender's passes (:func:`benchmarks._timing.interleaved_medians`).

Before each measured call the child prints ``{"id", "pass", "base_kib"}``,
so that a parent which has to kill it knows which call was running and from
which baseline. An exception ends only its job; the line says what it was.
"""

from __future__ import annotations

import json
import traceback

from ._common import measure
from ._contenders import build
from ._timing import interleaved_medians

OOM_MARKERS = ("RESOURCE_EXHAUSTED", "can't allocate memory", "MemoryError", "Out of memory", "out of memory")

_built: dict[str, object] = {}  # jobs in one process share cases (smoke runs several jobs per process)


def _case(job: dict, contender: str):
    key = json.dumps([job["group"], contender, job["n"], job["batch"], job["settings"]], sort_keys=True)
    if key not in _built:
        _built[key] = build(job["group"], contender, job["n"], job["batch"], job["settings"])
    return _built[key]


def _emit(row: dict) -> None:
    print(json.dumps(row), flush=True)


def _error(e: BaseException) -> dict:
    text = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"[:160]
    return {"error": text, "unavailable": isinstance(e, ImportError), "oom": any(m in text for m in OOM_MARKERS)}


def _memory(job: dict) -> None:
    import numpy as np

    p = None
    try:
        case = _case(job, job["contender"])
        for p in job["passes"]:
            res, out = measure(case.get(p), {"id": job["id"], "pass": p})
            if p == "fwd" and job.get("save"):
                np.save(job["save"], case.to_numpy(out))  # outside the measured region
            del out
            _emit({"id": job["id"], "pass": p, **res})
    except Exception as e:  # noqa: BLE001 - reported in the job's row
        _emit({"id": job["id"], "pass": p, **_error(e)})
        traceback.print_exc()


def _timing(job: dict) -> None:
    fns, errors = {}, {}
    for contender, passes in job["contenders"].items():
        try:
            case = _case(job, contender)
        except Exception as e:  # noqa: BLE001
            errors[contender] = _error(e)
            continue
        try:
            fns.update({f"{contender}|{p}": case.get(p) for p in passes})
        except Exception as e:  # noqa: BLE001
            errors[contender] = _error(e)
    try:
        medians = interleaved_medians(fns, job["repeats"], job["warmup"])
    except Exception as e:  # noqa: BLE001
        _emit({"id": job["id"], **_error(e)})
        traceback.print_exc()
        return
    times: dict[str, dict] = {}
    for key, t in medians.items():
        contender, p = key.split("|")
        times.setdefault(contender, {})[p] = t
    _emit({"id": job["id"], "times": times, "errors": errors})


def run_jobs(spec: str) -> None:
    for job in json.loads(spec):
        (_memory if job["kind"] == "memory" else _timing)(job)
