"""CUDA kernels rendered and compiled by NVRTC (no GPU needed): every variant for sm_80 and sm_90a over a
sample of schedules; a compile error, or a register spill in a hero schedule, fails. Binaries land in a
per-session cache, so the sample costs each compile once."""

from __future__ import annotations

import dataclasses
import random

import pytest

from tracea.doctor.errors import BadInputError, CompileError, UnsupportedError
from tracea.emitters import cuda
from tracea.emitters import nvrtc as nv
from tracea.emitters.cuda.build import compile_kernel
from tracea.kernels import Conv2d, Gemm, Softmax
from tracea.kernels.ops.attention import Attention

pytest.importorskip("cuda.core")


class NoGpu:
    nvidia = None


HOST = NoGpu()
ARCHS = ("sm_80", "sm_90a")

# (variant, op, whether its hero must be spill-free): the target shapes and odd ones
CASES = [
    ("cuda-mma-sync.gemm", Gemm(4096, 4096, 4096, "bf16")),
    ("cuda-mma-sync.gemm", Gemm(8192, 8192, 8192, "bf16", layout_b="col", epilogue=("bias", "gelu"))),
    ("cuda-mma-sync.gemm", Gemm(257, 130, 75, "fp16", layout_a="col", layout_b="col",
                                epilogue=("bias", "gelu", "scale", "residual"))),
    ("cuda-mma-sync.conv2d", Conv2d(32, 256, 56, 56, 256, 3, 3, padding=1, layout="nhwc", dtype="fp16")),
    ("cuda-mma-sync.conv2d", Conv2d(2, 3, 17, 19, 10, 3, 3, padding=1, stride=2, bias=True, dtype="bf16")),
    ("cuda-mma-sync.conv2d", Conv2d(2, 16, 17, 19, 24, 3, 3, padding=1, layout="nhwc", dtype="fp16", bias=True)),
    ("cuda-mma-sync.conv2d", Conv2d(1, 64, 224, 224, 128, 3, 3, padding=1, layout="nchw", dtype="fp16")),
    ("cuda-simt.gemm", Gemm(4096, 4096, 4096)),
    ("cuda-simt.gemm", Gemm(33, 65, 17, layout_a="col", epilogue=("relu", "bias"))),
    ("cuda-simt.conv2d", Conv2d(1, 64, 224, 224, 128, 3, 3, padding=1)),
    ("cuda-simt.conv2d", Conv2d(2, 4, 17, 19, 10, 3, 3, padding=1, layout="nhwc", bias=True)),
    ("cuda-simt.softmax", Softmax(8192, 8192)),
    ("cuda-simt.softmax", Softmax(37, 1001, "bf16")),
    ("cuda-mma-sync.attention", Attention(1, 4, 300, 128, dtype="bf16", causal=True)),
]


@pytest.fixture(autouse=True)
def _kernel_cache(kernel_home, monkeypatch):
    monkeypatch.setenv("TRACEA_HOME", str(kernel_home))


def test_every_variant_is_covered():
    assert {v for v, _ in CASES} == {v.id for v in cuda.ALL_VARIANTS}


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("vid,op", CASES, ids=lambda x: x if isinstance(x, str) else x.signature[:40])
def test_hero_compiles_without_spills(vid, op, arch):
    sched = cuda.hero_schedule(op, vid, HOST)
    _, r, _, art = compile_kernel(op, vid, sched, HOST, arch)
    res = art.metadata["resources"]
    assert art.language == "cuda" and art.compiler.startswith("NVRTC") and art.binary.endswith(".cubin")
    assert res["regs_per_thread"] > 0, art.metadata["compile_log"]
    assert res["spills"] == 0, f"{r.name} spills on {arch}: {res}"
    assert res["smem_per_cta"] >= r.smem and r.smem <= (232448 if arch == "sm_90a" else 166912)
    assert f"Compiling entry function '{r.entry}' for '{arch}'" in art.metadata["compile_log"]
    meta = art.metadata
    assert meta["launch"]["block"][0] == sched.block_threads and meta["arch"] == arch
    assert {"name", "tile", "fragments", "resources", "launch", "epilogue"} <= set(meta)  # DESIGN.md's fields
    assert meta["name"] == r.name and meta["fragments"]["dtype_acc"] == "fp32"


