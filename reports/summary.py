"""``tracea report``: a metrics file (CSV or JSONL) summarised per kernel configuration, and the
roofline ceilings of the device its rows ran on (from the doctor: spec, and measured when the
snapshot has ``--measure`` figures).

    rows = read_metrics(path); groups = summarise(rows); ceilings = roofline_ceilings(host, rows)
    errors = ceiling_errors(host, groups)  # rows faster than the spec: the ceiling is wrong
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from typing import Any


def _device_metric(backend: str, dtype: str) -> tuple[str | None, str | None]:
    """(device, compute metric) of the ceilings bounding a row of ``backend`` and ``dtype``: the backend's
    ``DEVICE`` and ``compute_metric`` (emitters/backend.py); (None, None) for a backend this Tracea lacks."""
    from tracea.doctor.errors import TraceaError
    from tracea.emitters import registry

    try:
        b = registry.backend(backend)
    except TraceaError:
        return None, None
    return b.DEVICE, b.compute_metric(dtype)


def shape_label(row: dict[str, Any]) -> str:
    """A short label for a row's shape, as its op says it (``Op.shape_label``): "256x256x256" for gemm,
    "rows x cols" for softmax, its scalar fields for an op this Tracea lacks."""
    from tracea.kernels import OPS, Op

    try:
        shape = json.loads(row["shape"]) if isinstance(row["shape"], str) else dict(row["shape"])
    except (ValueError, TypeError):
        return str(row["shape"])
    return OPS.get(row["op"], Op).shape_label(shape)


def _object(text: Any) -> Any:
    """A row's JSON-text cell (schedule) as the object it holds, for JSON output."""
    try:
        return json.loads(text) if isinstance(text, str) and text else (text or None)
    except ValueError:
        return text


@dataclass
class Group:
    op: str
    shape: str
    dtype: str
    backend: str
    variant: str
    rows: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ok(self) -> list[dict[str, Any]]:
        return [r for r in self.rows if r["status"] == "ok" and r["tflops"] is not None]

    @property
    def statuses(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.rows:
            out[r["status"]] = out.get(r["status"], 0) + 1
        return out

    @property
    def best(self) -> dict[str, Any] | None:
        return max(self.ok, key=lambda r: r["tflops"], default=None)

    def to_json(self) -> dict[str, Any]:
        best = self.best
        ok = self.ok
        return {
            "op": self.op, "shape": self.shape, "dtype": self.dtype, "backend": self.backend,
            "variant": self.variant, "rows": len(self.rows), "statuses": self.statuses,
            "best_tflops": best["tflops"] if best else None, "best_p50_ms": best["p50_ms"] if best else None,
            "best_schedule": _object(best["schedule"]) if best else None,
            "median_p50_ms": statistics.median(r["p50_ms"] for r in ok) if ok else None,
            "baseline": best["baseline"] if best else None,
            "baseline_p50_ms": best["baseline_p50_ms"] if best else None,
            "best_ratio": best["ratio"] if best else None,
            "max_rel_err": max((r["rel_err"] for r in ok if r["rel_err"] is not None), default=None),
        }


def summarise(rows: list[dict[str, Any]]) -> list[Group]:
    """Rows grouped per (op, shape, dtype, backend, variant), in first-seen order."""
    groups: dict[tuple[str, ...], Group] = {}
    for r in rows:
        key = (r["op"], shape_label(r), r["dtype"], r["backend"], r["variant"])
        groups.setdefault(key, Group(*key)).rows.append(r)
    return list(groups.values())


@dataclass(frozen=True)
class RooflineCeiling:
    label: str  # "spec" or "measured"
    flops: float | None  # FLOP/s
    bandwidth: float | None  # B/s
    basis: str


def roofline_ceilings(host: Any, rows: list[dict[str, Any]]) -> tuple[str, list[RooflineCeiling], list[str]]:
    """(device, ceilings, notes) for the device most rows ran on: a spec ceiling and a measured one
    where the snapshot has them; ``notes`` say what is missing and why."""
    backends = [r["backend"] for r in rows if r["backend"]]
    backend = max(set(backends), key=backends.count) if backends else "cpu"
    dtypes = [r["dtype"] for r in rows]
    dtype = max(set(dtypes), key=dtypes.count) if dtypes else "fp32"
    device, metric = _device_metric(backend, dtype)
    metric = metric or "fp32_flops"
    mine = {c.metric: c for c in getattr(host, "ceilings", []) if c.device == device}
    compute, memory = mine.get(metric), mine.get("memory_bandwidth")
    notes: list[str] = []
    out: list[RooflineCeiling] = []
    for label in ("spec", "measured"):
        flops = getattr(compute, label, None) if compute else None
        bw = getattr(memory, label, None) if memory else None
        if flops is None and bw is None:
            continue
        basis = (compute.basis if label == "spec" else compute.method) if compute and flops else ""
        out.append(RooflineCeiling(label, flops, bw, basis or ""))
    if compute is None or (compute.spec is None and compute.measured is None):
        notes.append(f"{device} {metric}: {compute.reason if compute else 'no ceiling known'}")
    if memory is None or (memory.spec is None and memory.measured is None):
        notes.append(f"{device} memory bandwidth: {memory.reason if memory else 'no ceiling known'} "
                     "(measured: `tracea doctor --measure --save FILE`, then `tracea report --snapshot FILE`)")
    return f"{device} ({metric.removesuffix('_flops').replace('_', ' ')})", out, notes


def _compute_ceiling(host: Any, backend: str, dtype: str) -> Any:
    """The spec compute ceiling a row of this backend and dtype is bounded by, or None."""
    device, metric = _device_metric(backend, dtype)
    if device is None:
        return None
    return next((c for c in getattr(host, "ceilings", []) if c.device == device and c.metric == metric
                 and c.spec), None)


def ceiling_errors(host: Any, groups: list[Group], fingerprints: set[str] | None = None) -> dict[int, dict[str, Any]]:
    """{group index: error} for each group with an ok row faster than the spec ceiling of ``host``.
    Hardware cannot beat its own peak, so such a row says the ceiling is wrong (a clock or a FMA width
    the doctor assumed), not that the kernel is magic. ``fingerprints`` limits the check to rows
    measured on ``host`` (None: every row, as when the user names the snapshot)."""
    out: dict[int, dict[str, Any]] = {}
    for i, g in enumerate(groups):
        ceiling = _compute_ceiling(host, g.backend, g.dtype)
        if ceiling is None:
            continue
        rows = [r for r in g.ok if fingerprints is None or r.get("env_fingerprint") in fingerprints]
        above = [r for r in rows if r["tflops"] * 1e12 > ceiling.spec]
        if not above:
            continue
        best = max(r["tflops"] for r in above) * 1e12
        out[i] = {
            "achieved_flops": best, "spec_flops": ceiling.spec, "ratio": best / ceiling.spec,
            "rows_above": len(above), "ceiling": f"{ceiling.device} {ceiling.metric}", "basis": ceiling.basis,
            "message": (f"ceiling error: {best / 1e12:.4g} TFLOP/s is {best / ceiling.spec:.2f}x the spec "
                        f"{ceiling.device} {ceiling.metric} ceiling of {ceiling.spec / 1e12:.4g} TFLOP/s "
                        f"({ceiling.basis}): the ceiling is wrong, not the kernel; measure it with "
                        "`tracea doctor --measure --save FILE` and read this file with --snapshot FILE"),
        }
    return out
