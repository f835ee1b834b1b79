"""Unpacking an untrusted .tar.gz (a repro bundle from someone else) without trusting it.

``safe_extract(archive, target)`` checks every member before writing anything, and refuses the whole
archive (BadInputError, one line) for: an absolute path or a drive; a ``..`` component; a NUL or
backslash in a name; a symbolic or hard link (a Tracea bundle has none, and a link is how archives
escape their folder); a device file, FIFO or anything not a plain file or folder; a member above
``max_member_bytes`` or a total above ``max_total_bytes`` (by header, then counted while writing,
so a lying header or a gzip bomb stops at the limit); more than ``max_members`` members; a name that
appears twice; a corrupted or truncated archive. Files are created with ``O_EXCL | O_NOFOLLOW`` inside a
fresh (or empty) target folder; on any failure the files written so far are removed again.
"""

from __future__ import annotations

import os
import shutil
import stat
import tarfile
import zlib
from pathlib import Path, PurePosixPath

from tracea.doctor.errors import BadInputError

MAX_MEMBER_BYTES = 256 << 20
MAX_TOTAL_BYTES = 1 << 30
MAX_MEMBERS = 20_000
_READ_ERRORS = (tarfile.TarError, EOFError, zlib.error, OSError, ValueError)  # gzip.BadGzipFile is an OSError


def _refuse(archive: Path, why: str) -> BadInputError:
    return BadInputError(f"refusing bundle {archive.name}: {why}")


def _check_name(archive: Path, name: str) -> PurePosixPath:
    if not name or "\x00" in name or "\\" in name:
        raise _refuse(archive, f"member name {name!r} is not a plain relative path")
    path = PurePosixPath(name)
    if path.is_absolute() or name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        raise _refuse(archive, f"member {name!r} has an absolute path")
    if ".." in path.parts:
        raise _refuse(archive, f"member {name!r} climbs out of the folder ('..')")
    return path


def check_members(archive: str | Path, max_member_bytes: int = MAX_MEMBER_BYTES, max_total_bytes: int = MAX_TOTAL_BYTES,
                  max_members: int = MAX_MEMBERS) -> list[tarfile.TarInfo]:
    """The archive's members, after every check above (nothing is written)."""
    archive = Path(archive)
    if not archive.is_file():
        raise BadInputError(f"bundle not found: {archive}" if not archive.exists() else f"bundle {archive} is not a file")
    members: list[tarfile.TarInfo] = []
    seen: set[str] = set()
    total = 0
    try:
        with open(archive, "rb") as f:
            gzipped = f.read(2) == b"\x1f\x8b"
        with tarfile.open(archive, mode="r:gz" if gzipped else "r:") as tar:
            for m in tar:  # streaming: a member's header is judged before the reader skips its data
                path = _check_name(archive, m.name)
                if m.issym() or m.islnk():
                    raise _refuse(archive, f"member {m.name!r} is a {'symbolic' if m.issym() else 'hard'} link "
                                           f"(to {m.linkname!r}); bundles contain plain files only")
                if not (m.isfile() or m.isdir()):
                    raise _refuse(archive, f"member {m.name!r} is a device, FIFO or other special file")
                if m.size > max_member_bytes:
                    raise _refuse(archive, f"member {m.name!r} is {m.size} bytes, above the {max_member_bytes} byte limit")
                total += m.size
                if total > max_total_bytes:
                    raise _refuse(archive, f"its members add up to more than {max_total_bytes} bytes")
                key = path.as_posix().rstrip("/")
                if key in seen and not m.isdir():
                    raise _refuse(archive, f"member {m.name!r} appears twice")
                seen.add(key)
                members.append(m)
                if len(members) > max_members:
                    raise _refuse(archive, f"it has more than {max_members} members")
            end = tar.offset
        _check_tail(archive, gzipped, end, max_total_bytes)
    except BadInputError:
        raise
    except _READ_ERRORS as exc:
        raise BadInputError(f"bundle {archive.name} is corrupted or not a .tar.gz ({type(exc).__name__}: {exc})",
                            "make it again with `tracea pack-repro`, or copy it again") from None
    if not members:
        raise BadInputError(f"bundle {archive.name} is empty")
    return members


