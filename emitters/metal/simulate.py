"""Runs a Metal kernel's own MSL source on the CPU: the source is compiled as C++17 against ``compat.HEADER``
(a model of the ``<metal_stdlib>`` subset Tracea's kernels use) and every threadgroup of the launch is run,
each of its threads a fiber, barriers and SIMD-group functions as rendezvous (compat.py says how, and where
the model can differ from an Apple GPU).

``run(launch, buffers, out, seed=0)`` raises ``SimulationError`` (one line) where the kernel does not
compile against the model (the compiler's first error line), leaves the subset (a threadgroup pointer, more
than 1024 threads or 32 KiB of threadgroup memory), where its threads do not all reach a barrier or
SIMD-group function together (divergence, deadlock), or where a thread reads or writes past a buffer (each
buffer ends at an inaccessible page: GUARD) or overflows its fiber's stack. The build is a shared library in the CPU backend's
content-hash cache (``host_compiler.compile_cached``), keyed by the kernel, the harness, the header and the
flags, so a kernel is compiled once per machine and compiler.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from tracea.doctor.errors import CompileError, ToolchainMissingError, TraceaError

from .. import host_compiler
from .compat import HEADER
from .core import KERNEL_BUILTINS, MAX_THREADS, SIMD_WIDTH, THREADGROUP_MEMORY, Launch

# -O1: a kernel's run is SIMD-group rendezvous and fiber switches more than arithmetic, and -O1 compiles a
# third faster than -O2 (gcc 12: 0.2 s of CPU for a 64-line GEMM with the header precompiled);
# -fno-strict-aliasing: MSL lets a kernel read a buffer through another type (half2 loads, bf16 bits);
# -Wno-attributes: [[buffer(i)]] and the built-ins' attributes mean nothing to g++; -pthread: threadgroups
# spread over OS threads; -fstack-clash-protection: a frame larger than a fiber's stack touches the guard
# page below it (and is reported) instead of stepping over it into another fiber's stack.
FLAGS = ("-std=c++17", "-O1", "-fPIC", "-shared", "-pthread", "-fno-strict-aliasing", "-Wno-attributes",
         *(("-fstack-clash-protection",) if sys.platform.startswith("linux") else ()))
CXX_HINT = "install a C++ compiler (`sudo apt install g++`), or point TRACEA_CXX at one (g++ 9+ or clang++ 12+)"

# numpy dtype -> the C++ element type its buffer parameter must have (bf16 travels as ushort bits)
ELEMENT = {"float32": "float", "float16": "half", "uint16": "ushort", "int16": "short", "int32": "int",
           "uint32": "uint", "uint8": "uchar", "int8": "char", "bool": "bool"}
STACK_KIB = 124  # a fiber's usable stack (compat.HEADER's STACK_BYTES less its guard page)
_RUN_LOCK = threading.Lock()  # a library's fault handler and guard state serve one run at a time
SCALAR = {"i32": ("int", ctypes.c_int32), "u32": ("uint", ctypes.c_uint32), "f32": ("float", ctypes.c_float)}

_KERNEL = re.compile(r"\bkernel\s+void\s+([A-Za-z_]\w*)\s*\(")
_THREADGROUP = re.compile(r"\bthreadgroup\b(?!_)")
_THREADGROUP_ARRAY = re.compile(r"threadgroup\s+(?:const\s+)?[A-Za-z_]\w*\s+[A-Za-z_]\w*\s*(?:\[[^\];{}]+\]\s*)+;")
_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
# C++ the model would compile and Apple's compiler would not (MSL 2.1-2.4: no double, no long long, no
# new/delete, no goto, no lambdas, no C++ standard library, no printf), and a pointer of the subset's element
# types declared or cast without an address space (MSL 2.10: every pointer names device, constant, thread or
# threadgroup). A pointer of a typedef'd type is not seen: the subset's kernels use none.
_NOT_MSL = re.compile(r"\bdouble\b|\blong\s+long\b|\bnew\b|\bdelete\b|\bgoto\b|\bprintf\b|\bstd::|"
                      r"\[[&=]?\]\s*\(|#\s*pragma\b")
_ELEMENT = r"(?:bool|char|uchar|short|ushort|int|uint|long|ulong|half|float)(?:[234])?"
_POINTER = re.compile(r"(?:\b(device|constant|thread|threadgroup)\s+)?(?:const\s+)?\b" + _ELEMENT + r"\s*(?:const\s*)?\*")


class SimulationError(TraceaError):
    """The kernel cannot run in the model, or its threads broke a rule of Metal's execution model."""


