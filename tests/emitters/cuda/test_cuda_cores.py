"""The CUDA core registry (emitters/cuda/cores/, a core file each): every CUDA variant has its core, every core's schedule
reads back from its JSON, and build.py is a lookup over the registry, not a switchboard."""

from __future__ import annotations

import ast
from pathlib import Path

from tracea.emitters.cuda import cores, variants

BUILD = Path(cores.__file__).parent.with_name("build.py")


def test_every_cuda_variant_has_a_core():
    every = (*variants.ALL_VARIANTS, *variants.VARIANTS, *variants.RENDERED)
    for v in every:
        assert (v.family, v.op) in cores.BY_VARIANT, v.id
        core = cores.BY_VARIANT[(v.family, v.op)]
        assert cores.BY_SCHEDULE[(core.name, v.op)] is core, v.id


def test_the_variants_are_the_main_cores_lines_in_order():
    """Each main core is its family's variant for each op it computes, in the registry's order (the
    planner's and `tracea plan`'s order); cuda-wgmma (sm_90a only) stays out of ALL_VARIANTS."""
    assert [v.id for v in variants.VARIANTS] == [
        "cuda-mma-sync.gemm", "cuda-mma-sync.conv2d", "cuda-simt.gemm", "cuda-simt.conv2d", "cuda-simt.softmax",
        "cuda-mma-sync.attention", "cuda-wgmma.gemm", "cuda-wgmma.conv2d", "cuda-wgmma.scaled_gemm",
        "cuda-wgmma.attention"]
    assert variants.ALL_VARIANTS == variants.VARIANTS[:6] and variants.RENDERED == variants.VARIANTS
    for v in variants.RENDERED:
        core = cores.BY_VARIANT[(v.family, v.op)]
        assert (v.precisions, v.description) == (core.precisions, core.descriptions[v.op]), v.id
        assert v.requirements.min_shared_memory_per_block_bytes == core.smem, v.id
    assert all(not c.descriptions and not c.verified for c in cores.CORES if not c.family)


def test_registry_lines_are_unique():
    keys = [(c.name, op) for c in cores.CORES for op in c.ops]
    assert len(keys) == len(set(keys))
    mains = [(c.family, op) for c in cores.CORES for op in c.ops if c.family]  # one main core a (family, op)
    assert len(mains) == len(set(mains))


def test_schedule_json_finds_its_core():
    from tracea.emitters import cuda
    from tracea.kernels import Conv2d, Gemm, Softmax

    for vid, op in (("cuda-mma-sync.gemm", Gemm(256, 256, 256, "bf16")), ("cuda-simt.gemm", Gemm(64, 64, 64)),
                    ("cuda-simt.softmax", Softmax(rows=8, cols=1000)), ("cuda-wgmma.gemm", Gemm(256, 256, 256, "bf16")),
                    ("cuda-wgmma.conv2d", Conv2d(1, 64, 16, 16, 64, 3, 3, padding=1, layout="nhwc", dtype="bf16"))):
        hero = cuda.hero_schedule(op, vid, None)
        assert cuda.schedule_from_json(hero.to_json()) == hero, vid
        assert cores.for_schedule(op, hero) is cores.for_variant(cuda.resolve(vid), op)


def _compares_kind_or_core(node: ast.Compare) -> bool:
    def named(e: ast.expr) -> bool:
        if isinstance(e, ast.Attribute):
            return e.attr in ("kind", "core")
        return (isinstance(e, ast.Call) and getattr(e.func, "id", None) == "getattr" and len(e.args) > 1
                and isinstance(e.args[1], ast.Constant) and e.args[1].value in ("kind", "core"))

    sides = [node.left, *node.comparators]
    return any(named(e) for e in sides) and any(isinstance(e, (ast.Constant, ast.Tuple)) for e in sides)


def test_build_holds_no_branch_on_an_op_or_a_core():
    tree = ast.parse(BUILD.read_text())
    found = [ast.unparse(n) for n in ast.walk(tree) if isinstance(n, ast.Compare) and _compares_kind_or_core(n)]
    assert not found, found
    text = BUILD.read_text()
    assert "op.kind ==" not in text and ".core ==" not in text and "wgmma" not in text


