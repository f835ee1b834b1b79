"""The C ABI of an exported package (DESIGN.md, "Written contracts"): ``tracea.h``, ``tracea.hpp`` and the
backend-neutral C behind them (last error, tensor-view checks), written once for every backend.

A package exports one op at one shape: each launcher checks every view against that shape, dtype and
contiguous row-major layout and returns a status with a message instead of reading out of bounds. The
backends (cpu/export.py, cuda/export.py) add the kernel, the body of the launcher and the CMake file.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracea.doctor.errors import BadInputError, UnsupportedError

ABI_VERSION = 1
MAX_DIMS = 8
DTYPES = {"fp32": ("TRACEA_DTYPE_F32", 4), "fp16": ("TRACEA_DTYPE_F16", 2), "bf16": ("TRACEA_DTYPE_BF16", 2)}
EXPORTABLE = ("gemm", "conv2d", "softmax", "attention")


@dataclass(frozen=True)
class Tensor:
    name: str
    shape: tuple[int, ...]
    output: bool = False

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


@dataclass(frozen=True)
class Launcher:
    """One exported op: ``tracea_<kind>(inputs..., out, stream)`` in the kernel's buffer order."""

    op: Any
    tensors: tuple[Tensor, ...]  # inputs first, the output last

    @property
    def name(self) -> str:
        return f"tracea_{self.op.kind}"

    @property
    def dtype(self) -> str:
        return self.op.dtype.value

    @property
    def inputs(self) -> tuple[Tensor, ...]:
        return self.tensors[:-1]

    @property
    def out(self) -> Tensor:
        return self.tensors[-1]

    def signature(self) -> str:
        args = [f"const TraceaTensorView* {t.name}" for t in self.inputs]
        return f"TraceaStatus {self.name}({', '.join([*args, f'TraceaTensorView* {self.out.name}', 'void* stream'])})"


def launcher_for(op: Any, order: tuple[str, ...] | list[str]) -> Launcher:
    """The launcher of ``op`` with its inputs in ``order`` (the kernel's buffers; absent optional ones dropped)."""
    if op.kind not in EXPORTABLE:
        raise UnsupportedError(f"export: {op.kind} cannot be exported yet (ABI version {ABI_VERSION} has "
                               f"{', '.join(EXPORTABLE)})", "export gemm, conv2d or softmax")
    if getattr(op, "block_mask", None) is not None:
        raise UnsupportedError("export: attention with a --block-mask cannot be exported yet",
                               "export it without the block mask (causal and --window are exported)")
    if op.dtype.value not in DTYPES:
        raise UnsupportedError(f"export: dtype {op.dtype.value} has no tensor-view type")
    shapes = {k: tuple(int(d) for d in v) for k, v in op.shapes().items()}
    inputs = [Tensor(n, shapes[n]) for n in order if n in shapes]
    missing = set(shapes) - {t.name for t in inputs}
    if missing:
        raise UnsupportedError(f"export: the kernel takes no buffer for {sorted(missing)[0]!r}")
    return Launcher(op, (*inputs, Tensor("out", tuple(int(d) for d in op.output_shape()), output=True)))


def _macro(launcher: Launcher, t: Tensor) -> str:
    return f"TRACEA_{launcher.op.kind.upper()}_{t.name.upper()}"


