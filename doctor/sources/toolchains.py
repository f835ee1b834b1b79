"""Compilers and the Python environment: cc/gcc/clang (and what -march=native enables), nvcc, NVRTC,
hipcc, xcrun metal; Python, numpy and its BLAS, torch and its CUDA, triton, the NVML and CUDA bindings.

Nothing heavy is imported: versions come from package metadata and files (importing torch alone
takes seconds). Each external command runs with a short timeout.
"""

from __future__ import annotations

import importlib.metadata as md
import importlib.util
import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from ..report import FieldSet, PythonEnv, Tool

TIMEOUT_S = 10

# Preprocessor macro -> ISA name, for what `cc -march=native` turns on.
MACRO_ISA = {
    "__SSE4_2__": "sse4.2", "__AVX__": "avx", "__AVX2__": "avx2", "__FMA__": "fma", "__F16C__": "f16c",
    "__AVX512F__": "avx512f", "__AVX512BW__": "avx512bw", "__AVX512VL__": "avx512vl",
    "__AVX512VNNI__": "avx512vnni", "__AVX512BF16__": "avx512bf16", "__AVX512FP16__": "avx512fp16",
    "__AMX_TILE__": "amx-tile", "__AMX_BF16__": "amx-bf16", "__AMX_INT8__": "amx-int8",
    "__ARM_NEON": "neon", "__ARM_FEATURE_FP16_VECTOR_ARITHMETIC": "fp16", "__ARM_FEATURE_DOTPROD": "dotprod",
    "__ARM_FEATURE_BF16": "bf16", "__ARM_FEATURE_MATMUL_INT8": "i8mm", "__ARM_FEATURE_SVE": "sve",
    "__ARM_FEATURE_SVE2": "sve2", "__ARM_FEATURE_SME": "sme",
}

PACKAGES = (
    "numpy", "torch", "triton", "nvidia-ml-py", "pynvml", "cuda-core", "cuda-bindings", "cuda-python",
    "nvidia-cuda-nvrtc", "amdsmi", "scikit-learn", "textual", "typer",
)


def _run(cmd: list[str], stdin: str | None = None) -> dict[str, Any]:
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S, input=stdin)
        return {"rc": p.returncode, "stdout": p.stdout[-20000:], "stderr": p.stderr[-4000:]}
    except subprocess.TimeoutExpired:
        return {"rc": None, "error": f"timed out after {TIMEOUT_S} s"}
    except OSError as exc:
        return {"rc": None, "error": str(exc)}


def _which(name: str, extra_dirs: tuple[str, ...] = ()) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    for d in extra_dirs:
        p = Path(d) / name
        if p.is_file() and os.access(p, os.X_OK):
            return str(p)
    return None


def _c_compiler(name: str) -> dict[str, Any]:
    path = _which(name)
    if not path:
        return {"path": None}
    entry: dict[str, Any] = {"path": path, "realpath": os.path.realpath(path), "version": _run([path, "--version"])}
    macros = _run([path, "-march=native", "-dM", "-E", "-x", "c", "-"], stdin="")
    if macros.get("stdout"):
        keep = [ln for ln in macros["stdout"].splitlines() if ln.split(" ")[1:2] and ln.split(" ")[1] in MACRO_ISA]
        macros = {**macros, "stdout": "\n".join(keep)}
    entry["march_native_macros"] = macros
    target = _run([path, "-march=native", "-Q", "--help=target"])
    if target.get("stdout"):
        m = re.search(r"^\s+-march=\s+(\S+)", target["stdout"], re.MULTILINE)
        entry["march_native_resolved"] = m.group(1) if m else None
    return entry


def _cuda_dirs() -> tuple[str, ...]:
    roots = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    return tuple(f"{r}/bin" for r in roots if r)


