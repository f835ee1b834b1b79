"""A test-only backend whose vendor baseline is deliberately noisy: three calls in four take 2.5 ms, every
fourth takes 30 ms (as when a dashboard or a neighbour takes the cores now and then). Its
kernels are the fault backend's healthy and slow candidates (real C, compiled and run in the tuner's
worker). Imported by the worker as ``noisy_baseline_backend`` (tests/tuner/ on PYTHONPATH)."""

from __future__ import annotations

import itertools
import time
from typing import Any

from test_tuner_fault_backend import (  # noqa: F401 - the backend protocol, as the fault backend has it
    COMPILES_BUNDLED_FLAGS,
    DEVICE,
    LANGUAGE,
    MEMBER_RESOURCES,
    ON_DEVICE,
    SOURCE_SUFFIX,
    VARIANTS,
    FaultSchedule,
    bench_on_device,
    build,
    build_from_source,
    compile_command,
    compute_metric,
    copy_bandwidth,
    default_workers,
    device_name,
    emit,
    environment,
    export,
    hero_schedule,
    layout_cost,
    load_binary,
    pool_filter,
    present,
    rendering,
    resolve,
    runs_kernels,
    schedule_from_json,
    suites,
    target_host,
    tuning_members,
    validate_schedule,
    vendor_on_device,
    worker_mismatch,
)

NAME = "noisy"

CALLS = itertools.count()


def search_space(op: Any, variant: Any, host: Any) -> list[FaultSchedule]:
    return [FaultSchedule("ok"), FaultSchedule("slow")]


def baseline_for(op: Any, inputs: dict[str, Any]) -> Any:
    import numpy as np

    from tracea.emitters.baselines import Baseline

    a, b = inputs["a"].astype(np.float32), inputs["b"].astype(np.float32)

    def run() -> Any:
        time.sleep(0.030 if next(CALLS) % 4 == 3 else 0.0025)  # >= 2 ms: one call per timed sample
        return a @ b

    return Baseline("noisy matmul (test)", run)
