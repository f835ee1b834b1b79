"""The C ABI of an exported package (DESIGN.md, "Written contracts"), written once for every backend: its
version and dtype codes, the package's prefix (its rules, ``default_prefix``), the ``Launcher`` every
backend renders (the op's tensors in the kernel's buffer order) and the backend-neutral C behind the
headers (last error, tensor-view checks: ``src/tracea_abi.inc`` and the launcher's opening checks).

A package exports one op at one shape under a prefix of its own (``--prefix``, else ``default_prefix``):
every symbol it leaves in the library, its macros, header guards, C++ namespace and CMake target carry
that prefix, so any number of packages link into one program. The types (status codes, tensor views) are
shared: the first package header in a translation unit defines them, keyed by the ABI version. Each
launcher checks every view against its shape, dtype and contiguous row-major layout and returns a status
with a message instead of reading out of bounds. The headers are export_headers.py's, the files every
package shares (manifest, README, the writing) export_package.py's; the backends (cpu/export.py,
cuda/export.py) add the kernel, the body of the launcher and the CMake file (``cmake_package`` has its
install and package config).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

from tracea.doctor.errors import BadInputError, UnsupportedError
from tracea.kernels import OPS, DType, Op

# 2: per-package prefixes (symbols, macros, guards, namespace), const input views (TraceaConstTensorView),
# the shared types guarded once per translation unit, tracea_view() an inline function of the header.
# 3: a dtype a tensor (8-bit inputs, fp32 scales, an int32 output: the scaled GEMM), codes for int8, int32 and FP8.
ABI_VERSION = 3
MAX_DIMS = 8
# the ABI's dtype codes: name -> (its TraceaDType enumerator, the enumerator's value, the C type of an element)
DTYPE_CODES = {"fp32": ("TRACEA_DTYPE_F32", 0, "float"), "fp16": ("TRACEA_DTYPE_F16", 1, "uint16_t"),
               "bf16": ("TRACEA_DTYPE_BF16", 2, "uint16_t"), "int8": ("TRACEA_DTYPE_I8", 3, "int8_t"),
               "int32": ("TRACEA_DTYPE_I32", 4, "int32_t"), "fp8e4m3": ("TRACEA_DTYPE_F8E4M3", 5, "uint8_t"),
               "fp8e5m2": ("TRACEA_DTYPE_F8E5M2", 6, "uint8_t")}
DTYPES = {name: code[0] for name, code in DTYPE_CODES.items()}

# ------------------------------------------------------------------------------------------- the prefix

PREFIX_MAX = 48
C_KEYWORDS = frozenset("""auto break case char const continue default do double else enum extern float for goto if
inline int long register restrict return short signed sizeof static struct switch typedef union unsigned void
volatile while bool true false nullptr alignas alignof constexpr static_assert thread_local typeof
typeof_unqual""".split())
CPP_KEYWORDS = frozenset("""and and_eq asm bitand bitor catch char8_t char16_t char32_t class compl concept consteval
constinit const_cast co_await co_return co_yield decltype delete dynamic_cast explicit export friend mutable
namespace new noexcept not not_eq operator or or_eq private protected public reinterpret_cast requires
static_cast template this throw try typeid typename using virtual wchar_t xor xor_eq""".split())
# Not keywords, but a package cannot be named so: C++'s reserved namespaces, the namespace every package
# shares, and the target names CMake keeps for itself.
RESERVED = frozenset({"std", "posix", "tracea", "all", "all_build", "clean", "edit_cache", "help", "install",
                      "package", "package_source", "preinstall", "rebuild_cache", "run_tests", "test",
                      "zero_check"})


def prefix_problem(name: str) -> str | None:
    """What makes ``name`` unusable as a package prefix (one line), or None."""
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        return f"{name!r} is not a C identifier (a letter, then letters, digits or _)"
    if name.startswith("_") or "__" in name or name.endswith("_"):
        return f"{name!r} starts or ends with _ or holds __ (names C and C++ reserve once the prefix is joined)"
    if name in C_KEYWORDS or name in CPP_KEYWORDS:
        return f"{name!r} is a C or C++ keyword"
    if name.lower() in RESERVED:
        return f"{name!r} is reserved (a C++ namespace, the shared `tracea` namespace, or a CMake target name)"
    if len(name) > PREFIX_MAX:
        return f"{name!r} is {len(name)} characters; at most {PREFIX_MAX}"
    return None


def check_prefix(name: str) -> str:
    problem = prefix_problem(name)
    if problem:
        raise BadInputError(f"--prefix: {problem}", "e.g. --prefix my_gemm")
    return name


def default_prefix(op: Any, backend: str) -> str:
    """``<op>_<dtype>_<size>_<hash>``, e.g. ``gemm_fp16_1024x1024x1024_3f9c2a``: the hash (6 hex digits of
    the sha256 of the op's JSON and the backend) tells apart exports that differ in anything else (layout,
    epilogue, stride, a CPU and a CUDA package of one op). A size too long for a prefix is left out."""
    doc = json.dumps({"op": op.to_json(), "backend": backend}, sort_keys=True)
    digest = hashlib.sha256(doc.encode()).hexdigest()[:6]
    name = f"{op.kind}_{op.dtype.value}_{op.extent()}_{digest}"
    return name if len(name) <= PREFIX_MAX else f"{op.kind}_{op.dtype.value}_{digest}"


# ------------------------------------------------------------------------------------------- the launcher


def exportable() -> list[str]:
    """The ops a package can hold: those that carry their reference in plain C (``Op.c_reference``), which
    the package's example checks the launcher against."""
    return [kind for kind, cls in OPS.items() if cls.c_reference is not Op.c_reference]


