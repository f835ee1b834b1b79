"""pack-repro bundles: one .tar.gz with what someone else needs to reproduce a run's result or failure.

    from tracea.reports.bundle import pack_run
    pack_run(find_run("LAST"), Path("bundle.tar.gz"), argv=sys.argv[1:])

Layout (one top folder, ``tracea-repro-<run id>/``):

    manifest.json       kind "tracea-repro-bundle", schema_version, tracea_version, created_at,
                        command_line (pack-repro's) and the run's own argv, env hash and fingerprinted
                        fields per backend, python, platform, the kernels and their architecture,
                        and the size + sha256 of every other file
    replay.sh           the replay entry point: ``sh replay.sh`` runs ``tracea replay`` on this folder
    README.txt          what this is, in three lines
    snapshot.json       the doctor snapshot (the run's; a fresh one when the run has none)
    packages.json       the installed Python distributions and versions (importlib.metadata)
    environment.json    the run's environment variables, secrets redacted (see ``redact_environment``)
    run/                the run folder: manifest, metrics, trials, ir/<kernel>/ dumps, logs, result.json

The archive is written to a temporary file beside ``out`` and renamed; members are plain files and
folders only, owned by nobody, so unpacking them never needs privileges.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import io
import json
import os
import platform
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from tracea.doctor.errors import BadInputError

from .irdump import dump_best
from .redact import redact_environment
from .runs import Run

BUNDLE_KIND = "tracea-repro-bundle"
BUNDLE_SCHEMA_VERSION = 1
SKIP_IN_RUN = {"crash-bundle.tar.gz"}


def installed_packages() -> list[dict[str, str]]:
    from importlib.metadata import distributions

    seen: dict[str, str] = {}
    for dist in distributions():
        name = dist.metadata.get("Name") if dist.metadata else None
        if name:
            seen.setdefault(name, dist.version)
    return [{"name": n, "version": seen[n]} for n in sorted(seen, key=str.lower)]


def _fresh_snapshot() -> dict[str, Any]:
    from tracea.doctor.snapshot import build_report, collect_raw, snapshot_document

    raw = collect_raw()
    return snapshot_document(raw, build_report(raw))


def _kernels(run_dir: Path, machine: str) -> list[dict[str, Any]]:
    """The kernels dumped in the run (its ir/ folders), with what replay needs to know up front."""
    import yaml

    out = []
    for folder in sorted((run_dir / "ir").glob("[0-9][0-9][0-9][0-9]_*")):
        if not folder.is_dir():
            continue
        meta: dict[str, Any] = {}
        try:
            meta = yaml.safe_load((folder / "07_metadata.yaml").read_text()) or {}
        except (OSError, yaml.YAMLError):
            pass
        decision: dict[str, Any] = {}
        try:
            decision = json.loads((folder / "01_decision.json").read_text()) or {}
        except (OSError, ValueError):
            pass
        source = next((p.name for p in sorted(folder.glob("03_source.*"))), None)
        binary = next((p.name for p in sorted(folder.glob("05_binary.*"))), None)
        out.append({
            "dir": f"run/ir/{folder.name}", "name": meta.get("name"), "variant": meta.get("variant") or decision.get("chosen"),
            "backend": decision.get("backend"), "language": meta.get("language"), "source": source, "binary": binary,
            "arch": meta.get("arch") or meta.get("target") or machine,
        })
    return out


def _dump_best_if_missing(run: Run) -> None:
    """A run that recorded a best schedule (``tune``) but no IR dump gets one now, built through the
    backend (a cache hit on the machine that tuned: the binary it measured), so its bundle replays.
    The run's manifest says it was dumped at pack time."""
    if (run.path / "ir").is_dir() or not isinstance(run.manifest.get("best"), dict):
        return
    try:
        result = json.loads((run.path / "result.json").read_text())
        from tracea.doctor import probe
        from tracea.kernels import Op

        paths = dump_best(run, Op.from_json(result["op"]), result["variant"], run.manifest["best"]["schedule"],
                          probe(), backend=result.get("backend"))
        run.record(ir_dumped_by="pack-repro", ir_dump_cache_hit=json.loads(
            next(p for p in paths if p.name == "04_compile.json").read_text()).get("cache_hit"))
    except Exception as exc:  # noqa: BLE001 - the bundle is still worth having without it
        sys.stderr.write(f"warning: run {run.id} has no IR dump and its best schedule could not be built "
                         f"({type(exc).__name__}: {exc}); the bundle will not replay\n")


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def pack_run(run: Run, out: str | Path, argv: list[str] | None = None) -> Path:
    """Write the bundle of ``run`` to ``out`` (a .tar.gz); returns its path."""
    out = Path(out)
    if out.is_dir():
        raise BadInputError(f"-o {out} is a directory; give a file name such as bundle.tar.gz")
    _dump_best_if_missing(run)
    files = _run_files(run)
    files.update(_top_files(run))
    files["manifest.json"] = (json.dumps(_manifest(run, files, argv), indent=1) + "\n").encode()
    _write_archive(out, f"tracea-repro-{run.id}", files)
    return out


