"""Writing a file so that nothing is lost: one ``write_atomic`` for the whole project.

The bytes go to a new temporary file beside the target, are flushed and fsynced, and the temporary file is
renamed over the target, then the folder is fsynced so the rename itself survives a power cut. A reader
sees the old file or the new one, never half of either; a crash leaves at most a hidden ``.name.*.tmp``.
"""

from __future__ import annotations

import errno
import os
import secrets
from pathlib import Path

from .errors import BadInputError, NoSpaceError

NO_SPACE_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
NO_SPACE_TEXT = "No space left on device"  # how compilers say it in their logs (strerror(ENOSPC))


def is_no_space(exc: BaseException) -> bool:
    """Whether ``exc`` is a full disk or quota (an OSError with ENOSPC or EDQUOT)."""
    return isinstance(exc, OSError) and exc.errno in NO_SPACE_ERRNOS


def no_space(where: str | os.PathLike[str], what: str) -> NoSpaceError:
    """The error for a full disk under ``where``, saying what was not written (``what``) and how to go on."""
    folder = Path(where)
    return NoSpaceError(f"no space left on the device holding {folder}: {what}",
                        f"free space there (df -h {folder if folder.is_dir() else folder.parent}) or set "
                        "TRACEA_HOME to another disk; files are written whole or not at all, the tuning database keeps "
                        "every trial written before, and `tracea tune` resumes where it stopped")


def write_atomic(path: str | os.PathLike[str], data: str | bytes) -> None:
    """Replace ``path`` with ``data`` (text is written as UTF-8). The file gets mode 0666 less the umask,
    like any file the user writes; missing parent folders are created."""
    path = Path(path)
    if path.exists() and not path.is_file():  # a rename would replace /dev/null or a FIFO with a file
        raise BadInputError(f"{path} is not a regular file; Tracea writes a file by replacing it")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{secrets.token_hex(6)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_folder(path.parent)


def _fsync_folder(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # a platform without directory handles (Windows): the rename is as durable as it gets
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
