"""The tuning database: SQLite, every trial kept, and the one source of truth for what was tuned.

Trials are keyed by the op signature, the variant and the environment fingerprint (backend, device and
architecture, driver, compiler and NVRTC versions, CPU flags, Tracea version: doctor/fingerprint.py), so
a change in any part is a miss, never a stale hit. Each trial is one short transaction committed before
the next candidate starts: a process killed at any point loses at most the trial in flight. Several
processes share the file; a writer waits up to ``BUSY_TIMEOUT_S`` for the others' short transactions.

What keeps the file consistent with itself, and with what is on disk (tuner/db_rows.py checks the rows):

* A rollback journal, not a write-ahead log: between transactions everything is in the one file, and a
  journal exists only while a transaction is open. A write-ahead log (the -wal and -shm files beside the
  database) belongs to the name, not to the file: a database replaced under a running tune (``mv backup
  tuning.sqlite``) met the old file's log, which SQLite then replayed into it, and readers of a full disk
  could not create the -shm file they need. A database written in WAL mode by an older Tracea is turned
  into this mode the first time it is opened for writing.
* Foreign keys are on: a trial cannot name a run that does not exist. Every write first checks, inside
  its own write transaction, that its run is still there: ``tracea cache clear`` (which takes the same
  write lock) and a running tune never interleave, and a tune whose run was cleared stops with
  ``DatabaseChangedError`` instead of writing trials that belong to nothing.
* Every write checks that the path still names the file this process opened (device and inode), and that
  the file's content is still the database it wrote: ``meta`` holds an ``instance`` (a random id given at
  creation) and a ``generation`` (raised by every write). A database deleted, replaced by another file
  (``mv``), or rewritten in place with another database or an older copy of itself (``cp backup
  tuning.sqlite``: the same inode, SQLite rereads the changed file) is said, and nothing is written to it:
  the restored copy stays as it was restored.
* A full disk is told from a broken file: a write that finds no space is rolled back whole (the database
  keeps every earlier trial) and raises NoSpaceError, which says so and how to recover.
* Readers (``TuningDB.reader``: cache list/show/export, bench's lookup) open the file read-only
  (``mode=ro``; ``immutable=1`` for a WAL-mode file when neither it nor its folder can be written), so a
  read-only database is still listed, exported and used.
* A malformed row (a value of the wrong type, JSON that does not parse, a trial of no run) is skipped with
  one warning naming the table, the row id and what is wrong; it never stops a command. A file that is not
  a database at all is refused with a hint to move it aside.

The tables are in tuner/db_schema.py, the reads in tuner/db_queries.py (``Queries``, the base of
``TuningDB``); this module opens the file, checks it, and writes.

Location: ``$TRACEA_HOME/tuning.sqlite``, else ``platformdirs.user_data_dir("tracea")/tuning.sqlite``.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

from tracea.doctor.errors import BadInputError, TraceaError
from tracea.doctor.files import no_space

from .db_queries import Queries
from .db_schema import ORPHANS, SCHEMA, SCHEMA_VERSION, TABLES
from .recorded import schedule_key
from .trial import Trial, now_iso

BUSY_TIMEOUT_S = 30.0
MAX_WARNINGS = 20  # per database handle; the rest are counted
CORRUPT_HINT = "move the file aside (or set TRACEA_HOME) to start a new database"


def _while_busy(step: Callable[[], Any]) -> None:
    """``step`` again while another connection holds the lock, up to BUSY_TIMEOUT_S: SQLite answers a
    change of journal mode (and a schema write racing it) on a new file with "database is locked" at once,
    not through the busy handler, when two processes or threads open the same new database together."""
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    while True:
        try:
            step()
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) and "busy" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.02)


class DatabaseChangedError(TraceaError):
    """The database this process writes was deleted, replaced, or its run cleared, while it ran."""


def default_path() -> Path:
    from tracea.doctor.home import tracea_dir  # $TRACEA_HOME, checked, else the user data folder

    return tracea_dir("data") / "tuning.sqlite"


def tuning_key(op_signature: str, variant: str, fingerprint: str) -> str:
    return hashlib.sha256(f"{op_signature}|{variant}|{fingerprint}".encode()).hexdigest()[:20]


def _stderr_warning(text: str) -> None:
    sys.stderr.write(f"warning: {text}\n")


def _writable(path: Path) -> bool:
    """Whether SQLite could write beside ``path`` (the -wal and -shm files a WAL database needs, even to
    be read through ``mode=ro``)."""
    return os.access(path.parent, os.W_OK | os.X_OK)


def _disk_full(exc: BaseException, path: Path) -> bool:
    """Whether SQLite's error is a full disk (or quota): said so by SQLite, or an I/O error on a device
    with next to no space left."""
    text = str(exc).lower()
    if "full" in text:
        return True
    if "disk i/o error" not in text and "unable to open" not in text:
        return False
    import shutil

    try:
        return shutil.disk_usage(path.parent if path.parent.exists() else Path.cwd()).free < (1 << 20)
    except OSError:
        return False


class TuningDB(Queries):
    """One connection to the tuning database. ``TuningDB(path)`` writes (a tune); ``TuningDB.reader(path)``
    only reads and never creates or changes the file."""

    def __init__(self, path: str | Path | None = None, *, readonly: bool = False,
                 warn: Callable[[str], None] | None = None) -> None:
        self.path = Path(path) if path is not None else default_path()
        self.readonly = readonly
        self.immutable = False  # read through immutable=1: no locks, the -wal file unseen
        self._warn_sink = warn or _stderr_warning
        self._warned: set[str] = set()
        self.skipped: list[dict[str, Any]] = []  # {"table", "id", "problem"} of each malformed row read
        self._identity: tuple[int, int] | None = None
        self._instance: str | None = None  # meta.instance and meta.generation as this handle last wrote them
        self._generation = 0
        memory = str(self.path) == ":memory:"
        try:
            if readonly and not memory:
                self.conn = self._connect_readonly()
            else:
                self.conn = self._connect_writable(memory)
            version = self._schema_version()
        except sqlite3.DatabaseError as exc:
            self._close_quietly()
            if not readonly and not memory and _disk_full(exc, self.path):
                raise no_space(self.path, "the tuning database could not be opened for writing") from None
            if "locked" in str(exc):
                raise BadInputError(f"tuning database {self.path} stayed locked by another process for "
                                    f"{BUSY_TIMEOUT_S:.0f} s", "wait for the other tune or cache command to end, "
                                    "or set TRACEA_HOME to another folder") from None
            if "readonly" in str(exc) or (not memory and self.path.exists() and not (
                    os.access(self.path, os.W_OK) and _writable(self.path))):
                raise BadInputError(
                    f"tuning database {self.path} is read-only; tuning writes to it",
                    "make it writable (chmod u+w on the file and its folder), or set TRACEA_HOME to another "
                    "folder; `tracea cache list/show/export` and `tracea bench` read it as it is") from None
            raise BadInputError(f"tuning database {self.path}: {exc}", CORRUPT_HINT) from None
        except OSError as exc:
            self._close_quietly()
            raise BadInputError(f"cannot open the tuning database {self.path}: {exc.strerror or exc}") from None
        if version != SCHEMA_VERSION:
            self._close_quietly()
            raise BadInputError(f"tuning database {self.path} has schema version {version}; this Tracea reads "
                                f"{SCHEMA_VERSION}")

    @classmethod
    def reader(cls, path: str | Path | None = None, warn: Callable[[str], None] | None = None) -> TuningDB:
        return cls(path, readonly=True, warn=warn)

    # ----------------------------------------------------------------------------------- opening

    def _configure(self, conn: sqlite3.Connection) -> sqlite3.Connection:
        conn.row_factory = sqlite3.Row
        conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        conn.execute("PRAGMA foreign_keys = ON")
        return conn

    def _connect_writable(self, memory: bool) -> sqlite3.Connection:
        if not memory:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = self._configure(sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None,
                                               check_same_thread=False))
        self.conn = conn
        # a rollback journal (the module docstring says why not WAL); the schema: idempotent, and
        # executescript commits
        _while_busy(lambda: (conn.execute("PRAGMA journal_mode = DELETE"), conn.execute("PRAGMA synchronous = FULL"),
                             conn.executescript(SCHEMA)))
        if not memory:
            st = os.stat(self.path)
            self._identity = (st.st_dev, st.st_ino)
        with self.tx(content=False):
            conn.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
            conn.execute("INSERT OR IGNORE INTO meta VALUES ('instance', ?)", (uuid.uuid4().hex,))
            conn.execute("INSERT OR IGNORE INTO meta VALUES ('generation', '0')")
            self._instance, self._generation = self._content()
        return conn

    def _connect_readonly(self) -> sqlite3.Connection:
        if not self.path.exists():
            # nothing stored yet: an empty database in memory answers every question with "nothing",
            # and no file is created just to look something up
            conn = self._configure(sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False))
            conn.executescript(SCHEMA)
            conn.execute("INSERT INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
            return conn
        if not self.path.is_file():
            raise BadInputError(f"tuning database {self.path} is not a file")
        uri = "file:" + quote(str(self.path.resolve()))
        if _writable(self.path):
            conn = sqlite3.connect(uri + "?mode=ro", uri=True, timeout=BUSY_TIMEOUT_S, isolation_level=None,
                                   check_same_thread=False)
            try:
                self._configure(conn).execute("SELECT name FROM sqlite_master LIMIT 1").fetchall()
                return conn
            except sqlite3.OperationalError as exc:
                conn.close()
                if "unable to open" not in str(exc) and "readonly" not in str(exc):
                    raise
        # a WAL database needs its -shm file even to be read; where nothing can be written beside it,
        # read the main file as it is (what the last checkpoint holds)
        self.immutable = True
        wal = self.path.with_name(self.path.name + "-wal")
        if wal.exists() and wal.stat().st_size > 0:
            self.warn(f"tuning database {self.path} is read-only and has a write-ahead log ({wal.name}) that "
                      "cannot be read without write access: the newest trials may be missing")
        conn = self._configure(sqlite3.connect(uri + "?immutable=1", uri=True, isolation_level=None,
                                               check_same_thread=False))
        conn.execute("SELECT name FROM sqlite_master LIMIT 1").fetchall()
        return conn

    def _schema_version(self) -> int:
        tables = {r[0] for r in self.conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        missing = [t for t in TABLES if t not in tables]
        if missing:
            raise sqlite3.DatabaseError(f"not a Tracea tuning database (no {', '.join(missing)} table)")
        row = self.conn.execute("SELECT value FROM meta WHERE name = 'schema_version'").fetchone()
        try:
            return int(row[0])
        except (TypeError, ValueError):
            raise sqlite3.DatabaseError(
                f"meta.schema_version is {None if row is None else row[0]!r}, not a version number") from None

    def _close_quietly(self) -> None:
        conn = getattr(self, "conn", None)
        if conn is not None:
            conn.close()

    def close(self) -> None:
        self.conn.close()

    # ----------------------------------------------------------------------------------- warnings

    def warn(self, text: str) -> None:
        """One warning per distinct text; after MAX_WARNINGS only a count (a damaged file can have many)."""
        if text in self._warned:
            return
        self._warned.add(text)
        if len(self._warned) <= MAX_WARNINGS:
            self._warn_sink(text)
        elif len(self._warned) == MAX_WARNINGS + 1:
            self._warn_sink(f"tuning database {self.path}: more malformed rows; not listing them all")

    @property
    def warnings(self) -> int:
        return len(self._warned)

    # ----------------------------------------------------------------------------------- writing

    def _check_identity(self) -> None:
        """The path still names the file this connection writes (not deleted, not replaced)."""
        if self._identity is None:
            return
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            raise DatabaseChangedError(f"the tuning database {self.path} was deleted while this process used it; "
                                       "nothing more is written to it") from None
        if (st.st_dev, st.st_ino) != self._identity:
            raise DatabaseChangedError(f"the tuning database {self.path} was replaced by another file while this "
                                       "process used it; nothing is written to the new file")

    def _content(self) -> tuple[str | None, int]:
        rows = dict(self.conn.execute("SELECT name, value FROM meta WHERE name IN ('instance', 'generation')"))
        try:
            generation = int(rows.get("generation", 0))
        except (TypeError, ValueError):
            generation = -1  # not written by Tracea: no later write of this handle can trust it
        return rows.get("instance"), generation

    def _check_content(self) -> int:
        """The file holds the database this handle wrote, at its last write or later (under the write lock,
        so the generation read is the file's: SQLite rereads a file changed behind its back); the current
        generation."""
        instance, generation = self._content()
        if instance != self._instance:
            raise DatabaseChangedError(f"the tuning database {self.path} was overwritten with another database while "
                                       "this process used it; nothing is written to it")
        if generation < self._generation:
            raise DatabaseChangedError(f"the tuning database {self.path} was overwritten with an older copy of itself "
                                       "while this process used it (a backup restored?); nothing is written to it, so "
                                       "the copy stays as it was")
        return generation

    @contextmanager
    def tx(self, content: bool = True) -> Iterator[sqlite3.Connection]:
        """One short write transaction (BEGIN IMMEDIATE: take the write lock up front, wait if busy); the
        file is checked to still be the one opened, holding the database this handle wrote (``content``),
        under the lock, before anything is written. A full disk rolls the transaction back and raises
        NoSpaceError: the database keeps what it held."""
        if self.readonly:
            raise BadInputError(f"tuning database {self.path} was opened read-only")
        self._check_identity()
        try:
            self.conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            raise self._write_error(exc) from None
        try:
            self._check_identity()
            generation = self._check_content() if content else None
            yield self.conn
            if generation is not None:
                self.conn.execute("UPDATE meta SET value = ? WHERE name = 'generation'", (str(generation + 1),))
        except BaseException as exc:
            self._rollback_quietly()
            if isinstance(exc, sqlite3.OperationalError):
                raise self._write_error(exc) from None
            raise
        try:
            self.conn.execute("COMMIT")
        except sqlite3.OperationalError as exc:
            self._rollback_quietly()
            raise self._write_error(exc) from None
        if generation is not None:
            self._generation = generation + 1

    def _rollback_quietly(self) -> None:
        try:
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
        except sqlite3.Error:
            pass

    def _write_error(self, exc: sqlite3.OperationalError) -> Exception:
        """A full disk said as such (the transaction is rolled back); any other error as it is."""
        if _disk_full(exc, self.path):
            return no_space(self.path, "this write to the tuning database was rolled back, nothing of it was kept")
        return exc

    def _require_run(self, c: sqlite3.Connection, run_id: int) -> None:
        if c.execute("SELECT 1 FROM runs WHERE id = ?", (run_id,)).fetchone() is None:
            raise DatabaseChangedError(f"run {run_id} was removed from the tuning database {self.path} while it "
                                       "ran (`tracea cache clear`); this run stops and writes nothing more")

    def start_run(self, *, key: str, op: Any, variant: str, backend: str, fingerprint: str,
                  environment: dict[str, Any], strategy: str, seed: int, budget: int | None, space_size: int,
                  options: dict[str, Any]) -> int:
        with self.tx() as c:
            cur = c.execute(
                "INSERT INTO runs (key, op_signature, op, variant, backend, fingerprint, environment, strategy, seed,"
                " budget, space_size, options, state, started) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (key, op.signature, json.dumps(op.to_json()), variant, backend, fingerprint,
                 json.dumps(environment, default=str), strategy, seed, budget, space_size, json.dumps(options),
                 "running", now_iso()))
            return int(cur.lastrowid)  # type: ignore[arg-type]

    def add_trial(self, run_id: int, key: str, trial: Trial) -> None:
        m = trial.measurement
        with self.tx() as c:
            self._require_run(c, run_id)
            c.execute(
                "INSERT INTO trials (run_id, key, idx, schedule_key, name, schedule, status, p50_ms, p95_ms, min_ms,"
                " runs, rel_err, error, compile_s, seconds, created) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (run_id, key, trial.index, schedule_key(trial.schedule), trial.name, json.dumps(trial.schedule),
                 m.status, m.p50_ms, m.p95_ms, m.min_ms, m.runs, m.rel_err, m.error, m.compile_s, trial.seconds,
                 trial.timestamp))

    def set_baseline(self, run_id: int, baseline: dict[str, Any] | None) -> None:
        with self.tx() as c:
            self._require_run(c, run_id)
            c.execute("UPDATE runs SET baseline = ? WHERE id = ?", (json.dumps(baseline), run_id))

    def finish_run(self, run_id: int, state: str) -> None:
        with self.tx() as c:
            self._require_run(c, run_id)
            c.execute("UPDATE runs SET state = ?, finished = ? WHERE id = ?", (state, now_iso(), run_id))

    def clear(self, key: str | None = None) -> int:
        """Delete every run and trial (of ``key``), trials of no run included; the number of trials removed.
        A tune running under a cleared key notices at its next write and stops."""
        with self.tx() as c:
            where, args = ("WHERE key = ?", (key,)) if key else ("", ())
            n = c.execute(f"SELECT COUNT(*) FROM trials {where}", args).fetchone()[0]
            c.execute(f"DELETE FROM trials {where}", args)
            c.execute(f"DELETE FROM runs {where}", args)
        return int(n)

    def clear_orphans(self) -> int:
        """Delete trials that belong to no run (an older Tracea, without foreign keys, could leave them)."""
        with self.tx() as c:
            return int(c.execute(f"DELETE FROM trials WHERE {ORPHANS}").rowcount)
