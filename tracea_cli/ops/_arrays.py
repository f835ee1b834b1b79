"""What ``tracea.ops`` reads off an argument (NumPy array or torch tensor) and how it hands the data to a
kernel without copying: a NumPy view of a CPU buffer, a device pointer of a CUDA tensor. torch is never
imported here: a tensor is recognised by its type's module, and its own methods do the rest."""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np

from tracea.doctor.errors import BadInputError
from tracea.kernels.dtypes import DType

NUMPY_DTYPES = {"float32": DType.FP32, "float16": DType.FP16, "bfloat16": DType.BF16}  # bfloat16: ml_dtypes'
TORCH_DTYPES = {"torch.float32": DType.FP32, "torch.float16": DType.FP16, "torch.bfloat16": DType.BF16}


def is_torch(x: Any) -> bool:
    return type(x).__module__.startswith("torch") and hasattr(x, "data_ptr")


def shown(value: Any, limit: int = 60) -> str:
    """A caller's value as an error message shows it: one line, at most ``limit`` characters, and never an
    error of its own (an array's repr spans lines; an integer of more than 4300 digits has none)."""
    if isinstance(value, np.ndarray) or is_torch(value):
        return f"a {type(value).__name__} of shape {tuple(value.shape)}"
    try:
        text = " ".join(repr(value).split())
    except Exception:  # noqa: BLE001 - a repr that raises (int past str's digit limit, a broken __repr__)
        text = f"a {type(value).__name__}"
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclass(frozen=True)
class Arg:
    """One array argument as the router sees it."""

    obj: Any
    kind: str  # "numpy" | "torch"
    device: str  # "cpu" | "cuda" | another torch device type
    index: int | None  # the CUDA device index
    dtype: DType | None  # None: a type no kernel serves
    dtype_name: str
    shape: tuple[int, ...]
    contiguous: bool  # dense, row-major
    grad: bool  # a torch tensor autograd tracks here
    lazy: bool = False  # a torch view with its negative or conjugate bit set (its memory is not its value)

    @property
    def where(self) -> str:
        return self.device if self.index is None else f"{self.device}:{self.index}"


def describe(name: str, x: Any) -> Arg:
    if isinstance(x, np.ndarray):
        dt = str(x.dtype)
        return Arg(x, "numpy", "cpu", None, NUMPY_DTYPES.get(dt), dt, tuple(x.shape), bool(x.flags.c_contiguous),
                   False)
    if is_torch(x):
        torch = sys.modules["torch"]
        dt = str(x.dtype)
        dev = x.device
        grad = bool(x.requires_grad and torch.is_grad_enabled())
        return Arg(x, "torch", dev.type, dev.index if dev.type == "cuda" else None, TORCH_DTYPES.get(dt), dt,
                   tuple(x.shape), bool(x.is_contiguous()), grad, bool(x.is_neg() or x.is_conj()))
    raise BadInputError(f"{name}: expected a NumPy array or a torch tensor, got {type(x).__name__}",
                        "wrap lists with numpy.asarray(...)")


def host_view(arg: Arg, obj: Any = None) -> np.ndarray:
    """The kernel's NumPy view of a CPU buffer, sharing its memory (bf16 as its uint16 bits)."""
    x = arg.obj if obj is None else obj
    if arg.kind == "numpy":  # (an index array beside bf16 operands, a block table, keeps its int32)
        return x.view(np.uint16) if arg.dtype is DType.BF16 and x.dtype.kind != "i" else x
    x = x.detach()
    if arg.dtype is DType.BF16 and x.is_floating_point():
        torch = sys.modules["torch"]
        return x.view(torch.int16).numpy().view(np.uint16)
    return x.numpy()


def device_ptr(obj: Any) -> int:
    """A CUDA tensor's device pointer (``data_ptr``: what ``__cuda_array_interface__`` and DLPack carry,
    and also there for bf16, which the array interface cannot describe)."""
    return int(obj.data_ptr())


_TOO_HARD = getattr(np, "exceptions", np).TooHardError  # numpy.exceptions from NumPy 1.25


def _extent(x: Any) -> tuple[str, int, int] | None:
    """(where, first byte, one past the last byte) that a tensor's elements span; None when it has none."""
    if x.numel() == 0:
        return None
    lo = hi = x.data_ptr()
    for size, stride in zip(x.shape, x.stride(), strict=True):
        step = (size - 1) * stride * x.element_size()
        lo, hi = (lo + step, hi) if step < 0 else (lo, hi + step)
    return str(x.device), lo, hi + x.element_size()


def overlapping(out: Any, x: Any) -> bool:
    """Whether ``out`` and the input ``x`` share memory. NumPy: exactly (``np.shares_memory``; a case too hard
    to decide counts as shared). torch: by the bytes each spans, where both are dense (every byte of the span
    an element's: what a kernel reads and writes); a strided input with gaps is not compared, as no kernel
    reads one (it takes torch's op, which computes into a temporary before ``out`` is written)."""
    if isinstance(out, np.ndarray) and isinstance(x, np.ndarray):
        try:
            return bool(np.shares_memory(out, x, max_work=100_000))
        except _TOO_HARD:
            return True
    if not (is_torch(out) and is_torch(x)):
        return False
    a, b = _extent(out), _extent(x)
    if a is None or b is None or a[0] != b[0]:
        return False
    dense = all(e[2] - e[1] == t.numel() * t.element_size() for e, t in ((a, out), (b, x)))
    return dense and a[1] < b[2] and b[1] < a[2]


def empty_like(arg: Arg, shape: tuple[int, ...]) -> Any:
    """A new output of ``arg``'s kind, dtype and device."""
    if arg.kind == "numpy":
        return np.empty(shape, dtype=arg.obj.dtype)
    torch = sys.modules["torch"]
    return torch.empty(shape, dtype=arg.obj.dtype, device=arg.obj.device)


def check_out(out: Any, like: Arg, shape: tuple[int, ...], channels_last: bool = False) -> Arg:
    """A caller's ``out``: the result's kind, device, dtype and shape, dense and writeable; with
    ``channels_last`` (a conv on channels_last tensors) a torch tensor dense in that memory format, as the
    kernel writes it."""
    o = describe("out", out)
    if channels_last:
        torch = sys.modules["torch"]
        if not out.is_contiguous(memory_format=torch.channels_last):
            raise BadInputError("out: x and weight are channels_last, so out must be too (the kernel writes NHWC)",
                                "out=torch.empty(shape).contiguous(memory_format=torch.channels_last), or leave "
                                "out= for a new result")
        o = dataclasses.replace(o, contiguous=True)
    if o.kind != like.kind or o.where != like.where or o.dtype_name != like.dtype_name or o.shape != shape:
        raise BadInputError(f"out: expected a {like.kind} {like.dtype_name} array of shape {shape} on {like.where}, "
                            f"got a {o.kind} {o.dtype_name} of shape {o.shape} on {o.where}",
                            "leave out= to get a new result, or allocate it like the inputs")
    if not o.contiguous or (o.kind == "numpy" and not out.flags.writeable):
        raise BadInputError("out: must be C-contiguous and writeable", "allocate it with numpy.empty / torch.empty")
    return o