def _run_files(run: Run) -> dict[str, bytes]:
    """The run folder's plain files, under ``run/``: not links, hidden files, the crash bundle, nor the
    snapshot and environment the bundle holds once at its top."""
    files: dict[str, bytes] = {}
    for path in sorted(run.path.rglob("*")):
        rel = path.relative_to(run.path)
        if path.is_symlink() or not path.is_file() or rel.name in SKIP_IN_RUN or rel.name.startswith("."):
            continue
        if rel.as_posix() in ("snapshot.json", "environment.json"):  # bundled once, at the top
            continue
        files[f"run/{rel.as_posix()}"] = path.read_bytes()
    return files


def _top_files(run: Run) -> dict[str, bytes]:
    """The files beside ``run/``: snapshot, packages, environment, replay.sh and README.txt."""
    files: dict[str, bytes] = {}
    snap = run.path / "snapshot.json"
    files["snapshot.json"] = snap.read_bytes() if snap.is_file() else (json.dumps(_fresh_snapshot(), indent=1) + "\n").encode()
    files["packages.json"] = (json.dumps(installed_packages(), indent=1) + "\n").encode()
    run_env = run.path / "environment.json"  # the run's own (redacted when written); else this process's
    files["environment.json"] = run_env.read_bytes() if run_env.is_file() else \
        (json.dumps(redact_environment(), indent=1) + "\n").encode()
    files["replay.sh"] = (
        b"#!/bin/sh\n# Replays this bundle: rebuilds its ops and schedules from Tracea's own rendering (--bundled-source\n"
        b"# or --binary run the bundled code instead), reruns, verifies on fresh random inputs and prints the\n"
        b"# recorded and the new figures side by side. Needs `pip install tracea` (the version in manifest.json)\n"
        b"# and a C compiler (CUDA kernels: a GPU and cuda-core).\n"
        b'cd "$(dirname "$0")" && exec tracea replay . "$@"\n')
    files["README.txt"] = (
        f"Tracea repro bundle of run {run.id} ({run.kind}, status {run.manifest.get('status')}).\n"
        "Replay it with `tracea replay BUNDLE.tar.gz` (or `sh replay.sh` in this folder).\n"
        "manifest.json lists every file with its sha256; environment.json has secrets redacted.\n").encode()
    return files


def _manifest(run: Run, files: dict[str, bytes], argv: list[str] | None) -> dict[str, Any]:
    """manifest.json: what made the bundle, the run, its environment, its kernels and every file's sha256."""
    from tracea.doctor.snapshot import tracea_version

    cpu_env = ((run.manifest.get("env") or {}).get("cpu") or {}).get("environment") or {}
    machine = cpu_env.get("machine") or platform.machine()
    return {
        "kind": BUNDLE_KIND, "schema_version": BUNDLE_SCHEMA_VERSION, "tracea_version": tracea_version(),
        "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "command_line": ["tracea", *(argv if argv is not None else sys.argv[1:])],
        "run": {k: run.manifest.get(k) for k in ("id", "run_kind", "argv", "status", "error", "started_at",
                                                  "finished_at", "tracea_version")},
        "env": run.manifest.get("env") or {},
        "env_hash": next((v.get("fingerprint") for v in (run.manifest.get("env") or {}).values()), None),
        "python": sys.version.split()[0], "platform": platform.platform(), "machine": platform.machine(),
        "kernels": _kernels(run.path, machine),
        "replay": "sh replay.sh  (or: tracea replay BUNDLE.tar.gz)",
        "files": {name: {"size": len(data), "sha256": _sha256(data)} for name, data in sorted(files.items())},
    }


def _write_archive(out: Path, top: str, files: dict[str, bytes]) -> None:
    """The .tar.gz written beside ``out`` and renamed onto it: ``top/`` and the files under it, manifest
    first, owned by nobody."""
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp")
    except OSError as exc:
        raise BadInputError(f"-o {out}: cannot write there ({exc.strerror})") from None
    mtime = int(_dt.datetime.now(_dt.timezone.utc).timestamp())
    try:
        with os.fdopen(fd, "wb") as raw, tarfile.open(fileobj=raw, mode="w:gz") as tar:
            tar.addfile(_info(top + "/", 0, mtime, tarfile.DIRTYPE))
            for name in ["manifest.json", *sorted(n for n in files if n != "manifest.json")]:
                data = files[name]
                mode = 0o755 if name == "replay.sh" else 0o644
                tar.addfile(_info(f"{top}/{name}", len(data), mtime, tarfile.REGTYPE, mode), io.BytesIO(data))
        os.chmod(tmp, 0o644)
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _info(name: str, size: int, mtime: int, kind: bytes, mode: int = 0o755) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name.rstrip("/"))
    info.size, info.mtime, info.type, info.mode = size, mtime, kind, mode
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info
