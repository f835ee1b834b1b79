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


def command(compiler: Compiler, flags: list[str], source: str | Path, binary: str | Path) -> list[str]:
    return [compiler.path, *flags, str(source), "-o", str(binary), *LINK_FLAGS]


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
            raise no_space(folder, f"{name} was not compiled (the compile cache)") from None
        raise
    t0 = time.perf_counter()
    try:
        try:
            proc = subprocess.run(command(compiler, flags, src_path, tmp), capture_output=True, text=True,
                                  timeout=COMPILE_TIMEOUT_S, env={**os.environ, "TMPDIR": scratch})
        except subprocess.TimeoutExpired:
            raise CompileError(f"{compiler.name} took more than {COMPILE_TIMEOUT_S} s on {src_path}",
                               "a smaller unroll or micro-kernel compiles faster") from None
        except OSError as exc:
            raise ToolchainMissingError(f"the C compiler {compiler.path} does not run ({exc})", INSTALL_HINT) from None
        if proc.returncode != 0:
            if NO_SPACE_TEXT in (proc.stderr or "") + (proc.stdout or ""):  # the disk's fault, not the kernel's
                raise no_space(folder, f"{name} was not compiled (the compile cache)")
            log = (proc.stderr or proc.stdout).strip().splitlines()
            head = "\n".join(log[:12])
            raise CompileError(f"{compiler.name} failed (exit {proc.returncode}) on {src_path}:\n{head}",
                               f"the full source is {src_path}; rerun the command with TRACEA_CC set to another "
                               "compiler, or report the schedule that produced it")
        os.replace(tmp, binary)
    except OSError as exc:
        if is_no_space(exc):
            raise no_space(folder, f"{name} was not compiled (the compile cache)") from None
        raise
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
        shutil.rmtree(scratch, ignore_errors=True)
    return binary, False, time.perf_counter() - t0


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
