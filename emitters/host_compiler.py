"""The host C compiler and the content-hash binary cache.

A binary is keyed by sha256(source, flags, compiler path and version line): the same kernel is compiled
once per machine and compiler, and a changed compiler or flag set compiles anew. Writes are atomic (a
temporary file in the cache folder, then ``os.replace``), so concurrent builds of one kernel (tuner
workers) never see half a file. A cached binary that is damaged (not a whole ELF file, or one the loader
refuses: ``runtime.CpuKernel``) is moved out of the way and compiled again, once, with a warning on
stderr, before it counts as a failure. Cache folder: ``$TRACEA_HOME/cache/cpu``, else the platform's user
cache folder (``platformdirs.user_cache_dir("tracea")/cpu``).
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracea.doctor.errors import BadInputError, CompileError, ToolchainMissingError
from tracea.doctor.files import NO_SPACE_TEXT, is_no_space, no_space, write_atomic

BASE_FLAGS = ("-O3", "-std=gnu11", "-fPIC", "-shared", "-pthread", "-fvisibility=hidden")
LINK_FLAGS = ("-lm",)
COMPILE_TIMEOUT_S = 300
SHARED_OBJECTS_ARE_ELF = sys.platform.startswith(("linux", "freebsd"))
INSTALL_HINT = ("install a C compiler: `sudo apt install gcc` (Debian/Ubuntu), `sudo dnf install gcc` (Fedora), "
                "`xcode-select --install` (macOS); or point TRACEA_CC at one")


# A kernel name becomes a file name in the cache: an identifier cannot climb out of it ('/', '..')
KERNEL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


def check_kernel_name(name: str) -> None:
    """Refuse a kernel name that is not a C identifier (replay checks bundles too; this is the last line)."""
    if not isinstance(name, str) or not KERNEL_NAME.fullmatch(name):
        raise BadInputError(f"kernel name {name!r} is not a C identifier ([A-Za-z_][A-Za-z0-9_]*, at most "
                            "128 characters); it would name files outside the compile cache")


@dataclass(frozen=True)
class Compiler:
    path: str
    version: str  # the first line of `--version`

    @property
    def name(self) -> str:
        return os.path.basename(self.path)


@functools.lru_cache(maxsize=16)
def _version_line(path: str) -> str:
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        raise ToolchainMissingError(f"the C compiler {path} does not run ({exc})", INSTALL_HINT) from None
    line = (out.stdout or out.stderr).strip().splitlines()
    return line[0] if line else "unknown"


def find_compiler(host: Any = None) -> Compiler:
    """TRACEA_CC if set, else the first of cc, gcc, clang the doctor found, else the first on PATH."""
    env = os.environ.get("TRACEA_CC")
    if env:
        path = shutil.which(env)
        if path is None:
            raise ToolchainMissingError(f"TRACEA_CC={env} is not an executable compiler", INSTALL_HINT)
        return Compiler(path, _version_line(path))
    candidates: list[str] = []
    for name in ("cc", "gcc", "clang"):
        tool = host.tool(name) if host is not None else None
        if tool is not None and tool.found and tool.path:
            candidates.append(tool.path)
    candidates += [p for p in (shutil.which(n) for n in ("cc", "gcc", "clang")) if p]
    for path in candidates:
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return Compiler(path, _version_line(path))
    raise ToolchainMissingError("no C compiler found (looked for cc, gcc and clang)", INSTALL_HINT)


def cache_dir(backend: str = "cpu") -> Path:
    """The binary cache of ``backend``: $TRACEA_HOME/cache/<backend>, else the platform's user cache."""
    from tracea.doctor.home import tracea_dir

    return tracea_dir("cache", backend)


def cache_key(source: str, flags: list[str], compiler: Compiler) -> str:
    h = hashlib.sha256()
    for part in (source, "\0".join(flags), os.path.realpath(compiler.path), compiler.version):
        h.update(part.encode())
        h.update(b"\x00\x01")
    return h.hexdigest()


def command(compiler: Compiler, flags: list[str], source: str | Path, binary: str | Path,
            prelude: Path | None = None) -> list[str]:
    """The compile command; ``prelude``: a precompiled header of the source's own first lines
    (``precompiled_prelude``), which only saves parsing them."""
    pch = ["-include", str(prelude)] if prelude is not None else []
    return [compiler.path, *flags, *pch, str(source), "-o", str(binary), *LINK_FLAGS]


