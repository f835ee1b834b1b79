"""The HIP backend's kernels for Tracea's ops (issue 19): schedules (JSON, heuristic, search space), one
launch description per op that every runner uses (``launch``: source, grid, block and arguments), and
``emit``, which needs only hipcc: the source, the code object, its disassembly and its resources.

GEMM and conv2d (NHWC, groups 1) run on the MFMA GEMM body (gemm.py) in bf16, fp16 or fp32 with the fused
epilogue; softmax on softmax.py. The heuristic fills the GPU's compute units with tiles before it makes
them large (a CU count from the doctor's AMD report, 104 (an MI210) where it has none).
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracea.doctor.errors import BadInputError, UnsupportedError

from . import gemm as g
from . import softmax as sm
from .render import HipRenderer
from .variants import VARIANTS

HipSchedule = g.HipGemmSchedule | sm.HipSoftmaxSchedule
DEFAULT_CUS = 104
# LDS row pads whose fragment reads the CDNA bank model (emitters/hip/lds_banks.py) finds conflict-free on
# every heuristic tile: 4 for 16-bit rows (an LD of 4 mod 8 elements), 1 for fp32 (an odd LD)
HERO_PAD = {"bf16": 4, "fp16": 4, "fp32": 1}
PADS = {"bf16": (0, 4, 8, 12), "fp16": (0, 4, 8, 12), "fp32": (0, 1, 4, 5)}
TILES = ((128, 128, 2, 2), (64, 128, 1, 2), (128, 64, 2, 1), (64, 64, 1, 1), (32, 64, 1, 2), (32, 32, 1, 1))


def resolve(variant: Any) -> Any:
    vid = variant if isinstance(variant, str) else variant.id
    for v in VARIANTS:
        if v.id == vid:
            return v
    raise UnsupportedError(f"no HIP variant {vid!r} (available: {', '.join(v.id for v in VARIANTS)})")


def schedule_from_json(d: dict[str, Any]) -> HipSchedule:
    """A HIP schedule from its ``to_json()``; ``BadInputError`` for anything else."""
    if not isinstance(d, dict):
        raise BadInputError(f"a HIP schedule is a JSON object, not {type(d).__name__}")
    kind, fields = d.get("kind"), {k: v for k, v in d.items() if k != "kind"}
    cls = {"hip-mfma": g.HipGemmSchedule, "hip-softmax": sm.HipSoftmaxSchedule}.get(kind)  # type: ignore[arg-type]
    if cls is None:
        raise BadInputError(f"schedule kind {kind!r} is not a HIP schedule (hip-mfma, hip-softmax)")
    allowed = set(cls.__dataclass_fields__)
    if set(fields) - allowed or any(isinstance(v, bool) or not isinstance(v, int) for v in fields.values()):
        raise BadInputError(f"a {kind} schedule has integer fields {', '.join(sorted(allowed))}; got {fields}")
    return cls(**fields)


def _gemm_shape(op: Any) -> tuple[int, int]:
    return (op.gemm_m, op.gemm_n) if op.kind == "conv2d" else (op.m, op.n)


def check_op(op: Any) -> None:
    """``UnsupportedError`` for an op these kernels do not compute, saying what they do."""
    dtype = op.dtype.value
    if op.kind in ("gemm", "conv2d") and dtype not in g.DTYPES:
        raise UnsupportedError(f"the HIP MFMA kernels compute {', '.join(g.DTYPES)}, not {dtype}")
    if op.kind == "conv2d" and (op.layout != "nhwc" or op.groups != 1):
        raise UnsupportedError("the HIP conv computes NHWC convolutions with groups 1",
                               "--layout nhwc; grouped convolutions run on another backend")
    if op.kind == "softmax" and dtype not in sm.STORE:
        raise UnsupportedError(f"the HIP softmax computes fp32, bf16 or fp16, not {dtype}")
    if op.kind not in ("gemm", "conv2d", "softmax"):
        raise UnsupportedError(f"the HIP backend has no {op.kind} kernel")


def amd_gpus(host: Any) -> list[Any]:
    """The host report's AMD GPUs (none for a report without an AMD section)."""
    return list(getattr(getattr(host, "amd", None), "devices", None) or [])


def compute_units(host: Any) -> int:
    gpus = amd_gpus(host)
    return gpus[0].compute_units if gpus and gpus[0].compute_units else DEFAULT_CUS