def run(launch: Launch, buffers: dict[str, Any], out: Any, *, seed: int = 0, bounds: bool = True) -> None:
    """Run ``launch`` on the CPU. ``buffers`` maps each ("in", name) argument to a C-contiguous numpy array
    in storage dtype (fp32 float32, fp16 float16, bf16 uint16 bits); ``out`` is written in place; scalars
    come from the Launch. ``seed`` picks the order in which fibers resume after each barrier. ``bounds``:
    every buffer ends at an inaccessible page (GUARD), so that an access past a buffer is a SimulationError
    naming it and the thread, not a silent read of a neighbour or a crash."""
    arrays = _arrays(launch, buffers, out)
    _check_launch(launch)
    library = _build(launch, [ELEMENT[str(a.dtype)] if a is not None else "" for a in arrays])
    scalars = [SCALAR[kind][1](value) for kind, value in launch.args if kind in SCALAR]
    pointers, s = [], iter(scalars)
    for array in arrays:
        pointers.append(array.ctypes.data if array is not None else ctypes.addressof(next(s)))
    n = max(1, len(pointers))
    args = (ctypes.c_void_p * n)(*pointers)
    geom = (ctypes.c_long * 6)(*launch.grid, *launch.block)
    groups = launch.grid[0] * launch.grid[1] * launch.grid[2]
    workers = max(1, min(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1,
                         groups))
    err, where = ctypes.create_string_buffer(512), (ctypes.c_long * 6)()
    with _RUN_LOCK:
        if bounds:
            sizes = (ctypes.c_long * n)(*[a.nbytes if a is not None else 0 for a in arrays])
            rc = library.metal_sim_run_guarded(args, sizes, len(pointers), geom, workers, seed & (2**64 - 1), err,
                                               len(err), where)
        else:
            rc = library.metal_sim_run(args, geom, workers, seed & (2**64 - 1), err, len(err))
    if rc == 2:
        raise SimulationError(f"{launch.name}: {_out_of_bounds(launch, arrays, list(where))}")
    if rc:
        raise SimulationError(f"{launch.name}: {err.value.decode(errors='replace')}")


def _out_of_bounds(launch: Launch, arrays: list[Any], where: list[int]) -> str:
    arg, offset, thread = where[:3]
    who = f"thread {thread} of threadgroup ({where[3]}, {where[4]}, {where[5]})" if thread >= 0 else "a thread"
    if arg == -2:
        return f"{who} overflowed its fiber's stack ({STACK_KIB} KiB in the model)"
    if arg < 0:
        return f"{who} accessed memory outside every buffer (a wild index)"
    kind, name = launch.args[arg]
    what = f"input {name!r}" if kind == "in" else "output"
    size = arrays[arg].nbytes
    if offset < 0:
        return f"{who} wrote {-offset} bytes before the start of the {what} ({size} bytes)"
    return f"{who} accessed byte {offset} of the {what}, which has {size} bytes"


def _arrays(launch: Launch, buffers: dict[str, Any], out: Any) -> list[Any]:
    """The array of each argument in order (None for a scalar); SimulationError for a missing or unfit one."""
    import numpy as np

    arrays: list[Any] = []
    for kind, value in launch.args:
        if kind in SCALAR:
            fits = isinstance(value, float | int) if kind == "f32" else isinstance(value, int) and (
                -2**31 <= value < 2**31 if kind == "i32" else 0 <= value < 2**32)
            if isinstance(value, bool) or not fits:
                raise SimulationError(f"{launch.name}: the {kind} argument {value!r} does not fit its kind")
            arrays.append(None)
            continue
        if kind == "in":
            if value not in buffers:
                raise SimulationError(f"{launch.name}: no array given for its input {value!r}")
            array, what = buffers[value], f"input {value!r}"
        elif kind == "out":
            array, what = out, "output"
        else:
            raise SimulationError(f"{launch.name}: argument kind {kind!r} is none of in, out, i32, u32, f32")
        if not isinstance(array, np.ndarray) or not array.flags.c_contiguous:
            raise SimulationError(f"{launch.name}: the {what} must be a C-contiguous numpy array")
        if str(array.dtype) not in ELEMENT:
            raise SimulationError(f"{launch.name}: the {what} has dtype {array.dtype}, none of {', '.join(ELEMENT)}")
        if kind == "out" and not array.flags.writeable:
            raise SimulationError(f"{launch.name}: the output array is read-only")
        arrays.append(array)
    return arrays


