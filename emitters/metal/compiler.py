"""Apple's offline Metal compiler: an MSL source to a ``.metallib`` (what ``tracea emit`` writes beside the
source, and what a program loads with ``newLibraryWithURL:error:`` or ``torch.mps.load_metallib``).

Two steps, as Apple's command-line tools do them (``xcrun -sdk macosx metal -c k.metal -o k.air``, then
``xcrun -sdk macosx metallib k.air -o k.metallib``; Apple's "Building a shader library by precompiling source
files", developer.apple.com/documentation/metal/building-a-shader-library-by-precompiling-source-files).
``xcrun`` is macOS's (Xcode or its command-line tools); from Xcode 26 the Metal toolchain is a separate
component (``xcodebuild -downloadComponent MetalToolchain``; Xcode names that command when it is missing).
Where any of it is absent, ``find_toolchain`` says why in one line and ``compile_library`` raises
``ToolchainMissingError`` (an ``UnsupportedError``) with it.

``FLAGS``:

* ``-std=metal3.0``: Metal 3.0 (macOS 13) has everything the kernels use (compat.py's subset): half, the
  ``simdgroup_matrix`` 8x8 operations and the SIMD collectives. bf16 is stored as ``ushort`` bits and
  converted with integer arithmetic, so nothing needs Metal 3.1's ``bfloat``. The simdgroup matrices need an
  Apple7 GPU or later (Apple's Metal feature set tables, "SIMD-scoped matrix multiply", Apple7+), which is
  what the arch names (``apple7``-``apple9``) promise;
* ``-fno-fast-math``: IEEE arithmetic, as the run-time compile (runtime.py: ``MTLMathModeSafe``) and PyTorch's
  own ``compile_shader`` (safe math unless ``PYTORCH_MPS_FAST_MATH``) do, so a kernel computes the same
  numbers on every path (the kernels keep infinities out of their arithmetic, but fast math may also
  drop the NaN a NaN input must give).

AIR is not specific to one Apple GPU family ("a GPU-independent bytecode" that Metal compiles for the host's
GPU at run time: developer.apple.com/documentation/metal/metal-libraries), so ``arch`` checks the target name
and keys the cache; it adds no flag. Libraries are cached under ``$TRACEA_HOME/cache/metal``, keyed by
sha256(source, arch, flags, compiler version), written atomically.
"""

from __future__ import annotations

import functools
import hashlib
import platform
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tracea.doctor.errors import BadInputError, CompileError, ToolchainMissingError
from tracea.doctor.files import write_atomic

FLAGS = ["-std=metal3.0", "-fno-fast-math"]
INSTALL_HINT = ("on a Mac: xcode-select --install (or Xcode), then xcodebuild -downloadComponent MetalToolchain "
                "where xcrun says the Metal toolchain is missing")
ARCH = re.compile(r"apple(\d+)")
MIN_FAMILY = 7  # simdgroup_matrix: Apple7 (M1, A14) and later


@dataclass(frozen=True)
class Toolchain:
    """What ``xcrun`` finds: the ``metal`` and ``metallib`` tools and the compiler's version line, or
    ``found`` False and the ``reason`` in one line."""

    found: bool
    metal: str | None = None
    metallib: str | None = None
    version: str | None = None
    reason: str | None = None


def _first_line(text: str) -> str:
    return next((line.strip() for line in (text or "").splitlines() if line.strip()), "")


def _xcrun(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["xcrun", "-sdk", "macosx", *args], capture_output=True, text=True, timeout=120)


