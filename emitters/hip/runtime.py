"""The HIP runtime through ctypes (issue 19): load a code object (``hipModuleLoadData``), launch a kernel
(``hipModuleLaunchKernel``), move buffers, time with HIP events. Used when an AMD GPU is present; nothing
here has run on one (docs/hip.md): on a machine without one, ``HipRuntime()`` says so in one line.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from typing import Any

from tracea.doctor.errors import UnsupportedError

HINT = "run on a machine with an AMD Instinct GPU and ROCm's runtime (libamdhip64)"


def _library() -> ctypes.CDLL:
    for name in ("libamdhip64.so", "libamdhip64.so.6", "libamdhip64.so.5", ctypes.util.find_library("amdhip64")):
        if not name:
            continue
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    raise UnsupportedError("the HIP runtime (libamdhip64) is not installed", HINT)


class HipRuntime:
    """One process's HIP device 0: modules, functions, buffers, launches and event timing."""

    def __init__(self) -> None:
        lib = self.lib = _library()
        lib.hipGetErrorString.restype = ctypes.c_char_p
        rc = lib.hipInit(0)
        if rc != 0:
            raise UnsupportedError(f"no AMD GPU for the HIP runtime (hipInit: {self._name(rc)})", HINT)
        count = ctypes.c_int(0)
        rc = lib.hipGetDeviceCount(ctypes.byref(count))
        if rc != 0 or count.value < 1:
            raise UnsupportedError(f"no AMD GPU for the HIP runtime (hipGetDeviceCount: {self._name(rc)})", HINT)
        self.devices = count.value

    def _name(self, rc: int) -> str:
        text = self.lib.hipGetErrorString(rc)
        return f"{rc} {text.decode() if text else ''}".strip()

    def _check(self, rc: int, what: str) -> None:
        if rc != 0:
            raise UnsupportedError(f"HIP {what} failed: {self._name(rc)}", HINT)

    def load(self, code_object: bytes, name: str) -> Any:
        """The kernel ``name`` of ``code_object`` (a clang offload bundle or a bare ELF)."""
        module, fn = ctypes.c_void_p(), ctypes.c_void_p()
        self._image = ctypes.create_string_buffer(code_object, len(code_object))  # kept alive with the module
        self._check(self.lib.hipModuleLoadData(ctypes.byref(module), self._image), "hipModuleLoadData")
        self._check(self.lib.hipModuleGetFunction(ctypes.byref(fn), module, name.encode()), "hipModuleGetFunction")
        return fn

    def alloc(self, nbytes: int) -> ctypes.c_void_p:
        ptr = ctypes.c_void_p()
        self._check(self.lib.hipMalloc(ctypes.byref(ptr), ctypes.c_size_t(max(nbytes, 1))), "hipMalloc")
        return ptr

    def upload(self, ptr: ctypes.c_void_p, host: Any) -> None:
        self._check(self.lib.hipMemcpyHtoD(ptr, host.ctypes.data_as(ctypes.c_void_p), ctypes.c_size_t(host.nbytes)),
                    "hipMemcpyHtoD")

    def download(self, host: Any, ptr: ctypes.c_void_p) -> None:
        self._check(self.lib.hipMemcpyDtoH(host.ctypes.data_as(ctypes.c_void_p), ptr, ctypes.c_size_t(host.nbytes)),
                    "hipMemcpyDtoH")

    def free(self, ptr: ctypes.c_void_p) -> None:
        self.lib.hipFree(ptr)

    def launch(self, fn: Any, grid: tuple[int, int, int], block: tuple[int, int, int], args: list[Any]) -> None:
        """``args``: ctypes values (``c_void_p`` device pointers, ``c_int``, ``c_float``) in the kernel's order."""
        params = (ctypes.c_void_p * len(args))(*[ctypes.cast(ctypes.pointer(a), ctypes.c_void_p) for a in args])
        self._check(self.lib.hipModuleLaunchKernel(fn, *map(ctypes.c_uint, grid), *map(ctypes.c_uint, block),
                                                   ctypes.c_uint(0), None, params, None), "hipModuleLaunchKernel")

    def synchronize(self) -> None:
        self._check(self.lib.hipDeviceSynchronize(), "hipDeviceSynchronize")

    def time_ms(self, run: Any, warmup: int, repeats: int) -> list[float]:
        """Each of ``repeats`` runs of ``run()`` between two HIP events, after ``warmup`` runs."""
        start, stop = ctypes.c_void_p(), ctypes.c_void_p()
        self._check(self.lib.hipEventCreate(ctypes.byref(start)), "hipEventCreate")
        self._check(self.lib.hipEventCreate(ctypes.byref(stop)), "hipEventCreate")
        for _ in range(warmup):
            run()
        out = []
        for _ in range(repeats):
            self._check(self.lib.hipEventRecord(start, None), "hipEventRecord")
            run()
            self._check(self.lib.hipEventRecord(stop, None), "hipEventRecord")
            self._check(self.lib.hipEventSynchronize(stop), "hipEventSynchronize")
            ms = ctypes.c_float()
            self._check(self.lib.hipEventElapsedTime(ctypes.byref(ms), start, stop), "hipEventElapsedTime")
            out.append(ms.value)
        self.lib.hipEventDestroy(start)
        self.lib.hipEventDestroy(stop)
        return out
