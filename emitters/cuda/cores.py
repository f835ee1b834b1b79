"""The CUDA kernel cores, one registry line each.

A core is everything that takes one family of kernels from an op to a launch (the shared ``Core`` of
emitters/core.py): its schedule class (read from JSON; its ``features`` are what the tuner's model sees),
the heuristic schedule (the hero), the search space, the checks, the renderer and the host-side kernel
object. ``build.py`` looks each step up here by the variant (family, op) or by the schedule (core, op), so
it holds no branch on a core or an op.

Adding a core or an op: write its module (schedule, ``hero_schedule``, ``search_space``, ``render``) and
add one ``CudaCore(...)`` line to ``CORES``; a core with a family is that family's variant for each op it
computes (``variants.py`` makes them from its line; offered to the planner once ``verified`` on a GPU). A
core that serves other
families' variants beside their main core (``gemv``: the small-M GEMM of cuda-mma-sync and cuda-wgmma)
has no family of its own, names those in ``serves`` and the ops it is their hero for in ``prefers``:
``hero_core`` picks it, ``search_space`` adds its candidates, ``for_check`` checks its schedules. Every
function is a direct reference to its module's own, which readers and tools can follow: importing the
registry imports the renderers (and NumPy), which only the build path (``build.py``, ``tracea plan`` and
what builds kernels) needs; ``tracea --help`` and ``tracea doctor`` do not import it. The kernel objects'
driver side (cuda-core) is still imported at a kernel's first load, inside ``runtime.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tracea.doctor.errors import BadInputError, UnsupportedError
from tracea.doctor.variants import Variant

from ..core import Core
from . import attention, attention_runtime, gemv, mma, simt, softmax, softmax_split, stem, stem_kernel, tma
from .arch import Arch
from .hopper import attention as hopper_attention
from .hopper import attention_kernel as hopper_attention_kernel
from .hopper import attention_schedule as hopper_attention_schedule
from .hopper import conv as hopper_conv
from .hopper import gemm as hopper_gemm
from .hopper import schedule as hopper_schedule
from .hopper import space as hopper_space
from .render import Rendered
from .runtime import CudaKernel
from .schedule import CudaSchedule


@dataclass(frozen=True, kw_only=True)
class CudaCore(Core):
    """One kernel core of the CUDA backend and the ops it serves. ``name`` is its schedules' ``core`` (their
    JSON's "core"; ``ops`` the JSON's "kernel" where a name is shared). The shared hooks take:
    ``hero(op, host)``, ``space(op, hero, target: Arch)`` (candidates beside the hero), ``check(op, variant,
    schedule, target: Arch)``, ``render(op, schedule, arch) -> (Rendered, runtime scalars)``, ``kernel(op,
    artifact, rendered, scalars) -> the kernel object``.

    An op kind has several cores here, so each names the variant family whose main core it is; an alternate
    core (family "") names the families whose variants also run it beside their main core (``serves``:
    "family" or "family.op"), and the ops for which it is their hero (``prefers``).

    A main core's line also states its variants (variants.py makes one per op it computes): ``precisions``,
    ``smem`` (the opt-in shared memory per block its largest hero schedule takes; None: no opt-in),
    ``descriptions`` and ``verified`` (its kernels ran and verified against the float64 references on a
    GPU: only then is the variant offered to the planner)."""

    family: str  # the variant family (variants.py) whose kernels it renders; "": an alternate core
    serves: tuple[str, ...] = ()
    prefers: Callable[[Any], bool] | None = None
    applies: Callable[[Any], bool] | None = None  # where it may run and is searched (default: ``prefers``)
    precisions: tuple[str, ...] = ()
    smem: int | None = None
    verified: bool = False


def tiled_check(core: str) -> Callable[[Any, Variant, Any, Arch], None]:
    """The checks of a ``CudaSchedule`` core: its schedule type, precision, target, core and limits."""

    def check(op: Any, v: Variant, schedule: Any, arch: Arch) -> None:
        if not isinstance(schedule, CudaSchedule):
            raise BadInputError(f"schedule: expected a CudaSchedule, got {type(schedule).__name__}")
        if op.dtype.value not in v.precisions:
            raise UnsupportedError(f"{v.id} computes {', '.join(v.precisions)}, not {op.dtype.value}",
                                   "fp32 runs on cuda-simt, bf16/fp16 on cuda-mma-sync")
        if arch.cc < v.requirements.min_compute_capability:
            raise UnsupportedError(f"{v.id} needs sm_{''.join(map(str, v.requirements.min_compute_capability))} "
                                   f"or later, not {arch.name}")
        if getattr(op, "groups", 1) != 1:
            raise UnsupportedError("grouped convolution is not implemented on CUDA yet", "use --backend cpu")
        if schedule.core != core:
            raise BadInputError(f"core: {v.id} runs the {core} core, not {schedule.core}")
        schedule.validate(op, arch)

    return check


def small_channel_conv(op: Any) -> bool:
    """A convolution with fewer than 16 input channels (an image network's stem) that the stem core does
    not take (NCHW, grouped): the mma core's, packing r*s*c as one reduction dimension too."""
    if getattr(op, "kind", None) != "conv2d" or op.c >= 16:
        return False
    return not stem.applies(op)


def cuda_kernel(op: Any, artifact: Any, rendered: Rendered, scalars: dict[str, Any]) -> Any:
    """The plain kernel object: buffers, one launch of the rendered grid, timing (runtime.py)."""
    return CudaKernel(op, artifact, rendered, scalars)


# ---------------------------------------------------------------------------------------------- Hopper
# The Hopper (sm_90a) kernels, composed in hopper/ (schedule, mainloop, scheduler, epilogue; gemm.py and
# conv.py over them); tma.py holds their checks and the GEMM's kernel object.
def hopper(kind: str, schedule_class: type, hero: Callable[..., Any], space: Callable[..., Any],
           rendered: Callable[..., Any], kernel: Callable[..., Any],
           scalars: Callable[[Any], dict[str, float | int]], smem: int, description: str) -> CudaCore:
    """A Hopper core: its schedule class and hero (hopper/schedule.py), its space (hopper/space.py), and its
    kernel module's ``rendered(op, schedule, sm_count)``; its variant bf16/fp16, verified on a GPU."""
    return CudaCore(
        name="wgmma", family="cuda-wgmma", ops=(kind,), schedule=schedule_class,
        hero=lambda op, host: hero(op, mma.sm_count(host)),
        space=lambda op, _hero, arch: space(op, arch.smem_optin, arch.sm_count if arch.sm_count > 1 else 132),
        check=tma.check_wgmma, render=lambda op, s, arch: (rendered(op, s, arch.sm_count), scalars(op)),
        kernel=kernel, precisions=("bf16", "fp16"), smem=smem, descriptions={kind: description}, verified=True)


# Each needs its hero's opt-in shared memory (tests/test_cuda_wgmma*.py check that the two agree).
HOPPER: tuple[CudaCore, ...] = (
    # hopper/gemm.py, tma.py (issue 5): the hero's 230480 B (WgmmaSchedule().smem_bytes); verified on an
    # H200 (docs/device-runs/h200-cuda-kernels-and-tuner/wgmma/, docs/hopper.md)
    hopper("gemm", hopper_schedule.WgmmaSchedule, hopper_schedule.hero_schedule, hopper_space.search_space,
           hopper_gemm.rendered, tma.WgmmaKernel, lambda op: {"M": op.m, "N": op.n, "K": op.k, "alpha": op.alpha},
           230480, "Hopper GEMM: TMA into 128B-swizzled shared memory, wgmma.mma_async on warpgroups, "
                   "producer/consumer warp specialisation over an mbarrier ring, setmaxnreg, "
                   "persistent L2-grouped tile order, fused epilogue, fp32 accumulation"),
    # hopper/conv.py: the GEMM's parts with a producer warpgroup that gathers the activations by cp.async
    # (NHWC; NCHW through transposes inside the call); its larger hero's 230512 B (128x128 ping-pong,
    # 6 stages); verified on an H200 (docs/device-runs/h200-cuda-kernels-and-tuner/wgmma_conv/)
    hopper("conv2d", hopper_schedule.WgmmaConvSchedule, hopper_schedule.conv_hero_schedule,
           hopper_space.conv_search_space, hopper_conv.rendered, hopper_conv.conv_kernel,
           lambda op: dict(hopper_conv.conv_scalars(op)),
           230512, "Hopper implicit-GEMM convolution (NHWC; NCHW via transposes): filter by TMA, "
                   "activations gathered by a cp.async producer warpgroup into 128B-swizzled shared memory "
                   "(zero fill for padding), wgmma.mma_async consumers, mbarrier ring, persistent tiles, bias"),
    # attention forward, FlashAttention-3 style (hopper/attention*.py, issue 17): TMA K/V ring, ping-pong
    # consumers. Verified on an H100: 30 of 30 cases (O and lse against float64; sequence 1, 17, 1000,
    # seq_q != seq_k, causal, window, block mask, GQA, head dim 64/128/256, bf16 and fp16).
    CudaCore(name="wgmma-attention", family="cuda-wgmma", ops=("attention",),
             schedule=hopper_attention_schedule.AttnWgmmaSchedule,
             hero=lambda op, _host: hopper_attention_schedule.hero_schedule(op),
             space=lambda op, _hero, arch: hopper_attention_schedule.search_space(op, arch.smem_optin),
             check=hopper_attention_schedule.check, render=hopper_attention.render,
             kernel=hopper_attention_kernel.WgmmaAttentionKernel, precisions=("bf16", "fp16"), smem=230480,
             descriptions={"attention": "Hopper attention forward (FlashAttention-3 style): TMA K/V ring over the "
                                        "mask's tiles only, producer/consumer warpgroups, wgmma S and register-P "
                                        "P.V, ping-pong and intra-warpgroup overlap, log-sum-exp written"},
             verified=True),
)
# ----------------------------------------------------------------------------------------- end Hopper

# The order of the variants (variants.py). A tiled core's shared memory is its largest hero's: 256x128x32
# with 4 stages (mma.sync), 128x128x16 double-buffered fp32 tiles (SIMT); the softmax needs only its static
# reduction arrays. The tiled cores and the softmax were verified on odd shapes on an NVIDIA H200 (17 of 17
# within tolerance: docs/device-runs/h200-cuda-kernels-and-tuner/cuda/smoke-verify,
# docs/device-runs/h200-cuda-kernels-and-tuner/cuda/full-checks-memcheck-api-reports).
CORES: tuple[CudaCore, ...] = (
    # Also the Hopper conv's hero for fewer than 16 input channels where the stem core does not run (NCHW):
    # mma.sync reduces over r*s*c packed as one dimension, the Hopper gather pads each tap's c to 8 (an
    # H100, ResNet-50's stem at batch 32: 0.32 ms against 2.29 ms; docs/device-runs/h100-cuda-suites-splitk-im2col-stem/variant-probe/)
    CudaCore(name="mma", family="cuda-mma-sync", ops=("gemm", "conv2d"), schedule=CudaSchedule,
             hero=mma.hero_schedule, space=mma.search_space, check=tiled_check("mma"), render=mma.render,
             kernel=cuda_kernel, serves=("cuda-wgmma.conv2d",), prefers=small_channel_conv,
             precisions=("bf16", "fp16"), smem=98304, verified=True, descriptions={
                 "gemm": "tensor-core GEMM: mma.sync m16n8k16 fed by ldmatrix, multi-stage cp.async pipeline, "
                         "swizzled shared memory, fused epilogue, fp32 accumulation",
                 "conv2d": "implicit-GEMM convolution on the mma.sync core (NCHW/NHWC, magic-number division, "
                           "hoisted coordinate table)"}),
    CudaCore(name="simt", family="cuda-simt", ops=("gemm", "conv2d"), schedule=CudaSchedule,
             hero=simt.hero_schedule, space=simt.search_space, check=tiled_check("simt"), render=simt.render,
             kernel=cuda_kernel, precisions=("fp32",), smem=33792, verified=True, descriptions={
                 "gemm": "warp-tiled fp32 GEMM on CUDA cores (8x8 per thread, double-buffered shared tiles)",
                 "conv2d": "implicit-GEMM fp32 convolution on the SIMT core"}),
    CudaCore(name="softmax", family="cuda-simt", ops=("softmax",), schedule=CudaSchedule,
             hero=softmax.hero_schedule, space=softmax.search_space, check=tiled_check("softmax"),
             render=softmax.render, kernel=softmax_split.split_kernel, precisions=("fp32", "fp16", "bf16"),
             verified=True, descriptions={"softmax": "row softmax: one kernel, online max and sum, vectorised, "
                                                     "one pass when the row fits in registers"}),
    # FlashAttention-2-style fused forward on mma.sync (attention.py, attention_kernel.py; issue 17), with the
    # mma.sync GEMM's shared memory; tests/test_cuda_attention_gpu.py: 16 of 16 verified on an H100
    # (docs/device-runs/h100-splitk-simt-attention/attention-mma-sync/)
    CudaCore(name="attention-mma", family="cuda-mma-sync", ops=("attention",),
             schedule=attention.AttentionMmaSchedule, hero=attention.hero_schedule, space=attention.search_space,
             check=attention.check, render=attention.render, kernel=attention_runtime.attention_kernel,
             precisions=("bf16", "fp16"), smem=98304, verified=True, descriptions={
                 "attention": "fused attention forward (FlashAttention-2 style): Q in registers, K/V by cp.async "
                              "ring, mma.sync, online softmax, masked tiles skipped, lse written"}),
    *HOPPER,
    # NHWC conv of fewer than 16 input channels (the stem): r*s*c packed densely, the filter resident in
    # shared memory, input rows copied once, A gathered from them; the hero of both 16-bit conv families
    CudaCore(name="stem", family="", ops=("conv2d",), schedule=stem.StemSchedule, hero=stem.hero_schedule,
             space=stem.search_space, check=stem.check, render=stem_kernel.render, kernel=cuda_kernel,
             serves=("cuda-mma-sync.conv2d", "cuda-wgmma.conv2d"), prefers=stem.prefers, applies=stem.applies),
    # GEMM of <= 16 rows (decode), memory bound: the hero of the tensor-core GEMM families for such shapes
    CudaCore(name="gemv", family="", ops=("gemm",), schedule=gemv.GemvSchedule, hero=gemv.hero_schedule,
             space=gemv.search_space, check=gemv.check, render=gemv.render, kernel=gemv.gemv_kernel,
             serves=("cuda-mma-sync", "cuda-wgmma"), prefers=gemv.prefers, applies=gemv.applies),
)

BY_VARIANT: dict[tuple[str, str], CudaCore] = {(c.family, op): c for c in CORES for op in c.ops if c.family}
# (family, op) -> the family's cores for the op: its main core (BY_VARIANT), then the alternates it runs
FAMILY_CORES: dict[tuple[str, str], tuple[CudaCore, ...]] = {
    key: (main, *(c for c in CORES if c is not main and key[1] in c.ops
                  and (key[0] in c.serves or f"{key[0]}.{key[1]}" in c.serves)))
    for key, main in BY_VARIANT.items()}
BY_SCHEDULE: dict[tuple[str, str], CudaCore] = {(c.name, op): c for c in CORES for op in c.ops}


def for_variant(v: Variant, op: Any) -> CudaCore:
    """The core that runs ``op`` for variant ``v`` (its family's core for the op's kind)."""
    kind = getattr(op, "kind", None)
    core = BY_VARIANT.get((v.family, kind))
    if core is None:
        raise BadInputError(f"variant: {v.id} has no CUDA core for {kind!r}")
    return core


def cores_for(v: Variant, op: Any) -> tuple[CudaCore, ...]:
    """Every core variant ``v`` may run ``op`` on: its main core first, then its alternates."""
    return FAMILY_CORES.get((v.family, getattr(op, "kind", None))) or (for_variant(v, op),)


def hero_core(v: Variant, op: Any) -> CudaCore:
    """The core whose heuristic schedule is the hero for ``op``: the first alternate that prefers it (gemv
    for M <= 16), else the main core."""
    main, *alternates = cores_for(v, op)
    return next((c for c in alternates if c.prefers is not None and c.prefers(op)), main)


def for_check(v: Variant, op: Any, schedule: Any) -> CudaCore:
    """The core that checks ``schedule`` for ``op`` under ``v``: the schedule's own where ``v`` runs it,
    else the main core (whose check names the mismatch)."""
    mine = BY_SCHEDULE.get((getattr(schedule, "core", None), getattr(op, "kind", None)))
    family = cores_for(v, op)
    return mine if mine in family else family[0]


def for_schedule(op: Any, schedule: Any) -> CudaCore:
    """The core that renders ``schedule`` for ``op``."""
    core = BY_SCHEDULE.get((getattr(schedule, "core", None), getattr(op, "kind", None)))
    if core is None:
        raise BadInputError(f"schedule: no CUDA core {getattr(schedule, 'core', None)!r} computes "
                            f"{getattr(op, 'kind', op)!r}")
    return core


def for_json(d: dict[str, Any]) -> CudaCore | None:
    """The core a schedule's JSON names by its "core" (and "kernel", where cores share a name); None for
    a name no core has (``CudaSchedule.from_json`` then names what is wrong)."""
    named = [c for c in CORES if c.name == d.get("core")]
    return next((c for c in named if d.get("kernel") in c.ops), named[0] if named else None)


def schedule_from_json(d: dict[str, Any]) -> Any:
    core = for_json(d)
    return core.schedule_from_json(d) if core is not None else CudaSchedule.from_json(d)