def header(launcher: Launcher, backend: str) -> str:
    """``include/tracea.h``: the whole C ABI of the package."""
    shapes = "\n".join(f"#define {_macro(launcher, t)}_NDIM {len(t.shape)}\n"
                       f"#define {_macro(launcher, t)}_SHAPE {{{', '.join(map(str, t.shape))}}}"
                       for t in launcher.tensors)
    stream = ("a CUstream (NULL: the default stream); views hold device pointers (CUdeviceptr cast to void*)"
              if backend == "cuda" else "unused on the CPU (pass NULL); the call returns when the result is written")
    return f"""/* tracea.h: the C ABI of a package written by `tracea export` (generated, do not edit).
 * One op at one shape; every launcher checks its views and returns a status (never reads out of bounds).
 * Backend: {backend}. Op: {json.dumps(launcher.op.to_json(), sort_keys=True)} */
#ifndef TRACEA_H
#define TRACEA_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {{
#endif

#define TRACEA_ABI_VERSION {ABI_VERSION}  /* tracea_abi_version() of the library must equal it */
#define TRACEA_MAX_DIMS {MAX_DIMS}

typedef enum {{
    TRACEA_SUCCESS = 0,
    TRACEA_ERROR_INVALID_ARGUMENT = 1,  /* a view's pointer, dtype, shape or strides differ from the export */
    TRACEA_ERROR_UNSUPPORTED = 2,       /* this device or build cannot run the kernel */
    TRACEA_ERROR_CUDA = 3,              /* a CUDA driver call failed (the message names it) */
    TRACEA_ERROR_CPU = 4,               /* the CPU kernel failed (out of memory for its packing buffers) */
    TRACEA_ERROR_ABI_MISMATCH = 5       /* header and library of different ABI versions */
}} TraceaStatus;

typedef enum {{ TRACEA_DTYPE_F32 = 0, TRACEA_DTYPE_F16 = 1, TRACEA_DTYPE_BF16 = 2 }} TraceaDType;

/* A tensor in memory: strides in elements; exported kernels take contiguous row-major tensors. */
typedef struct {{
    void* data;
    int32_t dtype;   /* a TraceaDType */
    int32_t ndim;
    int64_t shape[TRACEA_MAX_DIMS];
    int64_t strides[TRACEA_MAX_DIMS];
}} TraceaTensorView;

/* The exported shapes as stored (dtype {DTYPES[launcher.dtype][0]}; a 'col' layout is the row-major transpose). */
{shapes}

int tracea_abi_version(void);
/* The message of the last failed call on this thread ("" when none); valid until the next call. */
const char* tracea_get_last_error(void);
void tracea_clear_error(void);
/* Optional: prepares the kernel (CUDA: loads the module into the current context); launchers call it. */
TraceaStatus tracea_init(void);
void tracea_shutdown(void);
/* A contiguous row-major view of `data` (strides filled in). */
TraceaTensorView tracea_view(void* data, TraceaDType dtype, int32_t ndim, const int64_t* shape);

/* stream: {stream}. */
{launcher.signature()};

#ifdef __cplusplus
}}
#endif
#endif /* TRACEA_H */
"""


def header_cpp(launcher: Launcher) -> str:
    """``include/tracea.hpp``: RAII and exceptions over the C ABI."""
    ins = ", ".join(f"const TraceaTensorView& {t.name}" for t in launcher.inputs)
    args = ", ".join(f"&{t.name}" for t in launcher.inputs)
    return f"""// tracea.hpp: C++17 wrapper of tracea.h (generated, do not edit).
#ifndef TRACEA_HPP
#define TRACEA_HPP

#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <vector>

#include "tracea.h"

namespace tracea {{

class Error : public std::runtime_error {{
public:
    Error(TraceaStatus status, const std::string& what) : std::runtime_error(what), status_(status) {{}}
    TraceaStatus status() const noexcept {{ return status_; }}

private:
    TraceaStatus status_;
}};

inline void check(TraceaStatus status) {{
    if (status != TRACEA_SUCCESS) throw Error(status, tracea_get_last_error());
}}

inline TraceaTensorView view(void* data, TraceaDType dtype, std::initializer_list<int64_t> shape) {{
    std::vector<int64_t> s(shape);
    return tracea_view(data, dtype, static_cast<int32_t>(s.size()), s.data());
}}

// Owns the loaded kernel: checks the ABI version at load, releases it when destroyed. One per process.
class Module {{
public:
    Module() {{
        if (tracea_abi_version() != TRACEA_ABI_VERSION)
            throw Error(TRACEA_ERROR_ABI_MISMATCH, "tracea: library ABI " + std::to_string(tracea_abi_version()) +
                        ", header ABI " + std::to_string(TRACEA_ABI_VERSION));
        check(tracea_init());
    }}
    ~Module() {{ tracea_shutdown(); }}
    Module(const Module&) = delete;
    Module& operator=(const Module&) = delete;

    void {launcher.op.kind}({ins}, TraceaTensorView& out, void* stream = nullptr) const {{
        check({launcher.name}({args}, &out, stream));
    }}
}};

}}  // namespace tracea
#endif  // TRACEA_HPP
"""