@dataclass(frozen=True)
class Tensor:
    name: str
    shape: tuple[int, ...]
    output: bool = False
    dtype: str = "fp32"  # a DTYPES name

    @property
    def code(self) -> str:
        return DTYPES[self.dtype]

    @property
    def nbytes(self) -> int:
        return self.numel * DType(self.dtype).itemsize

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def view_type(self) -> str:
        """Its C view type: inputs are read through a const view."""
        return "TraceaTensorView" if self.output else "TraceaConstTensorView"

    @property
    def view_maker(self) -> str:
        return "tracea_view" if self.output else "tracea_const_view"


@dataclass(frozen=True)
class Launcher:
    """One exported op: ``<prefix>_<kind>(inputs..., out, side outputs..., stream)``, the inputs in the kernel's
    buffer order; the side outputs are what the kernel writes beside C (``Op.side_outputs``: an FP8 C's amax)."""

    op: Any
    tensors: tuple[Tensor, ...]  # the inputs, then the outputs: C ("out") first, then the side outputs
    prefix: str

    @property
    def name(self) -> str:
        return f"{self.prefix}_{self.op.kind}"

    @property
    def macro(self) -> str:
        """The prefix of the package's macros (its prefix upper-cased)."""
        return self.prefix.upper()

    def api(self, what: str) -> str:
        """The package's C function ``what`` (init, shutdown, get_last_error, ...)."""
        return f"{self.prefix}_{what}"

    def shape_macro(self, t: Tensor) -> str:
        return f"{self.macro}_{t.name.upper()}"

    @property
    def dtype(self) -> str:
        """The op's input type (every tensor's but a scaled GEMM's scales and output: ``Tensor.dtype``)."""
        return self.op.dtype.value

    @property
    def inputs(self) -> tuple[Tensor, ...]:
        return tuple(t for t in self.tensors if not t.output)

    @property
    def outputs(self) -> tuple[Tensor, ...]:
        """C, then the side outputs."""
        return tuple(t for t in self.tensors if t.output)

    @property
    def out(self) -> Tensor:
        return self.outputs[0]

    @property
    def side_outputs(self) -> tuple[Tensor, ...]:
        return self.outputs[1:]

    def signature(self) -> str:
        args = [f"const {t.view_type}* {t.name}" for t in self.inputs] + [f"TraceaTensorView* {t.name}"
                                                                          for t in self.outputs]
        return f"TraceaStatus {self.name}({', '.join([*args, 'void* stream'])})"


