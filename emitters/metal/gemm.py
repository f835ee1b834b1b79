"""The Metal simdgroup-matrix GEMM: C = epilogue(A B) for fp32, fp16 or bf16 A (m x k) and B (k x n), each
row- or column-major, fp32 accumulation, C in the inputs' type, any m, n, k (loads past an edge read zeros,
stores past it are skipped); the same body with another A loader is the implicit-GEMM NHWC conv2d.

A threadgroup of ``wm x wn`` simdgroups computes a ``bm x bn`` tile of C; each simdgroup a ``bm / wm x bn /
wn`` sub-tile of 8x8 ``simdgroup_float8x8`` accumulators. K advances ``bk`` at a time: the threadgroup
stages A's ``bm x bk`` and B's ``bk x bn`` tiles into threadgroup memory (consecutive threads read
consecutive global elements of each operand's layout; zeros past the edges), a barrier, then each
simdgroup ``simdgroup_load``s its 8x8 fragments from there (A as rows of k, B as rows of n, each row padded
by ``pad`` elements against bank conflicts, emitters/metal/tg_banks.py) and multiplies them into its
accumulators, a barrier before the next tile overwrites them. One buffer, as llama.cpp's ``kernel_mul_mm``
keeps (ggml-metal.metal).

The staged type: fp32 and fp16 as they are (fp16 fragments are ``simdgroup_half8x8`` multiplied into the
float accumulators, mixed types that Apple's compiler takes: llama.cpp's ``kernel_mul_mm``
(ggml-metal.metal) multiplies half fragments by float or half ones into float accumulators); bf16
converted to float while staged (exact: a bf16 is the high half of a float's bits), since MSL before 3.1
has no bfloat and no kernel here needs it.

The epilogue (kernels/epilogue.py's chain, emitters/gpu.py's statements, ``tr_gelu`` the tanh form) runs on
each lane's two accumulator elements (``thread_elements()``) at their place in the fragment: element ``e``
of lane ``l`` is row ``(q & 4) + (l / 2) % 4``, column ``(q & 2) * 2 + (l % 2) * 2 + e`` with ``q = l / 4``.
Apple does not document that placement; it is MLX's (mlx/backend/metal/kernels/steel/gemm/mma.h,
``BaseMMAFrag::get_coord``), which MLX's GEMMs rely on, and the one compat.py models.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tracea.doctor.errors import BadInputError, UnsupportedError
from tracea.kernels.epilogue import GELU_C0, GELU_C1, parse_chain

from ..gpu_epilogue import Operands, element_ops
from ..schedule import positive_ints, valid_space
from .core import KERNEL_BUILTINS, MAX_THREADS, SIMD_WIDTH, THREADGROUP_MEMORY, read_schedule, schedule_json

KIND = "metal-gemm"  # the schedule JSON's "kind"
KERNEL = "tr_metal_gemm"
CONV_KERNEL = "tr_metal_conv2d"
DTYPES = ("fp32", "fp16", "bf16")
MAX_FRAGMENTS = 16  # accumulators a simdgroup holds: 32 floats a lane, as MLX's 64x64 tile over 2x2 simdgroups
MAX_ELEMENTS = 1 << 32  # buffers are indexed by 32-bit unsigned offsets
MAX_DIM = (1 << 31) - 256  # M, N, K are int arguments; a tile's rows past the edge must not overflow

# dtype -> (device element type, the type staged in threadgroup memory (an IR dtype: bf16 is widened to fp32,
#           exactly), a device element read as staged, the staged zero, a device element read as float,
#           an fp32 value written as a device element)
TYPES = {
    "fp32": ("float", "fp32", "{x}", "0.0f", "{x}", "{v}"),
    "fp16": ("half", "fp16", "{x}", "half(0.0f)", "float({x})", "half({v})"),
    "bf16": ("ushort", "fp32", "tr_bf2f({x})", "0.0f", "tr_bf2f({x})", "tr_f2bf({v})"),
}


def staged_type(dtype: str) -> str:
    """The MSL type of ``dtype``'s staged elements (float or half)."""
    return TYPES[TYPES[dtype][1]][0]