def _check_tail(archive: Path, gzipped: bool, end: int, max_total_bytes: int) -> None:
    """Read the whole stream: gzip checks its CRC and length only at the end, and tarfile stops quietly
    at the first bad header after the first member, so past the last member there must be only zeros."""
    import gzip

    limit = end + max_total_bytes + (1 << 20)
    pos = 0
    with (gzip.open(archive, "rb") if gzipped else open(archive, "rb")) as f:
        while chunk := f.read(1 << 20):
            start = max(0, end - pos)
            if start < len(chunk) and chunk[start:].strip(b"\0"):
                raise BadInputError(f"bundle {archive.name} is corrupted (data after the last readable member)",
                                    "make it again with `tracea pack-repro`, or copy it again")
            pos += len(chunk)
            if pos > limit:
                raise _refuse(archive, f"it decompresses to more than {limit} bytes")


def safe_extract(archive: str | Path, target: str | Path, max_member_bytes: int = MAX_MEMBER_BYTES,
                 max_total_bytes: int = MAX_TOTAL_BYTES, max_members: int = MAX_MEMBERS) -> list[Path]:
    """Unpack ``archive`` into ``target`` (created; or an existing empty folder); the files written."""
    archive, target = Path(archive), Path(target)
    members = check_members(archive, max_member_bytes, max_total_bytes, max_members)
    created = not target.exists()
    try:
        target.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BadInputError(f"cannot create {target} ({exc.strerror})") from None
    if not created and any(target.iterdir()):
        raise BadInputError(f"{target} is not empty; replay unpacks into a fresh folder")
    root = target.resolve()
    written: list[Path] = []
    total = 0
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    try:
        with tarfile.open(archive, mode="r:*") as tar:
            wanted = {m.name: m for m in members}
            for m in tar:
                if m.name not in wanted:  # the archive changed under us
                    raise _refuse(archive, f"member {m.name!r} was not there when it was checked")
                dest = root.joinpath(*PurePosixPath(m.name).parts)
                if os.path.commonpath([root, dest.parent.resolve()]) != str(root):
                    raise _refuse(archive, f"member {m.name!r} would land outside {target}")
                if m.isdir():
                    dest.mkdir(parents=True, exist_ok=True)
                    continue
                dest.parent.mkdir(parents=True, exist_ok=True)
                if os.path.commonpath([root, dest.parent.resolve()]) != str(root):
                    raise _refuse(archive, f"member {m.name!r} would land outside {target}")
                src = tar.extractfile(m)
                if src is None:
                    raise _refuse(archive, f"member {m.name!r} has no data")
                fd = os.open(dest, flags, 0o755 if m.mode & stat.S_IXUSR else 0o644)
                written.append(dest)
                with os.fdopen(fd, "wb") as f:
                    left = m.size
                    while True:
                        chunk = src.read(1 << 20)
                        if not chunk:
                            break
                        left -= len(chunk)
                        total += len(chunk)
                        if left < 0 or total > max_total_bytes:
                            raise _refuse(archive, f"member {m.name!r} holds more data than its header says")
                        f.write(chunk)
    except BadInputError:
        _undo(target, written, created)
        raise
    except FileExistsError as exc:
        _undo(target, written, created)
        raise _refuse(archive, f"{exc.filename} would be written twice") from None
    except _READ_ERRORS as exc:
        _undo(target, written, created)
        raise BadInputError(f"bundle {archive.name} is corrupted ({type(exc).__name__}: {exc})",
                            "make it again with `tracea pack-repro`, or copy it again") from None
    return written


def _undo(target: Path, written: list[Path], created: bool) -> None:
    if created:
        shutil.rmtree(target, ignore_errors=True)
        return
    for p in reversed(written):
        p.unlink(missing_ok=True)