def launcher_for(op: Any, order: tuple[str, ...] | list[str], prefix: str) -> Launcher:
    """The launcher of ``op`` with its inputs in ``order`` (the kernel's buffers; absent optional ones dropped)."""
    if op.kind not in exportable():
        raise UnsupportedError(f"export: {op.kind} cannot be exported yet (ABI version {ABI_VERSION} has "
                               f"{', '.join(exportable())})", f"export {' or '.join(exportable())}")
    if getattr(op, "block_mask", None) is not None:
        raise UnsupportedError("export: attention with a --block-mask cannot be exported yet",
                               "export it without the block mask (causal and --window are exported)")
    if getattr(op, "serving", False):  # int32 views and an example that gathers pages: not in this ABI
        raise UnsupportedError("export: attention with --seq-lens or --page-size cannot be exported yet (ABI "
                               f"version {ABI_VERSION} has views of the op's dtype only)",
                               "export the contiguous op without them")
    shapes = {k: tuple(int(d) for d in v) for k, v in op.shapes().items()}
    side = op.side_outputs()  # written by the kernel, so output views after C, whatever their place among its buffers
    inputs = [Tensor(n, shapes[n], dtype=_input_dtype(op, n)) for n in order if n in shapes and n not in side]
    missing = set(shapes) - {t.name for t in inputs} - set(side)
    if missing:
        raise UnsupportedError(f"export: the kernel takes no buffer for {sorted(missing)[0]!r}")
    out = Tensor("out", tuple(int(d) for d in op.output_shape()), output=True, dtype=op.output_dtype.value)
    if out.dtype not in DTYPES:
        raise UnsupportedError(f"export: dtype {out.dtype} has no tensor-view type")
    sides = [Tensor(n, shapes[n], output=True, dtype=_input_dtype(op, n)) for n in side]
    return Launcher(op, (*inputs, out, *sides), check_prefix(prefix))


def _input_dtype(op: Any, name: str) -> str:
    """The DTYPES name of input ``name``: the epilogue operands' type (``operand_dtype``: C's, bf16 beside an FP8 C)
    for an epilogue operand of an op whose output type differs from its inputs' (``epilogue_shapes``), the op's
    type where its storage is the op's, else fp32 or int32 by storage (a scaled GEMM's scales)."""
    import numpy as np

    operand = getattr(op, "operand_dtype", op.output_dtype)  # C's type, or bf16 beside a scaled GEMM's FP8 C
    if name in getattr(op, "epilogue_shapes", dict)() and operand.value in DTYPES:
        return operand.value  # an epilogue operand in the type the kernel reads it (a scaled GEMM's bias, residual)
    want = np.dtype(op.input_dtype(name))
    if want == np.dtype(op.dtype.storage) and op.dtype.value in DTYPES:
        return op.dtype.value
    found = next((d for d in ("fp32", "int32") if want == np.dtype(DType(d).storage)), None)
    if found is None:
        raise UnsupportedError(f"export: {name} ({want}) has no tensor-view type")
    return found


# ------------------------------------------------------------------------------------- the C behind it

