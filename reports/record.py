"""One recorded run of ``tracea bench`` (and ``tracea tune``): the run folder, IR dumps of every kernel
built, metrics rows to the run and to ``--metrics FILE``, and a crash bundle when the run fails.

    with RunRecorder("bench", argv, host, dump_ir=dir, metrics=file) as rec:
        result = bench(op, host, build=rec.build_hook(backend))   # every build is recorded
        rec.bench_result(result)                                   # IR dumps, rows, result.json, status

On an exception inside the block the run is marked "error" ("interrupted" for Ctrl-C), a crash bundle
is written into the run folder and its path printed on stderr (not for bad input or for what this host
cannot do: ``BadInputError``, ``UnsupportedError``); the exception goes on. A recorded
failure (compile_failed, runtime_failed, wrong_result, timeout) gets a crash bundle too.
"""

from __future__ import annotations

import sys
import tempfile
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .irdump import dump_kernel
from .metrics import MetricsRow, MetricsWriter, bench_row
from .runs import Run, start_run

CRASH_BUNDLE = "crash-bundle.tar.gz"


@dataclass
class Built:
    """One call of the backend's build: the kernel, or the error it raised."""

    op: Any
    variant: Any
    schedule: Any
    kernel: Any = None
    error: BaseException | None = None
    source: str | None = None  # the rendered source when the build failed (from the backend's emit)
    language: str | None = None
    dumped: bool = False


class RunRecorder:
    def __init__(self, kind: str, argv: list[str], host: Any, dump_ir: str | Path | None = None,
                 metrics: str | Path | None = None) -> None:
        self.host = host
        self.dump_ir = _dump_folder(dump_ir) if dump_ir is not None else None  # bad paths fail before the run opens
        self.user_metrics = MetricsWriter(metrics) if metrics is not None else None  # bad extension: fail first
        self.run: Run = start_run(kind, argv, host)
        self.run_metrics = MetricsWriter(self.run.metrics_path)
        self.builds: list[Built] = []
        self.kernels_dumped = 0
        self.crash_bundle: Path | None = None

    # ------------------------------------------------------------------------------------------ building

    def build_hook(self, backend: str) -> Any:
        """A ``build(op, variant, schedule, host)`` that calls the backend's and remembers each result."""
        from tracea.emitters import registry

        mod = registry.backend(backend)

        def build(op: Any, variant: Any, schedule: Any, host: Any) -> Any:
            entry = Built(op, variant, schedule)
            self.builds.append(entry)
            try:
                entry.kernel = mod.build(op, variant, schedule, host)
            except BaseException as exc:
                entry.error = exc
                entry.source, entry.language = _emitted_source(mod, op, variant, schedule, host)
                raise
            return entry.kernel

        return build

    def dump(self, op: Any, decision: Any, schedule: Any, artifact: Any, *, source: str | None = None,
             language: str | None = None) -> list[Path]:
        """IR dump of one kernel into the run folder (and ``--dump-ir DIR`` when given)."""
        index = self.kernels_dumped
        self.kernels_dumped += 1
        paths = dump_kernel(self.run.ir_dir, op, decision, schedule, artifact, index, source=source, language=language)
        if self.dump_ir is not None:
            paths += dump_kernel(self.dump_ir, op, decision, schedule, artifact, index, source=source,
                                 language=language)
        return paths

    def row(self, row: MetricsRow) -> None:
        self.run_metrics.write(row)
        if self.user_metrics is not None:
            self.user_metrics.write(row)

    # --------------------------------------------------------------------------------------- bench results

    def bench_result(self, result: Any, settings: dict[str, Any] | None = None) -> None:
        """Record a ``BenchResult``: IR dump of its kernel, its metrics row, result.json, the status."""
        built = self.builds[-1] if self.builds else None
        if built is not None:
            artifact = getattr(built.kernel, "artifact", None)
            self.dump(result.op, result.decision, result.schedule, artifact, source=built.source,
                      language=built.language)
            built.dumped = True
        self.row(bench_row(result))
        self.run.add_json("result.json", bench_result_json(result))
        self.run.record(op=result.op.to_json(), backend=result.decision.backend, variant=result.variant,
                        settings=settings or {}, replay=None)
        self.run.finish(result.status, result.error)
        if result.status != "ok":
            self._crash_bundle()

    # ------------------------------------------------------------------------------------------- crashes

    def _crash_bundle(self) -> None:
        self.crash_bundle = crash_bundle(self.run)

    def __enter__(self) -> RunRecorder:
        return self

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> None:
        if exc is None:
            if self.run.manifest.get("status") == "running":
                self.run.finish("ok")
            return
        interrupted = isinstance(exc, KeyboardInterrupt)
        try:
            self.run.add_file("log.txt", "".join(traceback.format_exception(kind, exc, tb)))
            for built in self.builds:  # what was built before the exception, so the bundle can replay it
                artifact = getattr(built.kernel, "artifact", None)
                if not built.dumped and (artifact is not None or built.source):
                    built.dumped = True  # once: a dump that failed is not tried again below
                    self.dump(built.op, None, built.schedule, artifact, source=built.source,
                              language=built.language)
        except Exception as again:  # noqa: BLE001 - the run is closed whatever the evidence could not be
            sys.stderr.write(f"warning: run {self.run.id}: could not record everything: {again}\n")
        finally:
            # the run is closed on every path, a KeyboardInterrupt during the dumps above included
            self.run.finish("interrupted" if interrupted else "error", f"{type(exc).__name__}: {exc}")
        from tracea.doctor.errors import BadInputError, UnsupportedError

        # bad input and what this host cannot do (no such GPU, precision or compiler; a full disk) are
        # expected conditions, said in one line: a crash bundle is for what went wrong
        if not interrupted and not isinstance(exc, BadInputError | UnsupportedError):
            self._crash_bundle()