# The source's leading block of `#define _GNU_SOURCE` and system includes (`<immintrin.h>` among them), as
# every CPU kernel Tracea renders starts: parsing it was most of a small kernel's compile (0.25 s of 0.3 s
# with gcc 12 on a Zen 4), so gcc reads it precompiled instead.
_PRELUDE_LINE = re.compile(r"#define _GNU_SOURCE\b.*|#include <[A-Za-z0-9_./]+>\s*")
_GCC_VERSION = re.compile(r"\S+ \(.*\) \d+\.\d+")


def _prelude_block(source: str) -> str | None:
    """The source's leading `#define _GNU_SOURCE` and `#include <...>` lines (after its opening comment),
    or None when it does not start that way."""
    lines = source.splitlines()
    i = 0
    if lines and lines[0].lstrip().startswith("/*"):
        while i < len(lines) and "*/" not in lines[i]:
            i += 1
        i += 1
    block: list[str] = []
    for line in lines[i:]:
        if not line.strip() and not block:
            continue
        if not _PRELUDE_LINE.fullmatch(line.strip()):
            break
        block.append(line.strip())
    if not block or not block[0].startswith("#define _GNU_SOURCE") or not any("<immintrin.h>" in b or "<arm_neon.h>"
                                                                            in b for b in block):
        return None
    return "\n".join(block) + "\n"


# Free bytes the cache's disk must have before a precompiled header is built there. gcc's header of the
# AVX-512 intrinsics prelude is about 28 MB; while it is written, the compiles the tuner runs ahead beside it
# need room too, and on a nearly full disk the header would take it and fail them (seen on a 24 MB tmpfs in
# tests/tuner/test_full_disk.py). Without it the kernels compile as they are, only slower to parse.
PRELUDE_ROOM = 256 * 2**20


def precompiled_prelude(source: str, flags: list[str], compiler: Compiler, folder: Path) -> Path | None:
    """A precompiled header (gcc) of the source's leading block, built with the same flags, under the cache
    folder: the header to pass with ``-include`` (the source's own lines then change nothing: the same
    definition, include guards), or None where there is none to use (not gcc, not Linux, a source of
    another shape, a build that failed: the source compiles as it is). The binary is the same either way:
    a precompiled header only saves parsing."""
    if not sys.platform.startswith("linux") or "clang" in compiler.version.lower() or \
            not _GCC_VERSION.match(compiler.version):
        return None
    block = _prelude_block(source)
    if block is None:
        return None
    key = hashlib.sha256("\0".join([block, *flags, os.path.realpath(compiler.path), compiler.version]).encode())
    final = folder / "prelude" / key.hexdigest()[:24]
    header = final / "prelude.h"
    if (final / "prelude.h.gch").is_file():
        return header
    # built at the second compile that could use it: one kernel alone would pay for it (half a second)
    # and gain nothing; a tune, a test run or a model's layers compile many with the same block and flags
    seen = folder / "prelude" / f"{final.name}.seen"
    try:
        (folder / "prelude").mkdir(parents=True, exist_ok=True)
        if not seen.exists():
            seen.touch()
            return None
        if shutil.disk_usage(folder).free < PRELUDE_ROOM:  # an optional saving must not take a compile's room
            return None
        work = Path(tempfile.mkdtemp(dir=folder / "prelude", prefix=".build-"))
    except OSError:
        return None
    try:
        (work / "prelude.h").write_text(block)
        built = _run([compiler.path, *[f for f in flags if f != "-shared"], "-x", "c-header", str(work / "prelude.h"),
                      "-o", str(work / "prelude.h.gch")], str(work))
        if built.returncode != 0 or not (work / "prelude.h.gch").is_file():
            return None
        try:
            os.rename(work, final)  # whole or not at all; another process may have been first
        except OSError:
            pass
        return header if (final / "prelude.h.gch").is_file() else None
    except (OSError, subprocess.SubprocessError):
        return None
    finally:
        if work.exists():
            shutil.rmtree(work, ignore_errors=True)


