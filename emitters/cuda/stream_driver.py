"""How a kernel object's driver calls see a stream: memsets and host copies queued on it (``StreamDriver``), a
caller's stream in place of Tracea's own for one ``launch_ptrs`` preparation (``OnStream``), and a caller's
buffer that is borrowed, never copied into or freed (``Borrowed``). Used by ``runtime.py``."""

from __future__ import annotations

from typing import Any

import numpy as np

from tracea.doctor.errors import LaunchError


class Borrowed:
    """A caller's device buffer in ``launch_on``: its pointer and size; never freed, copied into or out of."""

    __slots__ = ("ptr", "nbytes")

    def __init__(self, ptr: int, nbytes: int) -> None:
        self.ptr, self.nbytes = ptr, nbytes

    def upload(self, host: np.ndarray) -> None:
        raise LaunchError("launch_on: a caller's buffer is never copied into", "pass host arrays to kernel(...)")

    download = upload


class StreamDriver:
    """The driver module as a stream's work sees it (``_Device``'s own, or a caller's in ``OnStream``): memsets and
    host copies (inputs, an output's poison, split-K semaphores) in order with its launches, not on the legacy
    stream a non-blocking one does not wait for (a pageable ``cuMemcpyHtoD`` returns before its copy lands)."""

    def __init__(self, driver: Any, handle: int) -> None:
        self._driver, self._handle = driver, driver.CUstream(handle)

    def cuMemsetD8(self, ptr: Any, value: int, nbytes: int) -> Any:  # noqa: N802 - the driver's name
        return self._driver.cuMemsetD8Async(ptr, value, nbytes, self._handle)

    def cuMemcpyHtoD(self, dst: Any, src: Any, nbytes: int) -> Any:  # noqa: N802 - staged before it returns
        return self._driver.cuMemcpyHtoDAsync(dst, src, nbytes, self._handle)

    def cuMemcpyDtoH(self, dst: Any, src: Any, nbytes: int) -> Any:  # noqa: N802 - done on return, pinned too
        out = self._driver.cuMemcpyDtoHAsync(dst, src, nbytes, self._handle)
        return out if out[0] else self._driver.cuStreamSynchronize(self._handle)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._driver, name)


class CallerStream:
    """A caller's stream as a kernel object's ``launch`` reads it (``.handle``), not owned."""

    __slots__ = ("handle",)

    def __init__(self, handle: int) -> None:
        self.handle = handle


class OnStream:
    """The device as one ``launch_ptrs`` preparation sees it: the caller's stream in place of Tracea's own."""

    def __init__(self, dev: Any, handle: int) -> None:
        self._real, self.stream = dev, CallerStream(handle)
        raw = dev.driver._driver if isinstance(dev.driver, StreamDriver) else dev.driver  # the module itself
        self.driver = StreamDriver(raw, handle)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)