def hero_schedule(op: Any, variant: Any, host: Any) -> HipSchedule:
    """The largest tile that still gives every compute unit a workgroup (else the one with the most
    workgroups); bk 32 for the small tiles, whose K loop is otherwise short of MFMAs; a workgroup of 4 rows
    for softmax unless that leaves CUs idle."""
    check_op(op)
    cus = compute_units(host)
    if op.kind == "softmax":
        return sm.HipSoftmaxSchedule(4 if op.rows >= 4 * cus else 1)
    m, n = _gemm_shape(op)
    best = None
    pad = HERO_PAD[op.dtype.value]
    for bm, bn, wm, wn in TILES:
        s = g.HipGemmSchedule(bm, bn, 16 if bm * bn >= 128 * 64 else 32, wm, wn, pad)
        tiles = -(-m // bm) * -(-n // bn)
        if tiles >= cus:
            return s
        best = best if best and best[0] >= tiles else (tiles, s)
    return best[1]  # type: ignore[index]


def validate_schedule(op: Any, variant: Any, schedule: Any, host: Any) -> None:
    check_op(op)
    want = sm.HipSoftmaxSchedule if op.kind == "softmax" else g.HipGemmSchedule
    if not isinstance(schedule, want):
        raise BadInputError(f"a {op.kind} on HIP takes a {want.__name__}, not {type(schedule).__name__}")
    schedule.validate() if op.kind == "softmax" else schedule.validate(op.dtype.value)


def search_space(op: Any, variant: Any, host: Any) -> list[HipSchedule]:
    """Every schedule that builds for ``op``, the heuristic's first: tiles of 32-256 over 1-8 wavefronts,
    bk 8-64 and four LDS pads (``PADS``: GEMM and conv); 1-8 rows a workgroup (softmax)."""
    hero = hero_schedule(op, variant, host)
    if op.kind == "softmax":
        return [hero, *(sm.HipSoftmaxSchedule(r) for r in range(1, 9) if r != hero.rows_per_group)]
    out = [hero]
    tiles = (32, 64, 128, 256)
    for bm, bn, wm, wn, bk, pad in itertools.product(tiles, tiles, (1, 2, 4), (1, 2, 4), (8, 16, 32, 64),
                                                     PADS[op.dtype.value]):
        s = g.HipGemmSchedule(bm, bn, bk, wm, wn, pad)
        try:
            s.validate(op.dtype.value)
        except BadInputError:
            continue
        if s != hero:
            out.append(s)
    return out


@dataclass(frozen=True)
class Launch:
    """One kernel ready for any runner: its source for ``target`` ("amd" or "nvidia"), grid, block, and
    arguments in order: ("in", input name), ("out", None), ("null", None), ("i32", value), ("f32", value);
    ``dynamic_smem``: the bytes of dynamic shared memory a launch must give (the NVIDIA prelude's LDS)."""

    name: str
    source: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    args: tuple[tuple[str, Any], ...]
    dynamic_smem: int = 0


def _operand(inputs_needed: tuple[str, ...], name: str) -> tuple[str, Any]:
    return ("in", name) if name in inputs_needed else ("null", None)


def launch(op: Any, schedule: Any, target: str) -> Launch:
    """The kernel that computes ``op`` with ``schedule``, rendered for ``target``."""
    check_op(op)
    dtype, needs = op.dtype.value, tuple(op.shapes())
    if op.kind == "softmax":
        return Launch(sm.KERNEL, sm.render(dtype, schedule, target), sm.grid(op.rows, schedule),
                      (schedule.threads, 1, 1), (("in", "x"), ("out", None), ("i32", op.rows), ("i32", op.cols)))
    block = (schedule.threads, 1, 1)
    smem = schedule.lds_bytes(dtype) if target == "nvidia" else 0
    if op.kind == "gemm":
        src = g.render(dtype, schedule, target, "gemm", op.epilogue, op.layout_a, op.layout_b)
        args = (("in", "a"), ("in", "b"), ("out", None), _operand(needs, "bias"), _operand(needs, "residual"),
                ("i32", op.m), ("i32", op.n), ("i32", op.k), ("f32", op.alpha))
        return Launch(g.KERNEL, src, g.grid(op.m, op.n, schedule), block, args, smem)
    src = g.render(dtype, schedule, target, "conv", ("bias",) if op.bias else ())
    ints = (op.n, op.h, op.w, op.c, op.p, op.q, op.k, op.r, op.s, *op.stride, *op.padding, *op.dilation)
    args = (("in", "x"), ("in", "weight"), ("out", None), _operand(needs, "bias"), *(("i32", v) for v in ints))
    return Launch(g.CONV_KERNEL, src, g.grid(op.gemm_m, op.gemm_n, schedule), block, args, smem)


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
    import dataclasses

    if not isinstance(schedule, g.HipGemmSchedule):
        return None
    from .lds_banks import READS, gemm_lds_report

    dtype = op.dtype.value

    def conflicts(s: g.HipGemmSchedule) -> int:
        report = gemm_lds_report(s, dtype)
        return sum(report[k]["conflicts"] for k in READS)

    mine = conflicts(schedule)
    if mine == 0:
        return None
    for pad in PADS[dtype]:
        other = dataclasses.replace(schedule, pad=pad)
        try:
            other.validate(dtype)
        except BadInputError:
            continue
        if conflicts(other) == 0:
            return f"pad {schedule.pad}: {mine} conflict cycles per k tile in its fragment reads; pad {pad} has none"
    return None