def _dump_folder(path: str | Path) -> Path:
    """``--dump-ir DIR``, created now: a path that is a file, or a folder that cannot be made, is bad
    input before any run opens."""
    from tracea.doctor.errors import BadInputError

    folder = Path(path)
    if folder.exists() and not folder.is_dir():
        raise BadInputError(f"--dump-ir: {folder} exists and is not a folder; give a folder to write the IR into")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BadInputError(f"--dump-ir: cannot create {folder} ({exc.strerror or exc})") from None
    return folder


def crash_bundle(run: Run) -> Path | None:
    """Pack ``run`` into ``<run folder>/crash-bundle.tar.gz`` and print its path on stderr (for a failed
    bench or tune run); None, with a warning, when even that fails."""
    from .bundle import pack_run

    try:
        path = pack_run(run, run.path / CRASH_BUNDLE, argv=run.argv)
    except Exception as exc:  # noqa: BLE001 - the bundle is a courtesy; the run's own error matters more
        sys.stderr.write(f"warning: could not write a crash bundle: {type(exc).__name__}: {exc}\n")
        return None
    sys.stderr.write(f"crash bundle: {path}\n")
    return path


def bench_result_json(result: Any) -> dict[str, Any]:
    """Everything a BenchResult measured, JSON-able (the recorded figures replay compares against)."""
    def timing(t: Any) -> dict[str, Any] | None:
        if t is None:
            return None
        return t.to_json() if hasattr(t, "to_json") else {k: getattr(t, k) for k in ("p50_ms", "p95_ms")}

    return {
        "status": result.status, "seed": result.seed, "variant": result.variant, "schedule": result.schedule,
        "schedule_source": result.schedule_source, "error": result.error, "rel_err": result.rel_err,
        "tolerance": result.tolerance, "tracea": timing(result.tracea), "baseline_name": result.baseline_name,
        "baseline": timing(result.baseline), "baseline_rel_err": result.baseline_rel_err,
        "baseline_reason": result.baseline_reason, "tflops": result.tflops, "gbps": result.gbps,
        "copy_gbps": result.copy_gbps, "copy_method": result.copy_method, "memory_bound": result.memory_bound,
        "ratio": result.ratio, "compile_s": result.compile_s, "cache_hit": result.cache_hit,
        "fingerprint": result.fingerprint, "timestamp": result.timestamp, "row": bench_row(result).to_json(),
    }


def _emitted_source(mod: Any, op: Any, variant: Any, schedule: Any, host: Any) -> tuple[str | None, str | None]:
    """The source the backend would compile, through its public ``emit`` (for a build that failed): the
    file named with the backend's ``SOURCE_SUFFIX``, in the backend's ``LANGUAGE``."""
    try:
        with tempfile.TemporaryDirectory(prefix="tracea-emit-") as tmp:
            for path in mod.emit(op, variant, schedule, host, tmp):
                path = Path(path)
                if path.suffix == mod.SOURCE_SUFFIX:
                    return path.read_text(), mod.LANGUAGE
    except Exception:  # noqa: BLE001 - nothing to show is acceptable; the build's error is what matters
        pass
    return None, None