def test_a_sample_of_the_search_space_compiles():
    """Three random candidates of each core's space on each target (seeded), beyond the heroes."""
    rnd = random.Random(4)
    picks = [("cuda-mma-sync.gemm", Gemm(1000, 1000, 1000, "bf16")),
             ("cuda-mma-sync.conv2d", Conv2d(1, 64, 56, 56, 64, 3, 3, padding=1, layout="nhwc", dtype="bf16")),
             ("cuda-simt.gemm", Gemm(1000, 1000, 1000)),
             ("cuda-simt.softmax", Softmax(100, 5000, "fp16"))]
    for vid, op in picks:
        space = cuda.search_space(op, vid, HOST, "sm_90a")
        assert space[0] == cuda.hero_schedule(op, vid, HOST) and len(set(space)) == len(space)
        for sched in rnd.sample(space[1:], min(2, len(space) - 1)):
            for arch in ARCHS:
                try:
                    compile_kernel(op, vid, sched, HOST, arch)
                except BadInputError:
                    assert arch == "sm_80"  # a schedule too big for sm_80's shared memory


@pytest.mark.parametrize("persist", [1, 3])
def test_persistent_softmax_compiles(persist):
    op = Softmax(1001, 4100, "bf16")
    s = cuda.CudaSchedule("softmax", threads=256, vec=4, chunks=5, persist=persist)
    _, r, _, a = compile_kernel(op, "cuda-simt.softmax", s, HOST, "sm_90a")
    assert a.metadata["resources"]["spills"] == 0 and r.grid[0] == 132 * persist and "gridDim.x" in r.source
    with pytest.raises(BadInputError, match="persist"):
        cuda.CudaSchedule("softmax", threads=256, vec=4, chunks=0, persist=2).validate(op)


def test_cache_hit_and_key():
    op = Softmax(64, 1000)
    vid = "cuda-simt.softmax"
    s = cuda.hero_schedule(op, vid, HOST)
    _, _, _, a = compile_kernel(op, vid, s, HOST, "sm_80")
    _, _, _, b = compile_kernel(op, vid, s, HOST, "sm_80")
    assert b.cache_hit and b.binary == a.binary and b.metadata["resources"] == a.metadata["resources"]
    _, _, _, c = compile_kernel(op, vid, s, HOST, "sm_90a")
    assert c.binary != a.binary  # the target is part of the key


def test_compile_error_names_the_log(tmp_path):
    with pytest.raises(CompileError) as exc:
        nv.compile_cached('extern "C" __global__ void k() { undeclared_thing(); }', "broken", "k", "sm_80")
    assert "undeclared_thing" in str(exc.value) and "identifier" in str(exc.value)


def test_compile_error_shows_the_error_not_the_warnings_before_it():
    # twenty unused variables (twenty warnings) ahead of one error: the message must carry the error
    unused = " ".join(f"int u{i} = {i};" for i in range(20))
    with pytest.raises(CompileError) as exc:
        nv.compile_cached(f'extern "C" __global__ void k() {{ {unused} undeclared_thing(); }}', "noisy", "k", "sm_80")
    assert "undeclared_thing" in str(exc.value) and "error" in str(exc.value)


def test_a_record_cached_without_ptxas_s_report_is_compiled_again():
    """A cubin NVRTC took from the driver's compute cache came with no ptxas report, and its resources were
    kept as zeros (NVRTC 13.0 on an H200: nvrtc_log_probe.py). Such a record is compiled again, and a new
    one says whether its log had the report."""
    import json

    src = 'extern "C" __global__ void k(float* x) { x[threadIdx.x] *= 2.0f; }'
    cubin, res, log, hit, _ = nv.compile_cached(src, "reported", "k", "sm_80")
    record = cubin.with_suffix(".json")
    assert not hit and nv.has_report(log, "k") and json.loads(record.read_text())["ptxas_report"] is True
    assert res.regs_per_thread > 0
    assert nv.compile_cached(src, "reported", "k", "sm_80")[3]  # a whole record: a hit
    # the record an earlier version kept for a compute-cache answer: no report, zeros, no "ptxas_report"
    record.write_text(json.dumps({"resources": {**res.to_json(), "regs_per_thread": 0}, "log": "warning #177-D",
                                  "nvrtc": "13.0"}))
    _, again, log2, hit2, _ = nv.compile_cached(src, "reported", "k", "sm_80")
    assert not hit2 and nv.has_report(log2, "k") and again == res
    assert json.loads(record.read_text())["ptxas_report"] is True
    assert not nv.has_report(log2, "other") and not nv.has_report("", "k")


