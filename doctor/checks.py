"""Checks, like ``flutter doctor``: one line each with a mark (ok / warning / problem) and a one-line
hint with the exact fix. They read the interpreted sections and, where the raw answer says more
(which NVML error), the raw snapshot.
"""

from __future__ import annotations

from typing import Any

from .blas_pin import pinned_below, unset_command
from .report import OK, PROBLEM, WARNING, Check, CpuInfo, NvidiaSection, PythonEnv, Tool
from .sources.nvidia import THROTTLING

WSL_LIB = "/usr/lib/wsl/lib"


def _version_tuple(v: str | None) -> tuple[int, ...] | None:
    try:
        return tuple(int(x) for x in (v or "").split(".")[:2]) if v else None
    except ValueError:
        return None


def run_checks(raw: dict[str, Any], cpu: CpuInfo, nvidia: NvidiaSection, tools: list[Tool],
               python: PythonEnv, amd: Any = None) -> list[Check]:
    host = raw.get("host") or {}
    checks: list[Check] = []
    checks += _nvml_checks(raw.get("nvml") or {}, host, nvidia)
    checks += _gpu_checks(nvidia, raw.get("cuda") or {})
    checks += _toolkit_checks(nvidia, tools)
    checks += _hip_checks(amd, tools)
    checks += _compiler_checks(cpu, tools)
    if python.pynvml_shadow:
        if python.pynvml_shadow.startswith("shadowing"):
            checks.append(Check("pynvml-shadow", PROBLEM,
                                f"the deprecated 'pynvml' package shadows nvidia-ml-py ({python.pynvml_shadow})",
                                "pip uninstall -y pynvml && pip install --force-reinstall nvidia-ml-py"))
        else:
            checks.append(Check("pynvml-shadow", WARNING, f"the deprecated 'pynvml' package is installed "
                                f"({python.pynvml_shadow})", "pip uninstall -y pynvml  (Tracea uses nvidia-ml-py)"))
    checks += _blas_checks(cpu, raw.get("env") or {}, python)
    if host.get("wsl"):
        checks.append(Check("wsl", WARNING, "running under WSL: NVML and CUDA come from the Windows driver; "
                            "some NVML fields and the hardware counters are unavailable",
                            f"keep {WSL_LIB} on LD_LIBRARY_PATH; install the driver on Windows, not in WSL"))
    if cpu.scaling_governor and cpu.scaling_governor not in ("performance",):
        checks.append(Check("cpu-governor", WARNING,
                            f"CPU frequency governor is '{cpu.scaling_governor}': CPU timings will vary",
                            "sudo cpupower frequency-set -g performance  (for benchmarking)"))
    return checks


def _nvml_checks(nvml: dict[str, Any], host: dict[str, Any], nvidia: NvidiaSection) -> list[Check]:
    if nvml.get("status") == "ok":
        n = len(nvidia.devices)
        msg = (f"NVML {nvidia.nvml_version or '?'}: driver {nvidia.driver_version or '?'}, "
               f"CUDA {nvidia.cuda_driver_version or '?'}, {n} GPU{'s' if n != 1 else ''} visible")
        if nvidia.hidden_by_cuda_visible_devices:
            msg += f" ({nvidia.hidden_by_cuda_visible_devices} hidden by CUDA_VISIBLE_DEVICES)"
        out = [Check("nvml", OK, msg)]
        if not nvidia.devices and nvidia.hidden_by_cuda_visible_devices:
            out = [Check("nvml", WARNING, msg, "unset CUDA_VISIBLE_DEVICES, or name a device in it")]
        return out
    err = nvml.get("error")
    if err == "LibraryNotFound":
        if host.get("wsl"):
            return [Check("nvml", PROBLEM, "NVML library not found under WSL",
                          f"export LD_LIBRARY_PATH={WSL_LIB}:$LD_LIBRARY_PATH")]
        if host.get("dev_nvidia"):
            return [Check("nvml", PROBLEM, "/dev/nvidia* exists but libnvidia-ml.so is missing: a container "
                          "started without the driver libraries",
                          "start it with `docker run --gpus all` (NVIDIA Container Toolkit)")]
        return [Check("nvml", OK, "no NVIDIA driver here (no libnvidia-ml.so, no /dev/nvidia*)",
                      "in a container on a GPU host? start it with `docker run --gpus all`")]
    if err == "LibRmVersionMismatch":
        return [Check("nvml", PROBLEM, "NVML library and kernel driver versions differ (driver upgraded, "
                      "old module still loaded)", "reboot, or reload the nvidia kernel modules")]
    if err == "DriverNotLoaded":
        return [Check("nvml", PROBLEM, "the NVIDIA kernel driver is not loaded",
                      "sudo modprobe nvidia; check `dmesg | grep -i nvidia` for why it failed")]
    if err == "NoPermission":
        return [Check("nvml", PROBLEM, "no permission to open /dev/nvidia*",
                      "add the user to the group that owns /dev/nvidia* (often 'video')")]
    if err == "ModuleNotFound":
        return [Check("nvml", WARNING, "nvidia-ml-py is not installed: NVIDIA GPUs are not probed",
                      "pip install nvidia-ml-py")]
    return [Check("nvml", PROBLEM, f"NVML failed: {err}: {nvml.get('message', '')}".strip(),
                  "run nvidia-smi to see whether the driver itself answers")]


