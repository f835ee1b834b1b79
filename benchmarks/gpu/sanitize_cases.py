"""One small case of every CUDA kernel family, each built with this GPU's hero schedule, run on fresh random
inputs and verified against the float64 reference: what compute-sanitizer's memcheck, racecheck and
synccheck run over (tests/emitters/cuda/test_sanitizers_gpu.py). The families are the cores the planner picks: the SIMT
and mma.sync GEMM and conv, the Hopper wgmma GEMM (tiles, split-K, the small-M GEMV core, its splits in a cluster and in the
global workspace), its conv (TMA
im2col, 1x1, the small-channel stem core), softmax (a row per warp, rows split across blocks), and attention
on mma.sync and wgmma (causal, grouped-query, a block mask) and the decode core (keys split over blocks).

    python benchmarks/gpu/sanitize_cases.py            # every case
    python benchmarks/gpu/sanitize_cases.py stem-224   # that case (else: the cases whose name holds the word)
    python benchmarks/gpu/sanitize_cases.py --list
    compute-sanitizer --tool memcheck python benchmarks/gpu/sanitize_cases.py --under-sanitizer

Prints one line per case (its kernel's name and the relative error) and exits 1 if any is wrong, or if a
kernel outlives its last reference (its device memory would wait for a garbage collection).
"""

from __future__ import annotations

import gc
import sys
import weakref

import numpy as np

from tracea.doctor import probe
from tracea.emitters import cuda
from tracea.kernels import Conv2d, Gemm, Softmax, relative_error, tolerance
from tracea.kernels.dtypes import to_float64
from tracea.kernels.ops.attention import Attention

