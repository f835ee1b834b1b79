"""hipcc to an AMD code object, without an AMD GPU (issue 19).

``hipcc --genco --offload-arch=<gfx>`` (with ``HIP_PLATFORM=amd``: without it, hipcc hands the file to nvcc
where one is installed) writes a clang offload bundle; its ``hipv4-amdgcn-amd-amdhsa--<gfx>`` entry, taken
out with ``clang-offload-bundler``, is the ELF that ``hipModuleLoadData`` loads. Its notes (``llvm-readelf
--notes``) carry the kernel's resources: VGPRs, AGPRs, SGPRs, spills, LDS and scratch; ``llvm-objdump
--mcpu`` disassembles it, so a test can see the ``v_mfma`` instructions. Code objects are cached under
``$TRACEA_HOME/cache/hip``, keyed by sha256(source, target, flags, hipcc version), written atomically.

Targets: gfx90a (CDNA2, MI200) and gfx942 (CDNA3, MI300); an LLVM that does not know gfx942 (Debian 12's
LLVM 15) builds for gfx940, the nearest CDNA3 target it accepts (``cdna3_target``).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracea.doctor.errors import BadInputError, CompileError, ToolchainMissingError
from tracea.doctor.files import write_atomic

INSTALL_HINT = ("Debian 12 / Ubuntu: sudo apt-get install hipcc libamdhip64-dev rocm-device-libs; or ROCm's packages "
                "(/opt/rocm/bin)")
FLAGS = ["-O3", "-std=c++17"]
TOOL_DIRS = ("/opt/rocm/llvm/bin", "/opt/rocm/bin")


@dataclass(frozen=True)
class Toolchain:
    hipcc: str
    version: str
    bundler: str
    objdump: str
    readelf: str


@dataclass(frozen=True)
class CodeObject:
    """A compiled kernel for one target: the bundle hipModuleLoadData takes, its ELF and resources."""

    target: str
    bundle: Path
    elf: Path
    resources: dict[str, int]
    cache_hit: bool


def _tool(names: tuple[str, ...]) -> str | None:
    for name in names:
        if name.startswith("/"):
            if Path(name).is_file():
                return name
            continue
        found = shutil.which(name) or next((str(Path(d) / name) for d in TOOL_DIRS if (Path(d) / name).is_file()), None)
        if found:
            return found
    return None


def _versioned(base: str, major: str | None) -> tuple[str, ...]:
    """The LLVM tool of hipcc's own clang first (Debian names it ``llvm-objdump-15``; the unversioned one may be
    an older LLVM that knows fewer targets), then ROCm's, then any."""
    own = (f"/usr/lib/llvm-{major}/bin/{base}", f"{base}-{major}") if major else ()
    return (*own, base)


@functools.lru_cache(maxsize=1)
def find_toolchain() -> Toolchain:
    """hipcc and the LLVM tools beside it; ToolchainMissingError naming what is missing and how to install it."""
    hipcc = _tool(("hipcc",))
    if hipcc is None:
        raise ToolchainMissingError("hipcc is not on PATH or in /opt/rocm/bin", INSTALL_HINT)
    out = subprocess.run([hipcc, "--version"], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "HIP_PLATFORM": "amd"})
    m = re.search(r"HIP version:\s*(\S+)", out.stdout)
    clang = re.search(r"clang version (\d+)", out.stdout)
    major = clang.group(1) if clang else None
    tools = {name: _tool(_versioned(name, major)) for name in ("clang-offload-bundler", "llvm-objdump", "llvm-readelf")}
    missing = [name for name, path in tools.items() if path is None]
    if missing:
        raise ToolchainMissingError(f"hipcc is here but not {', '.join(missing)}", INSTALL_HINT)
    return Toolchain(hipcc, m.group(1) if m else "unknown", tools["clang-offload-bundler"] or "",
                     tools["llvm-objdump"] or "", tools["llvm-readelf"] or "")


def _hipcc_env(scratch: str) -> dict[str, str]:
    """hipcc's environment: the AMD platform, and its temporary files (clang leaves an empty folder per
    source in TMPDIR) in ``scratch``, which is removed after the compile."""
    return {**os.environ, "HIP_PLATFORM": "amd", "TMPDIR": scratch}


@functools.lru_cache(maxsize=4)
def accepts(target: str) -> bool:
    """Whether this hipcc compiles for ``target`` (a one-line kernel, not cached on disk)."""
    tc = find_toolchain()
    with tempfile.TemporaryDirectory(prefix="tracea-hip-") as d:
        src = Path(d) / "probe.hip"
        src.write_text('#include <hip/hip_runtime.h>\nextern "C" __global__ void probe(int* p) { p[0] = 1; }\n')
        r = subprocess.run([tc.hipcc, "--genco", f"--offload-arch={target}", str(src), "-o", str(Path(d) / "p.co")],
                           capture_output=True, text=True, timeout=300, env=_hipcc_env(d))
        return r.returncode == 0


