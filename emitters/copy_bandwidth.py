"""The bandwidth column of a bench row (issue 34): how far a memory-bound kernel is from the device's own copy
bandwidth, measured in the same run.

``attach(result, host)`` measures the copy once a process and backend (the backend's ``copy_bandwidth``: a 1 GiB
device copy on a GPU, a stream triad over every core on the CPU) and returns the row with ``copy_gbps`` and
``memory_bound``: the op's FLOPs a byte (``op.flops / op.bytes``, each input read once and the output written
once) under the device's ridge point, its peak FLOP/s for the kernel's type (the report's ceiling: its spec, or
the larger of spec and measured in a report that holds measured figures) over the copy bandwidth. Where no
ceiling gives the peak nothing is measured and the row is neither (``None``). The row's own ``gbps`` counts the
same bytes, so ``of_copy`` reads as the fraction of the device's bandwidth the kernel reached.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from . import registry

_MEASURED: dict[str, dict[str, Any] | None] = {}  # backend -> its measurement, once a process
# What a row over 100 % of the copy means (the tables' note)
OVER_COPY = ("over 100 %: the row's bytes stayed partly in a cache between its timed calls, or the machine's "
             "bandwidth moved between the two measurements (a shared machine)")


def measured(backend: str, host: Any) -> dict[str, Any] | None:
    """The backend's copy bandwidth on this machine ({"value", "unit", "method"} or {"error"}; None where no
    measurement exists), measured on the first call of the process."""
    if backend not in _MEASURED:
        _MEASURED[backend] = registry.backend(backend).copy_bandwidth(host)
    return _MEASURED[backend]


def peak_flops(host: Any, backend: str, dtype: str) -> float | None:
    """The device's peak FLOP/s for kernels of ``dtype``: the larger of the report's spec and measured figures
    for the backend's ceiling (a measured figure over the spec means the spec's clock was low; one under it may be
    an older instruction's, as mma.sync's on Hopper; a live probe's report has the spec only), or None."""
    b = registry.backend(backend)
    metric = b.compute_metric(dtype) or "fp32_flops"  # as the roofline plots fall back
    for c in getattr(host, "ceilings", None) or []:
        if c.device == b.DEVICE and c.metric == metric:
            return max((x for x in (c.spec, c.measured) if x), default=None)
    return None


def memory_bound(op: Any, peak: float | None, bandwidth: float | None) -> bool | None:
    """Whether ``op``'s FLOPs a byte fall under the ridge point ``peak / bandwidth`` (None: either unknown)."""
    if not peak or not bandwidth or not op.bytes:
        return None
    return op.flops / op.bytes < peak / bandwidth


def attach(result: Any, host: Any) -> Any:
    """``result`` (a BenchResult) with the copy bandwidth measured in this run and whether its op is
    memory-bound; unchanged where the row did not time (a failed or refused row measures nothing)."""
    backend = result.decision.backend
    if result.status != "ok" or result.tracea is None or not backend:
        return result
    peak = peak_flops(host, backend, result.op.dtype.value)
    m = measured(backend, host) if peak else None  # no peak, no ridge point: nothing to hold the row against
    if m is None:
        return result
    value = m.get("value")
    if value is None:
        return dataclasses.replace(result, copy_method=f"copy bandwidth not measured: {m.get('error')}")
    bound = memory_bound(result.op, peak, value)
    return dataclasses.replace(result, copy_gbps=value / 1e9, copy_method=m.get("method"), memory_bound=bound)
