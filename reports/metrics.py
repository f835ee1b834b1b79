"""Metrics rows: one schema for CSV and JSONL (DESIGN.md), written by bench and tune.

``MetricsRow`` is the schema (keep it stable: readers are pandas, the csv module and ``tracea report``);
``MetricsWriter(path).write(row)`` appends safely (format from the extension); ``read_metrics(path)``
loads either format back with numbers parsed."""

from __future__ import annotations

import csv
import io
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tracea.doctor.errors import BadInputError

# 2: rows carry ``note`` (why a ratio is missing or must not be read as one: an unstable measurement, a
# baseline pinned below its best for this CPU); JSONL holds ``shape`` and ``schedule`` as objects.
# Version 1 rows are still read.
SCHEMA_VERSION = 2
READABLE_VERSIONS = (1, 2)
STATUSES = ("ok", "invalid", "compile_failed", "runtime_failed", "wrong_result", "timeout")


@dataclass(frozen=True)
class MetricsRow:
    timestamp: str
    op: str
    shape: str
    dtype: str
    backend: str
    variant: str
    schedule: str  # JSON of the schedule
    status: str
    p50_ms: float | None
    p95_ms: float | None
    tflops: float | None
    gbps: float | None
    rel_err: float | None
    baseline: str | None
    baseline_p50_ms: float | None
    ratio: float | None  # baseline time / Tracea time: > 1 means Tracea is faster
    env_fingerprint: str
    note: str | None = None  # why ratio is None, or why it is not the library's best (see SCHEMA_VERSION)
    schema_version: int = SCHEMA_VERSION

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status {self.status!r} is not one of {STATUSES}")

    def to_json(self) -> dict[str, Any]:
        """The row as JSON: ``shape`` and ``schedule`` as nested objects (``jq .schedule.mc`` works)."""
        out = asdict(self)
        for key in NESTED:
            out[key] = json.loads(out[key]) if out[key] else None
        return out

    def flat(self) -> dict[str, Any]:
        """The row for CSV: ``shape`` and ``schedule`` as JSON text in one cell."""
        return asdict(self)


FIELDS = list(MetricsRow.__dataclass_fields__)
NESTED = ("shape", "schedule")  # JSON text in CSV cells and in the dataclass, objects in JSON
V1_FIELDS = [f for f in FIELDS if f != "note"]


def to_jsonl(rows: list[MetricsRow]) -> str:
    return "".join(json.dumps(r.to_json(), sort_keys=False) + "\n" for r in rows)


def to_csv(rows: list[MetricsRow]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=FIELDS, lineterminator="\n")
    writer.writeheader()
    for r in rows:
        writer.writerow({k: ("" if v is None else v) for k, v in r.flat().items()})
    return buf.getvalue()


# ------------------------------------------------------------------------------ writing and reading

FORMATS = {".csv": "csv", ".jsonl": "jsonl"}
NUMERIC = ("p50_ms", "p95_ms", "tflops", "gbps", "rel_err", "baseline_p50_ms", "ratio")


def format_of(path: str | os.PathLike[str]) -> str:
    """"csv" or "jsonl" from the file's extension; BadInputError for anything else."""
    suffix = Path(path).suffix.lower()
    if suffix not in FORMATS:
        raise BadInputError(f"metrics file {path}: the extension must be .csv or .jsonl (it picks the format)")
    return FORMATS[suffix]


