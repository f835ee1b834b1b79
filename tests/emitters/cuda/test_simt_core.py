"""The SIMT GEMM core's forms without a GPU: the ``frags``, cp.async ``stages`` and ``fill`` fields (JSON,
name, checks), the rendered kernels run on the CPU by a thread-per-CUDA-thread emulator (tests/fixtures/
simt_emulator.h: barriers, cp.async copies landing at their wait) against the float64 reference, and NVRTC
compiles of the forms for sm_80 and sm_90a without spills."""

from __future__ import annotations

import dataclasses
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tracea.doctor.errors import BadInputError
from tracea.emitters import cuda
from tracea.emitters.cuda import simt
from tracea.emitters.cuda.arch import parse_arch
from tracea.emitters.cuda.schedule import CudaSchedule
from tracea.kernels import Conv2d, Gemm, relative_error, tolerance

VID = "cuda-simt.gemm"
BIG = CudaSchedule("simt", bm=128, bn=128, bk=16, wm=32, wn=64, stages=2, raster=8)
HEADER = Path(__file__).parents[2] / "fixtures" / "simt_emulator.h"
FILL = simt.fill_forms()
WIDE = CudaSchedule("simt", 128, 128, 8, 32, 64, 3, raster=8, frags=2, order="snake", fill="lanes")


class NoGpu:
    nvidia = None


def test_frags_and_stages_fields_json_name_and_checks():
    s = dataclasses.replace(BIG, frags=2, stages=3, order="snake")
    assert "frags" not in BIG.to_json() and "order" not in BIG.to_json() and "_f" not in BIG.name
    assert s.to_json()["frags"] == 2 and "_s3_" in s.name and s.name.endswith("_f2_os")
    assert CudaSchedule.from_json(s.to_json()) == s
    op = Gemm(1000, 999, 1001)
    s.validate(op, parse_arch("sm_90a"))
    for bad, what in [(dataclasses.replace(BIG, frags=3), "frags"), (dataclasses.replace(BIG, frags=0), "frags"),
                      (dataclasses.replace(BIG, stages=5), "stages"), (dataclasses.replace(BIG, stages=1), "stages"),
                      (dataclasses.replace(BIG, order="cols"), "order"),
                      (dataclasses.replace(BIG, wn=128, thread_n=16), "thread_n"),
                      (dataclasses.replace(BIG, stages=3, thread_n=16), "wm"),
                      (dataclasses.replace(BIG, stages=3, thread_n=12), "thread_n"),
                      (CudaSchedule("mma", bk=32, frags=2), "frags")]:
        with pytest.raises(BadInputError, match=what):
            bad.validate(op)
    with pytest.raises(BadInputError, match="gemm only"):
        dataclasses.replace(BIG, stages=3).validate(Conv2d(1, 8, 16, 16, 8, 3, 3, padding=1))


def test_the_lane_filled_hero_takes_one_wave_odd_shapes_only():
    """The rule measured on an H100 (simt._lane_filled): odd rows, a 64x128 grid of 0.9 to 1 wave, K up to 2048."""
    sms = 132
    takes = [Gemm(1000, 999, 1001), Gemm(999, 1023, 513), Gemm(997, 1021, 777), Gemm(1020, 900, 2047)]
    keeps = [Gemm(1000, 1001, 3001), Gemm(777, 1333, 555), Gemm(1500, 999, 1001), Gemm(1000, 1000, 1000),
             Gemm(4096, 4096, 4095), Gemm(64, 100, 37)]
    assert all(simt._lane_filled(op, sms) == simt.fill_forms()[0] for op in takes)
    assert not any(simt._lane_filled(op, sms) for op in keeps)
    assert simt._lane_filled(Gemm(1000, 999, 1001), 108) is None  # an A100's 108 SMs: 128 tiles, two waves
    # the boundaries: K 2048 in, 2049 out; 120 of 132 tiles (0.91 of the SMs) in, 112 (0.85) out
    assert simt._lane_filled(Gemm(1000, 999, 2048), sms) and not simt._lane_filled(Gemm(1000, 999, 2049), sms)
    assert simt._lane_filled(Gemm(897, 999, 1001), sms) and not simt._lane_filled(Gemm(896, 999, 1001), sms)
    # cp.async needs sm_80: an sm_75 host keeps the register-staged hero
    from tracea.doctor.report import HostReport
    from tracea.emitters.cuda.arch import target_host

    assert simt._lane_filled(Gemm(576, 999, 1001), 72, target_host(HostReport(), "sm_75")) is None
    assert simt._lane_filled(Gemm(1000, 999, 1001), sms, target_host(HostReport(), "sm_90a")) is not None


