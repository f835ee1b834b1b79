"""The two headers of an exported package: ``include/<prefix>/tracea.h`` (the C ABI: the types every package of
the ABI version shares, guarded once per translation unit, then the package's shapes, functions and
launcher) and ``include/<prefix>/tracea.hpp`` (the C++17 wrapper: ``tracea::Error``, the view makers and
the package's RAII ``Module``). The launcher they declare is export_abi.py's ``Launcher``."""

from __future__ import annotations

import json

from .export_abi import ABI_VERSION, DTYPE_CODES, MAX_DIMS, Launcher

# ------------------------------------------------------------------------------------------- tracea.h

# The types every package of this ABI version shares; the first package header of a translation unit
# defines them, so one view type serves every package's launchers (a GEMM's output, a softmax's input).
COMMON_H = f"""/* Shared by every Tracea package of C ABI version {ABI_VERSION}: defined once per translation unit. */
#ifndef TRACEA_COMMON_ABI
#define TRACEA_COMMON_ABI {ABI_VERSION}
#define TRACEA_MAX_DIMS {MAX_DIMS}

typedef enum {{
    TRACEA_SUCCESS = 0,
    TRACEA_ERROR_INVALID_ARGUMENT = 1,  /* a view's pointer, dtype, shape or strides differ from the export */
    TRACEA_ERROR_UNSUPPORTED = 2,       /* this device or build cannot run the kernel */
    TRACEA_ERROR_CUDA = 3,              /* a CUDA driver call failed (the message names it) */
    TRACEA_ERROR_CPU = 4,               /* the CPU kernel failed (out of memory for its packing buffers) */
    TRACEA_ERROR_ABI_MISMATCH = 5       /* header and library of different ABI versions */
}} TraceaStatus;

typedef enum {{ {", ".join(f"{code} = {value}" for code, value, _ in DTYPE_CODES.values())} }} TraceaDType;

/* An input tensor (read, never written): strides in elements; exported kernels take contiguous row-major tensors. */
typedef struct {{
    const void* data;
    int32_t dtype;   /* a TraceaDType */
    int32_t ndim;
    int64_t shape[TRACEA_MAX_DIMS];
    int64_t strides[TRACEA_MAX_DIMS];
}} TraceaConstTensorView;

/* The output tensor (written): the same fields over writable memory. */
typedef struct {{
    void* data;
    int32_t dtype;
    int32_t ndim;
    int64_t shape[TRACEA_MAX_DIMS];
    int64_t strides[TRACEA_MAX_DIMS];
}} TraceaTensorView;

static inline int32_t tracea_fill_dims_(int32_t ndim, const int64_t* shape, int64_t* dims, int64_t* strides) {{
    int32_t n = ndim < 0 ? 0 : (ndim > TRACEA_MAX_DIMS ? TRACEA_MAX_DIMS : ndim);
    int64_t stride = 1;
    for (int i = 0; i < TRACEA_MAX_DIMS; ++i) dims[i] = strides[i] = 0;
    for (int i = n - 1; i >= 0; --i) {{
        dims[i] = shape[i];
        strides[i] = stride;
        stride *= shape[i];
    }}
    return n;
}}

/* A contiguous row-major view of `data` (strides filled in): the output's ... */
static inline TraceaTensorView tracea_view(void* data, TraceaDType dtype, int32_t ndim, const int64_t* shape) {{
    TraceaTensorView v;
    v.data = data;
    v.dtype = (int32_t)dtype;
    v.ndim = tracea_fill_dims_(ndim, shape, v.shape, v.strides);
    return v;
}}

/* ... and an input's. */
static inline TraceaConstTensorView tracea_const_view(const void* data, TraceaDType dtype, int32_t ndim,
                                                      const int64_t* shape) {{
    TraceaConstTensorView v;
    v.data = data;
    v.dtype = (int32_t)dtype;
    v.ndim = tracea_fill_dims_(ndim, shape, v.shape, v.strides);
    return v;
}}

/* One op's output as the next op's input. */
static inline TraceaConstTensorView tracea_as_const(TraceaTensorView v) {{
    TraceaConstTensorView c;
    c.data = v.data;
    c.dtype = v.dtype;
    c.ndim = v.ndim;
    for (int i = 0; i < TRACEA_MAX_DIMS; ++i) {{
        c.shape[i] = v.shape[i];
        c.strides[i] = v.strides[i];
    }}
    return c;
}}
#elif TRACEA_COMMON_ABI != {ABI_VERSION}
#error "tracea.h: packages of two Tracea C ABI versions in one translation unit; export them again with one Tracea"
#endif
"""


