"""IR dumps: every stage of one kernel as files whose names sort in pipeline order.

    from tracea.reports.irdump import dump_kernel
    paths = dump_kernel(dir, op, decision, schedule, kernel.artifact, index=0)

writes into ``dir/<index:04d>_<kernel name>/``:

    00_op.json            the operation (L2), ``op.to_json()``
    01_decision.json      the decision engine's ranking and choice (L3), ``decision.to_json()``
    02_schedule.json      the schedule (L4), ``schedule.to_json()``
    03_source.<ext>       the rendered source exactly as compiled, named with its backend's SOURCE_SUFFIX
                          (.c, .cu, .hip; .txt for a language no registered backend compiles)
    04_compile.json       compiler, version, flags, the command, cache hit, seconds, the log when kept
    05_binary.<ext>       the binary (.so, .cubin or .ptx) when one was built
    06_sass.txt           CUDA only, when cuobjdump or nvdisasm is installed
    06_resources.txt      CUDA only, ``cuobjdump -res-usage``, when cuobjdump is installed
    07_metadata.yaml      the kernel metadata of DESIGN.md (``kernel_metadata``)

``artifact`` is a backend's ``Artifact`` (or its ``to_json()`` dict): name, op, variant, schedule,
source, language, entry, compiler, compiler_version, flags, binary, cache_hit, compile_seconds,
metadata. Without one (``tracea emit`` where nothing can compile), pass ``artifact=None`` with
``source=`` and ``language=``: the stages that exist are written, the others are absent.
Files are written atomically; a stage that cannot be produced is skipped, never faked.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

from tracea.doctor.errors import BadInputError
from tracea.doctor.files import write_atomic

from .runs import Run

DESIGN_KEYS = {
    "tile": ("M", "N", "K", "stages"),
    "fragments": ("mma", "dtype_in", "dtype_acc"),
    "resources": ("regs_per_thread", "smem_per_cta"),
    "launch": ("grid", "block"),
}
# names backends use for the resource figures DESIGN.md calls regs_per_thread / smem_per_cta
_REG_NAMES = ("regs_per_thread", "registers", "regs", "num_regs", "registers_per_thread")
_SMEM_NAMES = ("smem_per_cta", "shared_bytes", "smem_bytes", "smem", "shared_memory_bytes", "static_smem_bytes")
TOOL_TIMEOUT_S = 60


def field(obj: Any, name: str, default: Any = None) -> Any:
    """An artifact field, from an object or a dict."""
    if isinstance(obj, dict):
        return obj.get(name, default)
    return getattr(obj, name, default)


def _plain(value: Any) -> Any:
    """JSON/YAML-safe: tuples to lists, objects with to_json() to dicts, else str."""
    if hasattr(value, "to_json"):
        value = value.to_json()
    return json.loads(json.dumps(value, default=str))


def kernel_metadata(artifact: Any, op: Any = None) -> dict[str, Any]:
    """DESIGN.md's kernel metadata (Tessera §11.2) for ``artifact``: name, tile {M, N, K, stages},
    fragments {mma, dtype_in, dtype_acc}, resources {regs_per_thread, smem_per_cta}, launch {grid,
    block}, epilogue, with null where a field does not apply (a CPU kernel has no registers per
    thread or grid); the backend's other metadata follows under its own keys."""
    meta = _plain(field(artifact, "metadata") or {}) if artifact is not None else {}
    resources = dict(meta.get("resources") or {})
    for key in _REG_NAMES:
        if resources.get("regs_per_thread") is None and meta.get(key) is not None:
            resources["regs_per_thread"] = meta[key]
    for key in _SMEM_NAMES:
        if resources.get("smem_per_cta") is None and meta.get(key) is not None:
            resources["smem_per_cta"] = meta[key]
    meta["resources"] = resources
    out: dict[str, Any] = {"name": meta.get("name") or field(artifact, "name")}
    for key, subkeys in DESIGN_KEYS.items():
        section = meta.get(key)
        section = dict(section) if isinstance(section, dict) else {}
        out[key] = {k: section.get(k) for k in subkeys} | {k: v for k, v in section.items() if k not in subkeys}
    epilogue = meta.get("epilogue")
    if epilogue is None and op is not None:
        epilogue = list(field(_plain(op), "epilogue") or [])
    out["epilogue"] = epilogue if epilogue is not None else []
    out |= {k: v for k, v in meta.items() if k not in out and k not in ("compile_log", "log")}  # in 04_compile.json
    if artifact is not None:
        for key in ("variant", "language", "entry"):
            out.setdefault(key, field(artifact, key))
    return out


def source_suffix(language: str | None) -> str:
    """The suffix of a source in ``language`` (an artifact's): the ``SOURCE_SUFFIX`` of the backend that
    compiles it (emitters/backend.py), or ".txt" for a language no registered backend compiles."""
    from tracea.emitters.registry import by_language

    backend = by_language(language)
    return backend.SOURCE_SUFFIX if backend is not None else ".txt"


