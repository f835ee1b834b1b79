"""The builds of a replay, one per mode (see replay.py): the backend's own build (the default), the
bundled source compiled (``--bundled-source``), the bundled binary loaded (``--binary``). Each keeps the
artifact it made in ``k.built``, so replay can say afterwards what was compiled."""

from __future__ import annotations

import dataclasses
import platform
from typing import TYPE_CHECKING, Any

from tracea.doctor.errors import UnsupportedError

from .bundle_check import shown

if TYPE_CHECKING:
    from .replay import Bundle, KernelPlan


def _own_builder(k: KernelPlan) -> Any:
    """The backend's own build, keeping the artifact so the source can be compared afterwards."""
    from tracea.emitters import registry

    mod = registry.backend_module(k.backend)

    def build(op: Any, variant: Any, schedule: Any, host: Any) -> Any:
        kernel = mod.build(op, variant, schedule, host)
        k.built.append(kernel.artifact)
        return kernel

    return build


def _cpu_builder(k: KernelPlan, bundle: Bundle) -> Any:
    def build(op: Any, variant: Any, schedule: Any, host: Any) -> Any:
        from tracea.emitters.cpu import compiler as cc
        from tracea.emitters.cpu.render import render
        from tracea.emitters.cpu.runtime import Artifact, CpuKernel

        schedule.validate(op, host, variant)
        rendered = render(op, variant.family, schedule)  # the runtime's call interface for this op
        name = k.entry.get("name") or rendered.name
        source = k.source or ""
        if k.mode == "binary":
            path = bundle.path(f"{k.dir}/{k.entry['binary']}")
            hit, seconds = True, 0.0
            comp = cc.Compiler(k.compile.get("compiler") or "?", k.compile.get("compiler_version") or "?")
            flags = list(k.bundled_flags or [])
        else:
            comp = cc.find_compiler(host)
            flags = list(k.flags if k.flags is not None else [*cc.BASE_FLAGS, *rendered.flags])
            path, hit, seconds = cc.compile_cached(source, name, flags, comp)
        artifact = Artifact(name=name, op=op.to_json(), variant=variant.id, schedule=schedule.to_json(),
                            source=source, language="c", entry=rendered.entry, compiler=comp.path,
                            compiler_version=comp.version, flags=tuple(flags), binary=str(path), cache_hit=hit,
                            compile_seconds=seconds, metadata=rendered.metadata)
        k.built.append(artifact)
        return CpuKernel(op, artifact, dataclasses.replace(rendered, source=source))

    return build


def _cuda_builder(k: KernelPlan, bundle: Bundle) -> Any:
    """CUDA: NVRTC compiles the bundled .cu for this host's GPU with Tracea's options (``compile_cached``),
    or the bundled cubin loads when it was built for this GPU's architecture; the launch shape comes from
    the CUDA renderer."""
    def build(op: Any, variant: Any, schedule: Any, host: Any) -> Any:
        import importlib

        from tracea.emitters.cuda import compiler as nv
        from tracea.emitters.cuda.arch import target_of
        from tracea.emitters.cuda.runtime import Artifact, CudaKernel

        cuda_build = importlib.import_module("tracea.emitters.cuda.build")  # the package's `build` is a function
        target = target_of(host)  # this host's GPU (UnsupportedError without one)
        recorded = k.entry.get("arch")
        if k.mode == "binary" and recorded != target.name:
            raise UnsupportedError(f"the bundled cubin was built for {shown(recorded)}, this GPU is {target.name}",
                                   "replay without --binary builds Tracea's own rendering for this GPU")
        rendered, scalars = cuda_build.render(op, schedule, target)  # grid, block, smem, entry for this op
        name = k.entry.get("name") or rendered.name
        meta = dict(rendered.metadata)
        source = k.source or ""
        if k.mode == "binary":
            cubin, hit, seconds, log = bundle.path(f"{k.dir}/{k.entry['binary']}"), True, 0.0, None
        else:
            cubin, res, log, hit, seconds = nv.compile_cached(source, name, rendered.entry, target.name)
            meta["resources"] = res.to_json()
        meta |= {"arch": target.name, "compile_log": log}
        artifact = Artifact(name=name, op=op.to_json(), variant=variant.id, schedule=schedule.to_json(),
                            source=source, language="cuda", entry=rendered.entry,
                            compiler="NVRTC (cuda.core.Program)", compiler_version=k.compile.get("compiler_version") or "?",
                            flags=tuple(k.bundled_flags or ()), binary=str(cubin), cache_hit=hit,
                            compile_seconds=seconds, metadata=meta)
        k.built.append(artifact)
        kernel_class = CudaKernel
        if getattr(schedule, "core", None) == "wgmma":  # TMA tensor maps are built at upload (as cuda.build does)
            from tracea.emitters.cuda.tma import WgmmaKernel as kernel_class
        return kernel_class(op, artifact, dataclasses.replace(rendered, source=source), scalars)

    return build


def builder(k: KernelPlan, bundle: Bundle) -> Any:
    """``build(op, variant, schedule, host)`` for ``bench``, as ``k.mode`` says."""
    if k.mode == "own":
        return _own_builder(k)
    binary = k.mode == "binary"
    language = k.entry.get("language") or k.compile.get("language")
    if k.backend == "cpu" and language in (None, "c"):
        if binary and k.entry.get("arch") != platform.machine():
            raise UnsupportedError(f"the bundled binary was built for {shown(k.entry.get('arch'))}, this machine is "
                                   f"{platform.machine()}", "replay without --binary builds Tracea's own rendering")
        return _cpu_builder(k, bundle)
    from tracea.emitters import registry

    mod = registry.backend_module(k.backend)
    hook = getattr(mod, "load_binary" if binary else "build_from_source", None)
    if hook is None and k.backend == "cuda" and language in (None, "cuda"):
        return _cuda_builder(k, bundle)  # until the CUDA backend offers the hooks itself
    if hook is None:
        raise UnsupportedError(f"replay of {k.backend} kernels {'from the bundled binary' if binary else 'from the bundled source'} "
                               f"is not supported by this Tracea (the {k.backend} backend has no "
                               f"{'load_binary' if binary else 'build_from_source'})",
                               "replay without --binary or --bundled-source builds Tracea's own rendering")
    if binary:
        path = bundle.path(f"{k.dir}/{k.entry['binary']}")
        return lambda op, variant, schedule, host: hook(op, variant, schedule, host, path, k.entry.get("arch"))
    return lambda op, variant, schedule, host: hook(op, variant, schedule, host, k.source)