def header(launcher: Launcher, backend: str) -> str:
    """``include/<prefix>/tracea.h``: the whole C ABI of the package."""
    shapes = "\n".join(f"#define {launcher.shape_macro(t)}_NDIM {len(t.shape)}\n"
                       f"#define {launcher.shape_macro(t)}_SHAPE {{{', '.join(map(str, t.shape))}}}"
                       for t in launcher.tensors)
    from .registry import backend as backend_module

    # the CUDA driver's names: the one device backend that exports packages today (export_package.py)
    stream = ("a CUstream (NULL: the default stream); views hold device pointers (CUdeviceptr cast to void*)"
              if backend_module(backend).ON_DEVICE else
              "unused on the CPU (pass NULL); the call returns when the result is written")
    m, api = launcher.macro, launcher.api
    return f"""/* tracea.h: the C ABI of the Tracea package {launcher.prefix} (written by `tracea export`; do not edit).
 * One op at one shape; every launcher checks its views and returns a status (never reads out of bounds).
 * Every name the package exports starts with {launcher.prefix}_ (macros: {m}_), so packages link side by side.
 * Backend: {backend}. Op: {json.dumps(launcher.op.to_json(), sort_keys=True)} */
#ifndef {m}_TRACEA_H
#define {m}_TRACEA_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {{
#endif

{COMMON_H}
#define {m}_ABI_VERSION {ABI_VERSION}  /* {api("abi_version")}() of the library must equal it */

/* The exported shapes as stored ({", ".join(f"{t.name}: {t.code}" for t in launcher.tensors)}; a 'col' layout is the
 * row-major transpose). */
{shapes}

int {api("abi_version")}(void);
/* The message of the last failed call of this package on this thread ("" when none); valid until its next call. */
const char* {api("get_last_error")}(void);
void {api("clear_error")}(void);
/* Optional: prepares the kernel (CUDA: loads the module into the current context); the launcher calls it. */
TraceaStatus {api("init")}(void);
void {api("shutdown")}(void);

/* stream: {stream}. */
{launcher.signature()};

#ifdef __cplusplus
}}
#endif
#endif /* {m}_TRACEA_H */
"""


def header_cpp(launcher: Launcher) -> str:
    """``include/<prefix>/tracea.hpp``: RAII and exceptions over the C ABI, in ``namespace <prefix>``."""
    m = launcher.macro
    return f"""// tracea.hpp: C++17 wrapper of the Tracea package {launcher.prefix}'s tracea.h (generated, do not edit).
#ifndef {m}_TRACEA_HPP
#define {m}_TRACEA_HPP

#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <vector>

#include "tracea.h"

{_common_hpp()}{_package_hpp(launcher)}#endif  // {m}_TRACEA_HPP
"""


def _common_hpp() -> str:
    """What every package of this C ABI version shares in ``namespace tracea`` (the error type, the view
    makers), guarded so that several packages' headers go into one translation unit."""
    return f"""// Shared by every Tracea package of C ABI version {ABI_VERSION}: one error type, the view makers.
#ifndef TRACEA_COMMON_HPP
#define TRACEA_COMMON_HPP {ABI_VERSION}
namespace tracea {{

class Error : public std::runtime_error {{
public:
    Error(TraceaStatus status, const std::string& what) : std::runtime_error(what), status_(status) {{}}
    TraceaStatus status() const noexcept {{ return status_; }}

private:
    TraceaStatus status_;
}};

// An output view over writable memory; an input view over const memory (the overload picks by the pointer).
inline TraceaTensorView view(void* data, TraceaDType dtype, std::initializer_list<int64_t> shape) {{
    std::vector<int64_t> s(shape);
    return tracea_view(data, dtype, static_cast<int32_t>(s.size()), s.data());
}}

inline TraceaConstTensorView view(const void* data, TraceaDType dtype, std::initializer_list<int64_t> shape) {{
    std::vector<int64_t> s(shape);
    return tracea_const_view(data, dtype, static_cast<int32_t>(s.size()), s.data());
}}

inline TraceaConstTensorView as_const(const TraceaTensorView& v) {{ return tracea_as_const(v); }}

}}  // namespace tracea
#elif TRACEA_COMMON_HPP != {ABI_VERSION}
#error "tracea.hpp: packages of two Tracea C ABI versions in one translation unit"
#endif

"""


def _package_hpp(launcher: Launcher) -> str:
    """``namespace <prefix>``: ``check`` and the ``Module`` that loads the kernel and calls it."""
    ins = ", ".join([*(f"const {t.view_type}& {t.name}" for t in launcher.inputs),
                     *(f"TraceaTensorView& {t.name}" for t in launcher.outputs)])
    args = ", ".join(f"&{t.name}" for t in (*launcher.inputs, *launcher.outputs))
    m, api = launcher.macro, launcher.api
    return f"""namespace {launcher.prefix} {{

using ::tracea::Error;

inline void check(TraceaStatus status) {{
    if (status != TRACEA_SUCCESS) throw Error(status, {api("get_last_error")}());
}}

// Owns the loaded kernel: checks the ABI version at load, releases it when destroyed. One per process.
class Module {{
public:
    Module() {{
        if ({api("abi_version")}() != {m}_ABI_VERSION)
            throw Error(TRACEA_ERROR_ABI_MISMATCH, "{launcher.prefix}: library ABI " +
                        std::to_string({api("abi_version")}()) + ", header ABI " + std::to_string({m}_ABI_VERSION));
        check({api("init")}());
    }}
    ~Module() {{ {api("shutdown")}(); }}
    Module(const Module&) = delete;
    Module& operator=(const Module&) = delete;

    void {launcher.op.kind}({ins}, void* stream = nullptr) const {{
        check({launcher.name}({args}, stream));
    }}
}};

}}  // namespace {launcher.prefix}
"""
