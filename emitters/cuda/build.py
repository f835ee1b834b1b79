"""hero_schedule / search_space / build / emit: from (op, variant, schedule, host) to a loaded kernel or
files on disk. The same public functions as ``emitters/cpu`` so the registry, bench, tuner and
evidence layers treat backends alike. Each step is the kernel core's own (``cores.py``, looked up by the
variant or the schedule); what is left here is common to every core: the target, compiling, writing."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from tracea.doctor.errors import BadInputError, UnsupportedError
from tracea.doctor.variants import Variant

from .. import nvrtc as nv
from ..core import refuse_serving
from . import cores
from .arch import Arch, parse_arch, target_of
from .render import CudaRenderer, Rendered
from .variants import resolve


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
    core = cores.for_check(v, op, schedule)
    refuse_serving(core, op, "CUDA")
    core.check(op, v, schedule, arch)


def hero_schedule(op: Any, variant: Variant | str, host: Any, arch: str | Arch | None = None) -> Any:
    """A good default (each core's ``hero_schedule``): for tensor cores 128x256x32 GEMM blocks of 8 warps
    (64x64 each) and 4 cp.async stages (256x128x32 for convolutions), or 128x128x64 with 3 when that fills
    the last wave of blocks better, rasterized in groups of 8 block rows; 128x128x16 blocks of
    8x8-per-thread on CUDA cores (a K split or a smaller tile where those leave SMs idle); softmax rows held in registers when they fit; for a 16-bit GEMM of at
    most 16 rows the gemv core's (``cores.hero_core``: B streamed once, memory bound)."""
    v = resolve(variant)
    return cores.hero_core(v, op).hero(op, host)


def validate_schedule(op: Any, variant: Variant | str, schedule: Any, host: Any, arch: str | Arch | None = None) -> None:
    """Raise ``BadInputError`` or ``UnsupportedError`` when ``schedule`` cannot run ``op`` with ``variant``
    on the target (the tuner's check of candidates a ``--space`` file adds)."""
    _check(op, resolve(variant), schedule, _arch(host, arch))


def schedule_from_json(d: dict[str, Any]) -> Any:
    """Any CUDA schedule from its JSON, as the core its "core" (and "kernel") names reads it (cores.py)."""
    return cores.schedule_from_json(d)


def tuning_features(op: Any, schedule: dict[str, Any]) -> dict[str, float]:
    """Quantities the tuner's model sees beside the schedule's own fields (tuner/space.py ``encode``): the
    schedule's ``features`` (``schedule.tile_features``: warps and shared memory per block, the block tile's
    area, the number of tiles), read from its JSON by the core it names. Device-independent (a recorded
    space replays without its GPU). Empty for schedules without block tiles (softmax)."""
    core = cores.for_json(schedule)
    return {} if core is None else core.schedule_from_json(schedule).features(op)


def search_space(op: Any, variant: Variant | str, host: Any, arch: str | Arch | None = None) -> list[Any]:
    """Every valid candidate for ``op`` on the target, hero first."""
    v = resolve(variant)
    target = _arch(host, arch)
    first = cores.hero_core(v, op)
    hero = first.hero(op, host)
    cands: list[Any] = [hero, *first.space(op, hero, target)]
    main, *alternates = cores.cores_for(v, op)
    for core in (main, *alternates):  # the other cores the variant runs (the main one after gemv)
        searched = core.applies or core.prefers
        if core is not first and (core is main or searched is None or searched(op)):
            own = core.hero(op, host)
            cands += [own, *core.space(op, own, target)]
    out: list[Any] = []
    for c in cands:
        if c in out:
            continue
        try:
            _check(op, v, c, target)
        except (BadInputError, UnsupportedError):
            continue
        out.append(c)
    return out


def render(op: Any, schedule: Any, arch: Arch) -> tuple[Rendered, dict[str, float | int]]:
    """The kernel source and its runtime scalars."""
    return cores.for_schedule(op, schedule).render(op, schedule, arch)


def compile_kernel(op: Any, variant: Variant | str, schedule: Any, host: Any,
                   arch: str | Arch | None = None) -> tuple[Variant, Rendered, dict[str, Any], Any]:
    """Render and compile (cached); the Artifact-ready pieces. Works without a GPU when ``arch`` is named."""
    from ..artifact import Artifact

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


def build(op: Any, variant: Variant | str, schedule: Any, host: Any):
    """Render, compile (cached by content hash) and load the kernel on this machine's GPU."""
    _, r, scalars, artifact = compile_kernel(op, variant, schedule, host)
    return cores.for_schedule(op, schedule).kernel(op, artifact, r, scalars)


def emit(op: Any, variant: Variant | str, schedule: Any, host: Any, out_dir: str | Path,
         arch: str | Arch | None = None) -> list[Path]:
    """Write <name>.cu, <name>.cubin, schedule.json, metadata.yaml and compile.log into ``out_dir``.
    Needs no GPU when ``arch`` names the target (``sm_80``, ``sm_90a``)."""
    import yaml

    from tracea.doctor.files import write_atomic

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
        out / f"{r.name}{CudaRenderer.file_suffix}": r.source,
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