def staged_bytes(dtype: str) -> int:
    """Bytes of one staged element: fp16 stays half, fp32 and bf16 are float in threadgroup memory."""
    from tracea.kernels import DType

    return DType(TYPES[dtype][1]).itemsize


@dataclass(frozen=True)
class MetalGemmSchedule:
    """The tile of C a threadgroup computes (``bm x bn``), K's step (``bk``), its simdgroups along m and n
    (``wm x wn``) and the threadgroup-memory row pad in elements (``pad``)."""

    bm: int = 64
    bn: int = 64
    bk: int = 16
    wm: int = 2
    wn: int = 2
    pad: int = 8

    @property
    def simdgroups(self) -> int:
        return self.wm * self.wn

    @property
    def threads(self) -> int:
        return SIMD_WIDTH * self.simdgroups

    @property
    def fragments(self) -> tuple[int, int]:
        """The 8x8 accumulators of one simdgroup along m and n."""
        return self.bm // (8 * self.wm), self.bn // (8 * self.wn)

    @property
    def lda(self) -> int:
        return self.bk + self.pad

    @property
    def ldb(self) -> int:
        return self.bn + self.pad

    @property
    def name(self) -> str:
        return f"sg_{self.bm}x{self.bn}x{self.bk}_w{self.wm}x{self.wn}_p{self.pad}"

    def threadgroup_bytes(self, dtype: str = "fp16") -> int:
        """A's and B's staged tiles, padded rows."""
        return staged_bytes(dtype) * (self.bm * self.lda + self.bk * self.ldb)

    def to_json(self) -> dict[str, Any]:
        return schedule_json(self, KIND)

    @staticmethod
    def from_json(d: dict[str, Any]) -> MetalGemmSchedule:
        return read_schedule(MetalGemmSchedule, d, KIND)  # type: ignore[no-any-return]

    def features(self, op: Any) -> dict[str, float]:
        """Threads, threadgroup memory and the threadgroups that cover ``op`` (a GEMM or a conv)."""
        m, n = gemm_extent(op)
        return {"threads": float(self.threads), "threadgroup_bytes": float(self.threadgroup_bytes(op.dtype.value)),
                "threadgroups": float(-(-m // self.bm) * -(-n // self.bn))}

    def validate(self, op: Any = None, target: Any = None) -> None:
        """The fields for ``op``'s dtype (fp16 without an op); no target enters."""
        self.validate_dtype(op.dtype.value if op is not None else "fp16")

    def validate_dtype(self, dtype: str = "fp16") -> None:
        """``BadInputError`` for fields that do not build a ``dtype`` kernel."""
        positive_ints(self, ("bm", "bn", "bk", "wm", "wn"))
        if isinstance(self.pad, bool) or not isinstance(self.pad, int) or not 0 <= self.pad <= 64 or self.pad % 2:
            raise BadInputError(f"pad: {self.pad!r} is not an even number of elements in 0..64 (a lane's element "
                                "pair is one aligned access)")
        if self.bm % (8 * self.wm) or self.bn % (8 * self.wn):
            raise BadInputError(f"{self.name}: each simdgroup's tile must be whole 8x8 fragments")
        if self.bk % 8 or not 8 <= self.bk <= 64:
            raise BadInputError(f"bk: {self.bk} is not a multiple of 8 (the fragments' k) in 8..64")
        if self.threads > MAX_THREADS:
            raise BadInputError(f"{self.name}: {self.threads} threads, over the {MAX_THREADS} a threadgroup may have")
        tm, tn = self.fragments
        if tm * tn > MAX_FRAGMENTS:
            raise BadInputError(f"{self.name}: {tm * tn} accumulators a simdgroup, over {MAX_FRAGMENTS} "
                                f"({2 * MAX_FRAGMENTS} floats a lane)")
        if self.threadgroup_bytes(dtype) > THREADGROUP_MEMORY:
            raise BadInputError(f"{self.name}: its staged tiles take {self.threadgroup_bytes(dtype)} B of "
                                f"threadgroup memory in {dtype}, over the {THREADGROUP_MEMORY} a threadgroup has")


def gemm_extent(op: Any) -> tuple[int, int]:
    """The (M, N) of C for a GEMM or an implicit-GEMM conv."""
    return (op.gemm_m, op.gemm_n) if op.kind == "conv2d" else (op.m, op.n)


def check_dtype(op: Any) -> None:
    if op.dtype.value not in DTYPES:
        raise UnsupportedError(f"the Metal simdgroup GEMM computes {', '.join(DTYPES)}, not {op.dtype.value}")


def check_elements(what: str, *sizes: int) -> None:
    """UnsupportedError for a buffer of 2^32 elements or more (the kernels index with 32-bit offsets)."""
    total = 1
    for s in sizes:
        total *= s
    if total >= MAX_ELEMENTS:
        raise UnsupportedError(f"{what} has {total} elements; the Metal kernels index buffers below 2^32 elements")


def check_dims(**dims: int) -> None:
    """UnsupportedError for an extent of the GEMM past ``MAX_DIM`` (the kernels' M, N, K are 32-bit ints)."""
    for name, v in dims.items():
        if v > MAX_DIM:
            raise UnsupportedError(f"{name} = {v}: the Metal kernels take GEMM extents up to {MAX_DIM}")


def grid(m: int, n: int, sched: MetalGemmSchedule) -> tuple[int, int, int]:
    """Threadgroups along x (tiles of N) and y (tiles of M)."""
    return (-(-n // sched.bn), -(-m // sched.bm), 1)


# --------------------------------------------------------------------------------------------- the source

BF16_HELPERS = """static inline float tr_bf2f(ushort x) { return as_type<float>(uint(x) << 16); }
static inline ushort tr_f2bf(float f) {  // round to nearest even; a NaN stays a quiet NaN
    const uint u = as_type<uint>(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return ushort((u >> 16) | 0x40u);
    return ushort((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
"""
GELU_HELPER = f"""static inline float tr_gelu(float x) {{  // tanh form, as the IR's reference
    return 0.5f * x * (1.0f + precise::tanh({GELU_C0!r}f * (x + {GELU_C1!r}f * x * x * x)));
}}
"""


@dataclass(frozen=True)
class Problem:
    """What differs between the GEMM and the conv: the kernel's name, its buffer and scalar arguments (the
    launch's order), the lines that derive M, N, K where the arguments do not hold them, and the statements
    that read A's element (``gm``, ``gk``) and B's (``gk``, ``gn``) into ``val`` (already zero)."""

    name: str
    buffers: tuple[tuple[str, bool], ...]  # (name, written)
    scalars: tuple[tuple[str, str], ...]  # (MSL type, name)
    derived: tuple[str, ...]
    load_a: str
    load_b: str
    a_major: str  # "k": consecutive threads take consecutive k of a row of A; "m": consecutive rows
    b_major: str  # "n": consecutive threads take consecutive n of a row of B; "k": consecutive k


def gemm_problem(dtype: str, chain: tuple[str, ...], layout_a: str, layout_b: str) -> Problem:
    read = TYPES[dtype][2]
    a = "a[uint(gk) * uint(M) + uint(gm)]" if layout_a == "col" else "a[uint(gm) * uint(K) + uint(gk)]"
    b = "b[uint(gn) * uint(K) + uint(gk)]" if layout_b == "col" else "b[uint(gk) * uint(N) + uint(gn)]"
    buffers = (("a", False), ("b", False), *((name, False) for name in ("bias", "residual") if name in chain),
               ("out", True))
    scalars = (("int", "M"), ("int", "N"), ("int", "K"), *((("float", "alpha"),) if "scale" in chain else ()))
    return Problem(KERNEL, buffers, scalars, (),
                   f"if (gm < M && gk < K) val = {read.format(x=a)};",
                   f"if (gk < K && gn < N) val = {read.format(x=b)};",
                   "m" if layout_a == "col" else "k", "k" if layout_b == "col" else "n")


CONV_SCALARS = ("NB", "H", "W", "C", "P", "Q", "N", "R", "S", "SH", "SW", "PH", "PW", "DH", "DW")


def conv_problem(dtype: str, bias: bool) -> Problem:
    """NHWC input ``x`` (NB x H x W x C), KRSC filter ``weight`` (N = its K rows of R*S*C: B column-major),
    NPQK output: row gm of A is output pixel (img, p, q), column gk filter tap (r, s) at channel c."""
    read = TYPES[dtype][2]
    x = "x[((uint(img) * uint(H) + uint(y)) * uint(W) + uint(xx)) * uint(C) + uint(rs % C)]"
    load_a = f"""if (gm < M && gk < K) {{
                const int img = gm / (P * Q), pq = gm % (P * Q), rs = gk % (S * C);
                const int y = (pq / Q) * SH - PH + (gk / (S * C)) * DH, xx = (pq % Q) * SW - PW + (rs / C) * DW;
                if (y >= 0 && y < H && xx >= 0 && xx < W) val = {read.format(x=x)};
            }}"""
    load_b = f"if (gk < K && gn < N) val = {read.format(x='weight[uint(gn) * uint(K) + uint(gk)]')};"
    buffers = (("x", False), ("weight", False), *((("bias", False),) if bias else ()), ("out", True))
    return Problem(CONV_KERNEL, buffers, tuple(("int", s) for s in CONV_SCALARS),
                   ("const int M = NB * P * Q, K = R * S * C;",), load_a, load_b, "k", "k")


def render(dtype: str, sched: MetalGemmSchedule, problem: str = "gemm", chain: tuple[str, ...] = (),
           layout_a: str = "row", layout_b: str = "row") -> str:
    """The kernel's MSL source: ``problem`` "gemm" (``tr_metal_gemm``) or "conv" (``tr_metal_conv2d``, NHWC,
    its only epilogue a bias); ``chain`` the epilogue's ops in order."""
    if dtype not in DTYPES:
        raise BadInputError(f"dtype: the Metal simdgroup GEMM takes {', '.join(DTYPES)}, not {dtype}")
    if layout_a not in ("row", "col") or layout_b not in ("row", "col"):
        raise BadInputError(f"layouts: row or col, not {layout_a}/{layout_b}")
    if problem not in ("gemm", "conv"):
        raise BadInputError(f"problem: gemm or conv, not {problem!r}")
    chain = parse_chain(chain)
    if problem == "conv" and set(chain) - {"bias"}:
        raise BadInputError(f"epilogue: the conv takes a bias only, not {','.join(chain)}")
    sched.validate_dtype(dtype)
    prob = gemm_problem(dtype, chain, layout_a, layout_b) if problem == "gemm" else conv_problem(dtype, "bias" in chain)
    kernel = _signature(prob, dtype) + _body(prob, dtype, sched, chain)
    helpers = (BF16_HELPERS if dtype == "bf16" else "") + (GELU_HELPER if "tr_gelu(" in kernel else "")
    return "#include <metal_stdlib>\nusing namespace metal;\n\n" + helpers + ("\n" if helpers else "") + kernel


def _signature(prob: Problem, dtype: str) -> str:
    elem = TYPES[dtype][0]
    args = [f"device {'' if written else 'const '}{elem}* {name} [[buffer({i})]]"
            for i, (name, written) in enumerate(prob.buffers)]
    args += [f"constant {t}& {name} [[buffer({len(prob.buffers) + i})]]" for i, (t, name) in enumerate(prob.scalars)]
    args += list(KERNEL_BUILTINS)
    pad = " " * len(f"kernel void {prob.name}(")
    return f"kernel void {prob.name}(" + f",\n{pad}".join(args) + ") {\n"


def _body(prob: Problem, dtype: str, s: MetalGemmSchedule, chain: tuple[str, ...]) -> str:
    staged = staged_type(dtype)
    tm, tn = s.fragments
    frag = f"simdgroup_{staged}8x8"
    lines = [
        f"    threadgroup {staged} As[{s.bm * s.lda}];  // A's {s.bm} x {s.bk} tile, rows of {s.lda}",
        f"    threadgroup {staged} Bs[{s.bk * s.ldb}];  // B's {s.bk} x {s.bn} tile, rows of {s.ldb}",
        *(f"    {d}" for d in prob.derived),
        f"    const int sm = int(sgid) / {s.wn}, sn = int(sgid) % {s.wn};",
        f"    const int m0 = int(tgid.y) * {s.bm}, n0 = int(tgid.x) * {s.bn};",
        f"    simdgroup_float8x8 acc[{tm * tn}];",
        f"    for (int t = 0; t < {tm * tn}; ++t) acc[t] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);",
        f"    for (int k0 = 0; k0 < K; k0 += {s.bk}) {{",
        *_stage("A", s.bm, s.bk, prob.a_major == "m", "gm", "gk", "m0", "k0", s.lda, prob.load_a, dtype, s),
        *_stage("B", s.bk, s.bn, prob.b_major == "k", "gk", "gn", "k0", "n0", s.ldb, prob.load_b, dtype, s),
        "        threadgroup_barrier(mem_flags::mem_threadgroup);",
        f"        for (int kk = 0; kk < {s.bk}; kk += 8) {{",
        f"            {frag} fa[{tm}], fb[{tn}];",
        f"            for (int i = 0; i < {tm}; ++i) simdgroup_load(fa[i], As + (sm * {8 * tm} + i * 8) * {s.lda} + kk, {s.lda});",
        f"            for (int j = 0; j < {tn}; ++j) simdgroup_load(fb[j], Bs + kk * {s.ldb} + sn * {8 * tn} + j * 8, {s.ldb});",
        f"            for (int i = 0; i < {tm}; ++i)",
        f"                for (int j = 0; j < {tn}; ++j)",
        f"                    simdgroup_multiply_accumulate(acc[i * {tn} + j], fa[i], fb[j], acc[i * {tn} + j]);",
        "        }",
        "        threadgroup_barrier(mem_flags::mem_threadgroup);  // read before the next tile is staged",
        "    }",
        *_epilogue(dtype, s, chain),
        "}",
    ]
    return "\n".join(lines) + "\n"


def _stage(what: str, rows: int, cols: int, down: bool, rname: str, cname: str, r0: str, c0: str, ld: int,
           load: str, dtype: str, s: MetalGemmSchedule) -> list[str]:
    """The loop staging one operand's ``rows x cols`` tile: element ``f`` of the walk at (f / cols, f % cols),
    or (f % rows, f / rows) where consecutive threads go ``down`` the rows (the operand's contiguous axis)."""
    staged, zero = staged_type(dtype), TYPES[dtype][3]
    r, c = (f"f % {rows}", f"f / {rows}") if down else (f"f / {cols}", f"f % {cols}")
    return [f"        for (int f = int(tidx); f < {rows * cols}; f += {s.threads}) {{  // {what}",
            f"            const int r = {r}, c = {c};",
            f"            const int {rname} = {r0} + r, {cname} = {c0} + c;",
            f"            {staged} val = {zero};",
            f"            {load}",
            f"            {what}s[r * {ld} + c] = val;",
            "        }"]


def _epilogue(dtype: str, s: MetalGemmSchedule, chain: tuple[str, ...]) -> list[str]:
    """Each lane's two elements of each accumulator through the chain to C, inside M and N."""
    tm, tn = s.fragments
    as_float, store = TYPES[dtype][4], TYPES[dtype][5]
    ops = Operands(bias=as_float.format(x="bias[gn]"),
                   residual=as_float.format(x="residual[uint(gm) * uint(N) + uint(gn)]"))
    body = [*element_ops(chain, ops), f"out[uint(gm) * uint(N) + uint(gn)] = {store.format(v='v')};"]
    return [
        "    // lane l holds row (q & 4) + (l / 2) % 4, columns (q & 2) * 2 + (l % 2) * 2 + e of a fragment, q = l / 4",
        "    const int q = int(lane) / 4;",
        "    const int fr = (q & 4) + (int(lane) / 2) % 4, fc = (q & 2) * 2 + (int(lane) % 2) * 2;",
        f"    for (int i = 0; i < {tm}; ++i) {{",
        f"        const int gm = m0 + sm * {8 * tm} + i * 8 + fr;",
        f"        for (int j = 0; j < {tn}; ++j) {{",
        "            for (int e = 0; e < 2; ++e) {",
        f"                const int gn = n0 + sn * {8 * tn} + j * 8 + fc + e;",
        "                if (gm >= M || gn >= N) continue;",
        f"                float v = acc[i * {tn} + j].thread_elements()[e];",
        *(f"                {ln}" for ln in body),
        "            }",
        "        }",
        "    }",
    ]


# ------------------------------------------------------------------------------- heuristic and search space

DEFAULT_GPU_CORES = 10  # an Apple GPU's cores when the host does not say (M2, M3 and M4 have 10)
# (bm, bn, wm, wn), largest first: MLX's steel GEMM's 64x64 over 2x2 simdgroups (bk 16) is a known-good
# point on Apple GPUs; the smaller tiles keep every core busy on small problems. Larger tiles are the tuner's.
HERO_TILES = ((64, 64, 2, 2), (32, 64, 1, 2), (64, 32, 2, 1), (32, 32, 2, 2))
# Row pads whose fragment loads are conflict-free under the assumed Apple bank model (tg_banks.py) on every
# hero tile: rows of 8 mod 32 words in float, 8 mod 64 halves in fp16 (bk 16 + 8; bn 64 + 8, 32 + 8)
HERO_PAD = 8
PADS = (0, 4, 8, 16)
SPACE_TILES = (32, 64, 128)


def tiled_hero(m: int, n: int, dtype: str, gpu_cores: int | None) -> MetalGemmSchedule:
    """The largest hero tile that still gives every GPU core a threadgroup (else the one with the most
    threadgroups); bk 16 as MLX's 64x64 tile, 32 for the smaller ones, whose K loop is otherwise short."""
    cores = gpu_cores or DEFAULT_GPU_CORES
    best: tuple[int, MetalGemmSchedule] | None = None
    for bm, bn, wm, wn in HERO_TILES:
        s = MetalGemmSchedule(bm, bn, 16 if bm * bn >= 64 * 64 else 32, wm, wn, HERO_PAD)
        tiles = -(-m // bm) * -(-n // bn)
        if tiles >= cores:
            return s
        if best is None or tiles > best[0]:
            best = (tiles, s)
    assert best is not None
    return best[1]


def tiled_space(op: Any, hero: MetalGemmSchedule) -> list[MetalGemmSchedule]:
    """Every schedule that builds for ``op``'s dtype, the heuristic's first: tiles of 32-128 over 1-4
    simdgroups each way, bk 8, 16 or 32 and the row pads ``PADS``."""
    import itertools

    grid = itertools.product(SPACE_TILES, SPACE_TILES, (1, 2, 4), (1, 2, 4), (8, 16, 32), PADS)
    return valid_space(op, hero, (MetalGemmSchedule(bm, bn, bk, wm, wn, pad) for bm, bn, wm, wn, bk, pad in grid))