def test_fill_field_json_name_and_checks():
    """``fill`` (the cp.async pipeline's lane fill): written only when not "quads", named ``_cl``/``_cs``, and
    refused off the cp.async pipeline, with extents that are not powers of two and on operands of 2^31
    elements or more (32-bit offsets)."""
    lanes = dataclasses.replace(BIG, stages=3, fill="lanes")
    assert "fill" not in dataclasses.replace(BIG, stages=3).to_json() and "_c" not in BIG.name
    assert lanes.to_json()["fill"] == "lanes" and lanes.name.endswith("_s3_r8_cl")
    assert dataclasses.replace(lanes, fill="spread", split_k=2).name.endswith("_cs_k2")
    assert CudaSchedule.from_json(lanes.to_json()) == lanes
    lanes.validate(Gemm(1000, 999, 1001), parse_arch("sm_90a"))
    for f in simt.fill_forms():
        f.validate(Gemm(1000, 999, 1001), parse_arch("sm_80"))
        assert f.fill in ("lanes", "spread") and f.frags == 2 and f.block_threads * f.min_blocks <= 512
    for bad, op in [(dataclasses.replace(BIG, fill="lanes"), None), (dataclasses.replace(lanes, fill="rows"), None),
                    (CudaSchedule("mma", bk=32, fill="lanes"), None),
                    (dataclasses.replace(lanes, bm=96, wm=48, wn=32), None),
                    (lanes, Gemm(65536, 64, 32768))]:
        with pytest.raises(BadInputError, match="fill"):
            bad.validate(op)
    assert simt.fill_forms()[0] in simt.forms(Gemm(1000, 999, 1001))
    assert not any(f.fill != "quads" for f in simt.forms(Conv2d(1, 8, 16, 16, 8, 3, 3, padding=1)))


def test_gemv_form_field_checks_and_hero():
    op = Gemm(1, 513, 8191)
    # the gemv route is off (it faulted on the H100: simt.GEMV_MAX_M); its schedule as the route would pick it
    assert simt.GEMV_MAX_M == 0 and cuda_hero(op).form == "tile"
    assert not any(f.form == "gemv" for f in simt.forms(op))
    s = simt.gemv_schedule(op, 132)
    assert s.form == "gemv" and s.split_k > 1 and s.name.endswith(f"_gv_k{s.split_k}")
    assert s.to_json()["form"] == "gemv" and "form" not in BIG.to_json() and CudaSchedule.from_json(s.to_json()) == s
    s.validate(op, parse_arch("sm_90a"))
    assert simt._tiles(op, s) * s.split_k >= 132  # the blocks that stream B fill the GPU
    assert cuda_hero(Gemm(49, 513, 8191)).form == "tile" and cuda_hero(Gemm(1, 513, 8191, layout_b="col")).form == "tile"
    for bad, bop in [(dataclasses.replace(s, bm=16), op), (dataclasses.replace(s, form="rows"), op),
                     (dataclasses.replace(s, bm=56, wm=56), op), (dataclasses.replace(s, wm=16), op),
                     (s, Gemm(1, 513, 8191, layout_b="col")),
                     (dataclasses.replace(s, stages=3), op)]:
        with pytest.raises(BadInputError, match="form"):
            bad.validate(bop)


def cuda_hero(op):
    return cuda.hero_schedule(op, VID, NoGpu())
    assert simt.forms(Gemm(64, 4096, 4096))[-1].bm < 64 and all(f.bm >= 64 for f in simt.forms(op))