INTERNAL_H = """/* tracea_internal.h: shared by the package's C files (generated, do not edit). */
#ifndef TRACEA_INTERNAL_H
#define TRACEA_INTERNAL_H
#include "tracea.h"

TraceaStatus tr_fail(TraceaStatus status, const char* fmt, ...);
TraceaStatus tr_check_view(const char* fn, const char* name, const TraceaTensorView* v, int32_t dtype,
                           int32_t ndim, const int64_t* shape);
TraceaStatus tr_check_disjoint(const char* fn, const TraceaTensorView* out, int64_t out_bytes,
                               const TraceaTensorView* const* ins, const int64_t* in_bytes, int n);
#endif
"""

ABI_C = """/* tracea_abi.c: last error and tensor-view checks (generated, do not edit). */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>

#include "tracea_internal.h"

static _Thread_local char tr_last_error[512];

int tracea_abi_version(void) { return TRACEA_ABI_VERSION; }
const char* tracea_get_last_error(void) { return tr_last_error; }
void tracea_clear_error(void) { tr_last_error[0] = 0; }

TraceaStatus tr_fail(TraceaStatus status, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tr_last_error, sizeof tr_last_error, fmt, ap);
    va_end(ap);
    return status;
}

TraceaTensorView tracea_view(void* data, TraceaDType dtype, int32_t ndim, const int64_t* shape) {
    TraceaTensorView v = {0};
    v.data = data;
    v.dtype = (int32_t)dtype;
    v.ndim = ndim < 0 ? 0 : (ndim > TRACEA_MAX_DIMS ? TRACEA_MAX_DIMS : ndim);
    int64_t stride = 1;
    for (int i = v.ndim - 1; i >= 0; --i) {
        v.shape[i] = shape[i];
        v.strides[i] = stride;
        stride *= shape[i];
    }
    return v;
}

static const char* tr_dtype_name(int32_t d) {
    return d == TRACEA_DTYPE_F32 ? "f32" : d == TRACEA_DTYPE_F16 ? "f16" : d == TRACEA_DTYPE_BF16 ? "bf16" : "unknown";
}

TraceaStatus tr_check_view(const char* fn, const char* name, const TraceaTensorView* v, int32_t dtype,
                           int32_t ndim, const int64_t* shape) {
    if (v == NULL) return tr_fail(TRACEA_ERROR_INVALID_ARGUMENT, "%s: %s is NULL", fn, name);
    if (v->data == NULL) return tr_fail(TRACEA_ERROR_INVALID_ARGUMENT, "%s: %s->data is NULL", fn, name);
    if (v->dtype != dtype)
        return tr_fail(TRACEA_ERROR_INVALID_ARGUMENT, "%s: %s has dtype %s, the export takes %s", fn, name,
                       tr_dtype_name(v->dtype), tr_dtype_name(dtype));
    if (v->ndim != ndim)
        return tr_fail(TRACEA_ERROR_INVALID_ARGUMENT, "%s: %s has %d dimensions, the export takes %d", fn, name,
                       (int)v->ndim, (int)ndim);
    int64_t stride = 1;
    for (int i = ndim - 1; i >= 0; --i) {
        if (v->shape[i] != shape[i])
            return tr_fail(TRACEA_ERROR_INVALID_ARGUMENT, "%s: %s has shape[%d] = %lld, the export takes %lld", fn,
                           name, i, (long long)v->shape[i], (long long)shape[i]);
        if (v->strides[i] != stride && shape[i] != 1)
            return tr_fail(TRACEA_ERROR_INVALID_ARGUMENT,
                           "%s: %s has strides[%d] = %lld; the export takes contiguous row-major tensors (%lld)",
                           fn, name, i, (long long)v->strides[i], (long long)stride);
        stride *= shape[i];
    }
    return TRACEA_SUCCESS;
}

TraceaStatus tr_check_disjoint(const char* fn, const TraceaTensorView* out, int64_t out_bytes,
                               const TraceaTensorView* const* ins, const int64_t* in_bytes, int n) {
    uintptr_t o = (uintptr_t)out->data;
    for (int i = 0; i < n; ++i) {
        uintptr_t p = (uintptr_t)ins[i]->data;
        if (p < o + (uintptr_t)out_bytes && o < p + (uintptr_t)in_bytes[i])
            return tr_fail(TRACEA_ERROR_INVALID_ARGUMENT, "%s: out overlaps input %d; give a separate buffer", fn, i);
    }
    return TRACEA_SUCCESS;
}
"""