def _check_launch(launch: Launch) -> None:
    threads = launch.threads
    if min(launch.block) < 1 or min(launch.grid) < 1:
        raise SimulationError(f"{launch.name}: grid {launch.grid} and block {launch.block} must be positive")
    if len(launch.args) > 64:
        raise SimulationError(f"{launch.name}: {len(launch.args)} arguments; the model takes at most 64")
    if threads % SIMD_WIDTH or threads > MAX_THREADS:
        raise SimulationError(f"{launch.name}: a threadgroup of {threads} threads; the model runs a multiple of "
                              f"{SIMD_WIDTH} up to {MAX_THREADS}")
    source = _COMMENT.sub(lambda m: "\n" * m.group(0).count("\n") or " ", launch.source)  # lines kept
    for m in _THREADGROUP.finditer(source):
        if not _THREADGROUP_ARRAY.match(source, m.start()):
            line = source.count("\n", 0, m.start()) + 1
            raise SimulationError(f"{launch.name}: line {line}: threadgroup memory is modelled only as "
                                  "`threadgroup T name[N];` arrays in the kernel body (no threadgroup pointers)")
    _check_msl(launch.name, source)
    names = _KERNEL.findall(source)
    if names != [launch.name]:
        raise SimulationError(f"{launch.name}: the source must define exactly one kernel, named {launch.name} "
                              f"(it defines {', '.join(names) or 'none'})")


def _check_msl(name: str, source: str) -> None:
    """SimulationError for what the model would accept and MSL does not (``_NOT_MSL``, ``_POINTER``)."""
    def line(at: int) -> int:
        return source.count("\n", 0, at) + 1

    bad = _NOT_MSL.search(source)
    if bad:
        raise SimulationError(f"{name}: line {line(bad.start())}: {bad.group(0).strip()!r} is not in the Metal "
                              "Shading Language subset the model accepts")
    for m in _POINTER.finditer(source):
        if m.group(1) is None:
            raise SimulationError(f"{name}: line {line(m.start())}: a pointer without an address space "
                                  f"({m.group(0).strip()!r}); MSL pointers name device, constant, thread or threadgroup")


# What the harness passes for each argument: a buffer converts to a pointer to its element type (or a vector
# of it) and a scalar to a const reference to exactly the Launch's kind; any other parameter type is a
# compile error (a static_assert) naming the mismatch.
PROXIES = r"""
// ---- the simulator's harness
namespace metal_sim {
template <class T, class E> struct element_of : std::is_same<T, E> {};
template <class E, int N> struct element_of<metal::vec<E, N>, E> : std::true_type {};
template <class E> struct Buffer {
  void* p;
  template <class T> operator T*() const {
    static_assert(element_of<typename std::remove_cv<T>::type, E>::value,
                  "a buffer parameter's element type differs from the dtype of the array passed for it");
    return (T*)p;
  }
};
template <class E> struct Scalar {
  const void* p;
  template <class T> operator const T&() const {
    static_assert(std::is_same<T, E>::value, "a constant parameter's type differs from the Launch's scalar kind");
    return *(const E*)p;
  }
};
}  // namespace metal_sim
"""