@functools.lru_cache(maxsize=1)
def find_toolchain() -> Toolchain:
    """``xcrun -sdk macosx --find metal`` / ``--find metallib`` and ``metal --version``'s first line; never raises."""
    if shutil.which("xcrun") is None:
        where = platform.system() or "this system"
        return Toolchain(False, reason=f"no Metal toolchain: xcrun is macOS's (Xcode's command-line tools), "
                                       f"and this is {where}")
    tools: dict[str, str] = {}
    for tool in ("metal", "metallib"):
        r = _xcrun("--find", tool)
        if r.returncode != 0 or not r.stdout.strip():
            why = _first_line(r.stderr) or f"exit status {r.returncode}"
            return Toolchain(False, reason=f"no Metal toolchain: xcrun cannot find {tool} ({why})")
        tools[tool] = r.stdout.strip()
    r = _xcrun("metal", "--version")
    if r.returncode != 0:  # Xcode 26 without its Metal toolchain component says so here
        why = _first_line(r.stderr or r.stdout) or f"exit status {r.returncode}"
        return Toolchain(False, tools["metal"], tools["metallib"], reason=f"the Metal compiler does not run: {why}")
    return Toolchain(True, tools["metal"], tools["metallib"], _first_line(r.stdout) or "unknown")


def require_toolchain() -> Toolchain:
    """The toolchain, or ``ToolchainMissingError`` with ``find_toolchain``'s reason."""
    tc = find_toolchain()
    if not tc.found:
        raise ToolchainMissingError(tc.reason or "no Metal toolchain", INSTALL_HINT)
    return tc


def check_arch(arch: str) -> int:
    """The Apple GPU family number of ``arch`` ("apple7" -> 7); ``BadInputError`` for another name or a family
    without simdgroup matrices."""
    m = ARCH.fullmatch(str(arch).strip().lower())
    if m is None or int(m.group(1)) < MIN_FAMILY:
        raise BadInputError(f"Metal target {arch!r} is not an Apple GPU family from apple{MIN_FAMILY} on",
                            "apple7 (M1), apple8 (M2), apple9 (M3, M4)")
    return int(m.group(1))


def commands(source: Path, air: Path, metallib: Path, flags: list[str]) -> list[list[str]]:
    """The two command lines: ``metal -c`` to AIR, ``metallib`` to the library."""
    return [["xcrun", "-sdk", "macosx", "metal", *flags, "-c", str(source), "-o", str(air)],
            ["xcrun", "-sdk", "macosx", "metallib", str(air), "-o", str(metallib)]]


def cache_key(source: str, arch: str, flags: list[str], version: str) -> str:
    return hashlib.sha256("\0".join([source, arch, *flags, version]).encode()).hexdigest()[:24]


def _cache_dir() -> Path:
    from tracea.doctor.home import tracea_dir

    return tracea_dir("cache", "metal")


def compile_library(source: str, name: str, arch: str, flags: list[str] | None = None) -> Path:
    """``source`` (MSL with the kernel ``name``) compiled into a ``.metallib`` for ``arch`` (apple7-apple9),
    from the cache when it holds it. ``ToolchainMissingError`` without xcrun's Metal tools (any machine but a
    Mac with them), ``CompileError`` with the compiler's first lines, ``BadInputError`` for a bad name/arch."""
    arch = f"apple{check_arch(arch)}"
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise BadInputError(f"kernel name {name!r} is not an identifier")
    tc = require_toolchain()
    flags = [*FLAGS, *(flags or [])]
    out = _cache_dir() / f"{name}-{arch}-{cache_key(source, arch, flags, tc.version or '')}.metallib"
    if out.is_file():
        return out
    with tempfile.TemporaryDirectory(prefix="tracea-metal-") as d:
        src, air, lib = Path(d) / f"{name}.metal", Path(d) / f"{name}.air", Path(d) / f"{name}.metallib"
        src.write_text(source)
        for cmd in commands(src, air, lib, flags):
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
            if r.returncode != 0:
                lines = [ln.strip() for ln in (r.stderr or r.stdout).splitlines() if ln.strip()][:3]
                raise CompileError(f"{cmd[3]} failed for {name} ({arch}): " + (" | ".join(lines) or
                                                                                f"exit status {r.returncode}"))
        write_atomic(out, lib.read_bytes())
    return out
