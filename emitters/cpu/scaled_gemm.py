"""The CPU's scaled 8-bit GEMM (``kernels/ops/scaled_gemm.py``): int8 A x int8 B -> int32, scaled into fp32, bf16
or fp16 (or the int32 accumulator itself).

Every output is a dot product along K of a row of A and a row of B held n x k (``layout_b`` col: K contiguous, read
in place; ``row`` B is transposed once a call into that form, each thread its own columns). A tile of ``mr`` rows of
A x ``nr`` rows of B keeps ``mr x nr`` vector accumulators over a K chunk of ``kc`` bytes, then sums each
accumulator's lanes. On AVX-512 VNNI the inner step is ``vpdpbusd`` (64 byte products a vector): it multiplies
unsigned by signed bytes, so B is flipped to unsigned as it loads (b + 128, one xor) and each output gives back
128 x its A row's sum (computed once a call), the convention oneDNN and FBGEMM use for signed activations. The AVX2
family widens both operands to 16 bits and multiplies them in pairs (``vpmaddwd``, exact); others run the same loops
in plain C. K chunks past the first add into an int32 scratch (fp32 for block scales); the last applies the scales
and rounds to the output type. From ``PACK_FROM_M`` rows VNNI takes the packed form instead
(``scaled_gemm_packed_c.py``: B packed into ``vpdpbusd``'s operand layout, A's bytes broadcast, no lane sums); on
a Xeon with AMX-INT8 the packed form's tile is made of AMX tiles (``scaled_gemm_amx_c.py``, a schedule's ``amx``),
and for a col B the swapped AMX form computes C^T = B A^T with the weights read in place (``swap``,
``scaled_gemm_amx_swapped_c.py``).

block128: each 128-deep block's int32 sum (less its 128 x A-block-sum in lane 0) converts to fp32 and adds into a
float accumulator times sa[m, block] x sb[block, n / 128]: the fine-grained recipe's promotion at the block edge.

Threads split N (each a run of whole ``nr`` tiles); within a thread, ``mc`` rows of A (a block kept in L2) meet each
tile of B (``nr x kc`` bytes, kept in L1) before the next.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from tracea.doctor.errors import BadInputError

from ..schedule import SCHEMA_VERSION, booleans, positive_ints, schedule_fields
from .isa import CpuIsa
from .schedule import FAMILY_REGISTERS, check_threads, family_of

ENTRY = "tracea_scaled_gemm"
BUFFERS = ("a", "b", "scale_a", "scale_b", "out", "bias", "residual")  # (the epilogue's after out: ABI 3's order)
SCALE_MODE = {"none": 0, "tensor": 1, "row": 2, "block128": 3}
OUT_KIND = {"fp32": 0, "bf16": 1, "fp16": 2, "int32": 3}
VNNI_FAMILIES = ("cpu-avx512",)  # families whose kernel is the vpdpbusd one (their variants require VNNI for int8)
AVX2_FAMILIES = ("cpu-avx2-fma",)  # families whose integer tiles widen to 16 bits and use vpmaddwd (16 ymm registers)
MAX_KC = 1 << 16  # the largest K chunk a schedule takes


@dataclass(frozen=True)
class ScaledGemmSchedule:
    """``mr`` rows of A x ``nr`` rows of B a tile, ``kc`` bytes of K a chunk, ``mc`` rows of A a block, threads."""

    mr: int
    nr: int
    kc: int
    mc: int
    threads: int = 1
    pack: bool = False  # B packed into VNNI panels, nr columns (16 a vector) x mr rows a tile (scaled_gemm_packed_c)
    amx: bool = False  # the packed form's tile of AMX tiles, 32 x 32 (scaled_gemm_amx_c; hosts with AMX-INT8)
    swap: bool = False  # AMX, col B: C^T = B A^T, the weights read in place, A packed (scaled_gemm_amx_swapped_c)

    @property
    def name(self) -> str:
        form = "amxs" if self.swap else "amx" if self.amx else "p" if self.pack else ""
        return f"{form}{self.mr}x{self.nr}_kc{self.kc}_mc{self.mc}_t{self.threads}"

    def registers(self, op: Any, family: str) -> int | None:
        """Vector registers a tile holds, where the family's tiles are vector code (None: the portable loops). VNNI's
        dot form: accumulators (twice for block scales: int32 and fp32), B rows, one A row and the flip constant;
        packed: accumulators, the panel's vectors and one broadcast. AVX2's: accumulators, B rows and one A row
        (block scales take the portable loops there)."""
        if family in VNNI_FAMILIES:
            if self.amx:
                return None  # tiles, not vector registers
            if self.pack:
                return self.mr * (self.nr // 16) + self.nr // 16 + 1
            return self.mr * self.nr * (2 if _block(op) else 1) + self.nr + 2
        if family in AVX2_FAMILIES and not _block(op):
            return self.mr * self.nr + self.nr + 1
        return None

    def validate(self, op: Any, host: Any, variant: Any = None) -> None:
        positive_ints(self, ("mr", "nr", "kc", "mc", "threads"))
        booleans(self, ("pack", "amx", "swap"))
        if self.swap and (not self.amx or getattr(op, "layout_b", None) != "col"):
            raise BadInputError(f"swap: the swapped form is the AMX form's (amx true) for a col B (n x k); got amx "
                                f"{self.amx}, {getattr(op, 'layout_b', None)}")
        family = family_of(variant, host)
        if self.amx:
            _check_amx(self, op, host, family)
        elif self.pack:
            if family not in VNNI_FAMILIES or getattr(op, "scale", None) == "block128":
                raise BadInputError(f"pack: the packed form is AVX-512 VNNI's, for tensor, row or no scales (not "
                                    f"{family}, {getattr(op, 'scale', None)})")
            if self.nr % 16 or self.nr > 128 or self.mr > 16:
                raise BadInputError(f"nr: a packed tile is up to 16 rows x 128 columns, in vectors of 16 columns; got "
                                    f"{self.mr} x {self.nr}")
        elif self.mr > 8 or self.nr > 8:
            raise BadInputError(f"mr/nr: at most 8 x 8 a tile, got {self.mr} x {self.nr}")
        if self.kc % 128:
            raise BadInputError(f"kc: {self.kc} is not a multiple of 128 (two 64-byte steps, one scale block)")
        if self.kc > MAX_KC:
            raise BadInputError(f"kc: {self.kc} bytes is beyond any cache a K chunk should fit (at most {MAX_KC})")
        if self.mc % self.mr:
            raise BadInputError(f"mc: {self.mc} is not a multiple of mr={self.mr}")
        vregs, need = FAMILY_REGISTERS[family][1], self.registers(op, family)
        if need is not None and need > vregs:
            raise BadInputError(f"mr/nr: a {self.mr} x {self.nr} tile needs {need} vector registers, more than the "
                                f"{vregs} of {family}")
        check_threads(self.threads, host)

    def to_json(self) -> dict[str, Any]:
        return {"schema_version": SCHEMA_VERSION, "backend": "cpu", **dataclasses.asdict(self)}

    @staticmethod
    def from_json(d: dict[str, Any]) -> ScaledGemmSchedule:
        return ScaledGemmSchedule(**schedule_fields(d, ScaledGemmSchedule, "cpu", "CPU", ("mr", "nr", "kc", "mc")))

    def features(self, op: Any) -> dict[str, float]:
        """None beside the fields (``Schedule``)."""
        return {}


def has_amx(host: Any) -> bool:
    """Whether the host's CPU has AMX's int8 tiles (its ISA list: amx-tile and amx-int8) and the C compiler the
    kernels take (the first of cc, gcc, clang the doctor found) knows them (its ``-march=native`` enables
    amx-int8: GCC 11 and Clang 12 on)."""
    isa = getattr(getattr(host, "cpu", None), "isa", None) or ()
    if "amx-tile" not in isa or "amx-int8" not in isa or not hasattr(host, "tool"):
        return False
    tool = next((t for t in map(host.tool, ("cc", "gcc", "clang")) if t is not None and t.found), None)
    return tool is not None and "amx-int8" in (tool.details.get("march_native_enables") or ())


AMX_FLAGS = ("-mamx-tile", "-mamx-int8")


def core_flags(s: Any) -> tuple[str, ...]:
    """The AMX form's compiler flags beside the family's (its tile functions also carry the target attribute)."""
    return AMX_FLAGS if getattr(s, "amx", False) else ()


def _check_amx(s: ScaledGemmSchedule, op: Any, host: Any, family: str) -> None:
    if not s.pack or (s.mr, s.nr) != (32, 32):
        raise BadInputError(f"amx: the AMX form is the packed form's 32 x 32 tile (pack true, mr 32, nr 32), got "
                            f"pack {s.pack}, {s.mr} x {s.nr}")
    amx = has_amx(host)
    if family not in VNNI_FAMILIES or getattr(op, "scale", None) == "block128" or not amx:
        raise BadInputError(f"amx: the AMX form needs AMX-INT8 (Sapphire Rapids and later Xeons) under {VNNI_FAMILIES[0]}"
                            f", for tensor, row or no scales (here: {family}, {'AMX' if amx else 'no AMX'}, "
                            f"{getattr(op, 'scale', None)})")


def _block(op: Any) -> bool:
    return getattr(op, "scale", None) == "block128"


def _cores(host: Any) -> int:
    return max(1, getattr(getattr(host, "cpu", None), "logical_cores", None) or 1)


# Up to this many multiply-adds a scaled GEMM runs on one thread (as the fp32 GEMM's SMALL_MACS: waking a second
# thread costs more than it saves below it).
SMALL_MACS = 128 ** 3
PACK_FROM_M = 32  # rows of A from which the packed form is the hero (VNNI; tensor, row or no scales)
AMX_FROM_M = 32  # rows of A from which the AMX form is, on a host with AMX-INT8
SWAP_FROM_M = 8  # rows of A from which the swapped AMX form is, for a col B (n x k), on a host with AMX-INT8


def hero_schedule(op: Any, variant: Any, host: Any) -> ScaledGemmSchedule:
    """On AVX-512 VNNI, measured on a 2-core Zen 4 against oneDNN's and ``torch._int_mm`` (docs/benchmarks.md):
    the packed form (6 rows x 64 columns) from ``PACK_FROM_M`` rows of A, and for a row-major B at any M (its dot
    form transposes B a byte at a time); K in 4 KiB chunks (2 KiB for 129-256 rows: the chunk of A then fits L2
    beside a panel). Below, the dot form reading B in place, all of K in one chunk (against 4 KiB chunks: 16 x 4096 x
    14336 1.07x oneDNN against 0.84x, docs/cpu-runs/epyc-int8-gemm/probe_forms.txt): one row against 8 rows of B at
    M <= 2 (decode: the weights streamed once), 4 x 6 otherwise. Block scales: the dot form's 2 x 4 tiles (fp32
    accumulators beside the int32 ones). AVX2: its 16-bit multiply-add tiles, 1 x 6 at M = 1 and 2 x 4 otherwise
    (16 ymm registers). Other families: the portable loops, 4 x 4. All cores, or one under ``SMALL_MACS``. On a Xeon
    with AMX-INT8 (``has_amx``), from ``AMX_FROM_M`` rows: the AMX form (32 x 32 tiles over the packed panels), 1.06-
    1.36x the packed VNNI form there (docs/cpu-runs/xeon-amx-int8-gemm/probe_amx_vs_vnni.txt). For a col B (the
    weights n x k) on such a host, from ``SWAP_FROM_M`` rows: the swapped AMX form (the weights never packed; A's
    panels in blocks of 256 rows): on the 2-vCPU Xeon 1.37-1.46x the AMX form at 8-32 rows and 1.27x the dot form
    at 8 (0.73x at 4: the dot form keeps M < 8), docs/cpu-runs/xeon-amx-int8-gemm/probe_amx_swapped.txt; from 128
    rows the two AMX forms traded places between runs of that noisy host (0.73-1.84x in the kept probe)."""
    vnni = family_of(variant, host) in VNNI_FAMILIES
    threads = 1 if op.m * op.n * op.k <= SMALL_MACS else _cores(host)
    if vnni and op.scale != "block128" and op.layout_b == "col" and op.m >= SWAP_FROM_M and has_amx(host):
        return ScaledGemmSchedule(mr=32, nr=32, kc=4096, mc=256, threads=threads, pack=True, amx=True, swap=True)
    if vnni and op.scale != "block128" and op.m >= AMX_FROM_M and has_amx(host):
        return ScaledGemmSchedule(mr=32, nr=32, kc=4096, mc=96, threads=threads, pack=True, amx=True)
    if vnni and op.scale != "block128" and (op.m >= PACK_FROM_M or op.layout_b == "row"):
        kc = 2048 if 128 < op.m <= 256 else 4096
        return ScaledGemmSchedule(mr=6, nr=64, kc=kc, mc=96, threads=threads, pack=True)
    if family_of(variant, host) in AVX2_FAMILIES and op.scale != "block128":
        mr, nr = (1, 6) if op.m == 1 else (2, 4)
    elif not vnni:
        mr, nr = 4, 4
    elif op.scale == "block128":
        mr, nr = 2, 4
    elif op.m <= 2:
        mr, nr = op.m, 8
    else:
        mr, nr = 4, 6
    kc = min(MAX_KC, -(-op.k // 128) * 128)  # the dot form: all of K in one chunk (no partial sums to memory)
    return ScaledGemmSchedule(mr=mr, nr=nr, kc=kc, mc=max(mr, 128 // mr * mr), threads=threads)


def schedule_space(op: Any, variant: Any, host: Any) -> list[ScaledGemmSchedule]:
    """The hero, then dot-form tiles, packed tiles (VNNI), the AMX tile (AMX-INT8 hosts), K chunks and thread counts
    around it, each valid for this host and variant."""
    hero = hero_schedule(op, variant, host)
    out = [hero]
    dot = [(mr, nr, False) for mr, nr in ((1, 8), (2, 6), (2, 8), (3, 6), (3, 7), (4, 4), (4, 5), (4, 6), (5, 4),
                                           (2, 4), (3, 4), (1, 6), (2, 3), (3, 3))]  # the last: AVX2's 16 registers
    packed = [(mr, nr, True, False, False) for mr, nr in ((6, 64), (8, 48), (12, 32), (4, 96), (4, 64), (2, 128))]
    tiles = [(32, 32, True, True, False), (32, 32, True, True, True)]  # AMX: the form, then the swapped form
    for mr, nr, pack, amx, swap in [(mr, nr, False, False, False) for mr, nr, _ in dot] + packed + tiles:
        for kc in sorted({1024, 2048, 4096, 8192, hero.kc}):
            for threads in sorted({hero.threads, _cores(host), 1}):
                mc = 256 if swap else max(mr, 96 // mr * mr)
                s = ScaledGemmSchedule(mr, nr, kc, mc, threads, pack, amx, swap)
                try:
                    s.validate(op, host, variant)
                except BadInputError:
                    continue
                if s not in out:
                    out.append(s)
    return out


def core_check(op: Any, variant: Any, schedule: Any, host: Any) -> None:
    schedule.validate(op, host, variant)


def core_arguments(op: Any) -> tuple[tuple[int, ...], tuple[float, ...]]:
    return (op.m, op.n, op.k, 0), (op.alpha,)


def core_tag(op: Any) -> str:
    return f"{op.scale}_{op.layout_b}_{op.out_dtype.value}" + "".join(f"_{e}" for e in op.epilogue)


def core_metadata(op: Any, isa: CpuIsa, s: ScaledGemmSchedule, name: str) -> dict[str, Any]:
    vnni = isa.family in VNNI_FAMILIES
    avx2 = isa.family in AVX2_FAMILIES and not _block(op)
    return {
        "name": name, "tile": {"M": s.mr, "N": s.nr, "K": s.kc, "stages": 1},
        "fragments": {"mma": "tdpbsud (AMX tiles)" if s.amx else "vpdpbusd" if vnni else "vpmaddwd (16-bit pairs)"
                      if avx2 else "scalar int32 multiply-add",
                      "dtype_in": op.dtype.value, "dtype_acc": "int32",
                      "vector": "__m512i" if vnni else "__m256i" if avx2 else "int32_t",
                      "lanes": 16 if vnni else 8 if avx2 else 1},
        "resources": {"regs_per_thread": None, "smem_per_cta": None, "packed_a_bytes": 0,
                      "packed_b_bytes": op.n * op.k if op.layout_b == "row" else 0, "scratch_bytes_per_thread": 0},
        "launch": {"grid": None, "block": None, "threads": s.threads},
        "epilogue": ([] if op.scale == "none" else [f"scale {op.scale}"]) + list(op.epilogue)
        + ([] if op.out_dtype.value in ("fp32", "int32") else [f"round to {op.out_dtype.value}"]),
    }


def render_scaled_gemm(op: Any, isa: CpuIsa, s: ScaledGemmSchedule, header: str) -> str:
    from .pool import pool_c
    from .scaled_gemm_amx_c import AMX_C
    from .scaled_gemm_amx_swapped_c import SWAPPED_C
    from .scaled_gemm_c import DRIVER_C, TILE_AVX2_C, TILE_PORTABLE_C, TILE_VNNI_C, tile_table
    from .scaled_gemm_packed_c import PACKED_C, packed_table

    vnni = isa.family in VNNI_FAMILIES
    defines = "\n".join([
        f"#define MR {s.mr}", f"#define NR {s.nr}", f"#define KC {s.kc}", f"#define MC {s.mc}",
        f"#define NTHREADS {s.threads}", f"#define SCALE_MODE {SCALE_MODE[op.scale]}",
        f"#define OUT_KIND {OUT_KIND[op.out_dtype.value]}", f"#define B_COL {int(op.layout_b == 'col')}",
        f"#define FLIP {128 if vnni else 0}  /* what B's flip to unsigned adds to each product's B */",
        f"#define PACKED {int(s.pack)}", f"#define AMX {int(s.amx)}",
        f"#define KALIGN {64 if s.amx else 4}  /* the packed form's K padding (bytes) */",
        "#define TR_PTILE(R, ...) " + ("tr_amx_or_vnni(R, __VA_ARGS__, &tr_amx_rows)" if s.amx
                                       else "TR_PTILES[(R) - 1](__VA_ARGS__)"),
        f"#define HAS_EPILOGUE {int(bool(op.epilogue))}",
        f"#define TR_EPILOGUE {epilogue_c(op)}",
    ])
    kind_of = "vnni" if vnni else "avx2" if isa.family in AVX2_FAMILIES else "portable"
    tiles = [TILE_VNNI_C if vnni else TILE_PORTABLE_C, TILE_AVX2_C if kind_of == "avx2" else "",
             packed_table(12, s.nr) + AMX_C if s.amx else packed_table(s.mr, s.nr) if s.pack
             else tile_table(s.mr, s.nr, op.scale == "block128", kind_of)]
    call = "tr_scaled_gemm_swapped" if s.swap else "tr_scaled_gemm"
    return "\n".join([header, isa.prelude(("fp16", "bf16")), "#include <immintrin.h>" if vnni else "", pool_c(),
                      defines, *tiles, DRIVER_C.replace("@PACKED@", PACKED_C if s.pack else ""),
                      SWAPPED_C if s.swap else "",
                      f"{isa.kernel_prefix}int {ENTRY}(void* const* bufs, const int64_t* dims, const double* fparams) "
                      f"{{ return {call}(bufs, dims, fparams); }}"])


def epilogue_c(op: Any) -> str:
    """``TR_EPILOGUE``: the op's chain as one line of C statements over ``v`` (``epilogue.C_SCALAR``; empty without
    one), its operands read in C's type."""
    from .epilogue import C_SCALAR, statements

    load = {"fp32": "((const float*)J->{})[{}]", "bf16": "tr_bf2f(((const uint16_t*)J->{})[{}])",
            "fp16": "tr_h2f(((const uint16_t*)J->{})[{}])"}.get(op.out_dtype.value, "0")
    alpha = ["const float alpha = J->alpha;"] if "scale" in op.epilogue else []
    return " ".join(alpha + statements(op.epilogue, C_SCALAR, bias=load.format("bias", "j"),
                                       residual=load.format("resid", "at")))
