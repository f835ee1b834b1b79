"""NVRTC through cuda-core, and the content-hash cubin cache: CUDA C++ to a cubin for one NVIDIA target. The
CUDA backend compiles every kernel with it, and the HIP backend its kernels' NVIDIA rendering (their logic run
on an NVIDIA GPU, hip/run_nvidia.py): a toolchain two backends share lives beside them, as the host C
compiler does (host_compiler.py).

A kernel is compiled at run time by NVRTC (``cuda.core.Program``) to a cubin for one target (sm_80,
sm_90a, ...). No nvcc and no GPU are needed: CI compiles for targets it does not have. The cubin is
keyed by sha256(source, target, options, NVRTC version), written atomically into
``$TRACEA_HOME/cache/cuda`` (else the platform's user cache folder), and its resource usage (registers,
shared memory, spills) is read from ptxas's own report (``-v``), kept beside it as ``.json``. A cached
cubin that is not a whole ELF file (truncated, overwritten) is removed and compiled again, once, with a
warning on stderr, instead of failing at load time.

NVRTC's cubin output goes through the driver's compute cache (``~/.nv/ComputeCache``, kept across processes
and keyed by the PTX), and with NVRTC 13.0 a compile answered from there prints no ptxas report: on an H200
every compile of a source compiled before, in this process or an earlier one, came back without one, and its
registers and spills were recorded as zeros (benchmarks/gpu/nvrtc_log_probe.py; NVRTC 13.5 reports either
way). ``CUDA_CACHE_DISABLE=1`` would turn the cache off, but NVRTC 13.0 reads it once, at a process's first
compile. So a compile whose log lacks the report is compiled once more beside an empty kernel of a name of
its own, new PTX the cache cannot answer, for its log alone (``compile_with_report``); the cubin stays the
first compile's. A record cached without the report (before this) is compiled again.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracea.doctor.errors import BadInputError, CompileError, ToolchainMissingError
from tracea.doctor.files import write_atomic

from .host_compiler import check_kernel_name, discard_cached, elf_problem

INSTALL_HINT = ("install the CUDA extra: `pip install 'tracea[cuda]'` (cuda-core with cuda-bindings and "
                "nvidia-cuda-nvrtc); no nvcc or driver is needed to compile")
# -std=c++17 for constexpr-if; --use_fast_math is not used: softmax's __expf is explicit where wanted
BASE_OPTIONS: dict[str, Any] = {"std": "c++17", "ptxas_options": ["-v"]}


@dataclass(frozen=True)
class Nvrtc:
    version: str  # "13.5"


@dataclass(frozen=True)
class Resources:
    """What ptxas reports for the kernel: the figures DESIGN.md's kernel metadata asks for."""

    regs_per_thread: int
    smem_static: int
    spill_stores: int
    spill_loads: int
    stack_frame: int

    @property
    def spills(self) -> int:
        return self.spill_stores + self.spill_loads

    def to_json(self) -> dict[str, int]:
        return {"regs_per_thread": self.regs_per_thread, "smem_static": self.smem_static,
                "spill_stores": self.spill_stores, "spill_loads": self.spill_loads, "stack_frame": self.stack_frame}


def find_nvrtc() -> Nvrtc:
    """The NVRTC that cuda-core will use; ToolchainMissingError (with the install line) when absent."""
    try:
        import cuda.core  # noqa: F401
        from cuda.bindings import nvrtc
    except ImportError as exc:
        raise ToolchainMissingError(f"cuda-core is not installed ({exc.name or exc})", INSTALL_HINT) from None
    try:
        err, major, minor = nvrtc.nvrtcVersion()
    except Exception as exc:  # noqa: BLE001 - a missing libnvrtc surfaces as various errors
        raise ToolchainMissingError(f"NVRTC cannot be loaded ({exc})", INSTALL_HINT) from None
    if int(err) != 0:
        raise ToolchainMissingError(f"NVRTC cannot be loaded ({err})", INSTALL_HINT)
    return Nvrtc(f"{major}.{minor}")


def cache_dir() -> Path:
    """The cubins' folder: the cache's "cuda" folder, as it has always been named."""
    from .host_compiler import cache_dir as backend_cache_dir

    return backend_cache_dir("cuda")


def cache_key(source: str, arch: str, options: dict[str, Any], nvrtc: Nvrtc) -> str:
    h = hashlib.sha256()
    for part in (source, arch, json.dumps(options, sort_keys=True), nvrtc.version):
        h.update(part.encode())
        h.update(b"\x00\x01")
    return h.hexdigest()


_ENTRY = re.compile(r"Compiling entry function '([^']+)'")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")


def parse_resources(log: str, entry: str) -> Resources:
    """The ``entry`` function's figures from a ptxas ``-v`` log (zeros where ptxas printed none)."""
    regs = smem = stores = loads = frame = 0
    current = None
    for line in log.splitlines():
        m = _ENTRY.search(line)
        if m:
            current = m.group(1)
            continue
        if current != entry:
            continue
        if (m := _FRAME.search(line)):
            frame, stores, loads = (int(x) for x in m.groups())
        if (m := _USED.search(line)):
            regs = int(m.group(1))
            if (s := _SMEM.search(line)):
                smem = int(s.group(1))
    return Resources(regs, smem, stores, loads, frame)