def checks_c(launcher: Launcher) -> str:
    """The launcher's opening lines: clear the error, check each view, then that out overlaps no input."""
    code, esize = DTYPES[launcher.dtype]
    fn = launcher.name
    lines = ["    tracea_clear_error();"]
    for t in launcher.tensors:
        m = _macro(launcher, t)
        lines += [f"    static const int64_t shape_{t.name}[] = {m}_SHAPE;",
                  f"    if (tr_check_view(\"{fn}\", \"{t.name}\", {t.name}, {code}, {m}_NDIM, shape_{t.name}))"
                  " return TRACEA_ERROR_INVALID_ARGUMENT;"]
    ins = ", ".join(t.name for t in launcher.inputs)
    sizes = ", ".join(str(t.numel * esize) for t in launcher.inputs)
    lines += [f"    const TraceaTensorView* ins[] = {{{ins}}};", f"    static const int64_t in_bytes[] = {{{sizes}}};",
              f"    if (tr_check_disjoint(\"{fn}\", out, {launcher.out.numel * esize}, ins, in_bytes, "
              f"{len(launcher.inputs)})) return TRACEA_ERROR_INVALID_ARGUMENT;"]
    return "\n".join(lines)


def tracea_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tracea")
    except PackageNotFoundError:
        return "unknown"


def manifest(launcher: Launcher, backend: str, variant: str, schedule: dict[str, Any], schedule_source: str,
             target: dict[str, Any], kernel: dict[str, Any], files: dict[str, str | bytes]) -> str:
    """``manifest.json``: what was exported, from which Tracea, and the sha256 of every file beside it."""
    doc = {"schema_version": 1, "op": launcher.op.to_json(), "backend": backend, "variant": variant,
           "schedule": schedule, "schedule_source": schedule_source, "target": target, "abi_version": ABI_VERSION,
           "tracea_version": tracea_version(), "launcher": launcher.signature(), "kernel": kernel,
           "files": {name: hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()
                     for name, data in sorted(files.items())}}
    return json.dumps(doc, indent=1) + "\n"


def prepare_out(out: Path, force: bool) -> None:
    """Refuse a non-empty ``out`` unless ``force``; an unusable folder is one BadInputError line."""
    if out.exists() and not out.is_dir():
        raise BadInputError(f"--out: {out} exists and is not a folder")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise BadInputError(f"--out: {out} is not empty; give an empty or new folder, or --force to write over it")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BadInputError(f"--out: cannot create {out} ({exc.strerror})") from None


def write_package(out: Path, files: dict[str, str | bytes]) -> list[Path]:
    """Each file written atomically (doctor/files.py); the paths in the order given."""
    from tracea.doctor.files import write_atomic

    paths = []
    try:
        for rel, data in files.items():
            path = out / rel
            write_atomic(path, data)
            paths.append(path)
    except OSError as exc:
        raise BadInputError(f"--out: cannot write into {out} ({exc.strerror or exc})") from None
    return paths


README = """# Tracea export: {kind} ({backend})

Generated by `tracea export` (Tracea {version}, C ABI version {abi}). Kernel `{name}`, variant `{variant}`,
schedule: {source}. Target: {target}. The shapes are fixed at export: the launcher refuses any other
with a status and `tracea_get_last_error()`, never undefined behaviour.

```
cmake -S . -B build && cmake --build build && ctest --test-dir build
```

- `include/tracea.h`: the C ABI, `{signature}`;
  `include/tracea.hpp`: C++17, `tracea::Module` (checks the ABI version at load, RAII) and `tracea::Error`.
- `src/`: the launcher, the tensor-view checks and the kernel.
- `example.c`: random inputs, one call, a plain C reference (double accumulation), exit 1 on a mismatch;
  `example --perturb` corrupts one output element and must report MISMATCH. `example.cpp`: the C++ wrapper.
- `manifest.json`: op, variant, schedule, target, ABI and Tracea versions, the sha256 of every file.

{notes}
"""


def readme(launcher: Launcher, backend: str, name: str, variant: str, source: str, target: str, notes: str) -> str:
    return README.format(kind=launcher.op.kind, backend=backend, version=tracea_version(), abi=ABI_VERSION, name=name,
                         variant=variant, source=source, target=target, signature=launcher.signature(), notes=notes)
