"""The backend contract, written down once. A backend is a module (``emitters/cpu/backend.py``,
``emitters/cuda/backend.py``, a test or plug-in module) that has every member of ``Backend``; the registry
(emitters/registry.py) maps a name to it. Callers outside ``emitters/`` reach a backend's kernels, schedules,
environment facts and device only through these members, never by comparing its name. Inside a backend,
every schedule class follows ``schedule.Schedule`` (name, validate, to_json/from_json, features) and every
kernel core is a ``core.Core`` (or the backend's subclass), held in the backend's registry.

    from tracea.emitters import registry
    b = registry.backend("cuda")
    schedule = b.schedule_from_json(stored)          # not type(b.hero_schedule(...)).from_json
    kernel = b.build(op, variant, schedule, host)

Optional hooks, looked up with ``getattr`` where used: ``tuning_features(op, schedule_json)`` (the tuner's
model inputs), ``bank_conflict_drop(op, variant, schedule)`` (the tuner's shared-memory pruning).

An ``ON_DEVICE`` backend's kernels take a caller's device tensors in place (``tracea.ops``, which finds the
backend whose ``DEVICE`` type is the tensors' torch device type) through one of two optional kernel members:
``launch_on(pointers, stream)`` (the buffers' addresses on the caller's stream: CUDA) or
``launch_tensors(feeds, out)`` (the tensors themselves, where the device's API binds tensors rather than
addresses: Metal through ``torch.mps.compile_shader`` on ``mps`` tensors). A kernel with neither is passed over
for device tensors.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from tracea.doctor.variants import Variant

# (op, variant, schedule, host) -> a loaded kernel: what ``bench`` and the tuner's worker call to build
Builder = Callable[[Any, Variant, Any, Any], Any]


@dataclass
class Rendering:
    """What a build compiles: the source, its kernel name, the flags and the compiler (replay compares a
    bundle's kernel with it before anything runs)."""

    name: str
    source: str
    flags: list[str] | None  # None: the backend does not say
    compiler: str

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.source.encode()).hexdigest()