# The guarded entry (run's default): each buffer is copied into memory that ends where an inaccessible page
# begins, so that a read or write past a buffer's end faults at once; the fault handler (on the worker's signal
# stack, so a fiber's stack overflow is caught too) records where, and the faulting threadgroup stops as a
# divergence does. A write into the bytes before a buffer's start (its first page's slack, filled with a
# pattern) is found after the run. A fault outside a simulated fiber goes to the handler that was there before.
GUARD = r"""
namespace metal_sim_guard {
struct Fault { int hit, arg, who; long offset; uint tg[3]; };
static Fault fault; static char* starts[64]; static char* bases[64]; static long sizes[64], spans[64]; static int count;
static struct sigaction old_segv, old_bus;
static void on_fault(int sig, siginfo_t* info, void*) {
  metal_sim::Group* g = metal_sim::current;
  if (!g || !g->in_fiber) { sigaction(sig, sig == SIGSEGV ? &old_segv : &old_bus, nullptr); return; }  // not ours
  if (!__atomic_exchange_n(&fault.hit, 1, __ATOMIC_SEQ_CST)) {
    char* a = (char*)info->si_addr;
    fault.arg = -1; fault.who = g->cur; fault.tg[0] = g->tgid.x; fault.tg[1] = g->tgid.y; fault.tg[2] = g->tgid.z;
    for (int i = 0; i < count; ++i)
      if (sizes[i] && a >= bases[i] && a < bases[i] + spans[i]) { fault.arg = i; fault.offset = a - starts[i]; }
    if (fault.arg < 0 && a >= g->stacks && a < g->stacks + size_t(g->n) * g->stack_bytes) fault.arg = -2;
  }
  metal_sim::fail("a memory fault");
}
}  // namespace metal_sim_guard
extern "C" int metal_sim_run_guarded(void* const* args, const long* bytes, int n, const long* geom, int workers,
                                     unsigned long long seed, char* err, int errlen, long* where) {
  using namespace metal_sim_guard;
  const long page = sysconf(_SC_PAGESIZE);
  void* moved[64];
  count = n; memset(&fault, 0, sizeof fault);
  for (int i = 0; i < n; ++i) {
    sizes[i] = bytes[i]; bases[i] = nullptr; moved[i] = args[i];
    if (!bytes[i]) continue;
    long body = (bytes[i] + page - 1) / page * page;
    spans[i] = body + 2 * page;
    bases[i] = (char*)mmap(nullptr, spans[i], PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (bases[i] == (char*)MAP_FAILED) { snprintf(err, errlen, "cannot map %ld bytes", spans[i]); return 1; }
    mprotect(bases[i], page, PROT_NONE); mprotect(bases[i] + page + body, page, PROT_NONE);
    starts[i] = bases[i] + page + body - bytes[i];
    memset(bases[i] + page, 0xA5, body - bytes[i]); memcpy(starts[i], args[i], bytes[i]); moved[i] = starts[i];
  }
  struct sigaction sa; memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_fault; sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
  sigaction(SIGSEGV, &sa, &old_segv); sigaction(SIGBUS, &sa, &old_bus);
  int rc = metal_sim::run(metal_sim_body, moved, geom, workers, seed, err, errlen);
  sigaction(SIGSEGV, &old_segv, nullptr); sigaction(SIGBUS, &old_bus, nullptr);
  if (fault.hit) {
    rc = 2; where[0] = fault.arg; where[1] = fault.offset; where[2] = fault.who;
    for (int k = 0; k < 3; ++k) where[3 + k] = fault.tg[k];
  }
  for (int i = 0; i < n && rc == 0; ++i) {
    long slack = spans[i] - 2 * page - bytes[i];
    for (long k = 0; bytes[i] && k < slack; ++k)
      if ((uchar)bases[i][page + k] != 0xA5) { rc = 2; where[0] = i; where[1] = k - slack; where[2] = -1; break; }
  }
  for (int i = 0; i < n; ++i)
    if (bases[i]) { memcpy(args[i], starts[i], bytes[i]); munmap(bases[i], spans[i]); }
  return rc;
}
"""


def harness(launch: Launch, elements: list[str]) -> str:
    """The C++ appended to the kernel's source: its entry point, which calls the kernel in every thread
    with each argument's proxy (PROXIES), then the five built-ins."""
    params = []
    for i, ((kind, _), element) in enumerate(zip(launch.args, elements, strict=True)):
        if kind in SCALAR:
            params.append(f"metal_sim::Scalar<{SCALAR[kind][0]}>{{a[{i}]}}")
        else:
            params.append(f"metal_sim::Buffer<{element}>{{a[{i}]}}")
    builtins = [b.split()[1] for b in KERNEL_BUILTINS]
    call = ", ".join(params + [f"b.{name}" for name in builtins])
    return (f"{PROXIES}namespace {{ void metal_sim_body(void* const* a, const metal_sim::Builtins& b) {{\n"
            f"  {launch.name}({call});\n}} }}\n"
            'extern "C" int metal_sim_run(void* const* a, const long* geom, int workers, unsigned long long seed, '
            "char* err, int n) {\n  return metal_sim::run(metal_sim_body, a, geom, workers, seed, err, n);\n}\n" + GUARD)


def _build(launch: Launch, elements: list[str]) -> Any:
    compiler = find_cxx()
    include = _include_dir(compiler)
    flags = [*FLAGS, "-I", str(include)]
    source = launch.source + harness(launch, elements)
    try:
        binary, _, _ = host_compiler.compile_cached(source, f"metal_sim_{launch.name}", flags, compiler)
    except CompileError as exc:
        raise SimulationError(f"{launch.name}: does not compile against the Metal model: "
                              f"{_first_error(exc.message)}") from None
    used = threadgroup_bytes(str(binary))
    if used > THREADGROUP_MEMORY:
        raise SimulationError(f"{launch.name}: declares {used} bytes of threadgroup memory, over the "
                              f"{THREADGROUP_MEMORY} a threadgroup may use")
    if used > launch.threadgroup_bytes:
        raise SimulationError(f"{launch.name}: declares {used} bytes of threadgroup memory but its Launch says "
                              f"threadgroup_bytes={launch.threadgroup_bytes}")
    return _load(str(binary))


