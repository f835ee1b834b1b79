"""Run folders: every ``tracea bench`` and ``tracea tune`` run gets an id and a folder, so its evidence
(doctor snapshot, IR dumps, metrics, trial records, logs) can be found again and packed by
``tracea pack-repro``.

    from tracea.reports.runs import start_run, latest, find_run

    run = start_run("bench", sys.argv[1:], host)       # writes manifest.json and snapshot.json
    run.add_file("log.txt", text)                       # atomic; returns the path
    run.add_json("result.json", {...})
    run.record(op=op.to_json(), backend="cpu")          # merged into the manifest
    run.finish("ok")                                    # or "runtime_failed", "error", ... (+ error=...)
    latest()                                            # the newest run, or None
    find_run("20261123-081500-bench-3f9a1c")            # by id; "LAST" is latest()

Folder: ``$TRACEA_HOME/runs/<id>`` when TRACEA_HOME is set, else
``platformdirs.user_data_dir("tracea")/runs/<id>``. Ids sort by creation time:
``YYYYMMDD-HHMMSS-<kind>-<6 hex>``. Conventional names inside a run folder (``Run.path``):

    manifest.json       this module's manifest (RUN_SCHEMA_VERSION)
    snapshot.json       the doctor snapshot (raw answers when the process probed) or report
    environment.json    the environment variables at the start, secrets redacted
    metrics.jsonl       metrics rows (tracea.reports.metrics.MetricsWriter)
    trials.jsonl        the tuner's trial records
    ir/                 IR dumps (tracea.reports.irdump.dump_kernel), one folder per kernel
    log.txt, *.json     anything else the command records

Every write is atomic (temporary file + ``os.replace``); the manifest is rewritten whole each time.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import re
import secrets
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tracea.doctor.errors import BadInputError
from tracea.doctor.files import write_atomic

RUN_SCHEMA_VERSION = 1
RUN_KIND = "tracea-run"
ID_RE = re.compile(r"^\d{8}-\d{6}-[a-z][a-z0-9_-]{0,31}-[0-9a-f]{6}$")
STATUSES_DONE = ("ok", "failed", "error", "interrupted")  # plus any MetricsRow status


def tracea_home() -> Path:
    """``$TRACEA_HOME`` or the platform's user data folder for Tracea (doctor/home.py checks it)."""
    from tracea.doctor.home import tracea_dir

    return tracea_dir("data", create=False)


def runs_root() -> Path:
    return tracea_home() / "runs"


def _now() -> _dt.datetime:
    return _dt.datetime.now(_dt.timezone.utc)


def _json(obj: Any) -> str:
    return json.dumps(obj, indent=1, sort_keys=False, default=str) + "\n"


def _inside(root: Path, name: str | Path) -> Path:
    """``root / name`` for a relative name that stays inside ``root`` (no absolute path, no ``..``)."""
    rel = Path(name)
    if rel.is_absolute() or ".." in rel.parts or not rel.parts:
        raise BadInputError(f"run file name {str(name)!r} must be a relative path inside the run folder")
    return root / rel


@dataclass
class Run:
    """One run's folder and manifest. Not thread-safe: one process writes its own run."""

    id: str
    path: Path
    kind: str
    argv: list[str]
    manifest: dict[str, Any] = field(default_factory=dict)

    @property
    def metrics_path(self) -> Path:
        return self.path / "metrics.jsonl"

    @property
    def trials_path(self) -> Path:
        return self.path / "trials.jsonl"

    @property
    def ir_dir(self) -> Path:
        return self.path / "ir"

    def add_file(self, name: str | Path, data: str | bytes | Path) -> Path:
        """Write ``data`` (text, bytes, or a file to copy) to ``name`` inside the run folder, atomically."""
        target = _inside(self.path, name)
        if isinstance(data, Path):
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.parent / f".{target.name}.{secrets.token_hex(4)}.tmp"
            shutil.copyfile(data, tmp)
            os.replace(tmp, target)
        else:
            write_atomic(target, data)
        return target

    def add_json(self, name: str | Path, obj: Any) -> Path:
        return self.add_file(name, _json(obj))

    def record(self, **fields: Any) -> None:
        """Merge ``fields`` (JSON-able) into the manifest and rewrite it."""
        self.manifest.update(fields)
        self._save()

    def finish(self, status: str, error: str | None = None) -> None:
        """Mark the run done: ``status`` is "ok", a MetricsRow status, "error" or "interrupted"."""
        self.manifest.update(status=status, error=error, finished_at=_now().isoformat(timespec="seconds"))
        self._save()

    def _save(self) -> None:
        write_atomic(self.path / "manifest.json", _json(self.manifest))