def test_a_compile_answered_without_the_report_is_compiled_once_more_as_a_new_source(monkeypatch):
    """NVRTC 13.0's compute cache answers a kernel compiled before without ptxas's report
    (nvrtc_log_probe.py). The cache is keyed by the PTX, so the product compiles it once more beside an empty
    kernel of a name of its own, for the log alone (the cubin is the first compile's)."""
    real = nv._nvrtc_compile
    seen: list[str] = []

    def cached_first(source, file_name, opts):
        seen.append(source)
        code, log = real(source, file_name, opts)
        return (code, "warning #177-D: variable declared but never referenced") if len(seen) == 1 else (code, log)

    monkeypatch.setattr(nv, "_nvrtc_compile", cached_first)
    src = 'extern "C" __global__ void k2(float* x) { x[threadIdx.x] += 1.0f; }'
    code, log = nv.compile_with_report(src, "k2.cu", "k2", nv.options_for("sm_80"))
    assert len(seen) == 2 and seen[0] == src and seen[1].startswith(src) and "void tr_ptxas_report_" in seen[1]
    assert nv.has_report(log, "k2") and len(code) > 100
    assert code == real(src, "k2.cu", nv.options_for("sm_80"))[0]  # the first compile's cubin, not the other
    seen.clear()  # with the report at once, or without -v asked for: one compile
    nv.compile_with_report(src, "k2.cu", None, {"arch": "sm_80", "std": "c++17"})
    assert len(seen) == 1


def test_parse_resources_reads_ptxas():
    log = ("ptxas info    : Compiling entry function 'k' for 'sm_90a'\n"
           "ptxas         .     24 bytes stack frame, 20 bytes spill stores, 16 bytes spill loads\n"
           "ptxas info    : Used 255 registers, used 1 barriers, 1024 bytes smem\n")
    r = nv.parse_resources(log, "k")
    assert (r.regs_per_thread, r.smem_static, r.spills, r.stack_frame) == (255, 1024, 36, 24)
    assert nv.parse_resources(log, "other").regs_per_thread == 0


def test_bad_requests_are_clear():
    op = Gemm(64, 64, 64, "fp32")
    with pytest.raises(UnsupportedError, match="computes bf16, fp16"):
        compile_kernel(op, "cuda-mma-sync.gemm", cuda.hero_schedule(op, "cuda-mma-sync.gemm", HOST), HOST, "sm_80")
    bf = Gemm(64, 64, 64, "bf16")
    with pytest.raises(UnsupportedError, match="sm_80"):
        compile_kernel(bf, "cuda-mma-sync.gemm", cuda.hero_schedule(bf, "cuda-mma-sync.gemm", HOST), HOST, "sm_75")
    big = dataclasses.replace(cuda.hero_schedule(bf, "cuda-mma-sync.gemm", HOST), bm=256, bn=256, bk=64, stages=5)
    with pytest.raises(BadInputError):
        compile_kernel(bf, "cuda-mma-sync.gemm", big, HOST, "sm_80")
    with pytest.raises(BadInputError, match="bk"):
        cuda.CudaSchedule("mma", bk=16).validate()



def test_no_gpu_and_no_target_says_name_one():
    from tests.conftest import _nvidia_gpu_present

    if _nvidia_gpu_present() is None:
        pytest.skip("a GPU is present: its own target is used")
    bf = Gemm(64, 64, 64, "bf16")
    with pytest.raises(UnsupportedError, match="no NVIDIA GPU") as exc:
        compile_kernel(bf, "cuda-mma-sync.gemm", cuda.hero_schedule(bf, "cuda-mma-sync.gemm", HOST), HOST)
    assert "--arch sm_90a" in exc.value.hint