CASES = [
    ("simt-gemm", "cuda-simt.gemm", Gemm(130, 257, 72, layout_a="col", epilogue=("relu", "scale"), alpha=0.5)),
    ("simt-conv", "cuda-simt.conv2d", Conv2d(2, 3, 17, 19, 10, 3, 3, padding=1, stride=2, bias=True)),
    ("mma-gemm", "cuda-mma-sync.gemm", Gemm(300, 264, 200, "bf16", epilogue=("bias", "gelu", "residual"))),
    ("mma-conv", "cuda-mma-sync.conv2d", Conv2d(2, 16, 17, 19, 24, 3, 3, padding=1, layout="nhwc", dtype="fp16",
                                                bias=True)),
    ("wgmma-gemm", "cuda-wgmma.gemm", Gemm(520, 264, 328, "fp16", layout_a="col", epilogue=("bias", "relu"))),
    ("wgmma-splitk", "cuda-wgmma.gemm", Gemm(256, 256, 8192, "bf16")),
    # the spread fix-up's flat walk of (group, slice) pairs: 24 slices of 64 x 64 tiles (a share of at most one
    # group), and 2 slices of 64 x 128 (eight groups a share: two windows of loads); partial tiles, a bias
    ("wgmma-spread-24", "cuda-wgmma.gemm", Gemm(200, 136, 6000, "fp16", epilogue=("bias",)),
     {"core": "wgmma", "bm": 64, "bn": 64, "stages": 8, "consumers": 1, "store": "tma", "l2_hint": "first",
      "split": 24, "split_fix": "spread"}),
    ("wgmma-spread-2", "cuda-wgmma.gemm", Gemm(200, 136, 6000, "bf16", layout_b="col"),
     {"core": "wgmma", "bm": 64, "bn": 128, "stages": 6, "consumers": 1, "store": "tma", "split": 2,
      "split_fix": "spread"}),
    ("wgmma-gemv", "cuda-wgmma.gemm", Gemm(1, 1024, 2048, "bf16")),
    # 16 splits, past a cluster's: the parts meet in the global workspace (split_arrival.py's last block)
    ("gemv-workspace", "cuda-wgmma.gemm", Gemm(3, 1000, 4096, "fp16"), {"core": "gemv", "warps": 8, "splits": 16,
                                                                       "unroll": 2}),
    # the TMA-store epilogue (staging atoms alternate; a tile's even count names each atom's buffer), several
    # tiles a consumer (288 tiles of 128 x 128 over 132 SMs, two consumers each), bias + gelu + residual; and
    # ping-pong with split-K's ticket fix-up (col-major A and B)
    ("wgmma-tma-store", "cuda-wgmma.gemm", Gemm(2304, 2048, 128, "fp16", epilogue=("bias", "gelu", "residual")),
     {"core": "wgmma", "bm": 128, "bn": 128, "stages": 4, "consumers": 2, "pingpong": True, "store": "tma",
      "split": 1}),
    ("wgmma-tma-split", "cuda-wgmma.gemm", Gemm(200, 136, 1000, "fp16", layout_a="col", layout_b="col",
                                                epilogue=("bias", "gelu", "residual")),
     {"core": "wgmma", "bm": 128, "bn": 128, "stages": 4, "consumers": 2, "pingpong": True, "store": "tma",
      "split": 3}),
    ("wgmma-conv", "cuda-wgmma.conv2d", Conv2d(2, 64, 30, 30, 96, 3, 3, padding=1, stride=2, layout="nhwc",
                                              dtype="fp16")),
    ("wgmma-conv1x1", "cuda-wgmma.conv2d", Conv2d(2, 256, 14, 14, 128, 1, 1, layout="nhwc", dtype="fp16")),
    # the 1x1 conv's ping-pong heroes (conv_heroes.pingpong_1x1): 64 x 128 and 128 x 128 tiles on two ping-pong
    # consumers, partial tiles both ways, several tiles a consumer (M = 2 x 14 x 13 = 364 pixels, 200 filters)
    ("wgmma-conv1x1-pp64", "cuda-wgmma.conv2d", Conv2d(2, 256, 14, 13, 200, 1, 1, layout="nhwc", dtype="fp16",
                                                      bias=True),
     {"core": "wgmma", "kernel": "conv2d", "path": "gemm", "bm": 64, "bn": 128, "stages": 8, "consumers": 2,
      "pingpong": True, "store": "tma"}),
    ("wgmma-conv1x1-pp128", "cuda-wgmma.conv2d", Conv2d(2, 256, 14, 13, 200, 1, 1, layout="nhwc", dtype="bf16"),
     {"core": "wgmma", "kernel": "conv2d", "path": "gemm", "bm": 128, "bn": 128, "stages": 6, "consumers": 2,
      "pingpong": True, "store": "tma"}),
    # off_line_1x1's pairs sharing the filter's boxes (2-block clusters, TMA multicast) over rows off 128-byte lines
    # (440 channels, 232 filters: 880- and 464-byte rows), partial tiles both ways (429 pixels: four tile rows); the
    # "-odd" case has five (561 pixels), so the last pair's second block has no tile (not yet run under the sanitizers)
    ("wgmma-conv1x1-off-line-wide", "cuda-wgmma.conv2d", Conv2d(3, 440, 11, 13, 232, 1, 1, layout="nhwc",
                                                               dtype="fp16", bias=True),
     {"core": "wgmma", "kernel": "conv2d", "path": "gemm", "bm": 128, "bn": 256, "stages": 4, "consumers": 2,
      "cluster": 2, "store": "tma"}),
    ("wgmma-conv1x1-off-line-pair", "cuda-wgmma.conv2d", Conv2d(3, 440, 11, 13, 232, 1, 1, layout="nhwc",
                                                               dtype="bf16"),
     {"core": "wgmma", "kernel": "conv2d", "path": "gemm", "bm": 128, "bn": 128, "stages": 6, "consumers": 2,
      "pingpong": True, "cluster": 2, "store": "tma"}),
    ("wgmma-conv1x1-off-line-odd", "cuda-wgmma.conv2d", Conv2d(3, 440, 11, 17, 232, 1, 1, layout="nhwc",
                                                              dtype="fp16"),
     {"core": "wgmma", "kernel": "conv2d", "path": "gemm", "bm": 128, "bn": 256, "stages": 4, "consumers": 2,
      "cluster": 2, "store": "tma"}),
    # the 192-wide im2col heroes of columns_192 (3x3, 320 filters: the second column tile partial; ragged pixels)
    ("wgmma-conv3x3-128x192", "cuda-wgmma.conv2d", Conv2d(2, 192, 13, 11, 320, 3, 3, padding=1, layout="nhwc",
                                                         dtype="fp16", bias=True),
     {"core": "wgmma", "kernel": "conv2d", "path": "im2col", "bm": 128, "bn": 192, "stages": 4, "consumers": 2,
      "store": "tma"}),
    ("wgmma-conv3x3-64x192", "cuda-wgmma.conv2d", Conv2d(2, 192, 13, 11, 320, 3, 3, padding=1, layout="nhwc",
                                                        dtype="bf16"),
     {"core": "wgmma", "kernel": "conv2d", "path": "im2col", "bm": 64, "bn": 192, "stages": 6, "consumers": 1,
      "store": "tma"}),
    # boxes of 32 or 16 channels (WgmmaConvSchedule.chunk) and filter-wide tiles of 96 or 40 (direct stores): 96
    # channels (9 x 3 = 27 boxes of 32: the last stage's second box past the walk, zeros), ragged pixels; 40
    # channels in boxes of 16 (3 a tap, 27 boxes: a stage of 4 with one past the walk) with bias; 3 k slices of boxes of
    # 32 (14 stages: slices of 5, 5 and 4, the second starting mid-tap) on one 160-wide tile
    ("wgmma-conv3x3-k32-w96", "cuda-wgmma.conv2d", Conv2d(2, 96, 13, 11, 96, 3, 3, padding=1, layout="nhwc",
                                                         dtype="fp16", bias=True),
     {"core": "wgmma", "kernel": "conv2d", "path": "im2col", "bm": 128, "bn": 96, "stages": 6, "consumers": 2,
      "pingpong": True, "chunk": 32}),
    ("wgmma-conv3x3-k16-w40", "cuda-wgmma.conv2d", Conv2d(2, 40, 13, 11, 40, 3, 3, padding=1, layout="nhwc",
                                                         dtype="bf16", bias=True),
     {"core": "wgmma", "kernel": "conv2d", "path": "im2col", "bm": 256, "bn": 40, "stages": 4, "consumers": 2,
      "chunk": 16}),
    ("wgmma-conv3x3-k32-split", "cuda-wgmma.conv2d", Conv2d(1, 96, 9, 7, 160, 3, 3, padding=1, layout="nhwc",
                                                           dtype="fp16"),
     {"core": "wgmma", "kernel": "conv2d", "path": "im2col", "bm": 64, "bn": 160, "stages": 6, "consumers": 1,
      "chunk": 32, "split": 3}),
    # a tap's zero k16 steps skipped (``trim``): 200 channels (208: steps 1-3 of box 3) over 3 k slices starting
    # mid-tap, 72 filters; 96 channels on 256 x 96 tiles
    ("wgmma-conv3x3-trim-split", "cuda-wgmma.conv2d", Conv2d(1, 200, 9, 7, 72, 5, 3, padding=(4, 1),
                                                               dilation=(2, 1), layout="nhwc", dtype="bf16"),
     {"core": "wgmma", "kernel": "conv2d", "path": "im2col", "bm": 64, "bn": 72, "stages": 6, "consumers": 1,
      "trim": True, "split": 3}),
    ("wgmma-conv3x3-trim", "cuda-wgmma.conv2d", Conv2d(2, 96, 13, 11, 96, 3, 3, padding=1, layout="nhwc",
                                                         dtype="fp16", bias=True),
     {"core": "wgmma", "kernel": "conv2d", "path": "im2col", "bm": 256, "bn": 96, "stages": 4, "consumers": 2,
      "trim": True}),
    # fitted_width's hero forms: 72 filters on 192 x 72 tiles over three consumers, 112 on 128 x 112 ping-pong tiles,
    # both stored directly, ragged pixels, channels off 64
    ("wgmma-conv3x3-fitted-c3", "cuda-wgmma.conv2d", Conv2d(3, 80, 13, 11, 72, 3, 3, padding=1, layout="nhwc",
                                                           dtype="fp16", bias=True),
     {"core": "wgmma", "kernel": "conv2d", "path": "im2col", "bm": 192, "bn": 72, "stages": 5, "consumers": 3}),
    ("wgmma-conv3x3-fitted-pp", "cuda-wgmma.conv2d", Conv2d(3, 112, 13, 11, 112, 3, 3, padding=1, layout="nhwc",
                                                           dtype="bf16"),
     {"core": "wgmma", "kernel": "conv2d", "path": "im2col", "bm": 128, "bn": 112, "stages": 6, "consumers": 2,
      "pingpong": True}),
    # swapped operands (C^T's tiles stored transposed through C's map; partial tiles both ways) and, on a GEMM of
    # nn.Linear's layout, with split-K's fix-up and the direct transposed stores
    ("wgmma-conv1x1-swap", "cuda-wgmma.conv2d", Conv2d(1, 1024, 7, 5, 200, 1, 1, layout="nhwc", dtype="fp16",
                                                      bias=True),
     {"core": "wgmma", "kernel": "conv2d", "path": "gemm", "bm": 64, "bn": 16, "stages": 8, "consumers": 1,
      "store": "tma", "swap": True}),
    ("wgmma-gemm-swap-split", "cuda-wgmma.gemm", Gemm(24, 1000, 2048, "bf16", layout_b="col",
                                                      epilogue=("bias", "gelu", "residual")),
     {"core": "wgmma", "bm": 64, "bn": 16, "stages": 6, "consumers": 1, "store": "direct", "split": 4, "swap": True}),
    # the one-wave GEMM tiles of gemm_heroes.one_wave (33-512 rows): partial tiles both ways, a ragged K, 64 x 64 on
    # a 12-deep ring with a bias, 64 x 256 over nn.Linear's weights, 128 x 192 on two consumers; evict-first loads
    ("wgmma-one-wave-64x64", "cuda-wgmma.gemm", Gemm(100, 520, 1200, "bf16", epilogue=("bias",)),
     {"core": "wgmma", "bm": 64, "bn": 64, "stages": 12, "consumers": 1, "store": "tma", "l2_hint": "first"}),
    ("wgmma-one-wave-64x256", "cuda-wgmma.gemm", Gemm(70, 700, 1100, "fp16", layout_b="col"),
     {"core": "wgmma", "bm": 64, "bn": 256, "stages": 5, "consumers": 1, "store": "tma", "l2_hint": "first"}),
    ("wgmma-one-wave-128x192", "cuda-wgmma.gemm", Gemm(200, 400, 1200, "bf16", epilogue=("relu", "residual")),
     {"core": "wgmma", "bm": 128, "bn": 192, "stages": 4, "consumers": 2, "store": "tma", "l2_hint": "first"}),
    # gemm_heroes.many_waves' tiles over more tiles than SMs (a block walks two): 64 x 256 on one consumer with a
    # bias, partial tiles both ways; 128 x 192 on two consumers over 100 rows (the second consumer's rows partly past M)
    ("wgmma-many-waves-64x256", "cuda-wgmma.gemm", Gemm(300, 8200, 1100, "fp16", epilogue=("bias",)),
     {"core": "wgmma", "bm": 64, "bn": 256, "stages": 5, "consumers": 1, "store": "tma", "l2_hint": "first"}),
    ("wgmma-many-waves-128x192", "cuda-wgmma.gemm", Gemm(100, 26000, 640, "bf16", layout_b="col"),
     {"core": "wgmma", "bm": 128, "bn": 192, "stages": 4, "consumers": 2, "store": "tma", "l2_hint": "first"}),
    # few pixels on the im2col path (the heroes of few_pixels_im2col): 64 x 64 tiles split over the K of a 3x3 conv
    # of 512 channels (partial tiles: 7 x 5 pixels), and unsplit over a strided 1x1 with a ragged K
    ("wgmma-conv-few-split", "cuda-wgmma.conv2d", Conv2d(1, 512, 7, 5, 200, 3, 3, padding=1, layout="nhwc",
                                                        dtype="fp16", bias=True)),
    ("wgmma-conv-few-strided", "cuda-wgmma.conv2d", Conv2d(1, 256, 27, 27, 520, 1, 1, stride=2, layout="nhwc",
                                                          dtype="fp16")),
    ("stem-224", "cuda-wgmma.conv2d", Conv2d(1, 3, 224, 224, 64, 7, 7, stride=2, padding=3, layout="nhwc",
                                            dtype="fp16")),
    ("stem-small", "cuda-wgmma.conv2d", Conv2d(4, 12, 33, 33, 32, 5, 5, stride=2, padding=2, layout="nhwc",
                                              dtype="fp16")),
    ("stem-c4-pad2", "cuda-wgmma.conv2d", Conv2d(2, 4, 31, 29, 32, 5, 5, stride=2, padding=2, layout="nhwc",
                                                dtype="bf16", bias=True)),
    ("stem-c1-dil2", "cuda-wgmma.conv2d", Conv2d(1, 1, 40, 37, 16, 3, 3, padding=2, dilation=2, layout="nhwc",
                                                dtype="fp16")),
    ("stem-1stage", "cuda-wgmma.conv2d", Conv2d(2, 3, 64, 60, 32, 7, 7, stride=2, padding=3, layout="nhwc",
                                               dtype="fp16"), {"core": "stem", "pixels": 60, "warps": 4, "stages": 1}),
    ("softmax-rows", "cuda-simt.softmax", Softmax(37, 1001)),
    ("softmax-split", "cuda-simt.softmax", Softmax(3, 70001, "bf16")),
    ("attention-mma", "cuda-mma-sync.attention", Attention(1, 4, 300, 64, kv_heads=2, causal=True, dtype="bf16")),
    ("attention-wgmma", "cuda-wgmma.attention", Attention(1, 4, 777, 128, kv_heads=2, window=(64, 16), dtype="bf16")),
    # head dim 64's hero: two blocks an SM, persistent over 2 x SMs; then its one-block-per-item form
    ("attention-wgmma-two-blocks", "cuda-wgmma.attention", Attention(2, 4, 777, 64, kv_heads=2, window=(256, 0),
                                                                     dtype="bf16")),
    ("attention-wgmma-two-blocks-plain", "cuda-wgmma.attention", Attention(1, 4, 300, 64, causal=True, dtype="fp16"),
     {"backend": "cuda", "core": "wgmma-attention", "bk": 64, "stages": 2, "consumers": 2, "pingpong": False,
      "intra": False, "ctas": 2}),
    # decode: GQA rows packed in one tile, keys split over 3 blocks meeting in the workspace, causal
    ("attention-decode", "cuda-wgmma.attention", Attention(1, 8, 3, 64, seq_k=700, kv_heads=2, causal=True,
                                                           dtype="bf16"), {"core": "attention-decode", "split": 3}),
    ("attention-paged", "cuda-wgmma.attention", Attention(3, 8, 2, 64, seq_k=700, kv_heads=2, causal=True,
                                                          dtype="bf16", seq_lens=(700, 9, 0), page_size=16,
                                                          pages=60), {"core": "attention-decode", "split": 3}),
    ("attention-paged-k128", "cuda-wgmma.attention", Attention(2, 16, 1, 128, seq_k=900, kv_heads=4, dtype="bf16",
                                                               seq_lens=(900, 77), page_size=16, pages=50),
     {"core": "attention-decode", "kw": 2}),
    # TMA loads (sm_90): a tail tile past seq_k, 3 slices; paged, with lengths (one of 0)
    ("attention-decode-tma", "cuda-wgmma.attention", Attention(1, 8, 3, 64, seq_k=700, kv_heads=2, causal=True,
                                                               dtype="bf16"),
     {"core": "attention-decode", "split": 3, "bulk": True}),
    ("attention-paged-tma", "cuda-wgmma.attention", Attention(3, 8, 2, 64, seq_k=700, kv_heads=2, causal=True,
                                                              dtype="bf16", seq_lens=(700, 9, 0), page_size=16,
                                                              pages=60), {"core": "attention-decode", "bulk": True}),
    ("attention-ragged", "cuda-wgmma.attention", Attention(4, 8, 1, 64, seq_k=2000, kv_heads=2, dtype="bf16",
                                                           seq_lens=(2000, 5, 0, 900), page_size=16)),
    # head dim 128, pages of 16, uneven lengths: the hero on sm_90 (4 warps of 64-key TMA tiles, every entry the
    # launch's slices)
    ("attention-ragged-d128", "cuda-wgmma.attention", Attention(6, 16, 1, 128, seq_k=3000, kv_heads=4, dtype="bf16",
                                                                seq_lens=(3000, 64, 0, 1500, 2999, 700),
                                                                page_size=16)),
    # packed entries (varlen): empty, one-token and tile-crossing entries; the next entry's rows read past an end
    ("attention-packed", "cuda-wgmma.attention", Attention(4, 4, 300, 64, seq_k=300, kv_heads=2, dtype="bf16",
                                                           causal=True, seq_lens=(300, 0, 1, 150), packed=True)),
    ("attention-packed-d80", "cuda-wgmma.attention", Attention(3, 2, 200, 80, seq_k=200, dtype="fp16",
                                                               window=(50, 7), seq_lens=(130, 200, 17), packed=True)),
    # head dims of an odd number of 8s: computed over the next 16, the extra columns zeros, never stored
    ("attention-d72-wgmma", "cuda-wgmma.attention", Attention(1, 2, 300, 72, seq_k=333, dtype="bf16", causal=True)),
    ("attention-d40-mma", "cuda-mma-sync.attention", Attention(1, 2, 300, 40, seq_k=333, dtype="fp16",
                                                               window=(60, 9))),
    ("attention-d80-wgmma", "cuda-wgmma.attention", Attention(1, 2, 300, 80, seq_k=333, dtype="bf16", causal=True)),
    ("attention-d160-wgmma", "cuda-wgmma.attention", Attention(1, 2, 300, 160, seq_k=333, dtype="bf16")),
    ("attention-d96-mma", "cuda-mma-sync.attention", Attention(1, 2, 300, 96, seq_k=333, dtype="fp16", causal=True)),
    ("attention-mask", "cuda-wgmma.attention", Attention(1, 2, 512, 64, dtype="fp16", block_size=(128, 128),
                                                         block_mask=[[True, False, False, True]] * 4)),
]