class MetricsWriter:
    """Appends metrics rows to one file, safely from several processes (tuner workers, parallel runs).

    The format follows the extension (.csv or .jsonl). Each ``write`` takes an exclusive ``flock`` on the
    file, writes whole lines with one ``O_APPEND`` write, and ``fsync``s, so rows never interleave or
    tear and a crash loses at most the row being written. A CSV gets its header once, when the file is
    empty; appending to a CSV whose header is another schema's is refused (BadInputError), never mixed.

        w = MetricsWriter("runs.csv"); w.write(row); w.write_many(rows)
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.format = format_of(self.path)
        if self.path.is_dir():
            raise BadInputError(f"metrics file {self.path} is a directory")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise BadInputError(f"metrics file {self.path}: cannot create its folder ({exc.strerror})") from None

    def write(self, row: MetricsRow) -> None:
        self.write_many([row])

    def write_many(self, rows: list[MetricsRow]) -> None:
        if not rows:
            return
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
        except OSError as exc:
            raise BadInputError(f"metrics file {self.path}: cannot open for appending ({exc.strerror})") from None
        try:
            _lock(fd)
            size = os.fstat(fd).st_size
            if self.format == "jsonl":
                text = to_jsonl(rows)
            else:
                text = to_csv(rows)
                if size:
                    self._check_header()
                    text = text.split("\n", 1)[1]  # the header is there already
            if size and not self._ends_with_newline(size):
                text = "\n" + text  # a torn last line (a killed writer) must not swallow this row
            data = text.encode()
            while data:
                n = os.write(fd, data)
                data = data[n:]
            os.fsync(fd)
        finally:
            os.close(fd)  # closing releases the lock

    def _check_header(self) -> None:
        with open(self.path, newline="") as f:
            header = f.readline().rstrip("\r\n")
        if header != ",".join(FIELDS):
            raise BadInputError(f"metrics file {self.path} has another header ({header[:60]!r}...); "
                                "write to a new file")

    def _ends_with_newline(self, size: int) -> bool:
        with open(self.path, "rb") as f:
            f.seek(size - 1)
            return f.read(1) == b"\n"


def _lock(fd: int) -> None:
    try:
        import fcntl
    except ImportError:  # Windows: O_APPEND whole-buffer writes only
        return
    fcntl.flock(fd, fcntl.LOCK_EX)


def _number(value: Any) -> float | None:
    if value is None or value == "":
        return None
    return float(value)


def read_metrics(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The rows of a metrics file (CSV or JSONL) as dicts with numbers parsed and None for empty cells.
    BadInputError with the line number for a row that is not of this schema."""
    p = Path(path)
    fmt = format_of(p)
    try:
        text = p.read_text()
    except FileNotFoundError:
        raise BadInputError(f"metrics file not found: {p}") from None
    except IsADirectoryError:
        raise BadInputError(f"metrics file {p} is a directory") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInputError(f"cannot read metrics file {p}: {exc}") from None
    rows: list[dict[str, Any]] = []
    if fmt == "jsonl":
        raw: list[tuple[int, Any]] = []
        for i, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                raw.append((i, json.loads(line)))
            except ValueError:
                raise BadInputError(f"{p}:{i}: not a JSON line") from None
    else:
        reader = csv.DictReader(io.StringIO(text))
        if reader.fieldnames is None:
            return []
        missing = [f for f in V1_FIELDS if f not in reader.fieldnames]
        if missing:
            raise BadInputError(f"{p}: not a Tracea metrics CSV (missing columns: {', '.join(missing[:5])})")
        raw = [(i, r) for i, r in enumerate(reader, 2)]
    for i, r in raw:
        if not isinstance(r, dict) or any(f not in r for f in V1_FIELDS):
            raise BadInputError(f"{p}:{i}: not a Tracea metrics row (expected the fields {', '.join(FIELDS[:4])}, ...)")
        try:
            row = {f: r.get(f) for f in FIELDS}
            for f in NUMERIC:
                row[f] = _number(row[f])
            row["schema_version"] = int(row["schema_version"])
            for f in ("baseline", "note"):
                row[f] = row[f] or None
            for f in NESTED:  # rows read back hold JSON text, whichever format they were written in
                if isinstance(row[f], (dict, list)):
                    row[f] = json.dumps(row[f], sort_keys=True)
                elif row[f] is None:
                    row[f] = ""
        except (TypeError, ValueError) as exc:
            raise BadInputError(f"{p}:{i}: a number field does not parse ({exc})") from None
        if row["schema_version"] not in READABLE_VERSIONS:
            raise BadInputError(f"{p}:{i}: schema_version {row['schema_version']}; this Tracea reads "
                                f"{', '.join(map(str, READABLE_VERSIONS))}")
        rows.append(row)
    return rows


def bench_row(result: Any) -> MetricsRow:
    """The metrics row of a ``tracea bench`` result (emitters/bench.py ``BenchResult``)."""
    return MetricsRow(**result.row_fields())
