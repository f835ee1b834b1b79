"""Replaying a pack-repro bundle: a trust boundary. Everything is decided before anything runs.

    bundle = open_bundle(Path("bundle.tar.gz"))          # safetar, manifest fields, links, sizes, sha256
    bundle.extra                                         # entries the manifest does not list (never read)
    env_differences(bundle, host)                        # [(field, recorded, now), ...] (replay_environment.py)
    k = load_kernel(bundle, entry, host, mode)           # op, schedule, Tracea's own rendering, checks
    describe(k) + differences(k)                         # what will run and what differs, before it runs
    result = replay_kernel(bundle, k, host)              # a BenchResult; k.built: what was compiled

A bundle is untrusted input. Three modes, chosen by the user:

* ``own`` (the default): the op and schedule are read from the bundle (validated data), and the kernel
  is what *this* Tracea renders and builds for them through the backend (``registry.backend(name).build``
  inside ``bench``; ``rendering`` to compare before), with this Tracea's flags. Nothing from the bundle
  is compiled, loaded or run; its source and flags are only compared (sha256, flag lists).
* ``source`` (``--bundled-source``): the bundled source text, byte for byte, through the backend's
  ``build_from_source`` (C: the host compiler with the bundle's flags, through an allow-list first,
  ``compiler_flags.refused_flag``, where the backend says ``COMPILES_BUNDLED_FLAGS``; CUDA: NVRTC with this
  Tracea's options for this GPU).
* ``binary`` (``--binary``): the bundled binary through the backend's ``load_binary``, only when built
  for this architecture (C: the same machine type; CUDA: the same sm_XY target).

The backend (emitters/backend.py) is the only way in to the emitters (``builder`` below).
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tracea.doctor.errors import BadInputError, TraceaError, UnsupportedError
from tracea.doctor.inputs import parse_json
from tracea.emitters.backend import Rendering

from .bundle import BUNDLE_KIND, BUNDLE_SCHEMA_VERSION
from .bundle_check import check_manifest, quoted, read_listed, shown, unlisted
from .compiler_flags import refused_flag
from .safetar import safe_extract

MODES = ("own", "source", "binary")
MAX_MANIFEST_BYTES = 16 << 20


@dataclass
class Bundle:
    root: Path  # the unpacked top folder (holds manifest.json)
    manifest: dict[str, Any]
    data: dict[str, bytes] = field(default_factory=dict)  # every listed file, checked (size, sha256, no link)
    extra: list[tuple[str, str]] = field(default_factory=list)  # (path, what) the manifest does not list

    @property
    def kernels(self) -> list[dict[str, Any]]:
        return list(self.manifest["kernels"])

    def has(self, rel: str) -> bool:
        return rel in self.data

    def bytes(self, rel: str) -> bytes:
        if rel not in self.data:
            raise BadInputError(f"bundle is missing {shown(rel)} (its manifest does not list it)")
        return self.data[rel]

    def text(self, rel: str) -> str:
        try:
            return self.bytes(rel).decode()
        except UnicodeDecodeError:
            raise BadInputError(f"bundle file {shown(rel)} is not UTF-8 text") from None

    def json(self, rel: str) -> Any:
        return parse_json(self.text(rel), f"bundle file {shown(rel)}")

    def path(self, rel: str) -> Path:
        """A listed file on disk (the binary a loader needs by path), checked again just before use."""
        info = self.manifest["files"].get(rel)
        if info is None:
            raise BadInputError(f"bundle is missing {shown(rel)} (its manifest does not list it)")
        read_listed(self.root, rel, info)
        return self.root / rel


def _is_plain(path: Path, want_dir: bool) -> bool:
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) if want_dir else stat.S_ISREG(st.st_mode)


def _find_root(folder: Path) -> Path:
    if _is_plain(folder / "manifest.json", False):
        return folder
    if (folder / "manifest.json").is_symlink():
        raise BadInputError(f"{folder}/manifest.json is a symbolic link; replay follows none")
    tops = [p for p in folder.iterdir() if _is_plain(p, True) and _is_plain(p / "manifest.json", False)]
    if len(tops) != 1:
        raise BadInputError(f"{folder} holds no Tracea bundle (no manifest.json at its top)")
    return tops[0]


def read_manifest(root: Path) -> dict[str, Any]:
    path = root / "manifest.json"
    try:
        st = os.lstat(path)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_MANIFEST_BYTES:
            raise BadInputError(f"bundle manifest {path} is not a plain file of at most {MAX_MANIFEST_BYTES} bytes")
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        with os.fdopen(fd, "rb") as f:
            manifest = parse_json(f.read(MAX_MANIFEST_BYTES + 1), "bundle manifest is unreadable: it")
    except OSError as exc:
        raise BadInputError(f"bundle manifest is unreadable: {exc}") from None
    if not isinstance(manifest, dict) or manifest.get("kind") != BUNDLE_KIND:
        kind = manifest.get("kind") if isinstance(manifest, dict) else type(manifest).__name__
        raise BadInputError(f"not a Tracea repro bundle (manifest kind {quoted(kind)})")
    if manifest.get("schema_version") != BUNDLE_SCHEMA_VERSION or isinstance(manifest.get("schema_version"), bool):
        raise BadInputError(f"bundle manifest has schema_version {quoted(manifest.get('schema_version'))}; "
                            f"this Tracea reads {BUNDLE_SCHEMA_VERSION}",
                            f"replay it with the Tracea that made it ({shown(manifest.get('tracea_version'))})")
    check_manifest(manifest)
    return manifest


def open_bundle(source: Path, into: Path | None = None) -> Bundle:
    """Unpack (a .tar.gz) or open (an unpacked folder) a bundle; check its manifest and every listed
    file (no link on the way, the recorded size and sha256); list what the manifest does not."""
    if source.is_dir():
        root = _find_root(source)
    else:
        target = into if into is not None else Path(tempfile.mkdtemp(prefix="tracea-replay-"))
        safe_extract(source, target)
        root = _find_root(target)
    manifest = read_manifest(root)
    files = manifest["files"]
    data = {rel: read_listed(root, rel, info) for rel, info in files.items()}
    return Bundle(root=root, manifest=manifest, data=data, extra=unlisted(root, set(files)))


# ------------------------------------------------------------------------------------- environment


# ------------------------------------------------------------------------------------------ kernels


@dataclass
class KernelPlan:
    entry: dict[str, Any]
    dir: str
    op: Any
    backend: str
    variant: str
    schedule: dict[str, Any]  # as recorded (JSON)
    source: str | None
    source_name: str | None
    compile: dict[str, Any]
    recorded: dict[str, Any] | None  # the metrics row recorded for this kernel
    mode: str = "own"
    own: Rendering | None = None  # what this Tracea renders for the op and schedule
    own_note: str | None = None  # why ``own`` is None
    flags: list[str] | None = None  # what a bundled-source build passes to the compiler
    binary_sha256: str | None = None
    built: list[Any] = field(default_factory=list)  # the artifacts replay built

    @property
    def bundled_sha256(self) -> str | None:
        return hashlib.sha256(self.source.encode()).hexdigest() if self.source is not None else None

    @property
    def bundled_flags(self) -> list[str] | None:
        return self.compile.get("flags")


def _fail(d: str, what: str, exc: BaseException) -> BadInputError:
    return BadInputError(f"bundle kernel {shown(d)}: {what} ({type(exc).__name__}: {shown(str(exc))})")


def _object(bundle: Bundle, rel: str, required: bool = True) -> dict[str, Any]:
    if not required and not bundle.has(rel):
        return {}
    value = bundle.json(rel)
    if not isinstance(value, dict):
        raise BadInputError(f"bundle file {shown(rel)} holds {type(value).__name__}, expected a JSON object")
    return value


def _recorded_row(bundle: Bundle, variant: str, sched_key: str) -> dict[str, Any] | None:
    """The last metrics row recorded for this variant and schedule (read through the metrics reader)."""
    if not bundle.has("run/metrics.jsonl"):
        return None
    from .metrics import read_metrics

    with tempfile.TemporaryDirectory(prefix="tracea-replay-metrics-") as tmp:
        path = Path(tmp) / "metrics.jsonl"
        path.write_bytes(bundle.bytes("run/metrics.jsonl"))
        try:
            rows = read_metrics(path)
        except BadInputError as exc:
            raise BadInputError(f"bundle file run/metrics.jsonl is not a Tracea metrics file: "
                                f"{exc.message.replace(str(path), 'run/metrics.jsonl')}") from None
    found = None
    for row in rows:
        if row.get("variant") == variant and row.get("schedule") == sched_key:
            found = row
    return found


def load_kernel(bundle: Bundle, entry: dict[str, Any], host: Any, mode: str = "own") -> KernelPlan:
    """One kernel of the bundle, every field checked, with what this Tracea renders for it; refuses
    (before anything runs) what ``mode`` cannot do safely."""
    from tracea.emitters import registry
    from tracea.kernels import Op

    if mode not in MODES:
        raise ValueError(mode)
    d = entry["dir"]
    try:
        op = Op.from_json(_object(bundle, f"{d}/00_op.json"))
    except TraceaError as exc:
        raise type(exc)(f"bundle kernel {shown(d)}: {shown(exc.message)}", exc.hint) from None
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        raise _fail(d, "00_op.json is not an operation", exc) from None
    decision = _object(bundle, f"{d}/01_decision.json", required=False)
    schedule = _object(bundle, f"{d}/02_schedule.json")
    compile_rec = _object(bundle, f"{d}/04_compile.json", required=False)
    flags = compile_rec.get("flags")
    if flags is not None and not (isinstance(flags, list) and all(isinstance(f, str) for f in flags)):
        raise BadInputError(f"bundle kernel {shown(d)}: 04_compile.json flags is not a list of strings")
    for key in ("compiler", "compiler_version", "language"):
        if not isinstance(compile_rec.get(key), (str, type(None))):
            raise BadInputError(f"bundle kernel {shown(d)}: 04_compile.json {key} is not a string")
    source_name = entry.get("source")
    source = bundle.text(f"{d}/{source_name}") if source_name else None
    variant = entry.get("variant") or decision.get("chosen")
    backend = entry.get("backend") or decision.get("backend") or schedule.get("backend")
    if not isinstance(variant, str) or not isinstance(backend, str):
        raise BadInputError(f"bundle kernel {shown(d)}: no variant or backend recorded")
    try:
        v = registry.variant(variant)
    except TraceaError as exc:
        raise type(exc)(f"bundle kernel {shown(d)}: {shown(exc.message)}", exc.hint) from None
    if v.backend != backend:
        raise BadInputError(f"bundle kernel {shown(d)}: variant {quoted(variant)} is a {v.backend} variant, "
                            f"the manifest says backend {quoted(backend)}")
    if v.op != op.kind:
        raise BadInputError(f"bundle kernel {shown(d)}: variant {quoted(variant)} computes {v.op}, not {op.kind}")
    recorded = _recorded_row(bundle, variant, json.dumps(schedule, sort_keys=True))
    k = KernelPlan(entry, d, op, backend, variant, schedule, source, source_name, compile_rec, recorded, mode)
    k.own, k.own_note = own_rendering(k, host)
    _check_mode(bundle, k)
    return k


def _parse_schedule(backend: Any, k: KernelPlan) -> Any:
    try:
        return backend.schedule_from_json(k.schedule)
    except TraceaError as exc:
        raise type(exc)(f"bundle kernel {shown(k.dir)}: 02_schedule.json: {shown(exc.message)}", exc.hint) from None
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        raise _fail(k.dir, "02_schedule.json is not a schedule", exc) from None


def own_rendering(k: KernelPlan, host: Any) -> tuple[Rendering | None, str | None]:
    """What this Tracea renders for the kernel's op and schedule (no compiler runs), or why it cannot
    say. A schedule this Tracea refuses is bad input (exit 2)."""
    from tracea.emitters import registry

    backend = registry.backend(k.backend)
    variant = registry.variant(k.variant)
    sched = _parse_schedule(backend, k)
    try:
        return backend.rendering(k.op, variant, sched, host, k.entry.get("arch")), None
    except BadInputError as exc:
        raise BadInputError(f"bundle kernel {shown(k.dir)}: its schedule is not one this Tracea builds: "
                            f"{shown(exc.message)}", exc.hint) from None
    except TraceaError as exc:
        return None, exc.message


def _check_mode(bundle: Bundle, k: KernelPlan) -> None:
    """Refuse, before anything runs, what the chosen mode cannot do safely."""
    from tracea.emitters import registry

    if k.mode == "binary":
        if not k.entry.get("binary"):
            raise BadInputError(f"bundle kernel {shown(k.dir)} has no binary", "replay without --binary")
        k.binary_sha256 = hashlib.sha256(bundle.bytes(f"{k.dir}/{k.entry['binary']}")).hexdigest()
        return
    if k.mode != "source":
        return
    if k.source is None:
        raise BadInputError(f"bundle kernel {shown(k.dir)} has no source", "replay without --bundled-source")
    language = k.entry.get("language") or k.compile.get("language")
    backend = registry.backend(k.backend)
    if backend.COMPILES_BUNDLED_FLAGS and language in (None, backend.LANGUAGE):
        flags = k.bundled_flags if k.bundled_flags else (k.own.flags if k.own else None)
        refused = {shown(f): why for f in flags or [] if (why := refused_flag(f))}
        if refused:
            reasons = "; ".join(dict.fromkeys(refused.values()))
            raise BadInputError(f"bundle kernel {shown(k.dir)}: --bundled-source refuses the bundle's compiler "
                                f"flags {', '.join(repr(f) for f in refused)}: {reasons}",
                                "a compiler flag can run a program or read and write files (docs/evidence.md); "
                                "replay without --bundled-source builds Tracea's own rendering with Tracea's flags")
        k.flags = list(flags) if flags is not None else None


def describe(k: KernelPlan) -> list[str]:
    """What replay will run for this kernel, in words, before it runs."""
    what = k.op.signature if hasattr(k.op, "signature") else k.op.kind
    lines = [f"{k.dir}: {what} with {k.variant}, schedule {json.dumps(k.schedule, sort_keys=True)}"]
    if k.mode == "own":
        if k.own is not None:
            lines.append(f"  build Tracea's own rendering {k.own.name} ({len(k.own.source)} bytes, sha256 "
                         f"{k.own.sha256[:16]}) with {k.own.compiler}"
                         + (f" and Tracea's flags: {' '.join(k.own.flags)}" if k.own.flags is not None else ""))
        else:
            lines.append(f"  build Tracea's own rendering through the {k.backend} backend ({k.own_note})")
        lines.append("  nothing from the bundle is compiled, loaded or run (its op and schedule are data)")
    elif k.mode == "source":
        where = f"{k.source_name} ({len(k.source or '')} bytes, sha256 {(k.bundled_sha256 or '')[:16]})"
        if k.flags is not None:
            compiler = k.own.compiler if k.own else "this host's compiler"
            lines.append(f"  compile the bundled source {where} as kernel {k.entry.get('name') or (k.own and k.own.name)} "
                         f"with {compiler} and the bundle's flags (allowed): {' '.join(k.flags)}")
        else:
            lines.append(f"  compile the bundled source {where} with this Tracea's compiler options")
        lines.append("  RISK: this runs code from the bundle on this machine (--bundled-source)")
    else:
        lines.append(f"  load the bundled binary {k.entry.get('binary')} (built for {k.entry.get('arch')}, sha256 "
                     f"{(k.binary_sha256 or '?')[:16]})")
        lines.append("  RISK: this runs code from the bundle on this machine (--binary)")
    lines.append("  run it on fresh random inputs, verify against the float64 reference, time it beside the baseline")
    return [shown(line) for line in lines]


def differences(k: KernelPlan) -> list[str]:
    """How the bundle's kernel differs from what this Tracea would build for the same op and schedule."""
    if k.own is None:
        return [f"  cannot compare with this Tracea's rendering: {k.own_note}"]
    out = []
    if k.source is None:
        out.append("  the bundle holds no source to compare")
    elif k.bundled_sha256 != k.own.sha256:
        out.append(f"  DIFFERS: source: the bundle's {k.source_name} (sha256 {k.bundled_sha256[:16]}) is not what "
                   f"this Tracea renders (sha256 {k.own.sha256[:16]})")
    name = k.entry.get("name")
    if name is not None and name != k.own.name:
        out.append(f"  DIFFERS: kernel name: the bundle's {name}, this Tracea's {k.own.name}")
    theirs = k.bundled_flags
    if theirs is not None and k.own.flags is not None and theirs != k.own.flags:
        added = [f for f in theirs if f not in k.own.flags]
        missing = [f for f in k.own.flags if f not in theirs]
        detail = "; ".join(part for part in (f"the bundle adds {' '.join(added)}" if added else "",
                                             f"lacks {' '.join(missing)}" if missing else "") if part)
        out.append(f"  DIFFERS: compiler flags: {detail or 'the same flags in another order'}")
    recorded = f"{k.compile.get('compiler')} ({k.compile.get('compiler_version')})"
    if k.compile.get("compiler") and recorded != k.own.compiler:
        out.append(f"  recorded compiler: {recorded}; here: {k.own.compiler}")
    if not any(line.startswith("  DIFFERS") for line in out):
        out.insert(0, "  the same source" + (", flags" if theirs is not None else "") + " and kernel name as this "
                   "Tracea renders")
    return [shown(line) for line in out]