@runtime_checkable
class Backend(Protocol):
    """One backend's whole surface. Every member is required; a backend without a capability raises
    ``UnsupportedError`` from it (with a hint) rather than leaving it out."""

    NAME: str
    """The name users type (``--backend``) and rows record ("cpu", "cuda")."""

    VARIANTS: tuple[Variant, ...]
    """The variants the decision engine may choose (doctor/plan.py ranks them)."""

    ON_DEVICE: bool
    """True for an accelerator: kernels are verified in-process (no fork under a device context) and timed
    with device events, the vendor baseline runs on the device (``bench_on_device``), and the tuner's worker
    times its baseline there. False: forked verification and host timers against ``baseline_for``."""

    DEVICE: str
    """The device key of the host report's ceilings its kernels are bounded by ("cpu", "cuda:0")."""

    LANGUAGE: str
    """The language of the sources it compiles, as its artifacts record it ("c", "cuda"): an IR dump's
    compile command and a bundle's kernels are matched to their backend by it."""

    SOURCE_SUFFIX: str
    """The suffix of its kernels' source files, with the dot (".c", ".cu", ".hip"): its renderer's
    ``file_suffix``. The one place a source's suffix is known: ``emit`` names the source with it, an IR dump
    names ``03_source`` with it (``registry.by_language``: ".txt" for a language no backend compiles), and
    the evidence commands pick the source out of what ``emit`` wrote by it."""

    COMPILES_BUNDLED_FLAGS: bool
    """True when ``build_from_source`` compiles with the bundle's own compiler flags (replay screens them
    through an allow-list first); False when the backend always compiles with its own options."""

    def resolve(self, variant: Variant | str) -> Variant:
        """The variant of this backend by id (or the Variant itself); ``UnsupportedError`` if unknown."""
        ...

    def present(self, host: Any) -> bool:
        """Whether ``host`` (a doctor ``HostReport``) has this backend's device; its environment is then
        recorded with every run made there."""
        ...

    def runs_kernels(self, host: Any) -> str | None:
        """None when this process can build and run this backend's kernels on ``host`` (this machine's live
        report): its device is there and its runtime loads; otherwise why not, in one line. ``bench``,
        ``tune`` and ``tracea.ops`` pass over a backend that cannot (``tracea plan`` still ranks its
        variants: the plan is about the machine, not this process)."""
        ...

    def device_name(self, host: Any) -> str | None:
        """What this backend's kernels run on in ``host``, for a sentence ("GPU 0 (NVIDIA H100 80GB HBM3)"),
        or None where there is nothing to name."""
        ...

    def target_host(self, host: Any, arch: str) -> Any:
        """``host`` as if its device were the target ``arch`` (``sm_90a``, ``gfx90a``): what planning and
        emitting for a target that is not installed here needs. ``BadInputError`` when ``arch`` is not one
        of this backend's targets."""
        ...

    MEMBER_RESOURCES: dict[str, float]
    """What one tuning worker of a pool asks of a Ray node ({"num_gpus": 1, "num_cpus": 1}: a GPU each)."""

    def worker_mismatch(self, head: dict[str, Any], worker: dict[str, Any]) -> str | None:
        """Why results measured by a tuning worker in environment ``worker`` (``registry.environment`` on its
        node) cannot be stored under the head's ``head`` environment, or None when they can."""
        ...

    def pool_filter(self, host: Any, n: int) -> Any:
        """Which candidates ``n`` tuning workers sharing ``host`` time fairly (a predicate on a schedule), or
        None for all: a CPU candidate with more threads than a worker's cores would be timed crowded."""
        ...

    def default_workers(self, host: Any) -> int:
        """How many tuning workers ``tracea tune`` runs on ``host`` when ``--workers`` is not given."""
        ...

    def tuning_members(self, host: Any, n: int) -> list[dict[str, str]]:
        """The environments of ``n`` tuning workers sharing ``host`` (tuner/pool.py), each on its own part of
        the device (a GPU, a set of cores); ``BadInputError`` when ``host`` cannot give ``n`` such parts."""
        ...

    def compute_metric(self, dtype: str) -> str | None:
        """The ceiling metric (doctor/ceilings.py) a kernel of ``dtype`` is bounded by, or None when no
        ceiling of the device bounds it (roofline plots fall back to "fp32_flops")."""
        ...

    def copy_bandwidth(self, host: Any) -> dict[str, Any] | None:
        """The device's memory bandwidth, measured now ({"value": bytes/s, "unit", "method"} or {"error"}): what
        a memory-bound kernel is held against (emitters/copy_bandwidth.py); None where no measurement exists."""
        ...

    def environment(self, host: Any) -> dict[str, Any]:
        """This backend's facts for the environment fingerprint (compiler, driver, devices): a change in
        any of them makes a stored result a miss. JSON-able; added to doctor/fingerprint.py's common
        fields, so the keys must not collide with them."""
        ...

    def schedule_from_json(self, d: dict[str, Any]) -> Any:
        """Any schedule of this backend from its ``to_json()``; raises (``BadInputError``, ``KeyError``,
        ``TypeError``, ``ValueError``) on a document that is not one."""
        ...

    def hero_schedule(self, op: Any, variant: Variant | str, host: Any) -> Any:
        """The heuristic schedule for ``op`` on ``host``: what runs when nothing is tuned, and the first
        candidate of every search."""
        ...

    def search_space(self, op: Any, variant: Variant | str, host: Any) -> list[Any]:
        """Every candidate schedule that can run ``op`` on ``host``, hero first."""
        ...

    def validate_schedule(self, op: Any, variant: Variant | str, schedule: Any, host: Any) -> None:
        """Raise ``BadInputError`` / ``UnsupportedError`` when ``schedule`` cannot run ``op`` here."""
        ...

    def build(self, op: Any, variant: Variant | str, schedule: Any, host: Any) -> Any:
        """Render, compile (cached by content hash) and load: a callable kernel with ``.op`` and ``.artifact``
        (source, flags, binary, metadata). Raises a ``TraceaError`` (``CompileError``, ...), never a raw one."""
        ...

    def emit(self, op: Any, variant: Variant | str, schedule: Any, host: Any, out_dir: str | Path,
             arch: str | None = None) -> list[Path]:
        """Write the kernel's files (source, schedule.json, metadata.yaml, ...) into ``out_dir``; ``arch``
        names a target other than this host's (a backend that has none refuses it)."""
        ...

    def export(self, op: Any, variant: Variant | str, schedule: Any, host: Any, out_dir: str | Path,
               arch: str | None = None, force: bool = False, schedule_source: str = "given",
               prefix: str | None = None) -> list[Path]:
        """Write a self-contained C/C++ package for ``op`` at its shape into ``out_dir`` (``tracea export``):
        ``include/<prefix>/tracea.h`` (the C ABI: emitters/export_abi.py, its text in export_headers.py), ``tracea.hpp``, the kernel, a CMake
        file with ``install()`` and a package config, an example that verifies against a C reference, and
        ``manifest.json``. Every exported name carries ``prefix`` (None: one derived from the op,
        ``export_abi.default_prefix``). A non-empty ``out_dir`` is refused unless ``force``;
        ``schedule_source`` ("tuned", "heuristic", "given") goes into the manifest."""
        ...

    def rendering(self, op: Any, variant: Variant, schedule: Any, host: Any, arch: str | None = None) -> Rendering:
        """What ``build`` would compile for ``op`` and ``schedule``, without compiling: replay compares a
        bundle's source and flags with it. ``arch``: the recorded target, used where this host has none.
        ``BadInputError`` for a schedule this backend refuses; another ``TraceaError`` when it cannot say."""
        ...

    def build_from_source(self, source: str, name: str | None, flags: list[str] | None,
                          recorded: dict[str, Any]) -> Builder:
        """A builder that compiles ``source`` (a bundle's, byte for byte) instead of this backend's
        rendering: ``name`` the recorded kernel name, ``flags`` the compiler flags already allowed by replay
        (None: this backend's own), ``recorded`` the bundle's compile record (language, compiler, version,
        flags). ``UnsupportedError`` for a language this backend does not compile."""
        ...

    def load_binary(self, path: Path, arch: str | None, name: str | None, recorded: dict[str, Any],
                    source: str = "") -> Builder:
        """A builder that loads the binary at ``path`` built for ``arch``; ``UnsupportedError`` (now or when
        it builds) unless ``arch`` is what this host runs. ``source``: the bundled source it was built from,
        kept in the artifact."""
        ...

    def compile_command(self, compiler: str, flags: list[str], source: str, binary: str) -> list[str] | None:
        """The command line that runs ``compiler`` with ``flags`` (an artifact's) on the file ``source`` into
        ``binary`` (an IR dump's 04_compile.json), or None where the compiler runs in-process (NVRTC)."""
        ...

    def baseline_for(self, op: Any, inputs: dict[str, Any]) -> Any:
        """The vendor library on the host for ``op`` (emitters/baselines/ ``Baseline``): what a kernel that
        is not ``ON_DEVICE`` is timed against."""
        ...

    def bench_on_device(self, kernel: Any, op: Any, inputs: dict[str, Any], ref: Any, tol: float, warmup: int,
                        repeats: int) -> dict[str, Any]:
        """An ``ON_DEVICE`` backend's verify-and-time of ``kernel`` beside the device's vendor library
        (``BenchResult`` fields); a host backend raises ``UnsupportedError``."""
        ...

    def vendor_on_device(self, op: Any, inputs: dict[str, Any], ref: Any, warmup: int, repeats: int,
                         kernel: Any = None) -> dict[str, Any]:
        """An ``ON_DEVICE`` backend's vendor library for ``op`` on the device, for the tuner's worker: verified
        against ``ref`` and timed ({name, p50_ms, p95_ms, rel_err}, or {name, reason} where there is none);
        with ``kernel``, both timed in alternating rounds (adding ``tracea_p50_ms``, ``tracea_p95_ms``). A host
        backend raises ``UnsupportedError``."""
        ...

    def layout_cost(self, op: Any, variant: Variant | str) -> str | None:
        """What reading ``op``'s data layout costs on ``variant``, in words for the caller (an NCHW conv on a
        kernel that reads NHWC: the copies inside every call), or None where the layout is read in place."""
        ...

    def suites(self, quick: bool = False) -> dict[str, list[Any]]:
        """The ops ``tracea bench`` measures by suite name (``kernels/workloads.py``: llm-gemm, resnet50,
        softmax), in the dtypes and sizes this backend's users run; ``quick``: a few rows of each."""
        ...
