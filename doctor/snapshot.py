"""Probe the machine into a raw snapshot, interpret a snapshot into a ``HostReport``, save and load them.

A snapshot keeps the raw answers of every source (NVML calls, cuda-core attributes, /proc/cpuinfo,
sysfs, compiler output), so a report from a GPU machine replays, and is tested, on one without:
``read_snapshot(path)`` re-interprets the raw answers with ``build_report``, the function the live
probe uses.

A source that raises costs only its own section: the exception is recorded in ``errors``.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import ceilings as _ceilings
from ._threads import Task as _Task
from .checks import run_checks
from .errors import SnapshotError
from .files import write_atomic
from .report import SCHEMA_VERSION, AmdSection, AppleSection, CpuInfo, HostReport, NvidiaSection, PythonEnv
from .sources import amd, apple, cpu, cuda, host, nvidia, nvml, toolchains

SNAPSHOT_KIND = "tracea-doctor-snapshot"
REPORT_KIND = "tracea-doctor-report"


def tracea_version() -> str:
    try:
        from importlib.metadata import version

        return version("tracea")
    except Exception:  # noqa: BLE001 - running from a source tree
        return "0+unknown"


def _guard(name: str, fn: Callable[[], Any], errors: list[str]) -> Any:
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 - one failing source costs only its section
        errors.append(f"{name}: {type(exc).__name__}: {exc}")
        return {"status": "error", "error": type(exc).__name__, "message": str(exc),
                "traceback": traceback.format_exc(limit=4)}


def _timed(name: str, fn: Callable[[], Any], errors: list[str], timings: dict[str, float]) -> Any:
    t0 = time.perf_counter()
    try:
        return _guard(name, fn, errors)
    finally:
        timings[name] = round((time.perf_counter() - t0) * 1000, 1)


def nvidia_driver_present() -> bool:
    """A cheap look for an NVIDIA driver (device nodes, /proc, WSL's GPU node), so that cuda-core,
    which takes a few hundred milliseconds to import, is only tried where it can answer."""
    import glob

    return bool(glob.glob("/dev/nvidia[0-9]*") or os.path.exists("/proc/driver/nvidia/version")
                or os.path.exists("/dev/dxg") or os.name == "nt")


SOURCE_TIMEOUT_S = 30.0


def _cuda_attributes(nvml_task: _Task, deadline: float, use_cache: bool, errors: list[str],
                     timings: dict[str, float]) -> Any:
    """cuda-core's answers: from the static-attribute cache when it covers every GPU NVML sees,
    else read live and remembered (``use_cache=False`` still refreshes the cache)."""
    path = cuda.cache_path()
    nv = nvml_task.result(deadline)
    if use_cache:
        hit = cuda.cache_lookup(nv, path)
        if hit is not None:
            return hit
    live = _timed("cuda", cuda.collect, errors, timings)
    cuda.cache_store(nv, live, path)
    return live


def collect_raw(use_cache: bool = True) -> dict[str, Any]:
    """Every source's raw answers on this machine, gathered concurrently, each within
    ``SOURCE_TIMEOUT_S``. ``use_cache=False`` reads the static CUDA device attributes live instead of
    from the cache (see sources/cuda.py), and refreshes it."""
    errors: list[str] = []
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    deadline = time.monotonic() + SOURCE_TIMEOUT_S

    def timed(name: str, fn: Callable[[], Any]) -> _Task:
        return _Task(name, lambda: _timed(name, fn, errors, timings), SOURCE_TIMEOUT_S)

    tasks = {name: timed(name, fn) for name, fn in (
        ("host", host.collect), ("cpu", cpu.collect), ("nvml", nvml.collect), ("amd", amd.collect),
        ("apple", apple.collect), ("toolchains", toolchains.collect), ("python", toolchains.collect_python),
    )}
    if nvidia_driver_present():
        tasks["cuda"] = _Task("cuda", lambda: _guard(
            "cuda", lambda: _cuda_attributes(tasks["nvml"], deadline, use_cache, errors, timings), errors),
            SOURCE_TIMEOUT_S)
    results: dict[str, Any] = {name: task.result(deadline) for name, task in tasks.items()}
    for name, value in results.items():
        if isinstance(value, dict) and value.get("error") == "Timeout":
            errors.append(f"{name}: {value['message']}")
    results.setdefault("cuda", None)
    nv, cu = results.pop("nvml"), results.pop("cuda")
    if cu is None:
        cu = {"status": "skipped", "message": "not tried: no NVIDIA driver (no /dev/nvidia*, /proc/driver/nvidia)"}
    timings["total"] = round((time.perf_counter() - t0) * 1000, 1)
    return {
        "kind": SNAPSHOT_KIND,
        "schema_version": SCHEMA_VERSION,
        "tracea_version": tracea_version(),
        "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "env": host.collect_env(),
        **results,
        "nvml": nv,
        "cuda": cu,
        "collect_errors": errors,
        "timings_ms": timings,
    }


def build_report(raw: dict[str, Any], origin: str = "live") -> HostReport:
    """Interpret raw answers into a report; touches nothing on this machine."""
    errors = list(raw.get("collect_errors") or [])
    warnings: list[str] = []

    def part(name: str, fn: Callable[[], Any], fallback: Any) -> Any:
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001
            errors.append(f"interpreting {name}: {type(exc).__name__}: {exc}")
            return fallback

    env = raw.get("env") or {}
    cpu_info = part("cpu", lambda: cpu.interpret(raw.get("cpu") or {}), CpuInfo())
    nv = part("nvidia", lambda: nvidia.interpret(raw.get("nvml"), raw.get("cuda"), env),
              NvidiaSection(reason="could not be interpreted (see errors)"))
    amd_s = part("amd", lambda: amd.interpret(raw.get("amd")), AmdSection(reason="could not be interpreted"))
    sysctl = (raw.get("cpu") or {}).get("sysctl")
    apple_s = part("apple", lambda: apple.interpret(raw.get("apple"), sysctl), AppleSection(reason="could not be interpreted"))
    tools = part("toolchains", lambda: toolchains.interpret(raw.get("toolchains")), [])
    py = part("python", lambda: toolchains.interpret_python(raw.get("python")), PythonEnv())
    host_info = part("host", lambda: host.interpret(raw.get("host")), None)

    ceilings = part("ceilings", lambda: _ceilings.cpu_ceilings(cpu_info), [])
    for g in nv.devices:
        ceilings += part(f"ceilings cuda:{g.cuda_index}", lambda g=g: _ceilings.gpu_ceilings(g), [])
    ceilings = part("measured", lambda: _ceilings.merge_measured(ceilings, raw.get("measured")), ceilings)
    checks = part("checks", lambda: run_checks(raw, cpu_info, nv, tools, py, amd_s), [])

    for g in nv.devices:
        unsupported = [k for k, why in g.unavailable.items() if "NVML" in why and "does not support" not in why]
        if unsupported:
            warnings.append(f"GPU {g.cuda_index}: NVML errors for {', '.join(unsupported)}")

    kwargs = {} if host_info is None else {"host": host_info}
    return HostReport(
        schema_version=SCHEMA_VERSION,
        tracea_version=raw.get("tracea_version"),
        created_at=raw.get("created_at"),
        origin=origin,
        cpu=cpu_info,
        nvidia=nv,
        amd=amd_s,
        apple=apple_s,
        toolchains=tools,
        python=py,
        ceilings=ceilings,
        checks=checks,
        errors=errors,
        warnings=warnings,
        **kwargs,
    )


_CACHE: dict[str, Any] = {}


def probe(refresh: bool = False) -> HostReport:
    """This machine's report, probed once per process (``refresh=True`` probes again)."""
    if refresh or "report" not in _CACHE:
        raw = collect_raw()
        _CACHE["raw"] = raw
        _CACHE["report"] = build_report(raw)
    return _CACHE["report"]


def snapshot_document(raw: dict[str, Any], report: HostReport) -> dict[str, Any]:
    return {"kind": SNAPSHOT_KIND, "schema_version": SCHEMA_VERSION, "report": report.to_json(), "raw": raw}


def report_document(report: HostReport) -> dict[str, Any]:
    return {"kind": REPORT_KIND, **report.to_json()}


def write_json_atomic(path: str | os.PathLike[str], document: Any) -> None:
    """``document`` as indented JSON, written atomically (``files.write_atomic``)."""
    write_atomic(path, json.dumps(document, indent=1, sort_keys=False) + "\n")


def read_snapshot(path: str | os.PathLike[str]) -> tuple[HostReport, dict[str, Any] | None]:
    """A saved snapshot (re-interpreted from its raw answers) or a saved report, validated:
    (report, raw answers or None for a report-only file)."""
    p = Path(path)
    try:
        text = p.read_text()
    except FileNotFoundError:
        raise SnapshotError(f"snapshot not found: {p}", "save one with `tracea doctor --save FILE`") from None
    except IsADirectoryError:
        raise SnapshotError(f"snapshot is a directory, not a file: {p}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SnapshotError(f"cannot read snapshot {p}: {exc}") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SnapshotError(f"snapshot {p} is not valid JSON (truncated?): {exc}") from None
    except RecursionError:
        raise SnapshotError(f"snapshot {p} is not a snapshot: JSON nested too deeply") from None
    if not isinstance(doc, dict):
        raise SnapshotError(f"snapshot {p} is not a JSON object")
    kind = doc.get("kind")
    if kind not in (SNAPSHOT_KIND, REPORT_KIND):
        raise SnapshotError(f"{p} is not a Tracea doctor snapshot (kind={kind!r})",
                            "save one with `tracea doctor --save FILE`")
    version = doc.get("schema_version")
    if version != SCHEMA_VERSION:
        raise SnapshotError(f"snapshot {p} has schema_version {version!r}; this Tracea reads {SCHEMA_VERSION}",
                            "re-record it with this version of Tracea")
    try:
        if kind == SNAPSHOT_KIND:
            raw = doc.get("raw")
            if not isinstance(raw, dict):
                raise SnapshotError(f"snapshot {p} has no raw answers")
            return build_report(raw, origin=f"replay:{p.name}"), raw
        body = {k: v for k, v in doc.items() if k != "kind"}
        report = HostReport.from_json({**HostReport.from_json(body).to_json(), "origin": f"report:{p.name}"})
        return report, None
    except SnapshotError:
        raise
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        raise SnapshotError(f"snapshot {p} is malformed: {type(exc).__name__}: {exc}") from None


def load_snapshot(path: str | os.PathLike[str]) -> HostReport:
    """The report of a saved snapshot or report file (see ``read_snapshot``)."""
    return read_snapshot(path)[0]


def replay_raw(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The raw answers of a saved snapshot (None for a report-only file)."""
    return read_snapshot(path)[1]