def _snapshot_of(host: Any) -> dict[str, Any] | None:
    """The doctor snapshot of ``host``: with the raw answers when this process probed it (so it
    replays with ``tracea doctor --input``), else the report alone."""
    if host is None:
        return None
    from tracea.doctor import snapshot

    cache = getattr(snapshot, "_CACHE", {})  # probe()'s once-per-process cache holds the raw answers
    if cache.get("report") is host and isinstance(cache.get("raw"), dict):
        return snapshot.snapshot_document(cache["raw"], host)
    return snapshot.report_document(host)


def _environment(host: Any) -> dict[str, Any]:
    """The env fingerprint and what it hashes, per backend this host can run."""
    from tracea.emitters import registry

    return registry.environments(host)


def start_run(kind: str, argv: list[str], host: Any = None) -> Run:
    """Create a run folder with its manifest (and the doctor snapshot of ``host``, a ``HostReport``)."""
    if not re.fullmatch(r"[a-z][a-z0-9_-]{0,31}", kind):
        raise BadInputError(f"run kind {kind!r}: lower-case letters, digits, '-' and '_' only")
    from tracea.doctor.home import tracea_dir
    from tracea.doctor.snapshot import tracea_version

    root = tracea_dir("data", "runs")  # a TRACEA_HOME that cannot hold it is said here, naming it
    now = _now()
    for _ in range(8):
        run_id = f"{now:%Y%m%d-%H%M%S}-{kind}-{secrets.token_hex(3)}"
        path = root / run_id
        try:
            path.mkdir(parents=True)
            break
        except FileExistsError:
            continue
        except OSError as exc:
            raise BadInputError(f"cannot create the run folder {path} ({exc.strerror})",
                                "set TRACEA_HOME to a writable folder") from None
    else:  # pragma: no cover - eight collisions of 24 random bits in one second
        raise BadInputError(f"cannot find a free run id under {root}")
    manifest: dict[str, Any] = {
        "kind": RUN_KIND, "schema_version": RUN_SCHEMA_VERSION, "id": run_id, "run_kind": kind,
        "argv": list(argv), "tracea_version": tracea_version(), "started_at": now.isoformat(timespec="seconds"),
        "finished_at": None, "status": "running", "error": None, "pid": os.getpid(),
    }
    run = Run(id=run_id, path=path, kind=kind, argv=list(argv), manifest=manifest)
    from .redact import redact_environment

    run.add_json("environment.json", redact_environment())  # as the run saw it (OMP_NUM_THREADS, ...)
    if host is not None:
        manifest["env"] = _environment(host)
        snap = _snapshot_of(host)
        if snap is not None:
            run.add_json("snapshot.json", snap)
    run._save()
    return run


def load_run(path: Path) -> Run:
    """The run in folder ``path`` (BadInputError when it is not one)."""
    try:
        manifest = json.loads((path / "manifest.json").read_text())
    except FileNotFoundError:
        raise BadInputError(f"{path} is not a Tracea run folder (no manifest.json)") from None
    except (OSError, ValueError) as exc:
        raise BadInputError(f"run manifest {path / 'manifest.json'} is unreadable: {exc}") from None
    if not isinstance(manifest, dict) or manifest.get("kind") != RUN_KIND:
        raise BadInputError(f"{path / 'manifest.json'} is not a Tracea run manifest")
    if manifest.get("schema_version") != RUN_SCHEMA_VERSION:
        raise BadInputError(f"run {path.name} has schema_version {manifest.get('schema_version')!r}; "
                            f"this Tracea reads {RUN_SCHEMA_VERSION}")
    return Run(id=manifest.get("id", path.name), path=path, kind=manifest.get("run_kind", "?"),
               argv=list(manifest.get("argv") or []), manifest=manifest)


def list_runs() -> list[str]:
    """Run ids under ``runs_root()``, oldest first."""
    root = runs_root()
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if ID_RE.match(p.name) and (p / "manifest.json").is_file())


def latest(kind: str | None = None) -> Run | None:
    """The newest run (of ``kind`` when given), or None."""
    for run_id in reversed(list_runs()):
        if kind is None or run_id.split("-")[2:-1] == kind.split("-"):
            return load_run(runs_root() / run_id)
    return None


def find_run(ref: str | None) -> Run:
    """``None``/"LAST": the newest run; an id (or a unique prefix of one); or a run folder's path."""
    if ref is None or ref.upper() == "LAST":
        run = latest()
        if run is None:
            raise BadInputError(f"no runs yet under {runs_root()}",
                                "run `tracea bench ...` or `tracea tune ...` first (or set TRACEA_HOME)")
        return run
    if os.sep in ref or ref.startswith("."):
        return load_run(Path(ref))
    ids = [i for i in list_runs() if i == ref or i.startswith(ref)]
    if ref in ids:
        ids = [ref]
    if not ids:
        raise BadInputError(f"no run {ref!r} under {runs_root()}", "`--run LAST` picks the newest")
    if len(ids) > 1:
        raise BadInputError(f"run {ref!r} is ambiguous: {', '.join(ids[:4])}{' ...' if len(ids) > 4 else ''}")
    return load_run(runs_root() / ids[0])
