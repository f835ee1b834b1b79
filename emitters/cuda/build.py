"""hero_schedule / search_space / build / emit: from (op, variant, schedule, host) to a loaded kernel or
files on disk. The same public functions as ``emitters/cpu`` so the registry, bench, tuner and
evidence layers treat backends alike."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from tracea.doctor.errors import BadInputError, UnsupportedError
from tracea.doctor.variants import Variant

from . import compiler as nv
from .arch import Arch, parse_arch, target_of
from .render import Rendered
from .schedule import CudaSchedule
from .variants import resolve

CORE_OF_FAMILY = {"cuda-mma-sync": "mma", "cuda-simt": "simt", "cuda-wgmma": "wgmma"}


def _core(op: Any, v: Variant) -> str:
    if op.kind == "softmax":
        return "softmax"
    return CORE_OF_FAMILY[v.family]


def _arch(host: Any, arch: str | Arch | None = None) -> Arch:
    """The compile target: ``arch`` if named, else the host's GPU, else the GPU cuda-core sees."""
    if arch is not None or getattr(getattr(host, "nvidia", None), "devices", None):
        return target_of(host, arch)
    try:
        from cuda.core import Device

        d = Device()
        cc = d.compute_capability
        base = parse_arch(f"{cc[0]}.{cc[1]}")
    except Exception:  # noqa: BLE001 - no driver here
        raise UnsupportedError("no NVIDIA GPU to compile for",
                               "name a target instead: --arch sm_80 or --arch sm_90a") from None
    return dataclasses.replace(base, suffix="a" if base.cc == (9, 0) else "")


def _check(op: Any, v: Variant, schedule: Any, arch: Arch) -> None:
    if getattr(op, "kind", None) != v.op:
        raise BadInputError(f"variant: {v.id} computes {v.op}, not {getattr(op, 'kind', op)!r}")
    if v.family == "cuda-wgmma":  # the Hopper GEMM checks its own schedule type and target (tma.py)
        from .tma import check_wgmma

        return check_wgmma(op, v, schedule, arch)
    if not isinstance(schedule, CudaSchedule):
        raise BadInputError(f"schedule: expected a CudaSchedule, got {type(schedule).__name__}")
    if op.dtype.value not in v.precisions:
        raise UnsupportedError(f"{v.id} computes {', '.join(v.precisions)}, not {op.dtype.value}",
                               "fp32 runs on cuda-simt, bf16/fp16 on cuda-mma-sync")
    if arch.cc < v.requirements.min_compute_capability:
        raise UnsupportedError(f"{v.id} needs sm_{''.join(map(str, v.requirements.min_compute_capability))} or "
                               f"later, not {arch.name}")
    if op.kind == "conv2d" and op.groups != 1:
        raise UnsupportedError("grouped convolution is not implemented on CUDA yet", "use --backend cpu")
    if schedule.core != _core(op, v):
        raise BadInputError(f"core: {v.id} runs the {_core(op, v)} core, not {schedule.core}")
    schedule.validate(op, arch)