MAIN = r"""
static float* tr_read(const char* dir, const char* name, size_t n) {
    char p[512]; snprintf(p, sizeof p, "%s/%s", dir, name);
    float* v = (float*)aligned_alloc(64, ((n * 4 + 63) / 64) * 64 + 64);
    FILE* f = fopen(p, "rb"); if (!f || fread(v, 4, n, f) != n) { perror(p); exit(2); } fclose(f); return v;
}
int main(int argc, char** argv) {  // dir M N K grid threads workspace-words launches alpha
    const char* dir = argv[1];
    const int M = atoi(argv[2]), N = atoi(argv[3]), K = atoi(argv[4]), grid = atoi(argv[5]), threads = atoi(argv[6]);
    const size_t nws = atol(argv[7]); const int launches = atoi(argv[8]); const float alpha = (float)atof(argv[9]);
    float* a = tr_read(dir, "a.bin", (size_t)M * K); float* b = tr_read(dir, "b.bin", (size_t)K * N);
    float* bias = tr_read(dir, "bias.bin", N); float* res = tr_read(dir, "res.bin", (size_t)M * N);
    std::vector<float> out((size_t)M * N, NAN), ws(nws ? nws : 1, 0.0f);
    for (int launch = 0; launch < launches; ++launch)
        for (int bx = 0; bx < grid; ++bx) {
            for (size_t i = 0; i < sizeof tr_smem_f / 4; ++i) tr_smem_f[i] = NAN;  // unwritten shared memory
            std::barrier<> bar(threads); tr_bar = &bar;
            std::vector<std::thread> ts;
            for (int t = 0; t < threads; ++t) ts.emplace_back([&, t] {
                threadIdx = {t, 0, 0}; blockIdx = {bx, 0, 0}; tr_groups.clear(); tr_open.clear();
                TR_KERNEL(a, b, out.data(), bias, res, M, N, K, alpha TR_WS);
                if (!tr_open.empty() || !tr_groups.empty()) { fprintf(stderr, "cp.async left in flight\n"); exit(4); }
            });
            for (auto& t : ts) t.join();
        }
    char p[512]; snprintf(p, sizeof p, "%s/out.bin", dir);
    FILE* f = fopen(p, "wb"); fwrite(out.data(), 4, out.size(), f); fclose(f);
    for (size_t i = 0; i < 64 && i < nws; ++i) if (((uint32_t*)ws.data())[i]) { fprintf(stderr, "counter not at rest\n"); return 5; }
    return 0;
}
"""


def emulate(op: Gemm, s: CudaSchedule, tmp: Path, cxx: list[str], late: int = 1, mutate=None, launches: int = 1) -> float:
    """The kernel rendered for sm_90a, run by the emulator on fresh random inputs: its relative error."""
    r = simt.render_simt(op, s, parse_arch("sm_90a"))
    src = r.source[r.source.index('extern "C"'):]  # the emulator defines the device library it needs
    src = src.replace('asm volatile("cp.async.commit_group;\\n" ::: "memory");', "tr_commit();")
    src = re.sub(r'asm volatile\("cp.async.wait_group (\d+);\\n" ::: "memory"\);', r"tr_wait(\1);", src)
    src = src.replace("extern __shared__ __align__(16) float tr_smem_f[];", "")
    src = src.replace("__shared__ int tr_last;", "static int tr_last;")
    src = mutate(src) if mutate else src
    assert "asm" not in src
    ws = r.metadata.get("workspace_bytes", 0) // 4
    (tmp / "k.cpp").write_text(f'#define TR_LATE {late}\n#include "{HEADER}"\n{src}\n#define TR_KERNEL {r.name}\n'
                               f"#define TR_WS {', ws.data()' if ws else ''}\n{MAIN}")
    subprocess.run([*cxx, "-o", str(tmp / "k"), str(tmp / "k.cpp")], check=True)
    inputs = op.random_inputs(np.random.default_rng(11))
    zeros = {"bias": np.zeros(op.n, np.float32), "residual": np.zeros((op.m, op.n), np.float32)}
    for name, key in (("a", "a"), ("b", "b"), ("bias", "bias"), ("res", "residual")):
        np.ascontiguousarray(inputs.get(key, zeros.get(key)), np.float32).tofile(tmp / f"{name}.bin")
    subprocess.run([str(tmp / "k"), str(tmp), str(op.m), str(op.n), str(op.k), str(r.grid[0]), str(r.block[0]),
                    str(ws), str(launches), str(op.alpha)], check=True)
    out = np.fromfile(tmp / "out.bin", np.float32).reshape(op.m, op.n)
    return relative_error(out.astype(np.float64), op.reference(inputs))


