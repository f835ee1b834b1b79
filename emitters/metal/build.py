"""The Metal backend's kernels for Tracea's ops (issue 36): schedules (JSON, heuristic, search space), one
launch description per op that every runner uses (``launch``: the MSL source, grid, block, arguments and
threadgroup memory: core.py's ``Launch``), and ``emit``, which needs nothing but Python: the source, the
schedule and the metadata, and the ``.metallib`` where Apple's compiler (``xcrun metal``) is installed.

Each step asks the op's core (``cores/``: a core file per op kind), so nothing here branches on an op; the
schedule classes and their JSON "kind"s are gathered from the cores too. The heuristic sees the GPU's core
count (the doctor's ``AppleGpu.gpu_cores``; ``DEFAULT_GPU_CORES`` for an ``--arch`` target, which has none).
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

from tracea.doctor.errors import BadInputError, UnsupportedError

from ..core import check_schedule
from .core import Launch
from .cores import CORES, core_for
from .variants import FAMILIES_OF_GPU, VARIANTS

DEFAULT_GPU_CORES = 10  # the GPU of a base M2, M3 or M4 (an M1's has 7 or 8): what a target without a count plans for
SOURCE_SUFFIX = ".metal"
LANGUAGE = "metal"


def resolve(variant: Any) -> Any:
    vid = variant if isinstance(variant, str) else variant.id
    for v in VARIANTS:
        if v.id == vid:
            return v
    raise UnsupportedError(f"no Metal variant {vid!r} (available: {', '.join(v.id for v in VARIANTS)})")


def _kind(cls: type) -> str | None:
    """The JSON "kind" a schedule class writes: its ``KIND``, else its module's."""
    return getattr(cls, "KIND", None) or getattr(importlib.import_module(cls.__module__), "KIND", None)


def schedule_kinds() -> dict[str, type]:
    """{JSON kind: schedule class} over every core's schedule class."""
    return {k: c.schedule for c in CORES.values() if (k := _kind(c.schedule))}


def schedule_from_json(d: dict[str, Any]) -> Any:
    """A Metal schedule from its ``to_json()``, read by the class whose "kind" it names; ``BadInputError`` for
    anything else."""
    if not isinstance(d, dict):
        raise BadInputError(f"a Metal schedule is a JSON object, not {type(d).__name__}")
    kinds = schedule_kinds()
    cls = kinds.get(d.get("kind"))  # type: ignore[arg-type]
    if cls is None:
        raise BadInputError(f"schedule kind {d.get('kind')!r} is not a Metal schedule ({', '.join(sorted(kinds))})")
    return cls.from_json(d)  # type: ignore[attr-defined]


def check_op(op: Any) -> None:
    """``UnsupportedError`` for an op these kernels do not compute, saying what they do (the op's core)."""
    core_for(op)


def apple_gpus(host: Any) -> list[Any]:
    """The host report's Apple GPUs (none for a report without an Apple section)."""
    return list(getattr(getattr(host, "apple", None), "devices", None) or [])


def gpu_cores(host: Any) -> int:
    gpus = apple_gpus(host)
    return gpus[0].gpu_cores if gpus and gpus[0].gpu_cores else DEFAULT_GPU_CORES


def hero_schedule(op: Any, variant: Any, host: Any) -> Any:
    """The op's core's heuristic for this GPU's core count."""
    return core_for(op).hero(op, gpu_cores(host))


def validate_schedule(op: Any, variant: Any, schedule: Any, host: Any) -> None:
    check_schedule(core_for(op), op, variant, schedule, host, "Metal")


def search_space(op: Any, variant: Any, host: Any) -> list[Any]:
    """Every schedule that builds for ``op``, the heuristic's first (the op's core's space)."""
    core = core_for(op)
    return core.space(op, core.hero(op, gpu_cores(host)))  # type: ignore[no-any-return]


def launch(op: Any, schedule: Any) -> Launch:
    """The kernel that computes ``op`` with ``schedule``: one MSL source for every Apple GPU family listed."""
    return core_for(op).render(op, schedule)  # type: ignore[no-any-return]


def family_of(arch: str) -> str:
    """``--arch`` as an Apple GPU family the kernels are written for (case and spaces aside); ``BadInputError``
    naming them otherwise."""
    family = str(arch).replace(" ", "").lower()
    if family not in FAMILIES_OF_GPU:
        raise BadInputError(f"--arch {arch}: not an Apple GPU family these kernels target; use one of "
                            f"{', '.join(FAMILIES_OF_GPU)}")
    return family