def cdna3_target() -> str:
    """gfx942 (MI300X) where this compiler knows it, else gfx940 (the same CDNA3 instructions)."""
    return "gfx942" if accepts("gfx942") else "gfx940"


def _cache_dir() -> Path:
    from tracea.doctor.home import tracea_dir

    return tracea_dir("cache", "hip")


def compile_hip(source: str, name: str, target: str, flags: list[str] | None = None) -> CodeObject:
    """``source`` (HIP C++, kernel ``name``) built for ``target``; CompileError with hipcc's first lines."""
    if not re.fullmatch(r"gfx[0-9a-f]{3,4}", target):
        raise BadInputError(f"HIP target {target!r} is not of the form gfxNNN (gfx90a, gfx942)")
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise BadInputError(f"kernel name {name!r} is not a C identifier")
    tc = find_toolchain()
    flags = [*FLAGS, *(flags or [])]
    key = hashlib.sha256("\0".join([source, target, *flags, tc.version]).encode()).hexdigest()[:24]
    folder = _cache_dir()
    bundle, elf, meta = (folder / f"{name}-{target}-{key}{ext}" for ext in (".co", ".elf", ".json"))
    if bundle.exists() and elf.exists() and meta.exists():
        return CodeObject(target, bundle, elf, json.loads(meta.read_text()), True)
    with tempfile.TemporaryDirectory(prefix="tracea-hip-") as d:
        src, out, one = Path(d) / f"{name}.hip", Path(d) / "k.co", Path(d) / "k.elf"
        src.write_text(source)
        r = subprocess.run([tc.hipcc, "--genco", f"--offload-arch={target}", *flags, str(src), "-o", str(out)],
                           capture_output=True, text=True, timeout=600, env=_hipcc_env(d))
        if r.returncode != 0:
            raise CompileError(f"hipcc failed for {name} on {target}: "
                               + " | ".join((r.stderr or r.stdout).strip().splitlines()[:3]))
        u = subprocess.run([tc.bundler, "--unbundle", "--type=o", f"--targets=hipv4-amdgcn-amd-amdhsa--{target}",
                            f"--input={out}", f"--output={one}"], capture_output=True, text=True, timeout=120)
        if u.returncode != 0:
            raise CompileError(f"clang-offload-bundler found no {target} code object: {u.stderr.strip()[:300]}")
        res = resources(one, name)
        write_atomic(elf, one.read_bytes())
        write_atomic(bundle, out.read_bytes())
        write_atomic(meta, json.dumps(res))
    return CodeObject(target, bundle, elf, res, False)


NOTE_KEYS = {".vgpr_count": "vgprs", ".agpr_count": "agprs", ".sgpr_count": "sgprs",
             ".vgpr_spill_count": "vgpr_spills", ".sgpr_spill_count": "sgpr_spills",
             ".group_segment_fixed_size": "lds_bytes", ".private_segment_fixed_size": "scratch_bytes",
             ".wavefront_size": "wavefront", ".max_flat_workgroup_size": "max_workgroup"}


def resources(elf: Path, name: str) -> dict[str, int]:
    """Kernel ``name``'s entries of the code object's metadata notes (AMDGPU code object v4/v5: YAML)."""
    import yaml

    tc = find_toolchain()
    r = subprocess.run([tc.readelf, "--notes", str(elf)], capture_output=True, text=True, timeout=120)
    m = re.search(r"^\s*---\s*$(.*?)^\.\.\.\s*$", r.stdout, re.M | re.S)
    try:
        doc = yaml.safe_load(m.group(1)) if m else None
    except yaml.YAMLError:
        doc = None
    kernels = (doc or {}).get("amdhsa.kernels") or []
    entry = next((k for k in kernels if isinstance(k, dict) and k.get(".name") == name), None)
    if entry is None:
        raise CompileError(f"the code object's metadata has no kernel {name}")
    return {ours: int(entry[note]) for note, ours in NOTE_KEYS.items() if isinstance(entry.get(note), int)}


def disassemble(obj: CodeObject) -> str:
    tc = find_toolchain()
    r = subprocess.run([tc.objdump, "-d", f"--mcpu={obj.target}", str(obj.elf)], capture_output=True, text=True,
                       timeout=120)
    return r.stdout


def mfma_mnemonics(asm: str) -> list[str]:
    """The MFMA instructions in a disassembly, in order."""
    return re.findall(r"^\s*(v_mfma_\w+)", asm, re.M)


def summary(obj: CodeObject) -> dict[str, Any]:
    return {"target": obj.target, **obj.resources, "cache_hit": obj.cache_hit}