EMU_CASES = [  # (op, schedule, cp.async copies land late (1) or at issue (0))
    (Gemm(100, 70, 99), BIG, 1),
    (Gemm(100, 70, 99, epilogue=("bias", "relu")), dataclasses.replace(BIG, frags=2), 1),
    (Gemm(131, 70, 199, layout_a="col", layout_b="col"), dataclasses.replace(BIG, frags=2, split_k=3), 1),
    (Gemm(100, 72, 99), dataclasses.replace(BIG, stages=3), 1),
    (Gemm(100, 72, 99), dataclasses.replace(BIG, stages=3), 0),
    (Gemm(100, 72, 100, epilogue=("bias",)), dataclasses.replace(BIG, stages=3, order="snake"), 1),
    (Gemm(100, 72, 100), dataclasses.replace(BIG, order="snake", frags=2), 1),
    (Gemm(131, 70, 199, layout_a="col"), dataclasses.replace(BIG, stages=4, frags=2, split_k=3), 1),
    (Gemm(131, 70, 199, layout_a="col"), dataclasses.replace(BIG, stages=4, frags=2, split_k=3), 0),
    (Gemm(64, 200, 131, layout_b="col", epilogue=("residual", "scale"), alpha=0.5),
     dataclasses.replace(BIG, bk=8, stages=3, frags=2), 1),
    (Gemm(9, 300, 260), CudaSchedule("simt", 32, 256, 8, 16, 128, 2, raster=8, split_k=4), 1),
    (Gemm(9, 300, 260), CudaSchedule("simt", 16, 512, 8, 16, 128, 3, raster=8, frags=2, split_k=2), 1),
    (Gemm(130, 260, 40), CudaSchedule("simt", 128, 256, 8, 32, 64, 2, raster=8, frags=2), 1),
    (Gemm(130, 270, 41), CudaSchedule("simt", 128, 256, 8, 64, 64, 3, raster=8, order="snake", thread_n=16), 1),
    (Gemm(130, 270, 41, layout_a="col"), CudaSchedule("simt", 128, 256, 8, 64, 64, 3, raster=8, thread_n=16), 0),
    (Gemm(270, 130, 200, layout_b="col", epilogue=("bias", "gelu")),
     CudaSchedule("simt", 256, 128, 8, 64, 64, 4, raster=8, frags=2, order="snake", thread_n=16, split_k=3), 1),
    (Gemm(100, 200, 64), CudaSchedule("simt", 128, 256, 8, 32, 128, 4, raster=8, frags=2, thread_n=16), 0),
    # the lane fill (simt_fill.py): odd and aligned rows, every layout, K inside one tile, shorter than the
    # pipeline and a multiple of bk, splits, tiles past M and N, fewer tile elements than threads
    *((op, f, late) for f in simt.fill_forms() for op, late in ((Gemm(100, 70, 99), 1), (Gemm(100, 70, 99), 0))),
    (Gemm(100, 70, 5), FILL[0], 1),
    (Gemm(100, 70, 64, epilogue=("bias", "relu")), FILL[1], 1),
    (Gemm(9, 7, 33, layout_a="col", layout_b="col"), FILL[1], 1),
    (Gemm(130, 133, 101, layout_a="col"), dataclasses.replace(FILL[2], split_k=3), 1),
    (Gemm(128, 133, 101, layout_a="col", epilogue=("residual", "scale"), alpha=0.5),
     dataclasses.replace(FILL[0], split_k=2), 1),
    (Gemm(129, 260, 99, layout_b="col"), WIDE, 1),  # 8 warps: more threads than a k step's elements
    (Gemm(129, 256, 100), dataclasses.replace(WIDE, split_k=2), 0),
    (Gemm(9, 1100, 77), CudaSchedule("simt", 16, 1024, 8, 16, 128, 3, raster=8, frags=2, fill="lanes"), 1),
    (Gemm(9, 1100, 77, layout_a="col"), CudaSchedule("simt", 16, 1024, 8, 16, 128, 3, raster=8, fill="spread",
                                                     split_k=2), 1),
    (Gemm(70, 300, 93), CudaSchedule("simt", 128, 256, 8, 64, 64, 4, raster=8, order="snake", thread_n=16,
                                     fill="spread"), 1),
    (Gemm(128, 132, 60, layout_a="col"), FILL[1], 1),  # both operands' rows in 16-byte copies
    (Gemm(128, 132, 60, layout_a="col"), FILL[0], 0),
    (Gemm(1, 513, 700), simt.gemv_schedule(Gemm(1, 513, 700), 132, 1), 1),
    (Gemm(1, 513, 8191, epilogue=("gelu",)), simt.gemv_schedule(Gemm(1, 513, 8191), 132, 7), 1),
    (Gemm(3, 520, 999, layout_a="col", epilogue=("bias", "relu")), simt.gemv_schedule(Gemm(3, 520, 999), 132, 4), 1),
    (Gemm(8, 260, 300, epilogue=("residual", "scale"), alpha=0.5), simt.gemv_schedule(Gemm(8, 260, 300), 132, 2), 1),
    (Gemm(37, 301, 333, epilogue=("bias",)), simt.gemv_schedule(Gemm(37, 301, 333), 132, 3), 1),
    (Gemm(48, 256, 200, layout_a="col"), simt.gemv_schedule(Gemm(48, 256, 200), 132, 1), 1),
    (Gemm(64, 300, 200), simt.gemv_schedule(Gemm(64, 300, 200), 132, 3), 1),
    (Gemm(50, 260, 333, layout_a="col", epilogue=("bias", "residual")), simt.gemv_schedule(Gemm(50, 260, 333), 132, 2), 1),
]