def _nvrtc() -> dict[str, Any]:
    if importlib.util.find_spec("cuda") is None or importlib.util.find_spec("cuda.bindings") is None:
        return {"error": "cuda-bindings is not installed; pip install 'tracea[cuda]'"}
    try:
        from cuda.bindings import nvrtc

        err, major, minor = nvrtc.nvrtcVersion()
        if int(err) != 0:
            return {"error": f"nvrtcVersion failed: {err}"}
        return {"version": [int(major), int(minor)]}
    except Exception as exc:  # noqa: BLE001 - a missing libnvrtc is an answer
        return {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"}


def collect() -> dict[str, Any]:
    """Every toolchain's answers; the commands run concurrently (each waits on a subprocess or a
    shared-library load, so threads overlap them), and compilers behind one binary run once."""
    from .._threads import Task

    darwin = platform.system() == "Darwin"
    paths = {name: _which(name) for name in ("cc", "gcc", "clang")}
    nvcc, hipcc = _which("nvcc", _cuda_dirs()), _which("hipcc", ("/opt/rocm/bin",))
    xcrun = _which("xcrun") if darwin else None
    by_binary: dict[str, Task] = {}
    for name, path in paths.items():
        if path:
            key = os.path.realpath(path)
            if key not in by_binary:
                by_binary[key] = Task(name, lambda name=name: _c_compiler(name))
    nvrtc_t = Task("nvrtc", _nvrtc)
    nvcc_t = Task("nvcc", lambda: _run([nvcc, "--version"])) if nvcc else None
    hipcc_t = Task("hipcc", lambda: _run([hipcc, "--version"])) if hipcc else None
    metal_t = Task("metal", lambda: _run([xcrun, "metal", "--version"])) if xcrun else None
    raw: dict[str, Any] = {"cc": {}, "tools": {}}
    for name, path in paths.items():
        if not path:
            raw["cc"][name] = {"path": None}
            continue
        entry = dict(by_binary[os.path.realpath(path)].result())
        entry["path"] = path  # same binary, this name's path
        raw["cc"][name] = entry
    raw["tools"]["nvcc"] = {"path": nvcc, "version": nvcc_t.result() if nvcc_t else None}
    raw["tools"]["hipcc"] = {"path": hipcc, "version": hipcc_t.result() if hipcc_t else None}
    if darwin:
        raw["tools"]["metal"] = {"path": xcrun, "version": metal_t.result() if metal_t else None}
    raw["tools"]["nvrtc"] = nvrtc_t.result()
    return raw


def collect_python() -> dict[str, Any]:
    packages: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            packages[name] = md.version(name)
        except md.PackageNotFoundError:
            packages[name] = None
    raw: dict[str, Any] = {
        "version": platform.python_version(),
        "implementation": platform.python_implementation(),
        "executable": sys.executable,
        "packages": packages,
        "numpy_config": _package_file("numpy", "__config__.py", 200_000),
        "torch_version_py": _package_file("torch", "version.py", 20_000),
        "pynvml_origin": _origin("pynvml"),
    }
    if packages.get("nvidia-ml-py"):
        try:
            files = md.files("nvidia-ml-py") or []
            raw["nvidia_ml_py_files"] = [str(f) for f in files if str(f).endswith(".py")]
        except md.PackageNotFoundError:
            pass
    if packages.get("pynvml"):
        files = md.files("pynvml") or []
        raw["pynvml_dist_files"] = [str(f) for f in files if str(f).endswith(".py")]
    return raw


def _origin(module: str) -> str | None:
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    return spec.origin if spec else None


def _package_file(package: str, filename: str, limit: int) -> str | None:
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if not spec or not spec.submodule_search_locations:
        return None
    for loc in spec.submodule_search_locations:
        p = Path(loc) / filename
        if p.is_file():
            return p.read_text(errors="replace")[:limit]
    return None


# ---------------------------------------------------------------------------------------------------
# interpretation


def _first_line(result: dict[str, Any] | None) -> str | None:
    if not result or not result.get("stdout"):
        return None
    return result["stdout"].strip().splitlines()[0] if result["stdout"].strip() else None


def parse_nvcc_version(text: str | None) -> str | None:
    m = re.search(r"release (\d+\.\d+)", text or "")
    return m.group(1) if m else None


def _cc_tool(name: str, raw: dict[str, Any]) -> Tool:
    if not raw.get("path"):
        return Tool(name=name, found=False, reason=f"{name} is not on PATH")
    line = _first_line(raw.get("version"))
    details: dict[str, Any] = {"realpath": raw.get("realpath")}
    macros = raw.get("march_native_macros") or {}
    if macros.get("rc") == 0:
        defined = {ln.split(" ")[1] for ln in (macros.get("stdout") or "").splitlines() if ln.startswith("#define ")}
        enables = list(dict.fromkeys(isa for macro, isa in MACRO_ISA.items() if macro in defined))
        details["march_native"] = "works"
        details["march_native_enables"] = enables
    else:
        details["march_native"] = "fails"
        details["march_native_error"] = (macros.get("stderr") or macros.get("error") or "").strip()[:300]
    if raw.get("march_native_resolved"):
        details["march_native_resolved"] = raw["march_native_resolved"]
    version = None
    if line:
        m = re.search(r"(\d+\.\d+(?:\.\d+)?)", line.split(")")[-1]) or re.search(r"(\d+\.\d+(?:\.\d+)?)", line)
        version = m.group(1) if m else None
    details["version_line"] = line
    return Tool(name=name, found=True, path=raw["path"], version=version, details=details)


def interpret(raw: dict[str, Any] | None) -> list[Tool]:
    """The tools of a probe's answers; none at all (an empty list) for a recording without the toolchain
    section, which says nothing about what that machine has (doctor/variants.py does not judge it)."""
    if raw is None:
        return []
    tools = [_cc_tool(name, raw.get("cc", {}).get(name) or {}) for name in ("cc", "gcc", "clang")]
    t = raw.get("tools") or {}
    nvcc = t.get("nvcc") or {}
    if nvcc.get("path"):
        out = (nvcc.get("version") or {}).get("stdout")
        lines = (out or "").strip().splitlines()
        tools.append(Tool("nvcc", True, nvcc["path"], parse_nvcc_version(out),
                          details={"version_line": lines[-1] if lines else None}))
    else:
        tools.append(Tool("nvcc", False, reason="nvcc not on PATH, in $CUDA_HOME/bin or /usr/local/cuda/bin"))
    nvrtc = t.get("nvrtc") or {}
    if nvrtc.get("version"):
        tools.append(Tool("nvrtc", True, version="{}.{}".format(*nvrtc["version"])))
    else:
        tools.append(Tool("nvrtc", False, reason=nvrtc.get("error") or "not collected"))
    hipcc = t.get("hipcc") or {}
    if hipcc.get("path"):
        out = (hipcc.get("version") or {}).get("stdout") or ""
        m = re.search(r"HIP version:\s*(\S+)", out)
        tools.append(Tool("hipcc", True, hipcc["path"], m.group(1) if m else None))
    else:
        tools.append(Tool("hipcc", False, reason="hipcc not on PATH or in /opt/rocm/bin"))
    metal = t.get("metal")
    if metal and metal.get("path") and (metal.get("version") or {}).get("rc") == 0:
        out = (metal["version"].get("stdout") or "") + (metal["version"].get("stderr") or "")
        m = re.search(r"metal(?:fe)?-(\S+)", out) or re.search(r"version (\S+)", out)
        tools.append(Tool("metal", True, metal["path"], m.group(1) if m else None))
    else:
        tools.append(Tool("metal", False, reason="xcrun metal is macOS-only" if metal is None
                          else "xcrun metal did not run (install the Xcode command-line tools)"))
    return tools


def _numpy_blas(config: str | None) -> str | None:
    if not config:
        return None
    m = re.search(r'"blas":\s*\{\s*"name":\s*"([^"]+)".*?"version":\s*"([^"]*)"', config, re.DOTALL)
    return f"{m.group(1)} {m.group(2)}".strip() if m else None


def _torch_cuda(version_py: str | None) -> str | None:
    m = re.search(r"^cuda\s*(?::[^=]*)?=\s*['\"]([^'\"]+)['\"]", version_py or "", re.MULTILINE)
    return m.group(1) if m else None


def interpret_python(raw: dict[str, Any] | None) -> PythonEnv:
    raw = raw or {}
    fs = FieldSet()
    fs.put("python_version", raw.get("version"), "platform")
    fs.put("implementation", raw.get("implementation"), "platform")
    fs.put("executable", raw.get("executable"), "sys.executable")
    packages = raw.get("packages") or {}
    if packages.get("numpy"):
        fs.put("numpy_blas", _numpy_blas(raw.get("numpy_config")), "numpy/__config__.py",
               "numpy's build configuration names no BLAS")
    else:
        fs.miss("numpy_blas", "numpy is not installed")
    if packages.get("torch"):
        fs.put("torch_cuda", _torch_cuda(raw.get("torch_version_py")), "torch/version.py",
               "this torch build has no CUDA (CPU-only)")
    else:
        fs.miss("torch_cuda", "torch is not installed")
    fs.put("pynvml_shadow", _pynvml_shadow(raw), "package metadata", "no deprecated pynvml package installed")
    return fs.build(PythonEnv, packages=dict(packages))


def _pynvml_shadow(raw: dict[str, Any]) -> str | None:
    """'shadowing' when the old ``pynvml`` distribution (< 12) installs its own ``pynvml`` module: its
    ``pynvml/`` package wins the import over nvidia-ml-py's ``pynvml.py``, so an outdated NVML binding
    answers. 'deprecated' for pynvml >= 12, a shim that only adds ``pynvml_utils`` over nvidia-ml-py."""
    version = (raw.get("packages") or {}).get("pynvml")
    if not version:
        return None
    files = raw.get("pynvml_dist_files") or []
    own = [f for f in files if f == "pynvml.py" or f.startswith("pynvml/")]
    origin = raw.get("pynvml_origin") or "unknown path"
    if own:
        return f"shadowing: pynvml {version} installs its own {own[0].split('/')[0]} module; `import pynvml` loads {origin}"
    return f"deprecated: pynvml {version} is installed (a shim over nvidia-ml-py)"
