"""The CPU model of Metal (emitters/metal/compat.py, simulate.py) on small hand-written MSL kernels, each
checked against numpy: threadgroup memory and barriers, every SIMD-group function, simdgroup matrices
(loads from threadgroup and device memory, origins, strides, transposed loads and stores, MLX's lane
layout), bf16 bits and vector types; and the rule breaking it must catch: a divergent barrier or SIMD-group
function, a missing barrier (a wrong answer under some seed), a compile error, the subset's limits.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from tracea.emitters.metal.core import Launch
from tracea.emitters.metal.simulate import SimulationError, run
from tracea.kernels.dtypes import bf16_from_float, bf16_to_float32

pytestmark = pytest.mark.usefixtures("kernel_cache")

BUILTINS = """uint3 tgid [[threadgroup_position_in_grid]], uint3 tpos [[thread_position_in_threadgroup]],
    uint tidx [[thread_index_in_threadgroup]], uint sgid [[simdgroup_index_in_threadgroup]],
    uint lane [[thread_index_in_simdgroup]]"""


def kernel(name: str, params: str, body: str) -> str:
    return f"#include <metal_stdlib>\nusing namespace metal;\n\nkernel void {name}({params},\n    {BUILTINS}) {{\n{body}}}\n"


REDUCE = kernel("tr_reduce", "device const float* x [[buffer(0)]], device float* y [[buffer(1)]], "
                "constant float& scale [[buffer(2)]], constant uint& groups [[buffer(3)]]", """
    threadgroup float part[128];
    uint g = tgid.y * 3 + tgid.x;
    part[tidx] = x[g * 128 + tidx];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint s = 64; s > 0; s >>= 1) {
        if (tidx < s) part[tidx] += part[tidx + s];
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    if (tidx == 0) y[g] = part[0] * scale;
    y[groups + g * 128 + tidx] = float(tpos.x + 40 * tpos.y + 100 * tpos.z + 1000 * sgid + 10000 * lane);
""")


def test_a_threadgroup_reduction_through_barriers_and_the_builtins():
    rng = np.random.default_rng(1)
    x = rng.standard_normal(6 * 128).astype(np.float32)
    out = np.zeros(6 + 6 * 128, np.float32)
    launch = Launch("tr_reduce", REDUCE, (3, 2, 1), (32, 2, 2), (("in", "x"), ("out", None), ("f32", 0.5),
                                                                 ("u32", 6)), threadgroup_bytes=512)
    run(launch, {"x": x}, out, seed=7)
    np.testing.assert_allclose(out[:6], x.reshape(6, 128).sum(1, dtype=np.float64) * 0.5, rtol=1e-5, atol=1e-5)
    t = np.arange(128)
    code = t % 32 + 40 * (t // 32 % 2) + 100 * (t // 64) + 1000 * (t // 32) + 10000 * (t % 32)
    np.testing.assert_array_equal(out[6:].reshape(6, 128), np.broadcast_to(code, (6, 128)))


COLLECTIVES = kernel("tr_collectives", "device const float* x [[buffer(0)]], device const int* xi [[buffer(1)]], "
                     "device const half* xh [[buffer(2)]], device float* y [[buffer(3)]]", """
    float v = x[tidx]; int vi = xi[tidx]; half vh = xh[tidx];
    device float* o = y + tidx * 12;
    o[0] = simd_sum(v);
    o[1] = simd_max(v);
    o[2] = simd_min(v);
    o[3] = simd_shuffle(v, (lane * 7 + 3) % 32);
    o[4] = simd_shuffle_xor(v, 5);
    o[5] = simd_shuffle_down(v, 3);
    o[6] = simd_shuffle_up(v, 3);
    o[7] = simd_broadcast(v, 9);
    o[8] = float(simd_sum(vi));
    o[9] = float(simd_min(uint(vi + 100)));
    o[10] = float(simd_sum(vh));
    o[11] = float(simd_shuffle_down(vh, 16));
""")


def test_each_simd_group_function_against_its_lanes():
    rng = np.random.default_rng(2)
    x = rng.standard_normal(64).astype(np.float32)
    x[37] = np.nan  # max/min of floats drop a NaN (fmax/fmin, MSL 6.5)
    xi = rng.integers(-50, 50, 64).astype(np.int32)
    xh = (rng.standard_normal(64) * 4).astype(np.float16)
    out = np.zeros(64 * 12, np.float32)
    launch = Launch("tr_collectives", COLLECTIVES, (1, 1, 1), (64, 1, 1),
                    (("in", "x"), ("in", "xi"), ("in", "xh"), ("out", None)))
    run(launch, {"x": x, "xi": xi, "xh": xh}, out, seed=3)
    got = out.reshape(2, 32, 12)
    lane = np.arange(32)
    for s in range(2):
        v, vi, vh = x[32 * s:32 * s + 32], xi[32 * s:32 * s + 32], xh[32 * s:32 * s + 32]
        acc, acch = np.float32(0), np.float16(0)
        for k in range(32):  # lane order, in the operand's own type
            acc, acch = np.float32(acc + v[k]), np.float16(acch + vh[k])
        np.testing.assert_array_equal(got[s, :, 0], np.full(32, acc))
        np.testing.assert_array_equal(got[s, :, 1], np.full(32, np.nanmax(v)))
        np.testing.assert_array_equal(got[s, :, 2], np.full(32, np.nanmin(v)))
        np.testing.assert_array_equal(got[s, :, 3], v[(lane * 7 + 3) % 32])
        np.testing.assert_array_equal(got[s, :, 4], v[lane ^ 5])
        np.testing.assert_array_equal(got[s, :, 5], v[np.where(lane + 3 < 32, lane + 3, lane)])
        np.testing.assert_array_equal(got[s, :, 6], v[np.where(lane >= 3, lane - 3, lane)])
        np.testing.assert_array_equal(got[s, :, 7], np.full(32, v[9]))
        np.testing.assert_array_equal(got[s, :, 8], np.full(32, vi.sum()))
        np.testing.assert_array_equal(got[s, :, 9], np.full(32, vi.min() + 100))
        np.testing.assert_array_equal(got[s, :, 10], np.full(32, np.float32(acch)))
        np.testing.assert_array_equal(got[s, :, 11], vh[np.where(lane + 16 < 32, lane + 16, lane)].astype(np.float32))


# C = A @ B for A (16 x 24) and B given transposed (Bt, 16 x 24): A staged in threadgroup memory with a
# padded row (28) and loaded at non-zero origins; B loaded transposed straight from device memory; C stored
# at origins into device memory and, transposed, into threadgroup memory, copied out after C.
MMA = kernel("tr_mma", "device const ELEM* a [[buffer(0)]], device const ELEM* bt [[buffer(1)]], device float* c [[buffer(2)]]", """
    threadgroup ELEM As[16 * 28];
    threadgroup float Ct[16 * 20];
    for (uint i = tidx; i < 16 * 24; i += 64) As[(i / 24) * 28 + i % 24] = a[i];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    simdgroup_float8x8 acc[2] = {make_filled_simdgroup_matrix<float, 8, 8>(0.0f),
                                 make_filled_simdgroup_matrix<float, 8, 8>(0.5f)};
    for (uint k = 0; k < 24; k += 8) {
        simdgroup_matrix<ELEM, 8, 8> am, bm;
        simdgroup_load(am, As, 28, ulong2(k, 8 * sgid));
        for (uint j = 0; j < 2; ++j) {
            simdgroup_load(bm, bt + (8 * j) * 24 + k, 24, ulong2(0, 0), true);
            simdgroup_multiply_accumulate(acc[j], am, bm, acc[j]);
        }
    }
    for (uint j = 0; j < 2; ++j) {
        simdgroup_store(acc[j], c, 16, ulong2(8 * j, 8 * sgid));
        simdgroup_store(acc[j], Ct + (8 * j) * 20 + 8 * sgid, 20, ulong2(0, 0), true);
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint i = tidx; i < 256; i += 64) c[256 + i] = Ct[(i / 16) * 20 + i % 16];
""")


@pytest.mark.parametrize("element", ["float", "half"])
def test_simdgroup_matrix_products_over_tiles_origins_strides_and_transposes(element):
    rng = np.random.default_rng(3)
    dtype = np.float32 if element == "float" else np.float16
    a = rng.standard_normal((16, 24)).astype(dtype)
    bt = rng.standard_normal((16, 24)).astype(dtype)
    out = np.zeros(512, np.float32)
    tg = 16 * 28 * np.dtype(dtype).itemsize + 16 * 20 * 4
    launch = Launch("tr_mma", MMA.replace("ELEM", element), (1, 1, 1), (64, 1, 1),
                    (("in", "a"), ("in", "bt"), ("out", None)), threadgroup_bytes=tg)
    run(launch, {"a": a, "bt": bt}, out, seed=5)
    want = a.astype(np.float64) @ bt.astype(np.float64).T
    want[:, 8:] += 0.5
    np.testing.assert_allclose(out[:256].reshape(16, 16), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(out[256:].reshape(16, 16), out[:256].reshape(16, 16).T)


LAYOUT = kernel("tr_layout", "device const float* m [[buffer(0)]], device float* y [[buffer(1)]]", """
    simdgroup_float8x8 a;
    simdgroup_load(a, m);
    y[lane * 2] = a.thread_elements()[0];
    y[lane * 2 + 1] = a.thread_elements()[1];
    simdgroup_float8x8 d(2.0f);
    simdgroup_store(d, y + 64);
    simdgroup_multiply(a, a, d);
    simdgroup_store(a, y + 128, 8, ulong2(0, 0), true);
""")


def test_thread_elements_follow_mlx_lane_layout():
    m = np.arange(64, dtype=np.float32)
    out = np.zeros(192, np.float32)
    run(Launch("tr_layout", LAYOUT, (1, 1, 1), (32, 1, 1), (("in", "m"), ("out", None))), {"m": m}, out)
    lane = np.arange(32)
    q = lane // 4
    row, col = (q & 4) + (lane // 2) % 4, (q & 2) * 2 + (lane % 2) * 2  # mlx steel/gemm/mma.h
    np.testing.assert_array_equal(out[:64].reshape(32, 2), np.stack([row * 8 + col, row * 8 + col + 1], 1))
    np.testing.assert_array_equal(out[64:128].reshape(8, 8), 2 * np.eye(8))
    np.testing.assert_array_equal(out[128:].reshape(8, 8), 2 * m.reshape(8, 8).T)


BITS = kernel("tr_bits", "device const ushort* x [[buffer(0)]], device ushort* y [[buffer(1)]]", """
    uint i = tgid.x * 32 + tidx;
    float f = as_type<float>(uint(x[i]) << 16);
    float4 v = float4(f, f + 1.0f, -f, 2.0f);
    v = v * 2.0f + float4(1.0f);
    half4 h = half4(v);
    float2 w = float2(v.x, float(h.y)) / float2(1.0f, 2.0f);
    float r = w.x - w.y + v[2] + v.w;
    if (isnan(half(r)) || isinf(r) || !isfinite(r)) r = 0.0f;
    threadgroup_barrier(mem_flags::mem_device | mem_flags::mem_threadgroup);
    uint u = as_type<uint>(r);
    u += 0x7FFFu + ((u >> 16) & 1u);
    y[i] = ushort(u >> 16);
""")


def test_bf16_bits_and_vector_types():
    rng = np.random.default_rng(4)
    values = (rng.standard_normal(64) * 3).astype(np.float32)
    x = bf16_from_float(values)
    out = np.zeros(64, np.uint16)
    run(Launch("tr_bits", BITS, (2, 1, 1), (32, 1, 1), (("in", "x"), ("out", None))), {"x": x}, out)
    f = bf16_to_float32(x)
    v1 = (f + 1) * 2 + 1
    h = v1.astype(np.float16).astype(np.float32)
    r = (f * 2 + 1) - h / 2 + (-f * 2 + 1) + 5
    np.testing.assert_array_equal(out, bf16_from_float(r.astype(np.float32)))


# One kernel, one way of breaking the rules per `mode` (a uniform scalar, so that one build serves them all)
BROKEN = kernel("tr_broken", "device const float* x [[buffer(0)]], device float* y [[buffer(1)]], "
                "constant int& mode [[buffer(2)]]", """
    float v = x[tidx];
    if (mode == 0) {
        if (tidx >= 32) return;
        threadgroup_barrier(mem_flags::mem_threadgroup);
    } else if (mode == 1) {
        if (lane < 16) v = simd_sum(v);
    } else if (mode == 2) {
        if (sgid == 0) threadgroup_barrier(mem_flags::mem_threadgroup);
        else threadgroup_barrier(mem_flags::mem_threadgroup);
    } else if (mode == 3) {
        v = simd_shuffle_down(v, lane % 2);
    } else if (mode == 4) {
        simdgroup_float8x8 m;
        simdgroup_load(m, x, 8, ulong2(1, 0), true);
    } else if (mode == 5) {
        if (lane < 16) v = simd_max(v); else v = simd_min(v);
    } else if (mode == 6) {
        y[tidx + 1] = v;
    } else if (mode == 7) {
        y[int(tidx) - 1] = v;
    } else if (mode == 8) {
        v = x[tidx + 8];
    } else if (mode == 9) {
        y[tidx * 100000000u] = v;
    }
    y[tidx] = v;
""")

BREAKS = {
    0: r"thread 32 finished while 32 threads wait at the threadgroup_barrier of line \d+: a barrier in divergent",
    1: r"simd_sum at line \d+ reached by 16 of the 32 lanes of simdgroup 0 .*divergent control flow",
    2: r"threads reached different threadgroup_barrier calls \(lines \d+ and \d+\)",
    3: r"simd_shuffle_down at line \d+: its lane, mask or delta argument differs between lanes",
    4: r"simdgroup_load at line \d+: a transposed access with a non-zero matrix_origin is outside the modelled",
    5: r"lanes of simdgroup [01] reached different SIMD-group functions \(simd_(max|min) at line \d+",
    6: r"thread 63 of threadgroup \(\d, 0, 0\) accessed byte 256 of the output, which has 256 bytes",
    7: r"a thread wrote 4 bytes before the start of the output \(256 bytes\)",
    8: r"thread (5[6-9]|6[0-3]) of threadgroup \(\d, 0, 0\) accessed byte 2(5[6-9]|[6-8]\d) of the input 'x'",
    9: r"thread \d+ of threadgroup \(\d, 0, 0\) accessed memory outside every buffer",
}


@pytest.mark.parametrize("mode", sorted(BREAKS))
def test_divergence_and_out_of_bounds_are_one_line_errors(mode):
    x = np.ones(64, np.float32)
    launch = Launch("tr_broken", BROKEN, (2, 1, 1), (64, 1, 1), (("in", "x"), ("out", None), ("i32", mode)))
    where = r"threadgroup \(\d, 0, 0\): " if mode < 6 else ""
    with pytest.raises(SimulationError, match=r"^tr_broken: " + where + BREAKS[mode]) as info:
        run(launch, {"x": x}, np.zeros(64, np.float32))
    assert "\n" not in str(info.value)


RACE = kernel("tr_race", "device const float* x [[buffer(0)]], device float* y [[buffer(1)]], "
              "constant int& sync [[buffer(2)]]", """
    threadgroup float t[128];
    t[tidx] = x[tidx] * 2.0f;
    if (sync) threadgroup_barrier(mem_flags::mem_threadgroup);
    y[tidx] = t[(tidx + 33) % 128];
""")


def test_a_missing_barrier_gives_a_wrong_answer_and_the_barrier_the_right_one():
    x = np.arange(128, dtype=np.float32)
    want = 2 * x[(np.arange(128) + 33) % 128]

    def once(sync: int, seed: int) -> np.ndarray:
        out = np.zeros(128, np.float32)
        run(Launch("tr_race", RACE, (1, 1, 1), (128, 1, 1), (("in", "x"), ("out", None), ("i32", sync)),
                   threadgroup_bytes=512), {"x": x}, out, seed=seed)
        return out

    racy = [once(0, seed) for seed in range(3)]
    assert any(not np.array_equal(r, want) for r in racy)  # threadgroup memory unwritten yet reads as NaN
    np.testing.assert_array_equal(once(0, 1), racy[1])  # one seed, one order
    for seed in range(3):
        np.testing.assert_array_equal(once(1, seed), want)


def test_a_fiber_stack_overflow_is_an_error_not_a_crash():
    source = kernel("tr_deep", "device float* y [[buffer(0)]]", """
    volatile float big[40000];
    for (int i = 0; i < 40000; i += 1000) big[i] = float(i + tidx);
    y[tidx] = big[tidx * 100];
""")
    with pytest.raises(SimulationError, match=r"^tr_deep: thread \d+ of threadgroup \(0, 0, 0\) overflowed its fiber"):
        run(Launch("tr_deep", source, (1, 1, 1), (32, 1, 1), (("out", None),)), {}, np.zeros(32, np.float32))


def test_a_compile_error_is_one_line_with_the_kernels_line():
    source = kernel("tr_typo", "device float* y [[buffer(0)]]", "    y[tidx] = undeclared_value;\n")
    with pytest.raises(SimulationError, match=r"^tr_typo: does not compile against the Metal model: line 8: "
                                              r"error: .undeclared_value. was not declared") as info:
        run(Launch("tr_typo", source, (1, 1, 1), (32, 1, 1), (("out", None),)), {}, np.zeros(32, np.float32))
    assert "\n" not in str(info.value)


def test_the_subsets_limits_before_and_after_compiling():
    out = np.zeros(64, np.float32)
    plain = kernel("tr_plain", "device float* y [[buffer(0)]]", "    y[tidx] = 1.0f;\n")
    with pytest.raises(SimulationError, match="a threadgroup of 48 threads; the model runs a multiple of 32"):
        run(Launch("tr_plain", plain, (1, 1, 1), (16, 3, 1), (("out", None),)), {}, out)
    with pytest.raises(SimulationError, match="a threadgroup of 2048 threads"):
        run(Launch("tr_plain", plain, (1, 1, 1), (1024, 2, 1), (("out", None),)), {}, out)
    pointer = plain.replace("y[tidx] = 1.0f;", "/* a comment of\n two lines */ threadgroup float* p = nullptr;")
    with pytest.raises(SimulationError, match=r"line 9: threadgroup memory is modelled only as"):
        run(Launch("tr_plain", pointer, (1, 1, 1), (32, 1, 1), (("out", None),)), {}, out)
    for line, what in (("const float* p = y; y[tidx] = p[0];", "a pointer without an address space"),
                       ("y[tidx] = *(float*)y;", "a pointer without an address space"),
                       ("double d = 1.0; y[tidx] = float(d);", "'double' is not in the Metal Shading Language"),
                       ("auto f = [&](int i) { return i; }; y[tidx] = f(1);", "'[&](' is not in the Metal"),
                       ("long long big = 1; y[tidx] = float(big);", "'long long' is not in")):
        with pytest.raises(SimulationError, match=r"line 8: " + re.escape(what)):
            run(Launch("tr_plain", plain.replace("y[tidx] = 1.0f;", line), (1, 1, 1), (32, 1, 1), (("out", None),)),
                {}, out)
    thread_ok = plain.replace("y[tidx] = 1.0f;", "float v[2] = {1.0f, 2.0f}; thread const float* p = v; y[tidx] = p[1];")
    run(Launch("tr_plain", thread_ok, (1, 1, 1), (32, 1, 1), (("out", None),)), {}, out)
    assert (out[:32] == 2.0).all()
    with pytest.raises(SimulationError, match="must define exactly one kernel, named tr_other"):
        run(Launch("tr_other", plain, (1, 1, 1), (32, 1, 1), (("out", None),)), {}, out)
    big = plain.replace("y[tidx] = 1.0f;", "threadgroup float t[8193];\n    t[tidx] = 1.0f;\n    y[tidx] = t[tidx];")
    with pytest.raises(SimulationError, match="declares 32772 bytes of threadgroup memory, over the 32768"):
        run(Launch("tr_plain", big, (1, 1, 1), (32, 1, 1), (("out", None),), threadgroup_bytes=32772), {}, out)
    with pytest.raises(SimulationError, match=r"the u32 argument -1 does not fit its kind"):
        run(Launch("tr_plain", plain, (1, 1, 1), (32, 1, 1), (("out", None), ("u32", -1))), {}, out)
    with pytest.raises(SimulationError, match="no array given for its input 'x'"):
        run(Launch("tr_plain", plain, (1, 1, 1), (32, 1, 1), (("in", "x"), ("out", None))), {}, out)