def select_kernels(bundle: Bundle, prefix: str | None = None, every: bool = False) -> tuple[list[dict[str, Any]], str]:
    """The kernel entries to replay and a sentence saying which: those whose folder name starts with
    ``prefix``; else, for a run that recorded a best schedule (tune), the kernels of that schedule;
    else (or with ``every``) all of them."""
    entries = bundle.kernels
    if prefix is not None:
        return [e for e in entries if e["dir"].split("/")[-1].startswith(prefix)], f"matching {prefix!r}"
    best = None
    try:
        run_manifest = bundle.json("run/manifest.json") if bundle.has("run/manifest.json") else {}
        best = (run_manifest.get("best") or {}).get("schedule")
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
    except BadInputError:
        return None


def replay_kernel(bundle: Bundle, k: KernelPlan, host: Any, repeats: int = 10, warmup: int = 2,
                  seed: int | None = None) -> Any:
    """Build (as ``k.mode`` says), rerun on fresh random inputs, verify, time: a BenchResult."""
    from tracea.emitters.bench import bench


    build = builder(k, bundle)
    return bench(k.op, host, backend=k.backend, repeats=repeats, warmup=warmup, seed=seed, variant=k.variant,
                 tuned=lambda op, v: k.schedule, build=build)


def built_source_note(k: KernelPlan) -> str | None:
    """After an own build: whether what was compiled is byte for byte the bundle's source."""
    if k.mode != "own" or not k.built or k.source is None:
        return None
    mine = hashlib.sha256((getattr(k.built[-1], "source", "") or "").encode()).hexdigest()
    if mine == k.bundled_sha256:
        return f"source: Tracea built the bundle's {k.source_name} byte for byte (sha256 {mine[:16]})"
    return (f"source: Tracea built its own rendering (sha256 {mine[:16]}); the bundle's {k.source_name} "
            f"(sha256 {(k.bundled_sha256 or '')[:16]}) differs and was not run (--bundled-source runs it)")