def target_for(host: Any, arch: str | None) -> str:
    """The Apple GPU family to build for: ``arch`` (apple7, apple8, apple9), else this host's GPU's."""
    if arch is not None:
        return family_of(arch)
    gpus = apple_gpus(host)
    if gpus and gpus[0].gpu_family:
        return str(gpus[0].gpu_family)
    raise UnsupportedError("no Apple GPU here to build for", "name the target: --arch apple7 (M1), apple8 (M2) "
                           "or apple9 (M3, M4)")


def arguments(ln: Launch) -> list[str]:
    """``[[buffer(i)]]`` i's argument, in order: the input's name, "out", or a scalar's type and value."""
    return [f"buffer({i}): {name if kind == 'in' else 'out' if kind == 'out' else f'{kind} {name}'}"
            for i, (kind, name) in enumerate(ln.args)]


def _library(ln: Launch, target: str) -> tuple[Path | None, dict[str, Any]]:
    """The ``.metallib`` Apple's compiler builds for ``target`` (compiler.py) and its metadata; None and
    the reason where the toolchain is not here."""
    from . import compiler as mc

    tool = mc.find_toolchain()
    about = {"compiler": "xcrun metal", "compiler_version": getattr(tool, "version", None),
             "flags": list(mc.FLAGS)}
    try:
        return mc.compile_library(ln.source, ln.name, target), about
    except UnsupportedError as exc:  # the IR dump's 04_compile.json shows compile_log as the compile's log
        return None, {**about, "metallib": f"not built: {exc.message}", "compile_log": f"not compiled: {exc.message}"}


def metadata(op: Any, variant: Any, ln: Launch, target: str, library: dict[str, Any]) -> dict[str, Any]:
    """What ``metadata.yaml`` says: the variant and op, the target family, the launch, the compiler."""
    return {"variant": variant.id, "op": op.to_json(), "target": target, "kernel": ln.name,
            "grid": list(ln.grid), "block": list(ln.block), "threads": ln.threads, "arguments": arguments(ln),
            "threadgroup_bytes": ln.threadgroup_bytes,
            "run_time_compile": "MTLDevice newLibraryWithSource (runtime.py): the source as written here", **library}


def artifact(op: Any, variant: Any, schedule: Any, ln: Launch, target: str, compiler: str) -> Any:
    """The record of a kernel Metal compiles in the process (emitters/artifact.py): no binary file, no flags."""
    import platform

    from ..artifact import Artifact

    return Artifact(name=ln.name, op=op.to_json(), variant=variant.id, schedule=schedule.to_json(), source=ln.source,
                    language=LANGUAGE, entry=ln.name, compiler=compiler, compiler_version=platform.mac_ver()[0] or "",
                    flags=(), binary="", cache_hit=False, compile_seconds=0.0,
                    metadata=metadata(op, variant, ln, target, {}))


def emit(op: Any, variant: Any, schedule: Any, host: Any, out_dir: str | Path, arch: str | None = None) -> list[Path]:
    """Write <name>.metal, schedule.json, metadata.yaml and, where ``xcrun metal`` is installed,
    <name>-<family>.metallib into ``out_dir`` (metadata.yaml says why one is missing). Needs no Mac."""
    import yaml

    from tracea.doctor.files import write_atomic

    v = resolve(variant)
    validate_schedule(op, v, schedule, host)
    target = target_for(host, arch)
    ln = launch(op, schedule)
    lib, about = _library(ln, target)
    out = Path(out_dir)
    files: dict[Path, str | bytes] = {
        out / f"{ln.name}{SOURCE_SUFFIX}": ln.source,
        out / "schedule.json": json.dumps(schedule.to_json(), indent=2) + "\n",
        out / "metadata.yaml": yaml.safe_dump(metadata(op, v, ln, target, about), sort_keys=False),
    }
    if lib is not None:
        files[out / f"{ln.name}-{target}.metallib"] = Path(lib).read_bytes()
    try:
        out.mkdir(parents=True, exist_ok=True)
        for path, data in files.items():
            write_atomic(path, data)
    except OSError as exc:
        raise BadInputError(f"out: cannot write into {out} ({exc.strerror})") from None
    return list(files)
