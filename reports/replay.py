"""Replaying a pack-repro bundle: unpack safely, compare environments, rebuild, rerun, verify, compare.

    bundle = open_bundle(Path("bundle.tar.gz"))          # safetar checks, manifest + sha256 checks
    env_differences(bundle, host)                        # [(field, recorded, now), ...]
    for k in bundle.kernels: describe(k)                 # what will run, before it runs
    outcome = replay_kernel(bundle, k, host)             # a BenchResult and the recorded row

Rebuilding goes through the public backend API: ``registry.backend_module(backend)``, the op from
``Op.from_json``, the schedule through the backend's schedule ``from_json`` (inside ``bench``), the
planner pinned to the recorded variant (so a host that cannot run it says why), and ``bench()`` itself
for the fresh random inputs, the verification against the float64 reference and the timing beside
the baseline. What is compiled is the bundled source text, byte for byte:

* C (the CPU backend): ``compile_cached(bundled source, name, bundled flags, this host's compiler)``,
  loaded with the call interface the CPU runtime derives from the op (buffers, dims).
* CUDA: NVRTC's ``compile_cached(bundled source, name, entry, this GPU's arch)``, launched with the grid,
  block and shared memory the CUDA renderer derives from the op and schedule.
* other languages: the backend's ``build_from_source(op, variant, schedule, host, source)`` when it
  has one; otherwise replay says it is unsupported for that backend (exit 3).

``binary=True`` loads the bundled binary instead, only when it was built for this architecture
(C: the same machine type, and the variant's ISA requirements met here; CUDA: the same sm_XY target
as this GPU; other backends:
``load_binary(op, variant, schedule, host, path, arch)``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import platform
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracea.doctor.errors import BadInputError, UnsupportedError

from .bundle import BUNDLE_KIND, BUNDLE_SCHEMA_VERSION
from .safetar import safe_extract


@dataclass
class Bundle:
    root: Path  # the unpacked top folder (holds manifest.json)
    manifest: dict[str, Any]

    @property
    def kernels(self) -> list[dict[str, Any]]:
        return list(self.manifest.get("kernels") or [])

    def path(self, rel: str) -> Path:
        """A file of the bundle by its manifest path, never outside the bundle."""
        p = (self.root / rel).resolve()
        if not str(p).startswith(str(self.root.resolve()) + "/"):
            raise BadInputError(f"bundle manifest names {rel!r}, outside the bundle")
        return p

    def json(self, rel: str) -> Any:
        try:
            return json.loads(self.path(rel).read_text())
        except FileNotFoundError:
            raise BadInputError(f"bundle is missing {rel}") from None
        except (OSError, ValueError) as exc:
            raise BadInputError(f"bundle file {rel} is unreadable: {exc}") from None


def _find_root(folder: Path) -> Path:
    if (folder / "manifest.json").is_file():
        return folder
    tops = [p for p in folder.iterdir() if p.is_dir() and (p / "manifest.json").is_file()]
    if len(tops) != 1:
        raise BadInputError(f"{folder} holds no Tracea bundle (no manifest.json at its top)")
    return tops[0]


def read_manifest(root: Path) -> dict[str, Any]:
    try:
        manifest = json.loads((root / "manifest.json").read_text())
    except (OSError, ValueError) as exc:
        raise BadInputError(f"bundle manifest is unreadable: {exc}") from None
    if not isinstance(manifest, dict) or manifest.get("kind") != BUNDLE_KIND:
        kind = manifest.get("kind") if isinstance(manifest, dict) else type(manifest).__name__
        raise BadInputError(f"not a Tracea repro bundle (manifest kind {kind!r})")
    if manifest.get("schema_version") != BUNDLE_SCHEMA_VERSION:
        raise BadInputError(f"bundle manifest has schema_version {manifest.get('schema_version')!r}; "
                            f"this Tracea reads {BUNDLE_SCHEMA_VERSION}",
                            f"replay it with the Tracea that made it ({manifest.get('tracea_version')})")
    if not isinstance(manifest.get("files"), dict) or not isinstance(manifest.get("kernels", []), list):
        raise BadInputError("bundle manifest is malformed (no file list)")
    return manifest


def verify_files(bundle: Bundle) -> None:
    """Every file the manifest lists is there with its recorded size and sha256."""
    for rel, info in bundle.manifest["files"].items():
        p = bundle.path(rel)
        try:
            data = p.read_bytes()
        except FileNotFoundError:
            raise BadInputError(f"bundle is missing {rel}, which its manifest lists") from None
        if not isinstance(info, dict) or hashlib.sha256(data).hexdigest() != info.get("sha256"):
            raise BadInputError(f"bundle file {rel} does not match its sha256 in the manifest (altered or corrupted)")


def open_bundle(source: Path, into: Path | None = None) -> Bundle:
    """Unpack (a .tar.gz) or open (an unpacked folder) a bundle and check its manifest and files."""
    if source.is_dir():
        root = _find_root(source)
    else:
        target = into if into is not None else Path(tempfile.mkdtemp(prefix="tracea-replay-"))
        safe_extract(source, target)
        root = _find_root(target)
    bundle = Bundle(root=root, manifest=read_manifest(root))
    verify_files(bundle)
    return bundle


# ------------------------------------------------------------------------------------- environment


def current_environment(host: Any) -> dict[str, Any]:
    from tracea.doctor.fingerprint import environment, fingerprint

    backends = ["cpu"] + (["cuda"] if getattr(getattr(host, "nvidia", None), "devices", None) else [])
    return {b: {"fingerprint": fingerprint(host, b), "environment": environment(host, b)} for b in backends}


def env_differences(bundle: Bundle, host: Any) -> list[tuple[str, Any, Any]]:
    """(field, recorded, now) for every fingerprinted field that differs, plus Python and NumPy."""
    recorded = bundle.manifest.get("env") or {}
    now = current_environment(host)
    out: list[tuple[str, Any, Any]] = []
    for backend, rec in recorded.items():
        cur = now.get(backend)
        if cur is None:
            out.append((f"{backend}", "present", "absent on this host"))
            continue
        r_env, c_env = rec.get("environment") or {}, cur.get("environment") or {}
        for key in sorted(set(r_env) | set(c_env)):
            if json.dumps(r_env.get(key), default=str) != json.dumps(c_env.get(key), default=str):
                out.append((f"{backend}.{key}", r_env.get(key), c_env.get(key)))
    if bundle.manifest.get("python") and bundle.manifest["python"] != sys.version.split()[0]:
        out.append(("python", bundle.manifest["python"], sys.version.split()[0]))
    packages = {}
    try:
        packages = {p["name"].lower(): p["version"] for p in bundle.json("packages.json")}
    except (BadInputError, TypeError, KeyError):
        pass
    from importlib.metadata import PackageNotFoundError, version

    for name in ("numpy",):  # the reference and the baseline run on it
        try:
            mine = version(name)
        except PackageNotFoundError:
            mine = None
        if packages.get(name) and packages[name] != mine:
            out.append((name, packages[name], mine))
    return out


def package_differences(bundle: Bundle) -> list[tuple[str, str | None, str | None]]:
    """(name, recorded version, installed version) for every distribution that differs."""
    from .bundle import installed_packages

    try:
        recorded = {p["name"].lower(): p["version"] for p in bundle.json("packages.json")}
    except (BadInputError, TypeError, KeyError):
        return []
    now = {p["name"].lower(): p["version"] for p in installed_packages()}
    return [(n, recorded.get(n), now.get(n)) for n in sorted(set(recorded) | set(now)) if recorded.get(n) != now.get(n)]


def recorded_fingerprint(bundle: Bundle, backend: str) -> str | None:
    return ((bundle.manifest.get("env") or {}).get(backend) or {}).get("fingerprint")


# ------------------------------------------------------------------------------------------ kernels


@dataclass
class KernelPlan:
    entry: dict[str, Any]
    folder: Path
    op: Any
    backend: str
    variant: str
    schedule: dict[str, Any]
    source: str | None
    source_name: str | None
    compile: dict[str, Any]
    recorded: dict[str, Any] | None  # the metrics row recorded for this kernel


def load_kernel(bundle: Bundle, entry: dict[str, Any]) -> KernelPlan:
    from tracea.kernels import Op

    folder = bundle.path(entry.get("dir") or "")
    op = Op.from_json(bundle.json(f"{entry['dir']}/00_op.json"))
    decision = bundle.json(f"{entry['dir']}/01_decision.json") if (folder / "01_decision.json").is_file() else {}
    schedule = bundle.json(f"{entry['dir']}/02_schedule.json")
    compile_rec = bundle.json(f"{entry['dir']}/04_compile.json") if (folder / "04_compile.json").is_file() else {}
    source_name = entry.get("source")
    source = bundle.path(f"{entry['dir']}/{source_name}").read_text() if source_name else None
    variant = entry.get("variant") or decision.get("chosen")
    backend = entry.get("backend") or decision.get("backend") or (schedule or {}).get("backend")
    if not variant or not backend:
        raise BadInputError(f"bundle kernel {entry.get('dir')}: no variant or backend recorded")
    sched_key = json.dumps(schedule, sort_keys=True)
    recorded = None
    metrics = bundle.root / "run" / "metrics.jsonl"
    if metrics.is_file():
        from .metrics import read_metrics

        for row in read_metrics(metrics):
            if row["variant"] == variant and row["schedule"] == sched_key:
                recorded = row
    return KernelPlan(entry, folder, op, backend, variant, schedule, source, source_name, compile_rec, recorded)


def select_kernels(bundle: Bundle, prefix: str | None = None, every: bool = False) -> tuple[list[dict[str, Any]], str]:
    """The kernel entries to replay and a sentence saying which: those whose folder name starts with
    ``prefix``; else, for a run that recorded a best schedule (tune), the kernels of that schedule;
    else (or with ``every``) all of them."""
    entries = bundle.kernels
    if prefix is not None:
        return [e for e in entries if str(e.get("dir", "")).split("/")[-1].startswith(prefix)], f"matching {prefix!r}"
    best = None
    try:
        best = (bundle.json("run/manifest.json").get("best") or {}).get("schedule")
    except (BadInputError, AttributeError):
        pass
    if best and not every and len(entries) > 1:
        mine = [e for e in entries if _schedule_of(bundle, e) == best]
        if mine:
            return mine, f"the run's best schedule ({len(mine)} of {len(entries)} kernels; --all replays every one)"
    return entries, f"all {len(entries)}"


def _schedule_of(bundle: Bundle, entry: dict[str, Any]) -> Any:
    try:
        return bundle.json(f"{entry['dir']}/02_schedule.json")
    except (BadInputError, KeyError):
        return None


def describe(k: KernelPlan, binary: bool) -> list[str]:
    """What replay will run for this kernel, in words, before it runs."""
    what = f"{k.op.signature}" if hasattr(k.op, "signature") else k.op.kind
    lines = [f"{k.entry.get('dir')}: {what} with {k.variant}, schedule {json.dumps(k.schedule, sort_keys=True)}"]
    if binary:
        lines.append(f"  load the bundled binary {k.entry.get('binary')} (built for {k.entry.get('arch')})")
    else:
        flags = " ".join(k.compile.get("flags") or [])
        lines.append(f"  compile the bundled source {k.source_name} ({len(k.source or '')} bytes) "
                     f"with this host's compiler and the recorded flags: {flags}")
    lines.append("  run it on fresh random inputs, verify against the float64 reference, time it beside the baseline")
    return lines


def _cpu_builder(k: KernelPlan, bundle: Bundle, binary: bool) -> Any:
    def build(op: Any, variant: Any, schedule: Any, host: Any) -> Any:
        from tracea.emitters.cpu import compiler as cc
        from tracea.emitters.cpu.render import render
        from tracea.emitters.cpu.runtime import Artifact, CpuKernel

        schedule.validate(op, host, variant)
        rendered = render(op, variant.family, schedule)  # the runtime's call interface for this op
        name = k.entry.get("name") or rendered.name
        flags = list(k.compile.get("flags") or [*cc.BASE_FLAGS, *rendered.flags])
        if binary:
            path = bundle.path(f"{k.entry['dir']}/{k.entry.get('binary')}")
            hit, seconds, comp = True, 0.0, cc.Compiler(k.compile.get("compiler") or "?", k.compile.get("compiler_version") or "?")
        else:
            if k.source is None:
                raise BadInputError(f"bundle kernel {k.entry.get('dir')} has no source")
            comp = cc.find_compiler(host)
            path, hit, seconds = cc.compile_cached(k.source, name, flags, comp)
        artifact = Artifact(name=name, op=op.to_json(), variant=variant.id, schedule=schedule.to_json(),
                            source=k.source or "", language="c", entry=rendered.entry, compiler=comp.path,
                            compiler_version=comp.version, flags=tuple(flags), binary=str(path), cache_hit=hit,
                            compile_seconds=seconds, metadata=rendered.metadata)
        return CpuKernel(op, artifact, dataclasses.replace(rendered, source=k.source or ""))

    return build


def _cuda_builder(k: KernelPlan, bundle: Bundle, binary: bool) -> Any:
    """CUDA: NVRTC compiles the bundled .cu for this host's GPU (``compile_cached``), or the bundled cubin
    loads when it was built for this GPU's architecture; the launch shape comes from the CUDA renderer."""
    def build(op: Any, variant: Any, schedule: Any, host: Any) -> Any:
        import importlib

        from tracea.emitters.cuda import compiler as nv
        from tracea.emitters.cuda.arch import target_of
        from tracea.emitters.cuda.runtime import Artifact, CudaKernel

        cuda_build = importlib.import_module("tracea.emitters.cuda.build")  # the package's `build` is a function
        target = target_of(host)  # this host's GPU (UnsupportedError without one)
        recorded = k.entry.get("arch")
        if binary and recorded != target.name:
            raise UnsupportedError(f"the bundled cubin was built for {recorded}, this GPU is {target.name}",
                                   "replay without --binary to compile the bundled source for this GPU")
        rendered, scalars = cuda_build.render(op, schedule, target)  # grid, block, smem, entry for this op
        name = k.entry.get("name") or rendered.name
        meta = dict(rendered.metadata)
        if binary:
            cubin, hit, seconds, log = bundle.path(f"{k.entry['dir']}/{k.entry.get('binary')}"), True, 0.0, None
        else:
            if k.source is None:
                raise BadInputError(f"bundle kernel {k.entry.get('dir')} has no source")
            cubin, res, log, hit, seconds = nv.compile_cached(k.source, name, rendered.entry, target.name)
            meta["resources"] = res.to_json()
        meta |= {"arch": target.name, "compile_log": log}
        artifact = Artifact(name=name, op=op.to_json(), variant=variant.id, schedule=schedule.to_json(),
                            source=k.source or "", language="cuda", entry=rendered.entry,
                            compiler="NVRTC (cuda.core.Program)", compiler_version=k.compile.get("compiler_version") or "?",
                            flags=tuple(k.compile.get("flags") or ()), binary=str(cubin), cache_hit=hit,
                            compile_seconds=seconds, metadata=meta)
        kernel_class = CudaKernel
        if getattr(schedule, "core", None) == "wgmma":  # TMA tensor maps are built at upload (as cuda.build does)
            from tracea.emitters.cuda.tma import WgmmaKernel as kernel_class
        return kernel_class(op, artifact, dataclasses.replace(rendered, source=k.source or ""), scalars)

    return build


