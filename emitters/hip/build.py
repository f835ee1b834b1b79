"""The HIP backend's kernels for Tracea's ops (issue 19): schedules (JSON, heuristic, search space), one
launch description per op that every runner uses (``launch``: source, grid, block and arguments), and
``emit``, which needs only hipcc: the source, the code object, its disassembly and its resources. Each step
asks the op's core (cores.py: one line per op kind), so nothing here branches on the op. The heuristic sees
the GPU's compute units (a CU count from the doctor's AMD report, 104 (an MI210) where it has none).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tracea.doctor.errors import BadInputError, UnsupportedError

from ..core import check_schedule
from . import gemm as g
from . import softmax as sm
from .core import PADS, Launch
from .cores import core_for
from .render import HipRenderer
from .variants import VARIANTS

HipSchedule = g.HipGemmSchedule | sm.HipSoftmaxSchedule
DEFAULT_CUS = 104


def resolve(variant: Any) -> Any:
    vid = variant if isinstance(variant, str) else variant.id
    for v in VARIANTS:
        if v.id == vid:
            return v
    raise UnsupportedError(f"no HIP variant {vid!r} (available: {', '.join(v.id for v in VARIANTS)})")


def schedule_from_json(d: dict[str, Any]) -> HipSchedule:
    """A HIP schedule from its ``to_json()``, as the class its "kind" names reads it; ``BadInputError`` for
    anything else."""
    if not isinstance(d, dict):
        raise BadInputError(f"a HIP schedule is a JSON object, not {type(d).__name__}")
    kind = d.get("kind")
    cls = {g.KIND: g.HipGemmSchedule, sm.KIND: sm.HipSoftmaxSchedule}.get(kind)  # type: ignore[arg-type]
    if cls is None:
        raise BadInputError(f"schedule kind {kind!r} is not a HIP schedule ({g.KIND}, {sm.KIND})")
    return cls.from_json(d)  # type: ignore[no-any-return]


def check_op(op: Any) -> None:
    """``UnsupportedError`` for an op these kernels do not compute, saying what they do (the op's core)."""
    core_for(op)


def amd_gpus(host: Any) -> list[Any]:
    """The host report's AMD GPUs (none for a report without an AMD section)."""
    return list(getattr(getattr(host, "amd", None), "devices", None) or [])


def compute_units(host: Any) -> int:
    gpus = amd_gpus(host)
    return gpus[0].compute_units if gpus and gpus[0].compute_units else DEFAULT_CUS


def hero_schedule(op: Any, variant: Any, host: Any) -> HipSchedule:
    """The op's core's heuristic for this GPU's compute units (cores.py)."""
    return core_for(op).hero(op, compute_units(host))  # type: ignore[no-any-return]


def validate_schedule(op: Any, variant: Any, schedule: Any, host: Any) -> None:
    check_schedule(core_for(op), op, variant, schedule, host, "HIP")


def search_space(op: Any, variant: Any, host: Any) -> list[HipSchedule]:
    """Every schedule that builds for ``op``, the heuristic's first (the op's core's space)."""
    core = core_for(op)
    return core.space(op, core.hero(op, compute_units(host)))  # type: ignore[no-any-return]


def launch(op: Any, schedule: Any, target: str) -> Launch:
    """The kernel that computes ``op`` with ``schedule``, rendered for ``target``."""
    return core_for(op).render(op, schedule, target)


def host_target(host: Any) -> str | None:
    gpus = amd_gpus(host)
    return gpus[0].gfx_target if gpus else None


def target_for(host: Any, arch: str | None) -> tuple[str, str | None]:
    """The gfx target to build for (``arch``, else this host's first AMD GPU's) and a note when this hipcc
    cannot build it and builds the nearest one instead (gfx942 -> gfx940 on LLVM 15)."""
    from .compiler import accepts

    want = (arch or host_target(host) or "").strip().lower()
    if not want:
        raise UnsupportedError("no AMD GPU here to build for", "name the target: --arch gfx90a (MI200) or gfx942 (MI300)")
    if want in ("gfx940", "gfx941", "gfx942") and not accepts(want):
        other = next((t for t in ("gfx942", "gfx940") if t != want and accepts(t)), None)
        if other is None:
            raise UnsupportedError(f"this hipcc builds no CDNA3 target ({want}, gfx942 or gfx940)",
                                   "install a newer ROCm or hipcc")
        return other, (f"this hipcc does not know {want}; built for {other}, the nearest CDNA3 target it accepts "
                       "(for inspection: a code object loads only on its own target)")
    return want, None


def emit(op: Any, variant: Any, schedule: Any, host: Any, out_dir: str | Path, arch: str | None = None) -> list[Path]:
    """Write <name>.hip, <name>-<target>.co (what hipModuleLoadData takes), <name>-<target>.s (its
    disassembly), schedule.json and metadata.yaml (resources, MFMA count, launch shape) into ``out_dir``.
    Needs hipcc, not a GPU."""
    import yaml

    from tracea.doctor.files import write_atomic

    from . import compiler as hc

    v = resolve(variant)
    validate_schedule(op, v, schedule, host)
    target, note = target_for(host, arch)
    ln = launch(op, schedule, "amd")
    obj = hc.compile_hip(ln.source, ln.name, target)
    asm = hc.disassemble(obj)
    mfma = hc.mfma_mnemonics(asm)
    meta = {"variant": v.id, "op": op.to_json(), "target": target, **({"note": note} if note else {}),
            "kernel": ln.name, "grid": list(ln.grid), "block": list(ln.block),
            "arguments": [k if val is None else f"{k} {val}" for k, val in ln.args],
            "resources": obj.resources, "mfma": {"count": len(mfma), "instructions": sorted(set(mfma))},
            "compiler": "hipcc", "compiler_version": hc.find_toolchain().version,
            "flags": [*hc.FLAGS, f"--offload-arch={target}"]}  # the command: hipcc --genco FLAGS SOURCE -o CO
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
        files: dict[Path, str | bytes] = {
            out / f"{ln.name}{HipRenderer.file_suffix}": ln.source,
            out / f"{ln.name}-{target}.co": obj.bundle.read_bytes(),
            out / f"{ln.name}-{target}.s": asm,
            out / "schedule.json": json.dumps(schedule.to_json(), indent=2) + "\n",
            out / "metadata.yaml": yaml.safe_dump(meta, sort_keys=False),
        }
        for path, data in files.items():
            write_atomic(path, data)
    except OSError as exc:
        raise BadInputError(f"out: cannot write into {out} ({exc.strerror})") from None
    return list(files)


def bank_conflict_drop(op: Any, variant: Any, schedule: Any) -> str | None:
    """The tuner's pruning rule (tuner/space.py): drop a GEMM or conv schedule whose MFMA fragment reads
    conflict in LDS, by the CDNA bank model, when another pad of the search space makes the same tile
    conflict-free; None to keep it."""
    if not isinstance(schedule, g.HipGemmSchedule):
        return None
    from ..bank_search import pad_drop
    from .lds_banks import READS, gemm_lds_report

    dtype = op.dtype.value

    def conflicts(s: g.HipGemmSchedule) -> int:
        report = gemm_lds_report(s, dtype)
        return sum(report[k]["conflicts"] for k in READS)

    return pad_drop(op, schedule, PADS[dtype], conflicts, "its fragment reads")