def hero_schedule(op: Any, variant: Variant | str, host: Any, arch: str | Arch | None = None) -> CudaSchedule:
    """A good default: 128x256x32 GEMM blocks of 8 warps (64x64 each) and 4 cp.async stages (256x128x32 for
    convolutions), or 128x128x64
    with 3 when that fills the last wave of blocks better, rasterized in groups of 8 block rows, for
    tensor cores; 128x128x16 blocks of 8x8-per-thread on CUDA cores; softmax rows held in registers
    when they fit."""
    v = resolve(variant)
    core = _core(op, v)
    if core == "wgmma" and op.kind == "conv2d":
        from .hopper.schedule import conv_hero_schedule as conv_hero

        return conv_hero(op)
    if core == "wgmma":
        from .hopper.schedule import hero_schedule as wgmma_hero

        return wgmma_hero(op)
    if core == "softmax":
        vec = 16 // op.dtype.itemsize
        if op.cols % vec:
            vec = 1
        if vec == 1:  # scalar rows: about 4 elements a thread (more spilled in measured compiles)
            threads = min(1024, max(128, -(-op.cols // 128) * 32))
        else:
            threads = 512 if op.cols >= 8192 else 256 if op.cols >= 2048 else 128
        chunks = -(-op.cols // (threads * vec))
        if op.cols >= 8192 and vec > 1:
            # long rows: the two-pass form, whose second read of a row hits L2, ran at 0.93 of the copy
            # bandwidth at 8192 x 8192 fp32 against 0.70 for the rows held in registers (05_final)
            chunks = 0
        return CudaSchedule("softmax", threads=threads, vec=vec, chunks=chunks if chunks <= 16 else 0)
    if core == "simt":  # bk 16: 45 TFLOP/s on an H200 at 4096^3, bk 8: 26 (gpu/cuda_runs/02_bench_probe)
        return CudaSchedule("simt", bm=128, bn=128, bk=16, wm=32, wn=64, stages=2, raster=8)
    # Two tiles within 2 % of each other at 4096^3 on an H200 (370 and 376 TFLOP/s, 02_bench_probe):
    # take the one whose last wave of blocks is fuller on this GPU's SMs.
    m, n = (op.gemm_m, op.gemm_n) if op.kind == "conv2d" else (op.m, op.n)
    big = CudaSchedule("mma", bm=256, bn=128, bk=32, wm=64, wn=64, stages=4, raster=8)
    small = CudaSchedule("mma", bm=128, bn=128, bk=64, wm=64, wn=32, stages=3, raster=8)
    sms = _sm_count(host)

    def waves(s: CudaSchedule) -> int:
        return -(-(-(-m // s.bm) * -(-n // s.bn)) // sms)

    from .smem import vector_copies

    if not all(vector_copies(op)):  # rows not 16-byte aligned: the register copy path, lighter with bk 32
        return dataclasses.replace(small, bk=32, stages=4)
    if op.kind == "gemm" and op.epilogue:  # the 64x64 warp tile spills beside a fused epilogue's registers
        return small
    if op.kind == "conv2d" and n >= 256:  # 128x256 led the N32 C256 56x56 probe: 328 vs 270-282 TFLOP/s (05_final)
        wide = CudaSchedule("mma", bm=128, bn=256, bk=32, wm=64, wn=64, stages=4, raster=8)
        return wide if 2 * waves(wide) <= waves(small) else small
    if op.kind == "gemm":  # H200 run 08 (gpu/cuda_runs/08_epilogue), staged epilogue: 128x256x32 s4 led at
        # 4096^3, 8192^3 and 4000^3 (481, 507 and 436 TFLOP/s; 128x256x64 s3, run 07's pick at 8192^3: 505)
        wide = CudaSchedule("mma", bm=128, bn=256, bk=32, wm=64, wn=64, stages=4, raster=8)
        return wide if 2 * waves(wide) <= waves(small) else small
    # 256x128 led at 4096^3 and 8192^3 on an H200 (416 and 451 TFLOP/s, gpu/cuda_runs/05_final): take it
    # unless its last wave leaves the GPU emptier (a big tile does twice the work of a small one)
    return big if 2 * waves(big) <= waves(small) else small


def _sm_count(host: Any) -> int:
    gpus = getattr(getattr(host, "nvidia", None), "devices", None) or []
    return int(getattr(gpus[0], "sm_count", 0) or 132) if gpus else 132


def validate_schedule(op: Any, variant: Variant | str, schedule: Any, host: Any, arch: str | Arch | None = None) -> None:
    """Raise ``BadInputError`` or ``UnsupportedError`` when ``schedule`` cannot run ``op`` with ``variant``
    on the target (the tuner's check of candidates a ``--space`` file adds)."""
    _check(op, resolve(variant), schedule, _arch(host, arch))


def schedule_from_json(d: dict[str, Any]) -> Any:
    """Any CUDA schedule from its JSON: the Hopper GEMM's or conv's (``core`` wgmma, ``kernel`` conv2d)
    or a ``CudaSchedule`` (mma, simt, softmax)."""
    if d.get("core") == "wgmma":
        from .hopper.schedule import WgmmaConvSchedule, WgmmaSchedule

        return WgmmaConvSchedule.from_json(d) if d.get("kernel") == "conv2d" else WgmmaSchedule.from_json(d)
    return CudaSchedule.from_json(d)


def tuning_features(op: Any, schedule: dict[str, Any]) -> dict[str, float]:
    """Quantities the tuner's model sees beside the schedule's own fields (tuner/space.py ``encode``):
    warps per block, shared memory per block, the block tile's area and the number of block tiles. They
    set occupancy (registers and shared memory per SM), the work and reuse per block and how the grid
    fills the last wave, which the raw fields only carry jointly: a 256x128 tile of 64x64 warps and a
    128x128 tile of 64x32 warps share their warp count, not their smem. Device-independent (a recorded
    space replays without its GPU). Empty for schedules without block tiles (softmax)."""
    sched = schedule_from_json(schedule)
    if sched.core == "wgmma":
        warps, smem = sched.threads // 32, sched.smem_bytes
    elif sched.core in ("mma", "simt"):
        from .plan import smem_bytes

        warps, smem = sched.warps, smem_bytes(op, sched)
    else:
        return {}
    bm, bn = sched.bm, sched.bn
    m = getattr(op, "gemm_m", None) or getattr(op, "m", bm)
    n = getattr(op, "gemm_n", None) or getattr(op, "n", bn)
    return {"warps": warps, "smem_bytes": smem, "block_tile": bm * bn, "tiles": -(-m // bm) * -(-n // bn)}


def search_space(op: Any, variant: Variant | str, host: Any, arch: str | Arch | None = None) -> list[CudaSchedule]:
    """Every valid candidate for ``op`` on the target, hero first."""
    v = resolve(variant)
    target = _arch(host, arch)
    hero = hero_schedule(op, v, host)
    core = _core(op, v)
    cands: list[CudaSchedule] = [hero]
    if core == "mma":
        for bm in (64, 128, 256):
            for bn in (64, 128, 256):
                for wm, wn in ((64, 64), (64, 32), (32, 64), (32, 32)):
                    for bk in (32, 64):
                        for stages in (2, 3, 4, 5):
                            warps = (bm // max(wm, 1)) * (bn // max(wn, 1))
                            if not 2 <= warps <= 8:
                                continue
                            cands.append(CudaSchedule("mma", bm, bn, bk, wm, wn, stages, raster=8))
    elif core == "wgmma" and op.kind == "conv2d":
        from .hopper.schedule import conv_search_space as conv_space

        cands += conv_space(op, target.smem_optin)
    elif core == "wgmma":
        from .hopper.schedule import search_space as wgmma_space

        cands += wgmma_space(op, target.smem_optin)
    elif core == "simt":
        for bm, bn in ((128, 128), (128, 64), (64, 128), (64, 64)):
            for wm, wn in ((32, 64), (64, 32)):
                for bk in (8, 16):
                    cands.append(CudaSchedule("simt", bm, bn, bk, wm, wn, 2, raster=8))
    else:
        for threads in (128, 256, 512, 1024):
            vec = hero.vec
            chunks = -(-op.cols // (threads * vec))
            for c in sorted({0, chunks if chunks <= 16 else 0}):
                cands.append(CudaSchedule("softmax", threads=threads, vec=vec, chunks=c))
                if c:
                    cands += [CudaSchedule("softmax", threads=threads, vec=vec, chunks=c, persist=p) for p in (1, 2, 4)]
    out: list[CudaSchedule] = []
    for c in cands:
        if c in out:
            continue
        try:
            _check(op, v, c, target)
        except (BadInputError, UnsupportedError):
            continue
        out.append(c)
    return out


def render(op: Any, schedule: CudaSchedule, arch: Arch) -> tuple[Rendered, dict[str, float | int]]:
    """The kernel source and its runtime scalars."""
    if schedule.core == "wgmma" and op.kind == "conv2d":  # the Hopper implicit-GEMM conv (wgmma_conv.py)
        from .hopper.conv import conv_scalars
        from .hopper.conv import rendered as conv_rendered

        return conv_rendered(op, schedule, arch.sm_count), dict(conv_scalars(op))
    if schedule.core == "wgmma":
        from .hopper.gemm import rendered

        return rendered(op, schedule, arch.sm_count), {"M": op.m, "N": op.n, "K": op.k, "alpha": op.alpha}
    if schedule.core == "mma":
        from .mma import conv_scalars, render_mma

        r = render_mma(op, schedule, arch)
    elif schedule.core == "simt":
        from .mma import conv_scalars
        from .simt import render_simt

        r = render_simt(op, schedule, arch)
    else:
        from .softmax import render_softmax

        r = render_softmax(op, schedule, arch)
        return r, {"rows": op.rows, "cols": op.cols}
    if op.kind == "conv2d":
        scalars: dict[str, float | int] = {"M": op.gemm_m, "N": op.gemm_n, "K": op.gemm_k, "alpha": 1.0,
                                           **conv_scalars(op)}
    else:
        scalars = {"M": op.m, "N": op.n, "K": op.k, "alpha": op.alpha}
    return r, scalars


def compile_kernel(op: Any, variant: Variant | str, schedule: CudaSchedule, host: Any,
                   arch: str | Arch | None = None) -> tuple[Variant, Rendered, dict[str, Any], Any]:
    """Render and compile (cached); the Artifact-ready pieces. Works without a GPU when ``arch`` is named."""
    from .runtime import Artifact

    v = resolve(variant)
    target = _arch(host, arch)
    _check(op, v, schedule, target)
    r, scalars = render(op, schedule, target)
    cubin, res, log, hit, seconds = nv.compile_cached(r.source, r.name, r.entry, target.name)
    nvrtc = nv.find_nvrtc()
    meta = dict(r.metadata)
    meta["arch"] = target.name
    meta["resources"] = {"regs_per_thread": res.regs_per_thread,
                         "smem_per_cta": r.smem + res.smem_static, "smem_static": res.smem_static,
                         "spills": res.spills, "spill_stores": res.spill_stores, "spill_loads": res.spill_loads,
                         "stack_frame": res.stack_frame, "source": "ptxas -v (NVRTC compile log)"}
    meta["compile_log"] = log
    opts = nv.options_for(target.name)
    flags = tuple(f"{k}={v_}" for k, v_ in sorted(opts.items()))
    artifact = Artifact(name=r.name, op=op.to_json(), variant=v.id, schedule=schedule.to_json(), source=r.source,
                        language="cuda", entry=r.entry, compiler="NVRTC (cuda.core.Program)",
                        compiler_version=nvrtc.version, flags=flags, binary=str(cubin), cache_hit=hit,
                        compile_seconds=seconds, metadata=meta)
    return v, r, scalars, artifact


def build(op: Any, variant: Variant | str, schedule: CudaSchedule, host: Any):
    """Render, compile (cached by content hash) and load the kernel on this machine's GPU."""
    from .runtime import CudaKernel

    _, r, scalars, artifact = compile_kernel(op, variant, schedule, host)
    if schedule.core == "wgmma" and op.kind == "conv2d":
        from .hopper.conv import conv_kernel

        return conv_kernel(op, artifact, r, scalars)
    if schedule.core == "wgmma":  # tensor maps built at upload, passed by value (tma.py)
        from .tma import WgmmaKernel

        return WgmmaKernel(op, artifact, r, scalars)
    return CudaKernel(op, artifact, r, scalars)


def emit(op: Any, variant: Variant | str, schedule: CudaSchedule, host: Any, out_dir: str | Path,
         arch: str | Arch | None = None) -> list[Path]:
    """Write <name>.cu, <name>.cubin, schedule.json, metadata.yaml and compile.log into ``out_dir``.
    Needs no GPU when ``arch`` names the target (``sm_80``, ``sm_90a``)."""
    import yaml

    from ..cpu.compiler import write_atomic

    v, r, _, artifact = compile_kernel(op, variant, schedule, host, arch)
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BadInputError(f"out: cannot create {out} ({exc.strerror})") from None
    meta = {k: val for k, val in artifact.metadata.items() if k != "compile_log"}
    meta = {"variant": v.id, "op": op.to_json(), **meta, "entry": r.entry, "compiler": artifact.compiler,
            "compiler_version": artifact.compiler_version}
    files: dict[Path, str | bytes] = {
        out / f"{r.name}.cu": r.source,
        out / f"{r.name}.cubin": Path(artifact.binary).read_bytes(),
        out / "schedule.json": json.dumps(schedule.to_json(), indent=2) + "\n",
        out / "metadata.yaml": yaml.safe_dump(meta, sort_keys=False),
        out / "compile.log": artifact.metadata.get("compile_log", "") + "\n",
    }
    try:
        for path, data in files.items():
            write_atomic(path, data)
    except OSError as exc:
        raise BadInputError(f"out: cannot write into {out} ({exc.strerror})") from None
    return list(files)
