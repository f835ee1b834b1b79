"""The CUDA kernel cores, one registry line each.

A core is everything that takes one family of kernels from an op to a launch: its schedule type (read
from JSON), the heuristic schedule (the hero), the search space, the checks, the renderer, the host-side
kernel object and the quantities the tuner's model sees. ``build.py`` looks each step up here by the
variant (family, op) or by the schedule (core, op), so it holds no branch on a core or an op.

Adding a core or an op: write its module (schedule, ``hero_schedule``, ``search_space``, ``render``) and
add one ``Core(...)`` line to ``CORES`` (plus its variant in ``variants.py``). A core that serves other
families' variants beside their main core (``gemv``: the small-M GEMM of cuda-mma-sync and cuda-wgmma)
has no family of its own, names those in ``serves`` and the ops it is their hero for in ``prefers``:
``hero_core`` picks it, ``search_space`` adds its candidates, ``for_check`` checks its schedules. Every
function is a direct reference to its module's own, which readers and tools can follow: importing the
registry imports the renderers (and NumPy), which only the build path (``build.py``, ``tracea plan`` and
what builds kernels) needs; ``tracea --help`` and ``tracea doctor`` do not import it. The kernel objects'
driver side (cuda-core) is still imported at a kernel's first load, inside ``runtime.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from tracea.doctor.errors import BadInputError, UnsupportedError
from tracea.doctor.variants import Variant

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


@dataclass(frozen=True)
class Core:
    """One kernel core of the CUDA backend and the ops it serves."""

    name: str  # the schedule's ``core`` (its JSON's "core")
    family: str  # the variant family (variants.py) whose kernels it renders
    ops: tuple[str, ...]  # op kinds (the schedule JSON's "kernel", where a core's name is shared)
    schedule: Callable[[dict[str, Any]], Any]  # the schedule from its JSON
    hero: Callable[[Any, Any], Any]  # (op, host) -> the heuristic schedule
    space: Callable[[Any, Any, Arch], Iterable[Any]]  # (op, hero, target) -> candidates beside the hero
    check: Callable[[Any, Variant, Any, Arch], None]  # (op, variant, schedule, target) -> raise or pass
    render: Callable[[Any, Any, Arch], tuple[Rendered, dict[str, float | int]]]  # source and runtime scalars
    kernel: Callable[[Any, Any, Rendered, dict[str, Any]], Any]  # (op, artifact, rendered, scalars) -> kernel
    features: Callable[[Any, Any], tuple[int, int]] | None = None  # (warps, smem bytes); None: no block tiles
    # An alternate core (family ""): the families whose variants also run it beside their main core, and
    # the ops for which it is their hero
    serves: tuple[str, ...] = ()
    prefers: Callable[[Any], bool] | None = None
    applies: Callable[[Any], bool] | None = None  # where it may run and is searched (default: ``prefers``)


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


def tiled_features(op: Any, schedule: Any) -> tuple[int, int]:
    from .plan import smem_bytes

    return schedule.warps, smem_bytes(op, schedule)


def own_features(op: Any, schedule: Any) -> tuple[int, int]:
    """A schedule that knows its threads and shared memory itself (the Hopper kernels')."""
    return schedule.threads // 32, schedule.smem_bytes


# ---------------------------------------------------------------------------------------------- Hopper
# The Hopper (sm_90a) kernels, composed in hopper/ (schedule, mainloop, scheduler, epilogue; gemm.py and
# conv.py over them); tma.py holds their checks and the GEMM's kernel object.
def hopper(kind: str, schedule_class: type, hero: Callable[..., Any], space: Callable[..., Any],
           rendered: Callable[..., Any], kernel: Callable[..., Any],
           scalars: Callable[[Any], dict[str, float | int]]) -> Core:
    """A Hopper core: its schedule class and hero (hopper/schedule.py), its space (hopper/space.py), and its
    kernel module's ``rendered(op, schedule, sm_count)``."""
    return Core("wgmma", "cuda-wgmma", (kind,), schedule_class.from_json,
                lambda op, host: hero(op, mma.sm_count(host)),
                lambda op, _hero, arch: space(op, arch.smem_optin, arch.sm_count if arch.sm_count > 1 else 132),
                tma.check_wgmma,
                lambda op, s, arch: (rendered(op, s, arch.sm_count), scalars(op)), kernel, own_features)


HOPPER: tuple[Core, ...] = (
    hopper("gemm", hopper_schedule.WgmmaSchedule, hopper_schedule.hero_schedule, hopper_space.search_space,
           hopper_gemm.rendered, tma.WgmmaKernel, lambda op: {"M": op.m, "N": op.n, "K": op.k, "alpha": op.alpha}),
    hopper("conv2d", hopper_schedule.WgmmaConvSchedule, hopper_schedule.conv_hero_schedule,
           hopper_space.conv_search_space, hopper_conv.rendered, hopper_conv.conv_kernel,
           lambda op: dict(hopper_conv.conv_scalars(op))),
    # attention forward, FlashAttention-3 style (hopper/attention*.py): TMA K/V ring, ping-pong consumers
    Core("wgmma-attention", "cuda-wgmma", ("attention",), hopper_attention_schedule.schedule_from_json,
         lambda op, _host: hopper_attention_schedule.hero_schedule(op),
         lambda op, _hero, arch: hopper_attention_schedule.search_space(op, arch.smem_optin),
         hopper_attention_schedule.check, hopper_attention.render,
         hopper_attention_kernel.WgmmaAttentionKernel, hopper_attention_schedule.features),
)
# ----------------------------------------------------------------------------------------- end Hopper

CORES: tuple[Core, ...] = (
    # Also the Hopper conv's hero for fewer than 16 input channels where the stem core does not run (NCHW):
    # mma.sync reduces over r*s*c packed as one dimension, the Hopper gather pads each tap's c to 8 (an
    # H100, ResNet-50's stem at batch 32: 0.32 ms against 2.29 ms; docs/device-runs/h100-cuda-suites-splitk-im2col-stem/variant-probe/)
    Core("mma", "cuda-mma-sync", ("gemm", "conv2d"), CudaSchedule.from_json, mma.hero_schedule,
         mma.search_space, tiled_check("mma"), mma.render, cuda_kernel, tiled_features,
         serves=("cuda-wgmma.conv2d",), prefers=small_channel_conv),
    Core("simt", "cuda-simt", ("gemm", "conv2d"), CudaSchedule.from_json, simt.hero_schedule,
         simt.search_space, tiled_check("simt"), simt.render, cuda_kernel, tiled_features),
    Core("softmax", "cuda-simt", ("softmax",), CudaSchedule.from_json, softmax.hero_schedule,
         softmax.search_space, tiled_check("softmax"), softmax.render, softmax_split.split_kernel),
    *HOPPER,
    # NHWC conv of fewer than 16 input channels (the stem): r*s*c packed densely, the filter resident in
    # shared memory, input rows copied once, A gathered from them; the hero of both 16-bit conv families
    Core("stem", "", ("conv2d",), stem.StemSchedule.from_json, stem.hero_schedule, stem.search_space, stem.check,
         stem_kernel.render, cuda_kernel, stem.features,
         serves=("cuda-mma-sync.conv2d", "cuda-wgmma.conv2d"), prefers=stem.prefers, applies=stem.applies),
    # GEMM of <= 16 rows (decode), memory bound: the hero of the tensor-core GEMM families for such shapes
    Core("gemv", "", ("gemm",), gemv.GemvSchedule.from_json, gemv.hero_schedule, gemv.search_space, gemv.check,
         gemv.render, gemv.gemv_kernel, gemv.features,
         serves=("cuda-mma-sync", "cuda-wgmma"), prefers=gemv.prefers, applies=gemv.applies),
    # FlashAttention-2-style fused forward on mma.sync (attention.py, attention_kernel.py; issue 17)
    Core("attention-mma", "cuda-mma-sync", ("attention",), attention.schedule_from_json,
         attention.hero_schedule, attention.search_space, attention.check, attention.render,
         attention_runtime.attention_kernel, attention.features),
)

BY_VARIANT: dict[tuple[str, str], Core] = {(c.family, op): c for c in CORES for op in c.ops if c.family}
# (family, op) -> the family's cores for the op: its main core (BY_VARIANT), then the alternates it runs
FAMILY_CORES: dict[tuple[str, str], tuple[Core, ...]] = {
    key: (main, *(c for c in CORES if c is not main and key[1] in c.ops
                  and (key[0] in c.serves or f"{key[0]}.{key[1]}" in c.serves)))
    for key, main in BY_VARIANT.items()}
BY_SCHEDULE: dict[tuple[str, str], Core] = {(c.name, op): c for c in CORES for op in c.ops}


def for_variant(v: Variant, op: Any) -> Core:
    """The core that runs ``op`` for variant ``v`` (its family's core for the op's kind)."""
    kind = getattr(op, "kind", None)
    core = BY_VARIANT.get((v.family, kind))
    if core is None:
        raise BadInputError(f"variant: {v.id} has no CUDA core for {kind!r}")
    return core


def cores_for(v: Variant, op: Any) -> tuple[Core, ...]:
    """Every core variant ``v`` may run ``op`` on: its main core first, then its alternates."""
    return FAMILY_CORES.get((v.family, getattr(op, "kind", None))) or (for_variant(v, op),)


def hero_core(v: Variant, op: Any) -> Core:
    """The core whose heuristic schedule is the hero for ``op``: the first alternate that prefers it (gemv
    for M <= 16), else the main core."""
    main, *alternates = cores_for(v, op)
    return next((c for c in alternates if c.prefers is not None and c.prefers(op)), main)


def for_check(v: Variant, op: Any, schedule: Any) -> Core:
    """The core that checks ``schedule`` for ``op`` under ``v``: the schedule's own where ``v`` runs it,
    else the main core (whose check names the mismatch)."""
    mine = BY_SCHEDULE.get((getattr(schedule, "core", None), getattr(op, "kind", None)))
    family = cores_for(v, op)
    return mine if mine in family else family[0]


def for_schedule(op: Any, schedule: Any) -> Core:
    """The core that renders ``schedule`` for ``op``."""
    core = BY_SCHEDULE.get((getattr(schedule, "core", None), getattr(op, "kind", None)))
    if core is None:
        raise BadInputError(f"schedule: no CUDA core {getattr(schedule, 'core', None)!r} computes "
                            f"{getattr(op, 'kind', op)!r}")
    return core


def for_json(d: dict[str, Any]) -> Core | None:
    """The core a schedule's JSON names by its "core" (and "kernel", where cores share a name); None for
    a name no core has (``CudaSchedule.from_json`` then names what is wrong)."""
    named = [c for c in CORES if c.name == d.get("core")]
    return next((c for c in named if d.get("kernel") in c.ops), named[0] if named else None)


def schedule_from_json(d: dict[str, Any]) -> Any:
    core = for_json(d)
    return core.schedule(d) if core is not None else CudaSchedule.from_json(d)