def test_ptx_wrappers_are_renderer_data():
    """A renderer for another vendor substitutes its own wrappers; the kernels ask it for their prelude."""
    from tracea.emitters.cuda.arch import parse_arch
    from tracea.emitters.cuda.mma import render_mma
    from tracea.emitters.cuda.render import CudaRenderer
    from tracea.emitters.cuda.simt import render_simt
    from tracea.emitters.cuda.softmax import render_softmax
    from tracea.kernels import Gemm, Softmax

    class Other(CudaRenderer):
        library = (*CudaRenderer.library, ("marker", "/* other library */\n"))
        tensor_library = tuple((n, "/* other mma */\n" if n == "mma.sync" else t) for n, t in CudaRenderer.tensor_library)

    arch = parse_arch("sm_80")
    gemm = Gemm(256, 256, 256, "bf16")
    s = cuda_hero(gemm, "cuda-mma-sync.gemm")
    plain, other = render_mma(gemm, s, arch).source, render_mma(gemm, s, arch, Other()).source
    assert "mma.sync.aligned" in plain and "/* other mma */" in other and "mma.sync.aligned" not in other
    f32 = Gemm(128, 128, 128)
    assert "/* other library */" in render_simt(f32, cuda_hero(f32, "cuda-simt.gemm"), arch, Other()).source
    sm = Softmax(rows=4, cols=1000)
    assert "/* other library */" in render_softmax(sm, cuda_hero(sm, "cuda-simt.softmax"), arch, Other()).source



def test_barriers_fences_and_ptx_statements_are_renderer_data():
    """The kernels' barriers, fences and inline PTX statements are the renderer's (``barrier``, ``fence``,
    ``CudaRenderer.ptx``): a renderer that spells them otherwise changes every one of them in the text."""
    import dataclasses

    from tracea.emitters.cuda.arch import parse_arch
    from tracea.emitters.cuda.gemv import render_gemv
    from tracea.emitters.cuda.mma import render_mma
    from tracea.emitters.cuda.render import CudaRenderer
    from tracea.emitters.cuda.simt import render_simt
    from tracea.emitters.cuda.softmax import render_softmax, split_schedule
    from tracea.emitters.cuda.stem_kernel import render_stem
    from tracea.kernels import Conv2d, Gemm, Softmax

    class Other(CudaRenderer):
        barrier, fence = "TR_BARRIER();", "TR_FENCE();"
        ptx = {name: f"TR_PTX({name!r});" for name in CudaRenderer.ptx}

    arch = parse_arch("sm_90a")
    f32, bf16 = Gemm(100, 300, 4096), Gemm(200, 256, 512, "bf16", epilogue="bias")
    conv = Conv2d(n=1, c=3, h=56, w=56, k=64, r=7, s=7, padding=3, stride=2, layout="nhwc", dtype="bf16", bias=True)
    simt = cuda_hero(f32, "cuda-simt.gemm")
    sources = [render_mma(bf16, cuda_hero(bf16, "cuda-mma-sync.gemm"), arch, Other()).source,
               render_simt(f32, dataclasses.replace(simt, stages=3, split_k=2), arch, Other()).source,
               render_simt(f32, dataclasses.replace(simt, stages=2, split_k=2), arch, Other()).source,
               render_gemv(Gemm(4, 4096, 4096, "bf16"), cuda_hero(Gemm(4, 4096, 4096, "bf16"), "cuda-mma-sync.gemm"),
                           parse_arch("sm_80"), Other()).source,
               render_stem(conv, cuda_hero(conv, "cuda-mma-sync.conv2d"), arch, Other()).source,
               render_softmax(Softmax(rows=2, cols=1 << 20), split_schedule(Softmax(rows=2, cols=1 << 20), 4, 132),
                              arch, Other()).source]
    for text in sources:
        assert "TR_BARRIER();" in text and "__syncthreads" not in text and "__threadfence" not in text
    assert "TR_PTX('cp.async.commit');" in sources[1] and "TR_FENCE();" in sources[1]


def cuda_hero(op, vid):
    from tracea.emitters import cuda

    return cuda.hero_schedule(op, vid, None)