def _gpu_checks(nvidia: NvidiaSection, cuda: dict[str, Any]) -> list[Check]:
    out = []
    if nvidia.devices and cuda.get("status") != "ok":
        missing = cuda.get("error") == "ModuleNotFound"
        out.append(Check("cuda-core", WARNING,
                         f"device attributes NVML lacks come from the table, not the device "
                         f"({cuda.get('message') or 'cuda-core not collected'})",
                         "pip install 'tracea[cuda]'" if missing else
                         "cuda-core is installed but could not read the device: cuda-bindings 13 needs an R580+ "
                         "driver; with a CUDA 12 driver, pip install 'cuda-bindings<13' 'nvidia-cuda-nvrtc-cu12'"))
    for g in nvidia.devices:
        lost = g.unavailable.get("name", "")
        if g.name is None and lost.startswith("device handle"):
            out.append(Check(f"gpu-lost:{g.cuda_index}", PROBLEM,
                             f"GPU {g.cuda_index} (NVML index {g.nvml_index}) cannot be opened: {lost}",
                             "check `nvidia-smi` and `dmesg | grep -i xid`; a GPU that fell off the bus needs a reset or reboot"))
            continue
        label = f"GPU {g.cuda_index} ({g.name or '?'})"
        if g.mig_mode == "enabled":
            out.append(Check(f"mig:{g.cuda_index}", WARNING, f"{label} is in MIG mode: a kernel sees one slice",
                             "name a MIG instance in CUDA_VISIBLE_DEVICES=MIG-<uuid>, or ask an admin to "
                             "disable MIG (nvidia-smi -i N -mig 0)"))
        throttled = sorted(set(g.throttle_reasons or []) & THROTTLING)
        if throttled:
            out.append(Check(f"throttle:{g.cuda_index}", WARNING,
                             f"{label} clocks are throttled ({', '.join(throttled)}): timings now will be low",
                             "check cooling and power (nvidia-smi -q -d PERFORMANCE); rerun when it clears"))
        if g.persistence_mode is False:
            out.append(Check(f"persistence:{g.cuda_index}", WARNING,
                             f"{label} persistence mode is off: the driver re-initialises at each process start",
                             "sudo nvidia-smi -i N -pm 1"))
        if not any(c.id.endswith(f":{g.cuda_index}") for c in out):
            out.append(Check(f"gpu:{g.cuda_index}", OK,
                             f"{label}: sm_{(g.compute_capability or '?').replace('.', '')}, "
                             f"{g.sm_count or '?'} SMs, {', '.join(g.precisions or []) or 'no tensor cores'}"))
    return out


