"""The gemv core (emitters/cuda/gemv.py): its registry rules (the hero of the tensor-core GEMM families for
M <= 16 only, JSON round trip, checks by the schedule's own core), a NumPy model of its fragment index
math, NVRTC compiles without spills (sm_80, sm_90a), and on a GPU (marked ``gpu``) every case verified
against the float64 reference, with events timing beside cuBLAS (no speed assertion)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from mma_fragments import mma  # tests/helpers/ (tests/conftest.py puts it on the path)

from tracea.doctor.errors import BadInputError, UnsupportedError
from tracea.emitters import cuda
from tracea.emitters.cuda import cores, gemv
from tracea.emitters.cuda.arch import parse_arch
from tracea.kernels import Gemm


class NoGpu:
    nvidia = None


HOST = NoGpu()
FAMILIES = ("cuda-mma-sync.gemm", "cuda-wgmma.gemm")


# ---------------------------------------------------------------------------------------------- registry
@pytest.mark.parametrize("vid", FAMILIES)
@pytest.mark.parametrize("m,n", [(1, 4096), (4, 4096), (8, 11008), (16, 14336)])
def test_hero_is_gemv_for_small_m(vid, m, n):
    for layout_b in ("row", "col"):
        op = Gemm(m, n, 4096, "bf16", layout_b=layout_b)
        hero = cuda.hero_schedule(op, vid, HOST)
        if vid == "cuda-wgmma.gemm":  # Hopper feeds it by TMA (test_cuda_gemv_tma.py); registers on mma.sync
            assert hero.core == "gemv_tma"
            hero = gemv.hero_schedule(op, HOST)
        assert isinstance(hero, gemv.GemvSchedule) and hero.core == "gemv"
        assert cores.for_schedule(op, hero).name == "gemv"
        assert cuda.schedule_from_json(hero.to_json()) == hero
        arch = "sm_90a"
        cuda.validate_schedule(op, vid, hero, HOST, arch)  # checked by the gemv core


@pytest.mark.parametrize("vid", FAMILIES)
def test_hero_is_not_gemv_above_16_rows(vid):
    # above 16 rows, and between 5 and 16 rows when N is too narrow to fill the GPU without a K split
    for op in (Gemm(17, 4096, 4096, "bf16"), Gemm(128, 4096, 4096, "fp16", layout_b="col"),
               Gemm(16, 4096, 4096, "bf16"), Gemm(8, 4096, 11008, "fp16")):
        hero = cuda.hero_schedule(op, vid, HOST)
        assert getattr(hero, "core", None) != "gemv"
        if vid == "cuda-wgmma.gemm" and op.m <= 32:  # Hopper: TMA-fed gemv for every M <= 32 (test_cuda_gemv_tma.py)
            assert hero.core == "gemv_tma"
        else:
            assert cores.for_schedule(op, hero) is cores.for_variant(cuda.resolve(vid), op)
        if op.m > 16:
            with pytest.raises(BadInputError):  # a gemv schedule is refused by the gemv core's own check
                cuda.validate_schedule(op, vid, gemv.GemvSchedule(), HOST, "sm_90a")
        else:  # not the hero, but still a candidate the tuner may pick
            cuda.validate_schedule(op, vid, gemv.GemvSchedule(), HOST, "sm_90a")


def test_fp32_and_simt_keep_their_core():
    op = Gemm(4, 1000, 1000)
    assert cuda.hero_schedule(op, "cuda-simt.gemm", HOST).core == "simt"
    with pytest.raises(BadInputError):
        cuda.validate_schedule(op, "cuda-simt.gemm", gemv.GemvSchedule(), HOST, "sm_80")
    with pytest.raises(UnsupportedError):
        cuda.validate_schedule(Gemm(4, 64, 64, "bf16"), "cuda-wgmma.gemm", gemv.GemvSchedule(), HOST, "sm_80")


def test_search_space_holds_gemv_and_tiles_for_small_m():
    op = Gemm(16, 4096, 4096, "bf16")
    space = cuda.search_space(op, "cuda-mma-sync.gemm", HOST, "sm_90a")
    assert space[0] == cuda.hero_schedule(op, "cuda-mma-sync.gemm", HOST)
    kinds = {s.core for s in space}
    assert kinds == {"gemv", "mma"}
    assert len(space) == len(set(space))
    big = Gemm(256, 256, 256, "bf16")
    assert {s.core for s in cuda.search_space(big, "cuda-mma-sync.gemm", HOST, "sm_90a")} == {"mma"}


def test_json_round_trip_and_bad_fields():
    s = gemv.GemvSchedule(warps=4, splits=3, unroll=4)
    d = s.to_json()
    assert d["core"] == "gemv" and cuda.schedule_from_json(d) == s
    for bad in ({**d, "warps": 3}, {**d, "splits": 0}, {**d, "unroll": 8}, {**d, "tile": 1}):
        with pytest.raises(BadInputError):
            cuda.schedule_from_json(bad)


def test_tuning_features():
    op = Gemm(16, 4096, 4096, "bf16")
    f = cuda.tuning_features(op, gemv.GemvSchedule().to_json())
    assert f["warps"] == 8 and f["smem_bytes"] == 8 * 16 * 64 * 4 + 16 and f["tiles"] == 64


# ------------------------------------------------------------------------------ NumPy model of the kernel
def _model(op, x, w, s):
    """The kernel's index math in NumPy: x is A as [m, k], w is B as stored ([k, n] or [n, k])."""
    M, N, K = op.m, op.n, op.k
    mg = gemv.mpad(op) // 8
    row = op.layout_b == "row"
    ks = gemv.k_step(op)
    steps = -(-K // ks)
    per = -(-steps // s.splits)

    def bvec(kk, nn):  # ldB: 8 elements along B's contiguous dimension, zero outside
        if row:
            return [w[kk, nn + i] if kk < K and nn + i < N else 0.0 for i in range(8)]
        return [w[nn, kk + i] if nn < N and kk + i < K else 0.0 for i in range(8)]

    def xvec(m, kk, n):
        return [x[m, kk + i] if m < M and kk + i < K else 0.0 for i in range(n)]

    out = np.zeros((M, N))
    for n0 in range(0, N, gemv.NB):
        total = np.zeros((M, gemv.NB))
        for sp in range(s.splits):
            red = np.zeros((s.warps, 16, gemv.NB))
            for warp in range(s.warps):
                acc = np.zeros((4, mg, 32, 4))
                for c in range(sp * per + warp, min(sp * per + per, steps), s.warps):
                    a_fr = [[None] * 32 for _ in range(8)]
                    x_fr = [[None] * 32 for _ in range(mg * 2)]
                    for lane in range(32):
                        g, q = lane >> 2, lane & 3
                        if row:
                            k = c * 16 + 4 * q
                            r = [bvec(k + j, n0 + 8 * g) for j in range(4)]
                            for i in range(4):
                                a_fr[i][lane] = [(r[0][2 * i], r[1][2 * i]), (r[0][2 * i + 1], r[1][2 * i + 1]),
                                                 (r[2][2 * i], r[3][2 * i]), (r[2][2 * i + 1], r[3][2 * i + 1])]
                            for m in range(mg):
                                v = xvec(8 * m + g, k, 4)
                                x_fr[m][lane] = [(v[0], v[1]), (v[2], v[3])]
                        else:
                            k = c * 32 + 8 * q
                            for t in range(4):
                                r0, r1 = bvec(k, n0 + 16 * t + g), bvec(k, n0 + 16 * t + 8 + g)
                                for h in range(2):
                                    a_fr[4 * h + t][lane] = [(r0[4 * h], r0[4 * h + 1]), (r1[4 * h], r1[4 * h + 1]),
                                                             (r0[4 * h + 2], r0[4 * h + 3]),
                                                             (r1[4 * h + 2], r1[4 * h + 3])]
                            for m in range(mg):
                                v = xvec(8 * m + g, k, 8)
                                for h in range(2):
                                    x_fr[2 * m + h][lane] = [(v[4 * h], v[4 * h + 1]), (v[4 * h + 2], v[4 * h + 3])]
                    for m in range(mg):
                        if row:
                            for i in range(4):
                                mma(acc[i][m], a_fr[i], x_fr[m])
                        else:
                            for h in range(2):
                                for t in range(4):
                                    mma(acc[t][m], a_fr[4 * h + t], x_fr[2 * m + h])
                for lane in range(32):
                    g, q = lane >> 2, lane & 3
                    for t in range(4):
                        for m in range(mg):
                            for e in range(4):
                                col = 8 * g + 2 * t + (e >> 1) if row else 16 * t + 8 * (e >> 1) + g
                                red[warp, 8 * m + 2 * q + (e & 1), col] = acc[t][m][lane][e]
            total += red.sum(axis=0)[:M]
        width = min(gemv.NB, N - n0)
        out[:, n0:n0 + width] = total[:, :width]
    return out


@pytest.mark.parametrize("layout_b", ["row", "col"])
@pytest.mark.parametrize("m,n,k,splits", [(1, 70, 37, 1), (7, 64, 100, 2), (16, 33, 64, 1), (9, 130, 70, 3)])
def test_fragment_index_math(layout_b, m, n, k, splits):
    op = Gemm(m, n, k, "bf16", layout_b=layout_b)
    rng = np.random.default_rng(5)
    x = rng.standard_normal((m, k))
    w = rng.standard_normal((k, n) if layout_b == "row" else (n, k))
    s = gemv.GemvSchedule(warps=2, splits=splits, unroll=1)
    ref = x @ (w if layout_b == "row" else w.T)
    np.testing.assert_allclose(_model(op, x, w, s), ref, rtol=1e-9, atol=1e-9)


# ------------------------------------------------------------------------------------------ NVRTC
COMPILE = [
    Gemm(1, 4096, 4096, "bf16"),
    Gemm(16, 14336, 4096, "bf16", layout_b="col"),
    Gemm(16, 4096, 14336, "fp16", epilogue=("bias", "relu", "gelu", "scale", "residual"), alpha=0.5),
    Gemm(7, 33, 4095, "fp16", layout_a="col", layout_b="col", epilogue=("bias", "gelu")),
    Gemm(2, 11008, 5, "bf16", layout_b="row", epilogue=("residual",)),
]


@pytest.mark.parametrize("op", COMPILE, ids=lambda o: o.signature[:60])
def test_compiles_without_spills(op, kernel_home, monkeypatch):
    pytest.importorskip("cuda.core")
    from tracea.emitters.cuda.build import compile_kernel

    monkeypatch.setenv("TRACEA_HOME", str(kernel_home))
    hero = gemv.hero_schedule(op, HOST)  # gemv's own (not every op here has it as the variant's hero)
    picks = [hero, gemv.GemvSchedule(warps=4, splits=2, unroll=4), gemv.GemvSchedule(warps=8, splits=1, unroll=1)]
    for arch in ("sm_80", "sm_90a"):
        for vid in FAMILIES if arch == "sm_90a" else FAMILIES[:1]:
            for s in picks:
                _, r, _, art = compile_kernel(op, vid, s, HOST, arch)
                res = art.metadata["resources"]
                assert res["regs_per_thread"] > 0 and res["spills"] == 0, f"{r.name} on {arch}: {res}"
                assert art.metadata["launch"]["block"][0] == s.block_threads


def test_render_is_stable_and_sized():
    op = Gemm(16, 4096, 4096, "bf16", layout_b="col")
    s = gemv.hero_schedule(op, HOST)
    a, b = gemv.render_gemv(op, s, parse_arch("sm_90a")), gemv.render_gemv(op, s, parse_arch("sm_90a"))
    assert a == b and a.grid == (64, s.splits, 1) and a.block == (256, 1, 1) and s.splits > 1
    assert a.metadata["workspace_bytes"] == 0 and a.metadata["reduction"] == "cluster"  # sm_90: a cluster
    c = gemv.render_gemv(op, s, parse_arch("sm_80"))
    assert c.metadata["workspace_bytes"] == 4 * (s.splits * 16 * 4096 + 64) and "__cluster_dims__" not in c.source


# ------------------------------------------------------------------------------------------ on a GPU
GPU_M = (1, 2, 7, 16)
GPU_N = (1, 33, 4096, 11008)
GPU_K = (5, 64, 4095, 4096)


def _gpu_cases():
    cases = []
    i = 0
    for m in GPU_M:
        for n in GPU_N:
            for k in GPU_K:
                layout_b = ("row", "col")[i % 2]
                dtype = ("bf16", "fp16")[(i // 2) % 2]
                epi = ((), ("bias",), ("bias", "relu"), ("gelu", "scale"), ("residual",),
                       ("bias", "gelu", "scale", "residual"))[i % 6]
                layout_a = "col" if i % 7 == 3 else "row"
                cases.append(Gemm(m, n, k, dtype, layout_a=layout_a, layout_b=layout_b, epilogue=epi, alpha=0.75))
                i += 1
    # both layouts and dtypes at the decode shapes themselves
    for layout_b in ("row", "col"):
        for dtype in ("bf16", "fp16"):
            cases.append(Gemm(16, 4096, 4096, dtype, layout_b=layout_b))
    return cases


def _device_or_skip(vid):
    cc = pytest.importorskip("cuda.core")
    try:
        dev = cc.Device(0)
        cap = tuple(dev.compute_capability)
    except Exception:  # noqa: BLE001 - no driver or no GPU
        pytest.skip("no CUDA GPU")
    if vid == "cuda-wgmma.gemm" and cap != (9, 0):
        pytest.skip("cuda-wgmma needs an sm_90 GPU")


@pytest.mark.gpu
@pytest.mark.parametrize("op", _gpu_cases(), ids=lambda o: o.signature[:80])
def test_gpu_matches_the_reference(op, kernel_home, monkeypatch):
    from tracea.kernels import relative_error, tolerance

    vid = "cuda-mma-sync.gemm"
    _device_or_skip(vid)
    monkeypatch.setenv("TRACEA_HOME", str(kernel_home))
    sched = gemv.hero_schedule(op, HOST)  # gemv's own: the variant's hero is gemv only where it prefers it
    k = cuda.build(op, vid, sched, HOST)
    for seed in (1, 2):  # a second launch checks that the split counters were reset
        inputs = op.random_inputs(np.random.default_rng(seed))
        out = np.full(op.output_shape(), 0x7FC0 if op.dtype.value == "bf16" else np.nan, op.dtype.storage)
        k(inputs, out)
        ref = op.reference(inputs)
        from tracea.kernels.dtypes import to_float64

        got = to_float64(out, op.dtype)
        assert np.isfinite(got).all(), op.signature
        err = relative_error(got, ref)
        assert err <= tolerance(op), (op.signature, sched, err)


@pytest.mark.gpu
@pytest.mark.parametrize("splits", [1, 2, 5, 16])
@pytest.mark.parametrize("layout_b", ["row", "col"])
def test_gpu_every_split_matches(splits, layout_b, kernel_home, monkeypatch):
    from tracea.kernels import relative_error, tolerance
    from tracea.kernels.dtypes import to_float64

    _device_or_skip("cuda-mma-sync.gemm")  # on sm_90 splits <= 8 meet in a cluster, 16 in the workspace
    monkeypatch.setenv("TRACEA_HOME", str(kernel_home))
    op = Gemm(16, 4160, 4096, "bf16", layout_b=layout_b, epilogue=("bias", "gelu"))
    for s in (gemv.GemvSchedule(warps=8, splits=splits, unroll=2), gemv.GemvSchedule(warps=4, splits=splits, unroll=4)):
        k = cuda.build(op, "cuda-mma-sync.gemm", s, HOST)
        inputs = op.random_inputs(np.random.default_rng(3))
        outs = [k(inputs) for _ in range(2)]
        assert np.array_equal(outs[0], outs[1])  # deterministic: fixed-order reductions
        assert relative_error(to_float64(outs[0], op.dtype), op.reference(inputs)) <= tolerance(op)


DECODE = [(n, k) for n, k in ((4096, 4096), (11008, 4096), (4096, 11008), (14336, 4096), (4096, 14336))]


@pytest.mark.gpu
@pytest.mark.parametrize("m", [1, 16])
@pytest.mark.parametrize("layout_b", ["row", "col"])
def test_gpu_events_timing_beside_cublas(m, layout_b, kernel_home, monkeypatch, capsys):
    """Times the hero at the decode shapes with CUDA events and prints the ratio to torch/cuBLAS and the
    fraction of B's bytes over the time (no speed assertion: a report for the merger)."""
    _device_or_skip("cuda-wgmma.gemm")
    torch = pytest.importorskip("torch")
    monkeypatch.setenv("TRACEA_HOME", str(kernel_home))
    rows = []
    for n, kk in DECODE:
        op = Gemm(m, n, kk, "bf16", layout_b=layout_b)
        sched = cuda.hero_schedule(op, "cuda-wgmma.gemm", HOST)
        kern = cuda.build(op, "cuda-wgmma.gemm", sched, HOST)
        inputs = op.random_inputs(np.random.default_rng(0))
        t = kern.time(inputs, warmup=5, repeats=30)
        assert 0 < t.p50_ms < 100
        a = torch.randn(m, kk, dtype=torch.bfloat16, device="cuda")
        b = torch.randn(*((kk, n) if layout_b == "row" else (n, kk)), dtype=torch.bfloat16, device="cuda")
        bb = b if layout_b == "row" else b.t()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
        ms = []
        for i in range(35):
            flush.zero_()
            start.record()
            torch.mm(a, bb)
            end.record()
            torch.cuda.synchronize()
            if i >= 5:
                ms.append(start.elapsed_time(end))
        ref = float(np.median(ms))
        gbps = (n * kk * 2) / (t.p50_ms * 1e-3) / 1e9
        rows.append(f"M={m} {layout_b} N={n} K={kk} {sched.name}: {t.p50_ms * 1e3:.1f} us, cuBLAS "
                    f"{ref * 1e3:.1f} us, ratio {ref / t.p50_ms:.2f}, B at {gbps:.0f} GB/s")
    with capsys.disabled():
        print("\n" + "\n".join(rows))


# ------------------------------------------------------------------ the rendered kernel, emulated on the CPU
EMULATOR = Path(__file__).parents[2] / "fixtures" / "gemv_emulator.h"
EMULATED = [
    (Gemm(1, 70, 37, "bf16"), gemv.GemvSchedule(warps=2, splits=1, unroll=1)),
    (Gemm(3, 130, 200, "bf16", layout_b="col", epilogue=("bias", "relu")), gemv.GemvSchedule(warps=2, splits=3, unroll=2)),
    (Gemm(16, 64, 256, "fp16", epilogue=("gelu", "scale", "residual"), alpha=0.5), gemv.GemvSchedule(warps=4, splits=2, unroll=1)),
    (Gemm(9, 33, 129, "fp16", layout_a="col", layout_b="col", epilogue=("bias", "gelu", "scale", "residual"), alpha=1.5),
     gemv.GemvSchedule(warps=1, splits=1, unroll=4)),
    (Gemm(16, 128, 96, "bf16", layout_b="row"), gemv.GemvSchedule(warps=2, splits=5, unroll=1)),
    (Gemm(2, 8, 5, "bf16", layout_b="col"), gemv.GemvSchedule(warps=1, splits=1, unroll=1)),
]


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])  # splits through the global workspace, or a cluster
@pytest.mark.parametrize("op,s", EMULATED, ids=lambda x: x.signature[:60] if isinstance(x, Gemm) else x.name)
def test_rendered_kernel_on_a_cpu_emulator(op, s, arch, tmp_path, emulator_cxx):
    """The rendered CUDA text itself (its prelude swapped for CPU stand-ins: a std::thread per CUDA thread,
    barriers for __syncthreads and the warp's mma), run twice (the split counters must reset) and checked
    against the float64 reference."""
    import re
    import subprocess

    from tracea.kernels import relative_error, tolerance
    from tracea.kernels.dtypes import to_float64

    r = gemv.render_gemv(op, s, parse_arch(arch))
    assert ("_cl" in r.name) == (arch == "sm_90a" and s.splits > 1)
    body = r.source[r.source.index("#define M "):]
    ids = iter(range(100))
    body = re.sub(r"__shared__ (\w+) (\w+)((?:\[\d+\])*);",
                  lambda mt: f"auto& {mt[2]} = tr_smem<{mt[1]}{mt[3]}, {next(ids)}>();", body)
    body = body.replace("__cluster_dims__(1, ", "TR_CLUSTER(")
    src = tmp_path / "emu.cpp"
    src.write_text(f'#include "{EMULATOR}"\n{body}\n#define KERNEL {r.entry}\n#define TR_MAIN\n#include "{EMULATOR}"\n')
    exe = tmp_path / "emu"
    done = subprocess.run([*emulator_cxx, str(src), "-o", str(exe)],
                          capture_output=True, text=True)
    if done.returncode and "barrier" in done.stderr:
        pytest.skip("the C++ library has no std::barrier")
    assert done.returncode == 0, done.stderr[-3000:]
    inputs = op.random_inputs(np.random.default_rng(9))
    names = {"a": "a", "b": "b", "bias": "bias", "residual": "res"}
    sizes = {}
    for key, file in names.items():
        x = inputs.get(key, np.zeros(0, np.uint16))
        x.view(np.uint16).tofile(tmp_path / f"{file}.bin")
        sizes[key] = x.size
    ws = r.metadata["workspace_bytes"] // 4
    args = [str(exe), str(tmp_path), *map(str, r.grid[:2]), str(r.block[0]), str(sizes["a"]), str(sizes["b"]),
            str(sizes["bias"]), str(sizes["residual"]), str(op.m * op.n), str(ws),
            "1" if op.dtype.value == "bf16" else "0", repr(op.alpha), "2"]
    run = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    out = np.fromfile(tmp_path / "out.bin", np.uint16).view(op.dtype.storage).reshape(op.m, op.n)
    got = to_float64(out, op.dtype)
    assert np.isfinite(got).all()
    assert relative_error(got, op.reference(inputs)) <= tolerance(op)
