"""The Hopper GEMM's TMA tensor maps in a CUDA package (``cuda-wgmma.gemm`` takes its operands as maps passed by
value): the geometry the launcher encodes (``TensorMaps``, from ``hopper/gemm.tma_boxes`` as ``tma.py``
encodes it for Tracea's own runs), the C that encodes them and keeps the maps of the last few addresses of
each operand (``TMA_C``), and the launcher's lines that fill each map. An operand TMA cannot address
(``tma_unsupported``) is refused with a hint."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tracea.doctor.errors import UnsupportedError

from ..export_abi import Launcher
from .render import Rendered

# The Hopper GEMM's tensor maps (tma.py's encoding: 2-D, 128B swizzle, zero fill out of bounds). A map holds
# only the address and the geometry, and the geometry is the export's (its L2 promotion by tma.promotion_for's
# rule): the maps of the last TR_MAP_SLOTS addresses of each operand are kept, so a call with the same buffers
# encodes nothing.
TMA_C = """
#define TR_MAP_SLOTS 8
typedef struct { const void* ptr; CUtensorMap map; } TrMapSlot;
static TrMapSlot tr_maps[3][TR_MAP_SLOTS];  /* A, B, C */
static unsigned int tr_map_next[3];
static pthread_mutex_t tr_map_lock = PTHREAD_MUTEX_INITIALIZER;

