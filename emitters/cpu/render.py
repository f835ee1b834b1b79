"""Rendering one CPU kernel: the operation's renderer on the variant's ISA part, plus what the runtime
needs to call it (entry name, buffer order, runtime dimensions) and its metadata."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from tracea.doctor.errors import UnsupportedError

from ..schedule import CpuSchedule
from .isa import CpuIsa, isa_for


@dataclass(frozen=True)
class Rendered:
    name: str
    source: str
    entry: str
    flags: tuple[str, ...]  # the ISA's flags for this input type (the compiler adds BASE_FLAGS)
    buffers: tuple[str, ...]  # pointer order of the entry's bufs argument; "out" is the output
    dims: tuple[int, ...]  # the entry's int64 dims (threads last, 0 = the schedule's)
    fparams: tuple[float, ...]
    metadata: dict[str, Any] = field(default_factory=dict)


def kernel_name(op: Any, family: str, s: CpuSchedule) -> str:
    fam = family.removeprefix("cpu-").replace("-", "")
    dtype = op.dtype.value
    if op.kind == "gemm":
        tag = f"{op.layout_a[0]}{op.layout_b[0]}" + "".join(f"_{e}" for e in op.epilogue)
    elif op.kind == "conv2d":
        tag = op.layout + ("_bias" if op.bias else "")
    else:
        tag = "rows"
    return f"{op.kind}_{dtype}_{tag}_{fam}_{s.mr}x{s.nr}"


SHAPE_FREE = {"gemm": ("dtype", "layout_a", "layout_b", "epilogue"), "conv2d": ("dtype", "layout", "bias"),
              "softmax": ("dtype",)}


def _header(op: Any, family: str, s: CpuSchedule, name: str) -> str:
    # Only what the source depends on: shapes (and alpha) are runtime arguments, so one binary (one
    # cache entry) serves every shape of this kind.
    kind = {k: v for k, v in op.to_json().items() if k in SHAPE_FREE.get(op.kind, ())}
    return (f"/* Tracea CPU kernel {name}: generated, do not edit.\n"
            f" * variant  {family}.{op.kind}\n"
            f" * op       {json.dumps(kind, sort_keys=True)}, shapes at run time\n"
            f" * schedule {json.dumps(s.to_json(), sort_keys=True)} */\n")


def render(op: Any, family: str, s: CpuSchedule) -> Rendered:
    isa = isa_for(family)
    name = kernel_name(op, family, s)
    header = _header(op, family, s, name)
    dtype = op.dtype.value
    if op.kind == "gemm":
        from .gemm import ENTRY, render_gemm

        source = render_gemm(op, isa, s, header)
        buffers = ("a", "b", "out", "bias", "residual")
        dims: tuple[int, ...] = (op.m, op.n, op.k, 0)
        fparams: tuple[float, ...] = (op.alpha,)
    elif op.kind == "conv2d":
        from .conv import ENTRY, render_conv

        source = render_conv(op, isa, s, header)
        buffers = ("x", "weight", "out", "bias")
        dims = (op.n, op.c, op.h, op.w, op.k, op.r, op.s, *op.stride, *op.padding, *op.dilation, op.groups, 0)
        fparams = ()
    elif op.kind == "softmax":
        from .softmax import ENTRY, render_softmax

        source = render_softmax(op, isa, s, header)
        buffers = ("x", "out")
        dims = (op.rows, op.cols, 0)
        fparams = ()
    else:
        raise UnsupportedError(f"op: the CPU emitter has no renderer for {op.kind!r}")
    return Rendered(name=name, source=source, entry=ENTRY, flags=tuple(isa.compile_flags(dtype)), buffers=buffers,
                    dims=dims, fparams=fparams, metadata=metadata(op, isa, s, name))


def metadata(op: Any, isa: CpuIsa, s: CpuSchedule, name: str) -> dict[str, Any]:
    """DESIGN.md's kernel metadata (Tessera §11.2) for a CPU kernel: GPU-only resources are None."""
    dtype = op.dtype.value
    if op.kind == "softmax":
        return {
            "name": name, "tile": {"M": 1, "N": isa.lanes, "K": None, "stages": 1},
            "fragments": {"mma": None, "dtype_in": dtype, "dtype_acc": "fp32", "vector": isa.vtype, "lanes": isa.lanes},
            "resources": {"regs_per_thread": None, "smem_per_cta": None, "packed_a_bytes": 0, "packed_b_bytes": 0,
                          "scratch_bytes_per_thread": 0 if dtype == "fp32" else 4 * op.cols},
            "launch": {"grid": None, "block": None, "threads": s.threads},
            "epilogue": [] if dtype == "fp32" else [f"round to {dtype}"],
        }
    if op.kind == "gemm":
        epilogue = list(op.epilogue)
    else:
        epilogue = ["bias"] if op.bias else []
    if dtype != "fp32":
        epilogue.append(f"round to {dtype}")
    return {
        "name": name,
        "tile": {"M": s.mr, "N": s.nr, "K": s.kc, "stages": 1},
        "blocks": {"MC": s.mc, "KC": s.kc, "NC": s.nc},
        "fragments": {"mma": isa.mma, "dtype_in": dtype, "dtype_acc": "fp32", "vector": isa.vtype,
                      "lanes": isa.lanes, "accumulators": s.mr * s.nr // isa.lanes},
        "resources": {"regs_per_thread": None, "smem_per_cta": None,
                      "vector_registers": s.mr * s.nr // isa.lanes + s.nr // isa.lanes + 1,
                      "packed_a_bytes": 4 * s.mc * s.kc if s.pack_a or op.kind != "gemm" else 0,
                      "packed_b_bytes": 4 * s.kc * s.nc,
                      "packed_a_bytes_total": 4 * s.mc * s.kc * s.threads},
        "launch": {"grid": None, "block": None, "threads": s.threads},
        "unroll": s.unroll, "prefetch": s.prefetch, "pack": {"a": s.pack_a, "b": s.pack_b},
        "epilogue": epilogue,
    }
