"""Keep OpenBLAS's idle workers from stealing a core from whatever runs next.

After every call OpenBLAS's worker threads busy-wait (a nop loop, no yield) for 2^28 TSC cycles, about
0.1 s, before they sleep (``OPENBLAS_THREAD_TIMEOUT``, default 28). When Tracea and NumPy are timed
interleaved, the Tracea call right after a NumPy call then has one core fewer: on a 2-core machine
that halves Tracea's second thread (measured on the CI machine, 2026-11-23: 1024^3 fp32 GEMM ratio
0.58 with the spin, 0.88 without; NumPy's own speed is the same either way, 318 vs 332 GFLOP/s,
``benchmarks/bench_cpu_gemm_probe.py``). OpenBLAS's documented knob shortens the spin to 2^12
cycles; it is read once, when OpenBLAS loads, so it must be set before NumPy is imported.

``quiet_openblas()`` sets it (unless the user set it) and reports whether it could still take effect;
the bench baseline names the setting, so every figure says what it was measured with. This module
imports nothing heavy.
"""

from __future__ import annotations

import os
import sys

VARIABLE = "OPENBLAS_THREAD_TIMEOUT"
QUIET = "12"  # 2^12 cycles: a few microseconds of spin, then sleep


def quiet_openblas() -> bool:
    """Set OPENBLAS_THREAD_TIMEOUT for this process if NumPy is not loaded yet; True when it applies."""
    if "numpy" in sys.modules:
        return False
    os.environ.setdefault(VARIABLE, QUIET)
    return True


def describe() -> str:
    """What the loaded OpenBLAS spins for, as the baseline's name shows it."""
    value = os.environ.get(VARIABLE)
    out = f"{VARIABLE}={value}" if value else f"{VARIABLE} unset: workers spin ~0.1 s after each call"
    core = os.environ.get("OPENBLAS_CORETYPE")
    return out + (f", OPENBLAS_CORETYPE={core}" if core else "")  # a pinned kernel set (e.g. Haswell: AVX2)