/* The map of operand `which` (a row-major `outer` x `inner` 16-bit matrix at `ptr`, boxes of box0 x box1). */
static TraceaStatus tr_tensor_map(const char* fn, const char* name, int which, const void* ptr, uint64_t inner,
                                  uint64_t outer, uint32_t box0, uint32_t box1, CUtensorMap* map) {
    if ((uintptr_t)ptr % 16)
        return tr_fail(TRACEA_ERROR_INVALID_ARGUMENT, "%s: %s->data is not 16-byte aligned (TMA needs it)", fn, name);
    pthread_mutex_lock(&tr_map_lock);
    for (int i = 0; i < TR_MAP_SLOTS; ++i)
        if (tr_maps[which][i].ptr == ptr) {
            *map = tr_maps[which][i].map;
            pthread_mutex_unlock(&tr_map_lock);
            return TRACEA_SUCCESS;
        }
    pthread_mutex_unlock(&tr_map_lock);
    const cuuint64_t dims[2] = {inner, outer};
    const cuuint64_t strides[1] = {inner * 2};  /* bytes between rows */
    const cuuint32_t box[2] = {box0, box1};
    const cuuint32_t steps[2] = {1, 1};
    TraceaStatus s = tr_cu(cuTensorMapEncodeTiled(map, TR_MAP_DTYPE, 2, (void*)ptr, dims, strides, box, steps,
                                                  CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                                  inner * 2 % 128 ? TR_MAP_OFF_LINE_PROMOTION : TR_MAP_L2_PROMOTION,
                                                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
                           "cuTensorMapEncodeTiled");
    if (s != TRACEA_SUCCESS) return s;
    pthread_mutex_lock(&tr_map_lock);
    TrMapSlot* slot = &tr_maps[which][tr_map_next[which]++ % TR_MAP_SLOTS];
    slot->ptr = ptr;
    slot->map = *map;
    pthread_mutex_unlock(&tr_map_lock);
    return TRACEA_SUCCESS;
}
"""

MAP_OPERANDS = {"tmA": ("a", 0), "tmB": ("b", 1), "tmC": ("out", 2)}  # kernel parameter -> (tensor, cache row)


@dataclass(frozen=True)
class TensorMaps:
    """What the launcher encodes for the Hopper GEMM: per map (inner, outer, box inner, box outer) of a
    row-major 16-bit matrix, and whether C is stored through its map (``tma.c_output_map``'s rule; the
    launcher also needs C's address 16-byte aligned, else the kernel's direct stores run). ``operands``: the
    tensor each map is over (and its row of the launcher's map cache): A's, B's and C's, or with swapped operands
    the kernel's A over B and its B over A. The scaled 8-bit GEMM's maps are over its bytes taken two by two."""

    dtype: str
    geometry: dict[str, tuple[int, int, int, int]]
    store_tma: bool
    operands: dict[str, tuple[str, int]] = field(default_factory=lambda: dict(MAP_OPERANDS))

    def to_json(self) -> dict[str, Any]:
        return {"dtype": self.dtype, "store_tma": self.store_tma, "encoding": "tiled 2-D, 128B swizzle, zero fill",
                "maps": {p: {"tensor": self.operands[p][0],
                             **dict(zip(("inner", "outer", "box_inner", "box_outer"), g, strict=True))}
                         for p, g in self.geometry.items()}}


def tensor_maps(op: Any, r: Rendered, schedule: Any) -> TensorMaps | None:
    """The Hopper GEMM's maps, or the TMA-fed decode GEMM's (None for a kernel that takes none); an operand TMA
    cannot address is refused."""
    from . import gemv_tma
    from .hopper import gemm

    if getattr(schedule, "core", None) == "gemv_tma":  # the decode GEMM: A and B by TMA (8-bit ones as byte pairs)
        return TensorMaps(gemv_tma.view(op).dtype.value, gemv_tma.map_geometry(op), False)
    if op.kind == "scaled_gemm" and r.entry == gemm.KERNEL_NAME:
        return _scaled_maps(op, schedule)
    if op.kind != "gemm" or r.entry != gemm.KERNEL_NAME:
        return None
    if getattr(schedule, "swap", False):  # the kernel's A map would be over B, and its M and N exchanged
        raise UnsupportedError("export: a schedule with swapped operands (swap: true) is not exported",
                               "pass a schedule without swap (--schedule), or --variant cuda-mma-sync.gemm")
    why = gemm.tma_unsupported(op)
    if why:  # Tracea's own runs copy such an operand into a padded buffer at every launch; a package does not
        raise UnsupportedError(f"export: {why}", "pass --variant cuda-mma-sync.gemm (mma.sync, which Hopper runs too)")
    boxes = gemm.tma_boxes(op, schedule)
    geometry = {f"tm{w.upper()}": (*boxes[w]["dims"], *boxes[w]["box"]) for w in ("a", "b")}
    geometry["tmC"] = (op.n, op.m, 64, 64)
    return TensorMaps(op.dtype.value, geometry, schedule.store == "tma" and (op.n * 2) % 16 == 0)


def _scaled_maps(op: Any, schedule: Any) -> TensorMaps:
    """The scaled 8-bit GEMM's maps, as ``scaled_gemm.scaled_kernel`` encodes them: the bf16 GEMM's over the operands'
    byte pairs (``byte_view``: K/2 16-bit columns, K % 16 == 0 by the kernel's check), exchanged under ``swap``
    (C^T = B^T A^T: the kernel's A is B); C's for a 16-bit output only (``tma.c_output_map``: boxes of 64 x 64, or
    64 columns x ``bn`` rows swapped)."""
    from .hopper import gemm, scaled_gemm

    boxes = gemm.tma_boxes(scaled_gemm.byte_view(op), schedule)
    geometry = {f"tm{w.upper()}": (*boxes[w]["dims"], *boxes[w]["box"]) for w in ("a", "b")}
    geometry["tmC"] = (op.n, op.m, 64, schedule.bn if schedule.swap else 64)
    store_tma = schedule.store == "tma" and op.out_dtype.value in ("bf16", "fp16") and (op.n * 2) % 16 == 0
    operands = {"tmA": ("b", 1), "tmB": ("a", 0), "tmC": ("out", 2)} if schedule.swap else dict(MAP_OPERANDS)
    return TensorMaps("bf16", geometry, store_tma, operands)


def map_lines(launcher: Launcher, maps: TensorMaps, param: str) -> list[str]:
    """The launcher's lines that fill ``m_<param>`` (and ``s_store_tma`` with C's map)."""
    tensor, which = maps.operands[param]
    inner, outer, b0, b1 = maps.geometry[param]
    encode = [f"s = tr_tensor_map(\"{launcher.name}\", \"{tensor}\", {which}, {tensor}->data, {inner}, {outer}, "
              f"{b0}, {b1}, &m_{param});", "if (s != TRACEA_SUCCESS) return s;"]
    if param != "tmC":
        return [f"    CUtensorMap m_{param};", *(f"    {ln}" for ln in encode)]
    lines = [f"    CUtensorMap m_{param};", f"    memset(&m_{param}, 0, sizeof m_{param});", "    int s_store_tma = 0;"]
    if maps.store_tma:
        lines += ["    if ((uintptr_t)out->data % 16 == 0) {  /* else the kernel's direct stores */",
                  *(f"        {ln}" for ln in encode), "        s_store_tma = 1;", "    }"]
    return lines
