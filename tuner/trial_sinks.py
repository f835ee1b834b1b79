"""Where each trial of a run goes besides the tuning database (``_Sinks``): the --jsonl/--csv/--metrics files
and the run folder (its trials and metrics, the result, and the traceback and crash bundle when the tuner
itself fails)."""

from __future__ import annotations

import json
from typing import Any

from tracea.doctor.errors import BadInputError, UnsupportedError

from .config import Outputs
from .db import DatabaseChangedError
from .result import TuneResult
from .run_setup import _Setup
from .trial import Trial, now_iso


class _Sinks:
    """Where each trial goes besides the database: --jsonl/--csv metrics files and the run folder."""

    def __init__(self, outputs: Outputs, setup: _Setup, host: Any) -> None:
        from tracea.reports.metrics import MetricsWriter

        self.setup = setup
        self.baseline: dict[str, Any] | None = None
        self.writers = [MetricsWriter(p) for p in outputs.metrics_files]
        self.run = None
        if outputs.run_folder and not setup.simulated:
            # HOOK(reports): the run folder of this tune run (reports/runs.py); trials.jsonl + metrics.jsonl
            from tracea.reports.runs import start_run

            self.run = start_run("tune", outputs.argv, host)
            self.writers.append(MetricsWriter(self.run.metrics_path))

    def row(self, t: Trial) -> Any:
        from tracea.reports.metrics import MetricsRow

        op, m = self.setup.op, t.measurement
        shape = {k: v for k, v in op.to_json().items() if k not in ("op", "schema_version", "dtype")}
        secs = m.p50_ms * 1e-3 if m.ok else None
        b = self.baseline or {}
        return MetricsRow(
            timestamp=t.timestamp, op=op.kind, shape=json.dumps(shape, sort_keys=True), dtype=op.dtype.value,
            backend=self.setup.backend, variant=self.setup.variant, schedule=json.dumps(t.schedule, sort_keys=True),
            status=m.status, p50_ms=m.p50_ms, p95_ms=m.p95_ms, tflops=op.flops / secs / 1e12 if secs else None,
            gbps=op.bytes / secs / 1e9 if secs else None, rel_err=m.rel_err, baseline=b.get("name"),
            baseline_p50_ms=b.get("p50_ms"), ratio=b["p50_ms"] / m.p50_ms if secs and b.get("p50_ms") else None,
            env_fingerprint=self.setup.fingerprint, note=b.get("reason") if b.get("unstable") else b.get("note"))

    def trial(self, t: Trial) -> None:
        """The trial in the metrics files and the run folder (after the database: the source of truth)."""
        from tracea.doctor.files import is_no_space, no_space

        row = self.row(t)
        try:
            for w in self.writers:
                w.write(row)
            if self.run is not None:
                with open(self.run.trials_path, "a") as f:
                    f.write(json.dumps(t.to_json()) + "\n")
        except OSError as exc:
            if not is_no_space(exc):
                raise
            where = exc.filename or (self.run.path if self.run is not None else ".")
            raise no_space(where, f"trial {t.index} is in the tuning database, but not in the run folder or metrics "
                           "files") from None

    def crash(self, exc: BaseException) -> None:
        """The search raised: the run folder keeps the traceback and is marked "error" ("interrupted" for
        Ctrl-C), and, unless the input was bad or the host cannot do what was asked (``UnsupportedError``: no
        such GPU or compiler, a full disk), a crash bundle is written and its path printed."""
        if self.run is None:
            return
        import traceback

        from tracea.reports.record import crash_bundle

        interrupted = isinstance(exc, KeyboardInterrupt)
        try:
            self.run.add_file("log.txt", "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
            self.run.finish("interrupted" if interrupted else "error", f"{type(exc).__name__}: {exc}")
            if not interrupted and not isinstance(exc, (BadInputError, DatabaseChangedError, UnsupportedError)):
                crash_bundle(self.run)
        except OSError as again:  # a full disk: the exception being raised is the one to report
            import sys

            sys.stderr.write(f"warning: the run folder {self.run.path} could not record the error ({again})\n")

    def finish(self, status: str, result: TuneResult | None) -> None:
        if self.run is None:
            return
        if result is not None:
            self.run.add_json("result.json", {k: v for k, v in result.to_json().items() if k != "trials"})
            self.run.record(best=result.best, tuning_key=result.key, finished=now_iso())
        self.run.finish(status)
