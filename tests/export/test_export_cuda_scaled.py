"""`tracea export scaled_gemm --backend cuda` without a GPU: the Hopper 8-bit GEMM's package (FP8 tiles with the TMA
store, the swapped decode form with split-K, int8 into int32; FP8 decode of at most 16 rows on the TMA gemv) renders, its launcher encodes the kernel's tensor maps
over the operands' byte pairs with the geometry Tracea's own runs use (``scaled_gemm.byte_view``, exchanged under
``swap``), passes M, N and K as the kernel takes them, compiles and links with its example, and on a stand-in driver
answering as an sm_90 encodes each map once per address and launches with every argument in place. The GPU run:
tests/export/test_export_gpu.py."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest
from export_packages import cuda_include, export, needs_nvrtc
from test_export_cuda import _run_on_fake_driver

CASES = {
    "fp8-row-tile-tma-store": ["--m", "256", "--n", "512", "--k", "1024", "--dtype", "fp8e4m3", "--out-dtype", "bf16",
                               "--scale", "row"],
    "fp8-tensor-decode-swapped-split": ["--m", "24", "--n", "4096", "--k", "1024", "--dtype", "fp8e4m3",
                                        "--out-dtype", "fp16", "--scale", "tensor"],
    "int8-int32-wide-direct": ["--m", "256", "--n", "512", "--k", "1024", "--dtype", "int8", "--out-dtype", "int32",
                               "--scale", "none"],
}


def _expected(m: dict):
    from tracea.emitters import registry
    from tracea.emitters.cuda.hopper import gemm, scaled_gemm
    from tracea.kernels import Op

    op = Op.from_json(m["op"])
    sched = registry.backend("cuda").schedule_from_json(m["schedule"])
    return op, sched, gemm.tma_boxes(scaled_gemm.byte_view(op), sched), scaled_gemm.kernel_scalars(op, sched)


def _compiled(tmp_path, pkg, inc) -> list:
    """The package's library and example compiled (-Werror): their object files."""
    objs = []
    for src in ("src/launcher.c", "src/kernel_image.c", "example.c"):
        obj = tmp_path / f"{src.split('/')[-1]}.o"
        r = subprocess.run(["gcc", "-std=c11", "-Wall", "-Wextra", "-Werror", "-c", str(pkg / src), "-I",
                            str(pkg / "include"), "-I", str(pkg / "src"), "-I", str(inc), "-o", str(obj)],
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        objs.append(obj)
    return objs


@needs_nvrtc
@pytest.mark.skipif(cuda_include() is None or shutil.which("gcc") is None, reason="cuda.h or gcc is missing")
@pytest.mark.parametrize("case", list(CASES))
def test_the_scaled_gemm_package_encodes_its_byte_pair_maps_and_launches(tmp_path, case):
    from tracea.emitters.cuda.hopper import scaled_gemm

    pkg = export(tmp_path, "scaled_gemm", *CASES[case], "--arch", "sm_90a", "--backend", "cuda")
    m = json.loads((pkg / "manifest.json").read_text())
    op, sched, boxes, mnk = _expected(m)
    assert m["variant"] == "cuda-wgmma.scaled_gemm" and m["abi_version"] == 3
    assert sched.swap == (op.m <= 64)
    maps = m["kernel"]["tensor_maps"]["maps"]
    # the kernel's A is op's B under swap (C^T = B^T A^T), and the maps are over 16-bit pairs: K/2 columns
    assert (maps["tmA"]["tensor"], maps["tmB"]["tensor"]) == (("b", "a") if sched.swap else ("a", "b"))
    for which in ("a", "b"):
        g = maps[f"tm{which.upper()}"]
        assert (g["inner"], g["outer"], g["box_inner"], g["box_outer"]) == (*boxes[which]["dims"], *boxes[which]["box"])
        assert g["inner"] == op.k // 2
    assert m["kernel"]["tensor_maps"]["store_tma"] == (op.out_dtype.value in ("bf16", "fp16") and sched.store == "tma")
    # the C function takes the op's views in the op's order, whichever map each one feeds
    assert list(m["tensors"]) == ["a", "b", *(["scale_a", "scale_b"] if op.scale != "none" else []), "out"]
    assert re.search(r"_scaled_gemm\(const TraceaConstTensorView\* a, const TraceaConstTensorView\* b,", m["launcher"])
    launcher = (pkg / "src" / "launcher.c").read_text()
    for name, value in mnk.items():
        assert f"int s_{name} = {value};" in launcher
    args = re.search(r"void\* args\[\] = \{(.*)\};", launcher).group(1).split(", ")
    names = [a.lstrip("&").split("_", 1)[1] for a in args]
    assert names[:len(scaled_gemm.PARAMS)] == list(scaled_gemm.PARAMS)
    # the library and its example compile and link (-Werror), and say there is no GPU on a driver without one
    inc = cuda_include()
    objs = _compiled(tmp_path, pkg, inc)
    out = _run_on_fake_driver(tmp_path, pkg, m, objs[:2], inc, FAKE_CLUSTERS="3")
    addr = {t: (k + 1) << 28 for k, t in enumerate(m["tensors"])}
    calls = out.split("call ")[1:]
    assert all("status 0" in c for c in calls[:4]), out[-2000:]
    assert "status 1" in calls[4] and "not 16-byte aligned" in calls[4]  # A moved by 8 bytes: refused, not launched
    encoded = [[ln.split()[2] for ln in call.splitlines() if ln.startswith("encode ")] for call in calls]
    mapped = [maps["tmA"]["tensor"], maps["tmB"]["tensor"]] + (["out"] if m["kernel"]["tensor_maps"]["store_tma"] else [])
    assert encoded[0] == [str(addr[t]) for t in mapped] and encoded[1] == encoded[2] == []  # once per address
    for call in calls[:3]:
        words = next(ln for ln in call.splitlines() if ln.startswith("launch ")).split(" params ")[1].split()
        for word, param in zip(words[:2], ("tmA", "tmB"), strict=True):
            g = maps[param]
            assert word.split(":")[1:4] == [str(addr[g["tensor"]]), str(g["inner"]), str(g["outer"])], word
        # (int8 into int32 without scales: the scale pointers the kernel takes are null)
        assert words[3:6] == [str(addr["out"]), str(addr.get("scale_a", 0)), str(addr.get("scale_b", 0))], words
        assert words[6:9] == [str(mnk["M"]), str(mnk["N"]), str(mnk["K"])], words


@needs_nvrtc
@pytest.mark.skipif(cuda_include() is None or shutil.which("gcc") is None, reason="cuda.h or gcc is missing")
def test_the_fp8_decode_package_runs_the_tma_gemv_over_byte_pairs(tmp_path):
    """M <= 16 FP8 exports the gemv (emitters/cuda/gemv_tma.py): A's and B's maps over byte pairs (K/2 columns, 64
    pairs x 16 rows and 64 x 64 boxes), no C map, the launch taking the maps, then out, the scales, the epilogue's
    operands (none: null), the workspace (none: null) and alpha."""
    from tracea.emitters import registry
    from tracea.emitters.cuda import gemv_tma
    from tracea.kernels import Op

    pkg = export(tmp_path, "scaled_gemm", "--m", "16", "--n", "4096", "--k", "1024", "--dtype", "fp8e4m3",
                 "--out-dtype", "bf16", "--scale", "row", "--arch", "sm_90a", "--backend", "cuda")
    m = json.loads((pkg / "manifest.json").read_text())
    op = Op.from_json(m["op"])
    sched = registry.backend("cuda").schedule_from_json(m["schedule"])
    assert sched.core == "gemv_tma" and m["abi_version"] == 3
    maps = m["kernel"]["tensor_maps"]["maps"]
    assert (maps["tmA"]["tensor"], maps["tmB"]["tensor"]) == ("a", "b") and not m["kernel"]["tensor_maps"]["store_tma"]
    geometry = gemv_tma.map_geometry(op)
    for p in ("tmA", "tmB"):
        g = maps[p]
        assert (g["inner"], g["outer"], g["box_inner"], g["box_outer"]) == geometry[p] and g["inner"] == op.k // 2
    assert list(m["tensors"]) == ["a", "b", "scale_a", "scale_b", "out"]
    inc = cuda_include()
    objs = _compiled(tmp_path, pkg, inc)
    out = _run_on_fake_driver(tmp_path, pkg, m, objs[:2], inc)
    addr = {t: (k + 1) << 28 for k, t in enumerate(m["tensors"])}
    call = out.split("call ")[1]
    assert "status 0" in call, out[-2000:]
    words = next(ln for ln in call.splitlines() if ln.startswith("launch ")).split(" params ")[1].split()
    for word, p in zip(words[:2], ("tmA", "tmB"), strict=True):
        assert word.split(":")[1:4] == [str(addr[maps[p]["tensor"]]), str(maps[p]["inner"]), str(maps[p]["outer"])]
    assert words[2:7] == [str(addr["out"]), str(addr["scale_a"]), str(addr["scale_b"]), "0", "0"], words


FP8_C = {  # an FP8 C with its amax: the Hopper tiles with row scales (N off the tiles), the TMA gemv at 5 rows
    "tiles-e4m3-row": ["--m", "256", "--n", "520", "--k", "1024", "--dtype", "fp8e4m3", "--out-dtype", "fp8e4m3",
                       "--scale", "row"],
    "gemv-e5m2-tensor": ["--m", "5", "--n", "4096", "--k", "1024", "--dtype", "fp8e4m3", "--out-dtype", "fp8e5m2",
                         "--scale", "tensor"],
    "tiles-e4m3-bias-relu-residual": ["--m", "256", "--n", "512", "--k", "1024", "--dtype", "fp8e4m3",
                                      "--out-dtype", "fp8e4m3", "--scale", "row", "--epilogue", "bias,relu,residual"],
}


@needs_nvrtc
@pytest.mark.skipif(cuda_include() is None or shutil.which("gcc") is None, reason="cuda.h or gcc is missing")
@pytest.mark.parametrize("case", list(FP8_C))
def test_an_fp8_c_exports_with_its_amax_as_a_second_output(tmp_path, case):
    """C quantized by ``scale_out`` and the amax written beside it: the C function takes ``scale_out`` among its
    inputs and ``amax`` as a second output view after ``out``; the kernel's amax words are a scratch buffer the
    library allocates and zeroes once (every launch leaves them zero); an amax over C's memory is refused; the
    example picks ``scale_out`` from the reference's amax and rounds the reference to the FP8 type as the kernel
    stores C, then checks the amax too."""
    from tracea.emitters.export_example import FP8_FORMAT
    from tracea.kernels import DType, Op

    pkg = export(tmp_path, "scaled_gemm", *FP8_C[case], "--arch", "sm_90a", "--backend", "cuda")
    m = json.loads((pkg / "manifest.json").read_text())
    op = Op.from_json(m["op"])
    epilogue = [n for n in ("bias", "residual") if n in op.epilogue]
    assert op.fp8_out and list(m["tensors"]) == ["a", "b", "scale_a", "scale_b", *epilogue, "scale_out", "out", "amax"]
    assert m["tensors"]["amax"] == [1] and m["tensors"]["scale_out"] == [1]
    header = next((pkg / "include").glob("*/tracea.h")).read_text()
    for name in epilogue:  # the kernel reads them in bf16 beside an FP8 C (ScaledGemm.operand_dtype), not in C's type
        assert f"{name}: TRACEA_DTYPE_BF16" in header
    assert re.search(r"const TraceaConstTensorView\* scale_out, TraceaTensorView\* out, TraceaTensorView\* amax, "
                     r"void\* stream\)", m["launcher"])
    launcher = (pkg / "src" / "launcher.c").read_text()
    args = re.search(r"void\* args\[\] = \{(.*)\};", launcher).group(1).split(", ")
    names = [a.lstrip("&").split("_", 1)[1] for a in args]
    at = names.index("scale_out")
    assert names[at:at + 3] == ["scale_out", "amax", "amax_ws"], names
    slot = int(re.search(r"p_amax_ws = tr_scratch\[(\d+)\]", launcher).group(1))
    sizes = re.search(r"tr_scratch_bytes\[TR_NSCRATCH \+ 1\] = \{(.*)\};", launcher).group(1).split(", ")
    assert sizes[slot] == "8"
    mant, bias = FP8_FORMAT[op.out_dtype.value]
    example = (pkg / "example.c").read_text()
    assert f"ex_q8(ref[i] * scale_out[0], {mant}, {bias}, {DType(op.out_dtype.value).max_finite!r})" in example
    assert f"{DType(op.out_dtype.value).max_finite / 2!r} / amax_ref" in example and "amax_ok" in example
    assert "--perturb-amax" in example and "--perturb-amax" in (pkg / "CMakeLists.txt").read_text()
    inc = cuda_include()
    objs = _compiled(tmp_path, pkg, inc)
    out = _run_on_fake_driver(tmp_path, pkg, m, objs[:2], inc, FAKE_CLUSTERS="3")
    addr = {t: (k + 1) << 28 for k, t in enumerate(m["tensors"])}
    lines = out.splitlines()
    allocs = [ln.split()[1:] for ln in lines if ln.startswith("alloc ")]
    assert [a[1] for a in allocs][slot] == "8" and ["memset", allocs[slot][0], "0", "8"] in [ln.split() for ln in lines]
    calls = out.split("call ")[1:]
    assert all("status 0" in c for c in calls[:3]), out[-2000:]
    assert "status 1" in calls[5] and "amax overlaps out" in calls[5], calls[5]
    for call in calls[:3]:
        words = next(ln for ln in call.splitlines() if ln.startswith("launch ")).split(" params ")[1].split()
        assert words[at:at + 3] == [str(addr["scale_out"]), str(addr["amax"]), allocs[slot][0]], words


@pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is missing")
@pytest.mark.parametrize("dtype", ["fp8e4m3", "fp8e5m2"])
def test_the_examples_fp8_rounding_is_the_references(tmp_path, dtype):
    """``ex_q8`` (the example's FP8 rounding of C) against the reference's own (``to_storage``, as the kernel
    stores C): nearest even, ties included, subnormals, the largest finite value, saturation beyond it."""
    import numpy as np

    from tracea.emitters.export_example import FP8_FORMAT, FP8_ROUND
    from tracea.kernels import DType
    from tracea.kernels.dtypes import to_float64, to_storage

    t = DType(dtype)
    mant, bias = FP8_FORMAT[dtype]
    codes = np.arange(256, dtype=np.uint8)
    grid = to_float64(codes, t)  # every code's value
    grid = np.unique(np.abs(grid[np.isfinite(grid)]))
    ties = (grid[:-1] + grid[1:]) / 2  # exactly halfway: nearest even decides
    rng = np.random.default_rng(7)
    x = np.concatenate([grid, ties, np.nextafter(ties, 0), np.nextafter(ties, np.inf),
                        rng.standard_normal(4000) * 10.0 ** rng.uniform(-4, 5, 4000),
                        [t.max_finite * 1.01, t.max_finite * 4, 1e30, 0.0]])
    x = np.concatenate([x, -x])
    want = to_float64(to_storage(x, t), t)
    (tmp_path / "q8.c").write_text("#include <math.h>\n#include <stdio.h>\n" + FP8_ROUND + f"""
int main(void) {{
    double v;
    while (scanf("%lf", &v) == 1) printf("%.17g\\n", ex_q8(v, {mant}, {bias}, {t.max_finite!r}));
    return 0;
}}
""")
    subprocess.run(["gcc", "-std=c11", "-Wall", "-Wextra", "-Werror", str(tmp_path / "q8.c"), "-lm", "-o",
                    str(tmp_path / "q8")], check=True, capture_output=True, text=True)
    r = subprocess.run([str(tmp_path / "q8")], input="\n".join(repr(float(v)) for v in x), capture_output=True,
                       text=True, check=True, timeout=60)
    got = np.array([float(v) for v in r.stdout.split()])
    bad = np.flatnonzero(got != want)
    assert bad.size == 0, [(x[i], got[i], want[i]) for i in bad[:5]]


@pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is missing")
def test_the_examples_fp8_codes_decode_as_the_references(tmp_path):
    """``ex_f8`` (how the example reads FP8 elements) against ``to_float64`` on all 256 codes of each type: the
    subnormals, e5m2's infinities, and the NaNs (e4m3's two, e5m2's six), so an unwritten or NaN element of an FP8 C
    fails the example's finiteness check."""
    import numpy as np

    from tracea.emitters.export_example import FP8, FP8_FORMAT
    from tracea.kernels import DType
    from tracea.kernels.dtypes import to_float64

    src, exe = tmp_path / "f8.c", tmp_path / "f8"
    src.write_text("#include <math.h>\n#include <stdint.h>\n#include <stdio.h>\n#include <stdlib.h>\n" + FP8 + """
int main(int argc, char** argv) {
    int mant = argv[1][0] - '0', bias = atoi(argv[2]);
    for (int b = 0; b < 256; ++b) printf("%.17g\\n", ex_f8((uint8_t)b, mant, bias));
    return argc == 3 ? 0 : 1;
}
""")
    subprocess.run(["gcc", "-std=c11", "-Wall", "-Wextra", "-Werror", str(src), "-lm", "-o", str(exe)], check=True,
                   capture_output=True, text=True)
    for dtype, (mant, bias) in FP8_FORMAT.items():
        r = subprocess.run([str(exe), str(mant), str(bias)], capture_output=True, text=True, check=True, timeout=60)
        got = np.array([float(v) for v in r.stdout.split()])
        want = to_float64(np.arange(256, dtype=np.uint8), DType(dtype))
        assert np.array_equal(got, want, equal_nan=True), dtype
        assert np.isnan(got).sum() == (2 if dtype == "fp8e4m3" else 6)
