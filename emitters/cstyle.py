"""One C-style renderer base for every backend (the tinygrad habit).

The shared rules of C-family languages live here as tables (type map, qualifiers, barrier string,
op lambdas) plus a handful of methods that render declarations, functions and constants. A language
subclass mostly sets attributes; it overrides a method only where the language truly differs. The CPU
renderers (``emitters/cpu/isa.py``: AVX-512, AVX2+FMA, NEON, portable C) subclass it today; CUDA, HIP
and Metal renderers will subclass it too, each declaring its limits (``shared_max``, ``dtypes``).

Nothing here needs a compiler or a device: rendering is testable anywhere.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import ClassVar


class CodeWriter:
    """Lines of C with indentation; ``with w.block("for (...)"):`` opens and closes braces."""

    def __init__(self, indent: str = "    ") -> None:
        self._lines: list[str] = []
        self._level = 0
        self._indent = indent

    def __call__(self, *lines: str) -> CodeWriter:
        for text in lines:
            for ln in text.split("\n"):
                self._lines.append(self._indent * self._level + ln if ln else "")
        return self

    @contextmanager
    def block(self, head: str, tail: str = "}") -> Iterator[None]:
        self(head + " {")
        self._level += 1
        try:
            yield
        finally:
            self._level -= 1
            self(tail)

    @contextmanager
    def indented(self, levels: int = 1) -> Iterator[None]:
        """Lines written inside sit ``levels`` deeper, without braces (a body continued from text that
        opened its blocks elsewhere, a label's statements)."""
        self._level += levels
        try:
            yield
        finally:
            self._level -= levels

    def extend(self, text: str) -> None:
        self(text.rstrip("\n"))

    def render(self) -> str:
        return "\n".join(self._lines) + "\n"


@dataclass(frozen=True)
class Param:
    """One function parameter: ``dtype`` is a key of the renderer's type map or a literal C type."""

    name: str
    dtype: str
    pointer: bool = False
    const: bool = False
    restrict: bool = False


class CStyleRenderer:
    """Shared rules of C-family kernel languages. Subclasses set the class attributes."""

    language: ClassVar[str] = "c"
    file_suffix: ClassVar[str] = ".c"
    includes: ClassVar[tuple[str, ...]] = ("stdint.h", "stddef.h")
    kernel_prefix: ClassVar[str] = ""  # CUDA: 'extern "C" __global__ '; CPU: visibility
    static_prefix: ClassVar[str] = "static "
    inline_prefix: ClassVar[str] = "static inline "
    restrict: ClassVar[str] = "restrict"  # CUDA/HIP/C++: "__restrict__"
    smem_prefix: ClassVar[str] = ""  # CUDA: "__shared__ ", Metal: "threadgroup "
    barrier: ClassVar[str] = ""  # CUDA: "__syncthreads();", Metal: "threadgroup_barrier(...);"
    float_suffix: ClassVar[str] = "f"
    # Element types: 16-bit floats travel as their bits (uint16_t) unless a language has a native type.
    type_map: ClassVar[dict[str, str]] = {
        "fp32": "float", "fp16": "uint16_t", "bf16": "uint16_t", "fp64": "double",
        "i32": "int32_t", "i64": "int64_t", "u16": "uint16_t", "u32": "uint32_t", "bool": "int",
    }
    # Scalar ops; a language overrides the entries it spells differently.
    code_for_op: ClassVar[dict[str, Callable[..., str]]] = {
        "neg": lambda x: f"(-{x})",
        "add": lambda a, b: f"({a} + {b})",
        "sub": lambda a, b: f"({a} - {b})",
        "mul": lambda a, b: f"({a} * {b})",
        "div": lambda a, b: f"({a} / {b})",
        "max": lambda a, b: f"fmaxf({a}, {b})",
        "min": lambda a, b: f"fminf({a}, {b})",
        "exp": lambda x: f"expf({x})",
        "tanh": lambda x: f"tanhf({x})",
        "where": lambda c, a, b: f"({c} ? {a} : {b})",
        "cmplt": lambda a, b: f"({a} < {b})",
    }
    # Declared limits of the hardware this language targets (None: not applicable).
    shared_max: ClassVar[int | None] = None
    dtypes: ClassVar[tuple[str, ...]] = ("fp32", "fp16", "bf16")

    # ------------------------------------------------------------------ small pieces

    def ctype(self, dtype: str) -> str:
        return self.type_map.get(dtype, dtype)

    def render_const(self, value: float | int | bool, dtype: str = "fp32") -> str:
        if isinstance(value, bool):
            return "1" if value else "0"
        if dtype in ("i32", "i64", "u16", "u32") or (isinstance(value, int) and dtype not in ("fp32", "fp64")):
            return f"{int(value)}" + ("LL" if dtype == "i64" else "")
        v = float(value)
        if math.isnan(v):
            return "NAN"
        if math.isinf(v):
            return "INFINITY" if v > 0 else "-INFINITY"
        text = repr(v)
        if "e" not in text and "." not in text:
            text += ".0"
        return text + (self.float_suffix if dtype == "fp32" else "")

    def render_cast(self, dtype: str, expr: str) -> str:
        return f"(({self.ctype(dtype)})({expr}))"

    def op(self, name: str, *args: str) -> str:
        return self.code_for_op[name](*args)

    def render_comment(self, text: str) -> str:
        body = text.replace("*/", "* /").rstrip("\n").split("\n")
        return "/* " + "\n * ".join(body) + " */"

    def render_includes(self, extra: Iterable[str] = ()) -> str:
        seen: list[str] = []
        for inc in (*self.includes, *extra):
            if inc not in seen:
                seen.append(inc)
        return "\n".join(f"#include <{inc}>" for inc in seen)

    def render_defines(self, defines: dict[str, int | str]) -> str:
        return "\n".join(f"#define {k} {v}" for k, v in defines.items())

    def render_param(self, p: Param) -> str:
        t = self.ctype(p.dtype)
        if not p.pointer:
            return f"{'const ' if p.const else ''}{t} {p.name}"
        return f"{'const ' if p.const else ''}{t}* {self.restrict + ' ' if p.restrict else ''}{p.name}"

    def render_signature(self, name: str, params: Sequence[Param], ret: str = "void", prefix: str = "") -> str:
        args = ", ".join(self.render_param(p) for p in params) or "void"
        return f"{prefix}{ret} {name}({args})"

    def render_function(self, name: str, params: Sequence[Param], body: str, ret: str = "void",
                        prefix: str | None = None) -> str:
        w = CodeWriter()
        with w.block(self.render_signature(name, params, ret, self.static_prefix if prefix is None else prefix)):
            w.extend(body)
        return w.render()

    def render_kernel_signature(self, name: str, params: Sequence[Param], ret: str = "void") -> str:
        """The exported entry point: what the runtime looks up by name."""
        return self.render_signature(name, params, ret, self.kernel_prefix)


# Plain C in double precision over the scalar ``v`` (``alpha`` a double in scope): the exported packages'
# reference loops (export_example.py, every backend's packages), independent of any kernel's code; the
# vocabulary's ops as kernels/epilogue.py names them.
C_REFERENCE = {
    "bias": "v += {bias};",
    "relu": "v = v < 0 ? 0 : v;",  # a NaN stays NaN, as torch.relu and np.maximum keep it
    "gelu": "v = 0.5 * v * (1.0 + tanh(GELU_C0 * (v + GELU_C1 * v * v * v)));",
    "scale": "v *= alpha;",
    "residual": "v += {residual};",
}
