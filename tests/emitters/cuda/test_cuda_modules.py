"""emitters/cuda/modules.py: each distinct cubin loaded once per process (per context for a module), and a
shared function's shared-memory limit that only rises. No GPU: cuda-core's ObjectCode loads lazily, and the
module path takes the driver's load and context calls as arguments."""

from __future__ import annotations

import threading

import pytest

from tracea.emitters.cuda import modules


@pytest.fixture(autouse=True)
def _fresh(monkeypatch):
    monkeypatch.setattr(modules, "_LIBRARIES", {})
    monkeypatch.setattr(modules, "_MODULES", {})
    monkeypatch.setattr(modules, "_SMEM", {})
    monkeypatch.setattr(modules, "STATS", {"loads": 0, "shared": 0})


def test_library_once_per_content(tmp_path):
    pytest.importorskip("cuda.core")
    path = tmp_path / "k.cubin"
    path.write_bytes(b"\x7fELF one kernel")
    first = modules.library(b"\x7fELF one kernel")
    assert modules.library(bytearray(b"\x7fELF one kernel")) is first
    assert modules.library(path) is first  # a path is read: the content decides, not the name
    assert modules.library(str(path)) is first
    other = modules.library(b"\x7fELF another kernel")
    assert other is not first
    assert modules.STATS == {"loads": 2, "shared": 3}


def test_module_once_per_content_and_context():
    loads: list[bytes] = []
    ctx = [1]

    def load(cubin: bytes) -> object:
        loads.append(cubin)
        return object()

    a = modules.module(b"cubin A", load, lambda: ctx[0])
    assert modules.module(b"cubin A", load, lambda: ctx[0]) is a
    b = modules.module(b"cubin B", load, lambda: ctx[0])
    assert b is not a
    ctx[0] = 2  # another context: a module belongs to the context it was loaded in
    a2 = modules.module(b"cubin A", load, lambda: ctx[0])
    assert a2 is not a
    assert loads == [b"cubin A", b"cubin B", b"cubin A"]


def test_module_failed_load_is_not_kept():
    calls = []

    def load(cubin: bytes) -> object:
        calls.append(cubin)
        if len(calls) == 1:
            raise RuntimeError("cuModuleLoadData failed: CUDA_ERROR_INVALID_IMAGE")
        return "module"

    with pytest.raises(RuntimeError, match="INVALID_IMAGE"):
        modules.module(b"cubin", load, lambda: 7)
    assert modules.module(b"cubin", load, lambda: 7) == "module"  # tried again, not a cached failure
    assert len(calls) == 2


def test_smem_limit_only_rises():
    set_to: list[int] = []
    modules.allow_smem("function", 42, 100_000, set_to.append)
    modules.allow_smem("function", 42, 50_000, set_to.append)  # a smaller kernel of the same function
    modules.allow_smem("function", 42, 100_000, set_to.append)
    modules.allow_smem("function", 42, 150_000, set_to.append)
    modules.allow_smem("function", 43, 50_000, set_to.append)  # another function: its own limit
    assert set_to == [100_000, 150_000, 50_000]


def test_smem_limit_failure_leaves_no_record():
    def refuse(n: int) -> None:
        raise RuntimeError("too much shared memory")

    with pytest.raises(RuntimeError):
        modules.allow_smem("function", 9, 300_000, refuse)
    seen: list[int] = []
    modules.allow_smem("function", 9, 300_000, seen.append)
    assert seen == [300_000]


def test_threads_load_once():
    loads = []
    barrier = threading.Barrier(8)

    def load(cubin: bytes) -> object:
        loads.append(cubin)
        return object()

    got = []

    def worker() -> None:
        barrier.wait()
        got.append(modules.module(b"shared", load, lambda: 1))

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(loads) == 1 and len({id(g) for g in got}) == 1


def test_dynamic_smem_through_the_driver_names_a_refusal():
    """``allow_dynamic_smem``: a library kernel's limit is set per device, a function's on the function; the
    driver's refusal is one LaunchError naming the size. cuda-bindings' call shapes, without a GPU."""
    from tracea.doctor.errors import LaunchError

    class Kernel(int):
        pass

    class Driver:
        CUkernel = Kernel

        class CUfunction_attribute:  # noqa: N801 - cuda-bindings' name
            CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8

        def __init__(self):
            self.calls = []

        def cuKernelSetAttribute(self, attr, n, handle, device):  # noqa: N802
            self.calls.append(("kernel", attr, n, int(handle), device))
            return (0,)

        def cuFuncSetAttribute(self, handle, attr, n):  # noqa: N802
            self.calls.append(("function", attr, n, int(handle)))
            return (1 if n > 232448 else 0,)

    d = Driver()
    modules.allow_dynamic_smem(d, Kernel(5), 1, 100_000)
    modules.allow_dynamic_smem(d, Kernel(5), 1, 90_000)  # lower: nothing to do
    modules.allow_dynamic_smem(d, 6, 0, 100_000)
    assert d.calls == [("kernel", 8, 100_000, 5, 1), ("function", 8, 100_000, 6)]
    with pytest.raises(LaunchError, match="300000 B of dynamic shared memory"):
        modules.allow_dynamic_smem(d, 6, 0, 300_000)