@pytest.mark.parametrize("op,s,late", EMU_CASES, ids=lambda x: getattr(x, "name", str(x))[:40])
def test_forms_compute_the_product_in_the_emulator(op, s, late, tmp_path, emulator_cxx):
    s.validate(op, parse_arch("sm_90a"))
    err = emulate(op, s, tmp_path, emulator_cxx, late, launches=2 if s.split_k > 1 else 1)
    assert err <= tolerance(op), (s.name, err)


def test_the_emulator_sees_a_missing_wait(tmp_path, emulator_cxx):
    """The check can fail: waiting for one tile fewer than the pipeline needs reads a slot before its copies
    land (late copies), and gives a wrong product."""
    op, s = Gemm(100, 72, 99), dataclasses.replace(BIG, stages=3)
    err = emulate(op, s, tmp_path, emulator_cxx, 1, mutate=lambda src: src.replace("tr_wait(1);", "tr_wait(2);"))
    assert not err <= tolerance(op)


@pytest.mark.parametrize("s", FILL[:2], ids=lambda s: s.name)
def test_the_emulator_sees_an_unguarded_last_tile(s, tmp_path, emulator_cxx):
    """The lane fill's check can fail: one more iteration in the unguarded loop copies the tile that crosses
    K's end without zero-filling past it, and gives a wrong product."""
    op = Gemm(100, 70, 99)
    whole = f"K / {s.bk}) - {s.stages - 1});"
    err = emulate(op, s, tmp_path, emulator_cxx, 1, mutate=lambda src: src.replace(whole, whole.replace(
        f"- {s.stages - 1}", f"- {s.stages - 2}")) if whole in src else "#error the loop bound moved")
    assert not err <= tolerance(op)


COMPILE_CASES = [  # (op, schedule) compiled for sm_80 and sm_90a: no spills
    (Gemm(4096, 4096, 4096), dataclasses.replace(BIG, frags=2)),
    (Gemm(4096, 4096, 4096), dataclasses.replace(BIG, stages=3)),
    (Gemm(4096, 4096, 4096), dataclasses.replace(BIG, stages=4, frags=2)),
    (Gemm(4096, 4096, 4096), dataclasses.replace(BIG, bk=8, stages=4, min_blocks=2)),
    (Gemm(1000, 999, 1001), dataclasses.replace(BIG, frags=2, split_k=2)),
    (Gemm(1000, 999, 1001), dataclasses.replace(BIG, stages=3, split_k=2)),
    (Gemm(1000, 999, 1001), dataclasses.replace(BIG, stages=4, frags=2, split_k=2)),
    (Gemm(64, 4096, 4096), CudaSchedule("simt", 64, 256, 16, 32, 64, 4, raster=8, split_k=8)),
    (Gemm(64, 4096, 4096), CudaSchedule("simt", 32, 256, 8, 16, 128, 2, raster=8, split_k=8)),
    (Gemm(37, 1001, 4097), CudaSchedule("simt", 32, 512, 8, 16, 128, 3, raster=8, frags=2, split_k=8)),
    (Gemm(4096, 4096, 4096), CudaSchedule("simt", 128, 256, 8, 64, 64, 3, raster=8, order="snake", thread_n=16)),
    (Gemm(1000, 999, 1001), CudaSchedule("simt", 256, 128, 8, 64, 64, 4, raster=8, order="snake", thread_n=16,
                                         split_k=2)),
    # the lane-filled forms (FILL_FORMS) on the odd shapes, 4096^3 and both layouts; split in 2
    *((op, f) for f in FILL for op in (Gemm(1000, 999, 1001), Gemm(777, 1333, 555), Gemm(4096, 4096, 4096))),
    *((Gemm(1000, 999, 1001), dataclasses.replace(f, split_k=2)) for f in FILL if f.warps == 4),
    (Gemm(1000, 1000, 1000, layout_a="col", layout_b="col", epilogue=("bias", "gelu")), FILL[0]),
    (Gemm(1000, 999, 1001, layout_a="col", layout_b="col"), FILL[1]),
    (Gemm(1, 513, 8191, epilogue=("gelu",)), simt.gemv_schedule(Gemm(1, 513, 8191), 132)),
    (Gemm(8, 4096, 4096, layout_a="col"), simt.gemv_schedule(Gemm(8, 4096, 4096), 132)),
    (Gemm(37, 1001, 4097), simt.gemv_schedule(Gemm(37, 1001, 4097), 132)),
    (Gemm(48, 1001, 4097, epilogue=("bias", "gelu")), simt.gemv_schedule(Gemm(48, 1001, 4097), 132)),
    (Gemm(64, 4096, 4096), simt.gemv_schedule(Gemm(64, 4096, 4096), 132)),
]