def _toolkit_checks(nvidia: NvidiaSection, tools: list[Tool]) -> list[Check]:
    driver = _version_tuple(nvidia.cuda_driver_version)
    out = []
    if driver is None:
        return out
    for t in tools:
        if t.name in ("nvcc", "nvrtc") and t.found:
            v = _version_tuple(t.version)
            if v and v > driver:
                out.append(Check(f"{t.name}-newer-than-driver", WARNING,
                                 f"{t.name} {t.version} is newer than the driver's CUDA {nvidia.cuda_driver_version}: "
                                 "PTX it produces will not load",
                                 f"compile to SASS (cubin) for the exact sm_XY, use a {t.name} <= "
                                 f"{nvidia.cuda_driver_version}, or upgrade the driver"))
    return out


HIPCC_HINT = ("Debian 12 / Ubuntu: sudo apt-get install hipcc libamdhip64-dev rocm-device-libs (set HIP_PLATFORM=amd "
              "where nvcc is installed too, or hipcc hands the file to nvcc); or ROCm's packages (/opt/rocm/bin)")


def _hip_checks(amd: Any, tools: list[Tool]) -> list[Check]:
    """AMD GPUs here: is there a compiler for them? (Nothing said where there is no AMD GPU.)"""
    devices = list(getattr(amd, "devices", None) or [])
    if not devices:
        return []
    targets = ", ".join(sorted({d.gfx_target or "an unknown target" for d in devices}))
    hipcc = next((t for t in tools if t.name == "hipcc"), None)
    if hipcc is None or not hipcc.found:
        return [Check("hipcc", WARNING, f"{len(devices)} AMD GPU(s) ({targets}) but no hipcc: HIP kernels for them "
                      "cannot be compiled here", HIPCC_HINT)]
    return [Check("hipcc", OK, f"hipcc {hipcc.version or '(version unknown)'} at {hipcc.path} for {targets}")]


def _compiler_checks(cpu: CpuInfo, tools: list[Tool]) -> list[Check]:
    compilers = [t for t in tools if t.name in ("cc", "gcc", "clang") and t.found]
    if not compilers:
        return [Check("c-compiler", PROBLEM, "no C compiler (cc, gcc or clang): the CPU emitter cannot build kernels",
                      "apt-get install gcc  (Debian/Ubuntu), dnf install gcc, or xcode-select --install (macOS)")]
    cc = compilers[0]
    if cc.details.get("march_native") == "fails":
        return [Check("march-native", WARNING, f"{cc.name} -march=native fails: "
                      f"{cc.details.get('march_native_error') or 'unknown error'}",
                      "the CPU emitter uses explicit ISA flags instead; upgrade the compiler for -march=native")]
    enables = set(cc.details.get("march_native_enables") or [])
    missing = [isa for isa in (cpu.isa or []) if isa not in enables and isa not in ("neon",)]
    resolved = cc.details.get("march_native_resolved")
    msg = f"{cc.name} {cc.version or ''} ({cc.path}); -march=native" + (f" = {resolved}" if resolved else "")
    if missing:
        return [Check("march-native", WARNING, f"{msg} does not enable {', '.join(missing)} that this CPU has",
                      "upgrade the compiler (or pass the ISA flags explicitly, as the CPU emitter does)")]
    return [Check("c-compiler", OK, f"{msg} enables {', '.join(cc.details.get('march_native_enables') or []) or 'no SIMD'}")]


def _blas_checks(cpu: CpuInfo, env: dict[str, str], python: PythonEnv) -> list[Check]:
    """A BLAS pinned below this CPU makes every "x NumPy" ratio wrong (blas_pin.py)."""
    reasons = pinned_below(cpu, env, python.numpy_blas)
    if not reasons:
        return []
    blas = python.numpy_blas or "NumPy's BLAS"
    return [Check("blas-pinned", WARNING,
                  f"{blas} is pinned below this CPU by the environment: {'; '.join(reasons)}. "
                  "Baselines against it run slow, so ratios against them are too high",
                  f"{unset_command(env, reasons)} tracea bench ...  (for that command). Some machines pin it on "
                  "purpose: old OpenBLAS builds computed wrong results with their own kernels on newer CPUs "
                  "(SkylakeX kernels in 0.3.5-0.3.6, numpy/numpy#13401), so check NumPy's OpenBLAS version "
                  "first: python -c 'import numpy; numpy.show_config()'")]