# Included once, by the launcher (src/launcher.c): every helper is static, so the library's only global
# symbols are the package's own @P@_ functions (and the kernel's @P@_ entry or image).
ABI_C = """/* tracea_abi.inc: last error and tensor-view checks of the package @P@, included once by launcher.c
 * (generated, do not edit). Its helpers are static: the library exports only names starting with @P@_. */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>

#include "@P@/tracea.h"

static _Thread_local char tr_last_error[512];

int @P@_abi_version(void) { return @M@_ABI_VERSION; }
const char* @P@_get_last_error(void) { return tr_last_error; }
void @P@_clear_error(void) { tr_last_error[0] = 0; }

static TraceaStatus tr_fail(TraceaStatus status, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tr_last_error, sizeof tr_last_error, fmt, ap);
    va_end(ap);
    return status;
}

static const char* tr_dtype_name(int32_t d) {
    static const char* names[] = {"f32", "f16", "bf16", "i8", "i32", "f8e4m3", "f8e5m2"};
    return d >= 0 && d < (int32_t)(sizeof names / sizeof names[0]) ? names[d] : "unknown";
}

/* One view's fields (input or output view alike) against the export's dtype and shape. */
static TraceaStatus tr_check_view(const char* fn, const char* name, const void* data, int32_t dtype, int32_t ndim,
                                  const int64_t* shape, const int64_t* strides, int32_t want_dtype, int32_t want_ndim,
                                  const int64_t* want_shape) {
    if (data == NULL) return tr_fail(TRACEA_ERROR_INVALID_ARGUMENT, "%s: %s->data is NULL", fn, name);
    if (dtype != want_dtype)
        return tr_fail(TRACEA_ERROR_INVALID_ARGUMENT, "%s: %s has dtype %s, the export takes %s", fn, name,
                       tr_dtype_name(dtype), tr_dtype_name(want_dtype));
    if (ndim != want_ndim)
        return tr_fail(TRACEA_ERROR_INVALID_ARGUMENT, "%s: %s has %d dimensions, the export takes %d", fn, name,
                       (int)ndim, (int)want_ndim);
    int64_t stride = 1;
    for (int i = want_ndim - 1; i >= 0; --i) {
        if (shape[i] != want_shape[i])
            return tr_fail(TRACEA_ERROR_INVALID_ARGUMENT, "%s: %s has shape[%d] = %lld, the export takes %lld", fn,
                           name, i, (long long)shape[i], (long long)want_shape[i]);
        if (strides[i] != stride && want_shape[i] != 1)
            return tr_fail(TRACEA_ERROR_INVALID_ARGUMENT,
                           "%s: %s has strides[%d] = %lld; the export takes contiguous row-major tensors (%lld)",
                           fn, name, i, (long long)strides[i], (long long)stride);
        stride *= want_shape[i];
    }
    return TRACEA_SUCCESS;
}

/* A view (input or output) against the export; a NULL view is refused too. */
#define TR_CHECK_VIEW(fn, name, v, w_dtype, w_ndim, w_shape)                                                \\
    ((v) == NULL ? tr_fail(TRACEA_ERROR_INVALID_ARGUMENT, "%s: %s is NULL", fn, name)                        \\
                 : tr_check_view(fn, name, (v)->data, (v)->dtype, (v)->ndim, (v)->shape, (v)->strides, w_dtype,   \\
                                 w_ndim, w_shape))

/* An output's bytes against each of n other views' (the inputs, then the outputs before it). */
static TraceaStatus tr_check_disjoint(const char* fn, const char* name, const void* out, int64_t out_bytes,
                                      const void* const* others, const int64_t* other_bytes,
                                      const char* const* other_names, int n) {
    uintptr_t o = (uintptr_t)out;
    for (int i = 0; i < n; ++i) {
        uintptr_t p = (uintptr_t)others[i];
        if (p < o + (uintptr_t)out_bytes && o < p + (uintptr_t)other_bytes[i])
            return tr_fail(TRACEA_ERROR_INVALID_ARGUMENT, "%s: %s overlaps %s; give a separate buffer", fn, name,
                           other_names[i]);
    }
    return TRACEA_SUCCESS;
}
"""


def abi_c(launcher: Launcher) -> str:
    """``src/tracea_abi.inc`` of the package."""
    return ABI_C.replace("@P@", launcher.prefix).replace("@M@", launcher.macro)


def checks_c(launcher: Launcher) -> str:
    """The launcher's opening lines: clear the error, check each view, then that no output overlaps an input or
    another output."""
    fn = launcher.name
    lines = [f"    {launcher.api('clear_error')}();"]
    for t in launcher.tensors:
        m = launcher.shape_macro(t)
        lines += [f"    static const int64_t shape_{t.name}[] = {m}_SHAPE;",
                  f"    if (TR_CHECK_VIEW(\"{fn}\", \"{t.name}\", {t.name}, {t.code}, {m}_NDIM, shape_{t.name}))"
                  " return TRACEA_ERROR_INVALID_ARGUMENT;"]
    views = [*launcher.inputs, *launcher.outputs]  # each output against the inputs and the outputs before it
    n_in = len(launcher.inputs)
    lines += [f"    const void* views[] = {{{', '.join(f'{t.name}->data' for t in views)}}};",
              f"    static const int64_t view_bytes[] = {{{', '.join(str(t.nbytes) for t in views)}}};",
              f"    static const char* const view_names[] = {{{', '.join(f'{chr(34)}{t.name}{chr(34)}' for t in views)}}};"]
    for k, t in enumerate(launcher.outputs):
        lines.append(f"    if (tr_check_disjoint(\"{fn}\", \"{t.name}\", {t.name}->data, {t.nbytes}, views, view_bytes, "
                     f"view_names, {n_in + k})) return TRACEA_ERROR_INVALID_ARGUMENT;")
    return "\n".join(lines)