def _first_error(log: str) -> str:
    """The compiler's first error line, its file named by the line in the kernel's source (or the header)."""
    lines = log.splitlines()
    line = next((x for x in lines if "error:" in x), lines[-1] if lines else log).strip()
    m = re.match(r"(\S+?):(\d+):(?:\d+:)?\s*(.*)", line)
    if m is None:
        return line
    name = os.path.basename(m.group(1))
    return f"line {m.group(2)}: {m.group(3)}" if name.endswith(".c") else f"{name}:{m.group(2)}: {m.group(3)}"


@functools.lru_cache(maxsize=256)
def _load(path: str) -> Any:
    library = ctypes.CDLL(path)
    library.metal_sim_run.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_ulonglong,
                                      ctypes.c_char_p, ctypes.c_int]
    library.metal_sim_run.restype = ctypes.c_int
    library.metal_sim_run_guarded.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p,
                                              ctypes.c_int, ctypes.c_ulonglong, ctypes.c_char_p, ctypes.c_int,
                                              ctypes.c_void_p]
    library.metal_sim_run_guarded.restype = ctypes.c_int
    return library


def find_cxx() -> Any:
    """TRACEA_CXX if set, else the first of g++, clang++, c++ on PATH (host_compiler's Compiler record)."""
    env = os.environ.get("TRACEA_CXX")
    for name in ([env] if env else ["g++", "clang++", "c++"]):
        path = shutil.which(name)
        if path:
            return host_compiler.Compiler(path, host_compiler._version_line(path))
    raise ToolchainMissingError(f"TRACEA_CXX={env} is not an executable compiler" if env else
                                "no C++ compiler found (looked for g++, clang++ and c++)", CXX_HINT)


def _include_dir(compiler: Any) -> Path:
    """A folder holding the header as `metal_stdlib` and, where the compiler makes one, its precompiled form
    (`metal_stdlib.gch`, which gcc reads instead when the flags match: a third of a small kernel's compile);
    named by the hash of the header, flags and compiler, so the compile flags that name it key the cache."""
    from tracea.doctor.files import write_atomic

    key = hashlib.sha256("\0".join([HEADER, *FLAGS, compiler.path, compiler.version]).encode()).hexdigest()
    folder = host_compiler.cache_dir("metal") / f"include-{key[:16]}"
    header = folder / "metal_stdlib"
    if not header.is_file() or header.read_text() != HEADER:
        write_atomic(header, HEADER)
    pch = folder / "metal_stdlib.gch"
    if "g++" in os.path.basename(compiler.path) and not pch.is_file():
        tmp = folder / f".metal_stdlib.{os.getpid()}.gch"
        try:  # optional: without it the header is parsed with each kernel
            subprocess.run([compiler.path, *[f for f in FLAGS if f != "-shared"], "-x", "c++-header", str(header),
                            "-o", str(tmp)], capture_output=True, timeout=120, check=True)
            os.replace(tmp, pch)
        except (OSError, subprocess.SubprocessError):
            tmp.unlink(missing_ok=True)
    return folder


@functools.lru_cache(maxsize=256)
def threadgroup_bytes(path: str) -> int:
    """Bytes of threadgroup memory the library's kernel declares: its thread-local arrays (each threadgroup
    array is a `static thread_local` one in the model), from the symbol table, less the model's own."""
    if not host_compiler.SHARED_OBJECTS_ARE_ELF:  # the model's own sizes are read from ELF files only
        return 0
    tool = shutil.which("readelf")
    if tool is None:  # no binutils: the size of the thread-local segment, less the model's one pointer
        return max(0, _tls_segment(path) - 8)
    table = subprocess.run([tool, "-sW", path], capture_output=True, text=True, timeout=60).stdout
    total = 0
    for row in table.splitlines():
        cols = row.split()
        if len(cols) >= 8 and cols[3] == "TLS" and "metal_sim" not in cols[7]:
            total += int(cols[2], 0)
    return total


def _tls_segment(path: str) -> int:
    import struct

    data = Path(path).read_bytes()
    phoff, = struct.unpack_from("<Q", data, 0x20)
    size, count = struct.unpack_from("<HH", data, 0x36)
    for i in range(count):
        kind, = struct.unpack_from("<I", data, phoff + i * size)
        if kind == 7:  # PT_TLS
            return struct.unpack_from("<Q", data, phoff + i * size + 0x28)[0]
    return 0