def has_report(log: str, entry: str | None) -> bool:
    """Whether a ptxas ``-v`` log reports ``entry`` (its registers and spills); None: any entry function."""
    return any(entry is None or m.group(1) == entry for m in _ENTRY.finditer(log))


def options_for(arch: str, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    return {**BASE_OPTIONS, "arch": arch, **(extra or {})}


def _program_options(opts: dict[str, Any], name: str) -> Any:
    from cuda.core import ProgramOptions

    try:
        return ProgramOptions(name=name, **opts)
    except TypeError:  # an older cuda-core without one of the keywords: drop ptxas -v, keep the rest
        return ProgramOptions(name=name, **{k: v for k, v in opts.items() if k != "ptxas_options"})


def _nvrtc_compile(source: str, file_name: str, opts: dict[str, Any]) -> tuple[bytes, str]:
    from cuda.core import Program

    logs = io.StringIO()
    try:
        obj = Program(source, "c++", _program_options(opts, file_name)).compile("cubin", logs=logs)
    except Exception as exc:  # noqa: BLE001 - cuda-core raises its own or NVRTC's error types
        text = (logs.getvalue() or str(exc)).replace("\x00", "").strip()
        lines = text.splitlines()
        # the errors first: a long log of warnings would otherwise hide the one line that matters
        errors = [ln for ln in lines if ("error" in ln.lower() or "fatal" in ln.lower())
                  and "NVRTC_ERROR_COMPILATION" not in ln]
        raise CompileError("\n".join((errors or lines)[:15])) from None
    return bytes(obj.code), logs.getvalue().replace("\x00", "").strip()


def compile_with_report(source: str, file_name: str, entry: str | None, opts: dict[str, Any]) -> tuple[bytes, str]:
    """(cubin, log) of one NVRTC compile, with ptxas's report of ``entry`` in the log where ``opts`` asks for
    it (``-v``; ``entry`` None: any entry function's). NVRTC 13.0's compute cache, keyed by the PTX, answers a
    kernel compiled before without the report (a comment added to the source does not change the PTX). Then
    the source is compiled once more beside an empty kernel of a name of its own (new PTX, so ptxas runs and
    reports every entry) for the log alone: the cubin is the first compile's, and ptxas's figures for
    ``entry`` do not depend on the other kernels of its module. CompileError holds the log's first errors."""
    code, log = _nvrtc_compile(source, file_name, opts)
    if "-v" in opts.get("ptxas_options", ()) and not has_report(log, entry):
        extra = f'\nextern "C" __global__ void tr_ptxas_report_{uuid.uuid4().hex}() {{}}\n'
        _, log = _nvrtc_compile(source + extra, file_name, opts)
    return code, log


def compile_cached(source: str, name: str, entry: str, arch: str,
                   extra: dict[str, Any] | None = None) -> tuple[Path, Resources, str, bool, float]:
    """(cubin path, resources, compile log, cache hit, seconds) for ``source`` on ``arch`` (``sm_90a``).

    CompileError names the first lines of NVRTC's log and where the full source was written."""
    check_kernel_name(name)
    if not re.fullmatch(r"sm_[0-9]{2,3}[a-z]?", arch):  # the target is part of the file name too
        raise BadInputError(f"CUDA target {arch!r} is not of the form sm_XY")
    nvrtc = find_nvrtc()
    opts = options_for(arch, extra)
    key = cache_key(source, arch, opts, nvrtc)[:24]
    folder = cache_dir()
    cubin = folder / f"{name}-{arch}-{key}.cubin"
    info = folder / f"{name}-{arch}-{key}.json"
    if cubin.exists() and info.exists():
        problem = elf_problem(cubin)
        if problem is None:
            try:
                d = json.loads(info.read_text())
                if "ptxas_report" in d or has_report(d["log"], entry):  # a record says whether it had one
                    return cubin, Resources(**d["resources"]), d["log"], True, 0.0
                problem = f"its resource record {info.name} holds no ptxas report (a compute-cache answer)"
            except (OSError, ValueError, KeyError, TypeError, AttributeError):
                problem = f"its resource record {info.name} is unreadable"
        discard_cached(cubin, problem)  # compiled again below and written over atomically
    src_path = folder / f"{name}-{arch}-{key}.cu"
    write_atomic(src_path, source)
    t0 = time.perf_counter()
    try:
        code, log = compile_with_report(source, f"{name}.cu", entry, opts)
    except CompileError as exc:
        raise CompileError(f"NVRTC {nvrtc.version} failed on {name} for {arch}:\n{exc.message}",
                           f"the full source is {src_path}") from None
    seconds = time.perf_counter() - t0
    res = parse_resources(log, entry)
    write_atomic(cubin, code)
    write_atomic(info, json.dumps({"resources": res.to_json(), "log": log, "nvrtc": nvrtc.version,
                                   "ptxas_report": has_report(log, entry)}))
    return cubin, res, log, False, seconds