FIGURES = ("status", "p50_ms", "p95_ms", "tflops", "gbps", "rel_err", "baseline", "baseline_p50_ms", "ratio")


def side_by_side(recorded: dict[str, Any] | None, new: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    return [(f, (recorded or {}).get(f), new.get(f)) for f in FIGURES]


# ------------------------------------------------------------------------------------------ the builds
# One per mode: the backend's own build (the default), the bundled source compiled (``--bundled-source``:
# the backend's ``build_from_source``), the bundled binary loaded (``--binary``: its ``load_binary``). Each
# keeps the artifact it made in ``k.built``, so replay can say afterwards what was compiled.

def _keeping(k: KernelPlan, make: Any) -> Any:
    """``make`` (a backend's builder), keeping each artifact; the backend's refusals name the bundle's
    values terminal-safe."""
    def build(op: Any, variant: Any, schedule: Any, host: Any) -> Any:
        try:
            kernel = make(op, variant, schedule, host)
        except UnsupportedError as exc:
            raise UnsupportedError(shown(exc.message), exc.hint) from None
        k.built.append(kernel.artifact)
        return kernel

    return build


def builder(k: KernelPlan, bundle: Bundle) -> Any:
    """``build(op, variant, schedule, host)`` for ``bench``, as ``k.mode`` says."""
    from tracea.emitters import registry

    backend = registry.backend(k.backend)
    if k.mode == "own":
        return _keeping(k, backend.build)
    recorded = {**k.compile, "language": k.entry.get("language") or k.compile.get("language")}
    try:
        if k.mode == "binary":
            make = backend.load_binary(bundle.path(f"{k.dir}/{k.entry['binary']}"), k.entry.get("arch"),
                                       k.entry.get("name"), recorded, k.source or "")
        else:
            make = backend.build_from_source(k.source or "", k.entry.get("name"), k.flags, recorded)
    except UnsupportedError as exc:
        raise UnsupportedError(shown(exc.message), exc.hint) from None
    return _keeping(k, make)