def _builder(k: KernelPlan, bundle: Bundle, binary: bool) -> Any:
    language = k.entry.get("language") or k.compile.get("language")
    if k.backend == "cpu" and language in (None, "c"):
        if binary and k.entry.get("arch") != platform.machine():
            raise UnsupportedError(f"the bundled binary was built for {k.entry.get('arch')}, this machine is "
                                   f"{platform.machine()}", "replay without --binary to compile the bundled source")
        return _cpu_builder(k, bundle, binary)
    from tracea.emitters import registry

    mod = registry.backend_module(k.backend)
    hook = getattr(mod, "load_binary" if binary else "build_from_source", None)
    if hook is None and k.backend == "cuda" and language in (None, "cuda"):
        return _cuda_builder(k, bundle, binary)  # until the CUDA backend offers the hooks itself
    if hook is None:
        raise UnsupportedError(f"replay of {k.backend} kernels {'from the bundled binary' if binary else 'from source'} "
                               f"is not supported by this Tracea (the {k.backend} backend has no "
                               f"{'load_binary' if binary else 'build_from_source'})")
    if binary:
        path = bundle.path(f"{k.entry['dir']}/{k.entry.get('binary')}")
        return lambda op, variant, schedule, host: hook(op, variant, schedule, host, path, k.entry.get("arch"))
    return lambda op, variant, schedule, host: hook(op, variant, schedule, host, k.source)