def compile_record(artifact: Any) -> dict[str, Any]:
    """What 04_compile.json holds: how the binary was (or would be) made."""
    from tracea.emitters.registry import by_language
    language = field(artifact, "language")
    flags = list(field(artifact, "flags") or [])
    compiler = field(artifact, "compiler")
    binary = field(artifact, "binary")
    command = None
    backend = by_language(language)
    if backend is not None and compiler:
        # the command as it runs in the dump folder, on the dumped source (None: the compiler runs in-process)
        suffix = Path(str(binary)).suffix if binary else ""
        command = backend.compile_command(compiler, flags, f"03_source{backend.SOURCE_SUFFIX}",
                                          f"05_binary{suffix or '.so'}")
    meta = field(artifact, "metadata") or {}
    log = field(artifact, "log") or (meta.get("compile_log") if isinstance(meta, dict) else None) \
        or (meta.get("log") if isinstance(meta, dict) else None)
    return {
        "language": language, "compiler": compiler, "compiler_version": field(artifact, "compiler_version"),
        "flags": flags, "command": command, "binary": binary, "cache_hit": field(artifact, "cache_hit"),
        "compile_seconds": field(artifact, "compile_seconds"), "entry": field(artifact, "entry"),
        "log": log,
        "log_note": None if log else ("a cache hit: the binary was compiled earlier and its log was not kept"
                                      if field(artifact, "cache_hit") else
                                      "the compiler printed nothing that was kept (it succeeded)"),
    }


def _cuda_tools(binary: Path, folder: Path) -> list[Path]:
    """06_sass.txt and 06_resources.txt for a cubin, with the CUDA binary utilities when installed."""
    out: list[Path] = []
    if binary.suffix != ".cubin":
        return out
    cuobjdump, nvdisasm = shutil.which("cuobjdump"), shutil.which("nvdisasm")
    jobs = []
    if cuobjdump:
        jobs += [("06_sass.txt", [cuobjdump, "-sass", str(binary)]),
                 ("06_resources.txt", [cuobjdump, "-res-usage", str(binary)])]
    elif nvdisasm:
        jobs += [("06_sass.txt", [nvdisasm, "-c", str(binary)])]
    for name, cmd in jobs:
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=TOOL_TIMEOUT_S)
        except (OSError, subprocess.SubprocessError):
            continue
        text = proc.stdout if proc.returncode == 0 else f"# {' '.join(cmd)} failed ({proc.returncode})\n{proc.stderr}"
        write_atomic(folder / name, text)
        out.append(folder / name)
    return out


def dump_kernel(dir: str | Path, op: Any, decision: Any, schedule: Any, artifact: Any, index: int = 0, *,
                source: str | None = None, language: str | None = None) -> list[Path]:
    """Write every stage of one kernel (see the module docstring); the paths written, in order."""
    import yaml

    name = field(artifact, "name") if artifact is not None else None
    name = name or f"{field(_plain(op), 'op') or 'kernel'}"
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in str(name))[:80]
    folder = Path(dir) / f"{index:04d}_{safe}"
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BadInputError(f"dump-ir: cannot create {folder} ({exc.strerror})") from None

    def dumps(obj: Any) -> str:
        return json.dumps(_plain(obj), indent=1) + "\n"

    files: list[tuple[str, str | bytes]] = [("00_op.json", dumps(op))]
    if decision is not None:
        files.append(("01_decision.json", dumps(decision)))
    if schedule is not None:
        files.append(("02_schedule.json", dumps(schedule)))
    language = (field(artifact, "language") if artifact is not None else None) or language or "c"
    text = (field(artifact, "source") if artifact is not None else None) or source
    if text is not None:
        files.append((f"03_source{source_suffix(language)}", text))
    if artifact is not None:
        files.append(("04_compile.json", dumps(compile_record(artifact))))
    written: list[Path] = []
    try:
        for fname, data in files:
            write_atomic(folder / fname, data)
            written.append(folder / fname)
        binary = Path(field(artifact, "binary")) if artifact is not None and field(artifact, "binary") else None
        if binary is not None and binary.is_file():
            target = folder / f"05_binary{binary.suffix or '.bin'}"
            write_atomic(target, binary.read_bytes())
            written.append(target)
            written += _cuda_tools(target, folder)  # a cubin's SASS and resources; nothing for other binaries
        meta = kernel_metadata(artifact, op)
        if meta.get("name") is None:
            meta["name"] = name
        write_atomic(folder / "07_metadata.yaml", yaml.safe_dump(meta, sort_keys=False))
        written.append(folder / "07_metadata.yaml")
    except OSError as exc:
        raise BadInputError(f"dump-ir: cannot write into {folder} ({exc.strerror})") from None
    return written


def dump_best(run: Run, op: Any, variant: str, schedule: dict[str, Any], host: Any, decision: Any = None,
              backend: str | None = None, index: int = 0) -> list[Path]:
    """Build ``schedule`` through the backend (a compile-cache hit when this process or machine measured
    it: the very binary) and write its IR dump into the run folder, so the run's bundle replays it.
    For the tuner: call it with the best schedule before ``run.finish``."""
    from tracea.emitters import registry

    v = registry.variant(variant)
    mod = registry.backend(backend or v.backend)
    sched = mod.schedule_from_json(schedule)
    kernel = mod.build(op, v, sched, host)
    return dump_kernel(run.ir_dir, op, decision, sched, kernel.artifact, index)