def run(name: str, vid: str, op, host, schedule: dict | None = None, check_freed: bool = True) -> bool:
    """``schedule``: a schedule's JSON where the hero would not exercise a path (the stem's single stage)."""
    sched = cuda.schedule_from_json(schedule) if schedule else cuda.hero_schedule(op, vid, host)
    k = cuda.build(op, vid, sched, host)
    inputs = op.random_inputs(np.random.default_rng())
    y = to_float64(k(inputs), op.dtype)
    err = relative_error(np.nan_to_num(y, nan=1e30), op.reference(inputs))
    ok = bool(err <= tolerance(op))
    kernel_name, alive = k.artifact.name, weakref.ref(k)
    del k  # its device buffers go with it, at once (no reference cycle holds them until a collection)
    if check_freed and alive() is not None:
        held = [f"{r.f_code.co_name}@{r.f_code.co_filename.rsplit('/', 1)[-1]}:{r.f_lineno}"
                f"<-{[type(h).__name__ for h in gc.get_referrers(r)]}" if hasattr(r, "f_code") else type(r).__name__
                for r in gc.get_referrers(alive())]
        gc.collect()
        print(f"{name:16s} the kernel outlived its last reference ({'a cycle' if alive() is None else 'held'}: "
              f"referrers {held}) LEAK", flush=True)
        ok = False
    print(f"{name:16s} {kernel_name:60s} rel err {err:.2e} {'ok' if ok else 'WRONG'}", flush=True)
    return ok


def main(argv: list[str]) -> int:
    if "--list" in argv:
        for name, vid, op, *_ in CASES:
            print(name, vid, op.signature)
        return 0
    # under compute-sanitizer the allocations' saved host backtraces hold Python frames (and so the kernels):
    # the collection check is the plain run's; the sanitizer's leak check sees what the exit frees (runtime.py)
    check_freed = "--under-sanitizer" not in argv
    argv = [a for a in argv if not a.startswith("--")]
    host = probe()
    exact = [c for c in CASES if c[0] in argv]
    chosen = exact or [c for c in CASES if not argv or any(w in c[0] for w in argv)]
    ok = [run(name, vid, op, host, *rest, check_freed=check_freed) for name, vid, op, *rest in chosen]
    return 0 if all(ok) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