def rendered_matches(k: KernelPlan, host: Any) -> bool | None:
    """Whether this Tracea renders the very source the bundle holds (None: could not tell)."""
    try:
        from tracea.emitters import registry

        mod = registry.backend_module(k.backend)
        variant = registry.variant(k.variant)
        sched = type(mod.hero_schedule(k.op, variant, host)).from_json(k.schedule)
        with tempfile.TemporaryDirectory(prefix="tracea-render-") as tmp:
            paths = [Path(p) for p in mod.emit(k.op, variant, sched, host, tmp)]
            src = next((p for p in paths if k.source_name and p.suffix == Path(k.source_name).suffix), None)
            return src is not None and src.read_text() == k.source
    except Exception:  # noqa: BLE001 - informative only
        return None


def replay_kernel(bundle: Bundle, k: KernelPlan, host: Any, binary: bool = False, repeats: int = 10,
                  warmup: int = 2, seed: int | None = None) -> Any:
    """Rebuild (bundled source or binary), rerun on fresh random inputs, verify, time: a BenchResult."""
    from tracea.emitters.bench import bench

    build = _builder(k, bundle, binary)
    return bench(k.op, host, backend=k.backend, repeats=repeats, warmup=warmup, seed=seed, variant=k.variant,
                 tuned=lambda op, v: k.schedule, build=build)


FIGURES = ("status", "p50_ms", "p95_ms", "tflops", "gbps", "rel_err", "baseline", "baseline_p50_ms", "ratio")


def side_by_side(recorded: dict[str, Any] | None, new: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    return [(f, (recorded or {}).get(f), new.get(f)) for f in FIGURES]