@pytest.fixture()
def _cache(kernel_home, monkeypatch):
    monkeypatch.setenv("TRACEA_HOME", str(kernel_home))


@pytest.mark.parametrize("arch", ("sm_80", "sm_90a"))
@pytest.mark.parametrize("op,s", COMPILE_CASES, ids=lambda x: getattr(x, "name", "")[:40])
def test_forms_compile_without_spills(op, s, arch, _cache):
    pytest.importorskip("cuda.core")
    from tracea.emitters.cuda.build import compile_kernel

    _, r, _, art = compile_kernel(op, VID, s, NoGpu(), arch)
    res = art.metadata["resources"]
    assert 0 < res["regs_per_thread"] <= 255 and res["spills"] == 0, (r.name, arch, res)
    if s.form == "gemv":
        assert r.smem == 4 * 8 * min(8, op.m) * 128 and r.grid == (-(-op.m // s.bm) * -(-op.n // 128) * s.split_k, 1, 1)
        return
    assert r.smem == s.stages * s.bk * (s.bm + s.bn + 8) * 4 and ("cp.async" in r.source) == (s.stages > 2)
    assert r.metadata["tile"]["thread"] == [8, s.thread_n]


@pytest.mark.parametrize("core", [{"stages": 2, "frags": 1, "order": "snake"}, {"stages": 3, "frags": 1, "order": "snake"},
                                  {"stages": 4, "frags": 2, "order": "snake"}])
def test_a_hero_core_from_the_sweep_gives_valid_heroes(core, monkeypatch, _cache):
    """HERO_CORE is the one line the sweep's table changes: every GEMM hero then validates and the odd shape's
    compiles without spills (there the lane-filled form, which does not follow HERO_CORE); a convolution's hero
    keeps the recorded two-stage form."""
    pytest.importorskip("cuda.core")
    from tracea.emitters.cuda.build import compile_kernel

    monkeypatch.setattr(simt, "HERO_CORE", core)
    monkeypatch.setattr(simt, "HERO_CORE_ALIGNED", {**core, "frags": 3 - core["frags"]})
    for op in (Gemm(1000, 999, 1001), Gemm(128, 256, 64, layout_a="col", layout_b="col", epilogue=("relu",)),
               Gemm(4096, 4096, 4096), Gemm(512, 512, 16384), Gemm(777, 1333, 555), Gemm(64, 100, 37, layout_a="col"), Gemm(64, 100, 37, layout_b="col")):
        s = cuda_hero(op)
        lanes = simt._lane_filled(op, simt.sm_count(NoGpu()))
        if lanes is not None:  # odd rows, a one-wave 64x128 grid, K not long: the lane-filled form, whatever the core
            assert s == lanes == simt.fill_forms()[0] and op.k <= simt.LANES_MAX_K, op
            s.validate(op, parse_arch("sm_90a"))
            continue
        rows = (op.k if op.layout_a == "row" else op.m, op.n if op.layout_b == "row" else op.k)  # contiguous runs
        aligned = rows[0] % 4 == 0 and rows[1] % 4 == 0
        want = simt.HERO_CORE_ALIGNED if aligned else core  # odd rows (the scalar loader) keep HERO_CORE
        assert (s.stages, s.frags, s.order) == (want["stages"], want["frags"], want["order"]), op
        s.validate(op, parse_arch("sm_90a"))
    op = Gemm(1000, 999, 1001, epilogue=("bias", "relu"))
    assert compile_kernel(op, VID, cuda_hero(op), NoGpu(), "sm_90a")[3].metadata["resources"]["spills"] == 0
    conv = Conv2d(2, 64, 30, 30, 96, 3, 3, stride=2, padding=1, layout="nhwc")
    assert cuda.hero_schedule(conv, "cuda-simt.conv2d", NoGpu()) == BIG