def compile_cached(source: str, name: str, flags: list[str], compiler: Compiler) -> tuple[Path, bool, float]:
    """(binary path, cache hit, compile seconds) for ``source``; CompileError with the log on failure."""
    check_kernel_name(name)
    key = cache_key(source, flags, compiler)[:24]
    folder = cache_dir()
    binary = folder / f"{name}-{key}.so"
    src_path = folder / f"{name}-{key}.c"
    if binary.exists():
        problem = elf_problem(binary) if SHARED_OBJECTS_ARE_ELF else None  # macOS: Mach-O, the loader checks
        if problem is None:
            return binary, True, 0.0
        discard_cached(binary, problem)
    tmp = ""
    unkept = f"{name} was not compiled (the compile cache)"  # what a full disk costs, said by no_space
    try:
        write_atomic(src_path, source)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{binary.name}.", suffix=".tmp")
        os.close(fd)
        # the compiler's own temporary files (assembly, objects) in a folder of this compile, removed after
        # it: a compiler killed midway (a tune stopped, a worker timed out) leaves nothing in the system's TMPDIR
        scratch = tempfile.mkdtemp(dir=folder, prefix=f".{binary.name}.", suffix=".d")
    except OSError as exc:
        if tmp and os.path.exists(tmp):
            os.unlink(tmp)
        if is_no_space(exc):
            raise no_space(folder, unkept) from None
        raise
    t0 = time.perf_counter()
    prelude = precompiled_prelude(source, flags, compiler, folder)
    try:
        try:
            proc = _run(command(compiler, flags, src_path, tmp, prelude), scratch)
            if proc.returncode != 0 and prelude is not None:  # whatever the header did, the source decides
                proc = _run(command(compiler, flags, src_path, tmp), scratch)
        except subprocess.TimeoutExpired:
            raise CompileError(f"{compiler.name} took more than {COMPILE_TIMEOUT_S} s on {src_path}",
                               "a smaller unroll or micro-kernel compiles faster") from None
        except OSError as exc:
            raise ToolchainMissingError(f"the C compiler {compiler.path} does not run ({exc})", INSTALL_HINT) from None
        if proc.returncode != 0:
            if NO_SPACE_TEXT in (proc.stderr or "") + (proc.stdout or ""):  # the disk's fault, not the kernel's
                raise no_space(folder, unkept)
            log = (proc.stderr or proc.stdout).strip().splitlines()
            head = "\n".join(log[:12])
            raise CompileError(f"{compiler.name} failed (exit {proc.returncode}) on {src_path}:\n{head}",
                               f"the full source is {src_path}; rerun the command with TRACEA_CC set to another "
                               "compiler, or report the schedule that produced it")
        os.replace(tmp, binary)
    except OSError as exc:
        if is_no_space(exc):
            raise no_space(folder, unkept) from None
        raise
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
        shutil.rmtree(scratch, ignore_errors=True)
    return binary, False, time.perf_counter() - t0


def _run(cmd: list[str], scratch: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S,
                          env={**os.environ, "TMPDIR": scratch})


def elf_problem(path: Path) -> str | None:
    """Why ``path`` is not a whole ELF file (bad magic, or headers that point past its end), else None.
    A cheap check of a cache entry before the loader sees it: a truncated or overwritten file is caught
    here; anything subtler, by the loader (``CpuKernel``)."""
    try:
        with open(path, "rb") as f:
            head = f.read(64)
            size = os.fstat(f.fileno()).st_size
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    if len(head) < 52 or head[:4] != b"\x7fELF":
        return "not an ELF file"
    order = {1: "<", 2: ">"}.get(head[5])
    if order is None or head[4] not in (1, 2):
        return "an ELF header of unknown class or byte order"
    if head[4] == 2:  # 64-bit
        if len(head) < 64:
            return "a truncated ELF header"
        phoff, shoff = struct.unpack_from(order + "QQ", head, 32)
        phentsize, phnum, shentsize, shnum = struct.unpack_from(order + "HHHH", head, 54)
    else:
        phoff, shoff = struct.unpack_from(order + "II", head, 28)
        phentsize, phnum, shentsize, shnum = struct.unpack_from(order + "HHHH", head, 42)
    if phoff + phentsize * phnum > size or shoff + shentsize * shnum > size:
        return f"truncated ({size} bytes; its headers reach past the end)"
    return None


def discard_cached(binary: Path, problem: str, inode: int | None = None) -> None:
    """Move a damaged cache entry out of the way (a rename, then unlink: a concurrent reader sees the old
    file or none) and say so; the next ``compile_cached`` builds it again. With ``inode``, only that
    very file is removed: another process may have rebuilt it already."""
    try:
        if inode is not None and os.stat(binary).st_ino != inode:
            return
        doomed = binary.with_name(f".{binary.name}.damaged-{os.getpid()}")
        os.replace(binary, doomed)
        os.unlink(doomed)
    except FileNotFoundError:
        return  # someone else removed it first
    except OSError as exc:
        sys.stderr.write(f"warning: cached binary {binary} is damaged ({problem}) and cannot be removed: "
                         f"{exc.strerror or exc}\n")
        return
    sys.stderr.write(f"warning: cached binary {binary} was damaged ({problem}); removed it, compiling it again\n")


def in_cache(path: str | Path, backend: str = "cpu") -> bool:
    """Whether ``path`` is an entry of this machine's binary cache (a bundled binary is never rebuilt)."""
    try:
        return Path(path).resolve().parent == cache_dir(backend).resolve()
    except OSError:
        return False
