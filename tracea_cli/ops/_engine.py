"""Routing one ``tracea.ops`` call: the backend of the data's device, the planner's variant, the tuned
schedule from the tuning database (else the heuristic one), the kernel built once per process (and once
per machine: the backends' content-hash build caches), or the vendor call with the reason.

Caches, all in this process: the host report (``doctor.probe``), the choice per (op signature, backend)
(plan + database lookup, read once: ``clear_cache()`` after a new ``tracea tune``), and the kernels, keyed
by op signature + backend + variant + schedule."""

from __future__ import annotations

import json
import threading
import warnings
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from tracea.doctor.errors import (
    BadInputError,
    CompileError,
    LaunchError,
    ToolchainMissingError,
    TraceaError,
    UnsupportedError,
)

# builds, kernel_hits, tracea, fallbacks, slow_path, fast_path: what tests and explain count
STATS: Counter[str] = Counter()
LAST = threading.local()  # .route: the route of this thread's last call (explain())
_LOCK = threading.RLock()
_HOST: list[Any] = []
_CHOICES: dict[tuple[str, str, frozenset[str]], Any] = {}
_READY: dict[tuple[Any, str, bool], tuple[Any, str, str, dict[str, Any], dict[str, str]]] = {}  # the fast path
_FAILED: dict[tuple[Any, str, bool], Fallback] = {}  # ops no variant could build: the vendor call at once
_NO_LAUNCH_ON: set[str] = set()  # variants whose kernel objects cannot launch on a caller's device buffers
_KERNELS: dict[tuple[str, str, str, str], Any] = {}
_BUILDING: dict[tuple[str, str, str, str], threading.Lock] = {}
_POLICY = {"fallback": True}


class Fallback(Exception):
    """Why a call takes the vendor path (caught by the op functions; never reaches the caller)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass
class Route:
    """Which path a call runs and why: ``str(route)`` is explain's text."""

    op: str
    path: str = "tracea"  # "tracea" | "fallback" | "empty" (a result with no elements: nothing runs)
    reason: str | None = None  # the fallback's reason
    vendor: str | None = None  # the vendor call that runs instead
    backend: str | None = None
    variant: str | None = None
    schedule_source: str | None = None  # "tuned" (tuning database) | "heuristic"
    schedule: dict[str, Any] | None = None
    kernel: str | None = None  # the kernel's name
    in_process: bool | None = None  # the kernel was already built in this process
    build_cache_hit: bool | None = None  # the backend's build cache held the binary when it was built
    notes: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        if self.path == "empty":
            return f"{self.op}: nothing to compute ({self.reason})"
        if self.path == "fallback":
            return f"{self.op}: vendor fallback ({self.vendor}) because {self.reason}"
        sched = json.dumps(self.schedule, sort_keys=True, default=str) if self.schedule else "?"
        lines = [f"{self.op}: Tracea kernel {self.kernel or '(not built yet)'} on {self.backend}",
                 f"  variant {self.variant}; schedule {self.schedule_source}: {sched}"]
        if self.in_process:
            lines.append("  kernel cache: built earlier in this process (no build)")
        elif self.build_cache_hit is None:
            lines.append("  kernel cache: not built in this process yet (the build cache decides on the first call)")
        else:
            lines.append("  kernel cache: built in this process; binary " + (
                "from the build cache (no compile)" if self.build_cache_hit else "compiled (build cache miss)"))
        return "\n".join(lines + [f"  {n}" for n in self.notes])


def policy(fallback: bool) -> None:
    _POLICY["fallback"] = bool(fallback)


def fallback_allowed() -> bool:
    return _POLICY["fallback"]


def host() -> Any:
    with _LOCK:
        if not _HOST:
            from tracea.doctor import probe

            _HOST.append(probe())
        return _HOST[0]


def clear() -> None:
    with _LOCK:
        _CHOICES.clear()
        _KERNELS.clear()
        _READY.clear()
        _FAILED.clear()
        STATS.clear()


def launches_in_place(k: Any) -> bool:
    """Whether kernel ``k`` launches on a caller's device buffers: their pointers on a stream (``launch_on``)
    or the tensors themselves (``launch_tensors``, where the device's API takes tensors, not pointers)."""
    return hasattr(k, "launch_on") or hasattr(k, "launch_tensors")


def backend_for(device: str) -> str:
    """The registered backend whose kernels run where the data is: its ``DEVICE``'s type is the tensors' torch
    device type ("cpu", "cuda", "mps")."""
    from tracea.emitters import registry

    for name in registry.BACKENDS:
        b = registry.backend(name)
        if b.DEVICE.split(":")[0] == device:
            if not b.present(host()):
                raise Fallback(f"this machine has no {device} device the {name} backend can use")
            return name
    raise Fallback(f"no Tracea backend runs on {device} tensors")


def _short(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def choose(op: Any, backend: str, skip: frozenset[str] = frozenset()) -> tuple[str, Any, str]:
    """(variant id, schedule, "tuned" | "heuristic") for ``op`` on ``backend``, the variants in ``skip`` left
    out; Fallback with the reason."""
    key = (op.signature, backend, skip)
    got = _CHOICES.get(key)
    if got is None:
        got = _choose(op, backend, skip)
        _CHOICES[key] = got
    if isinstance(got, Fallback):
        raise got
    return got


def _choose(op: Any, backend: str, skip: frozenset[str]) -> tuple[str, Any, str] | Fallback:
    from tracea.doctor.plan import plan
    from tracea.emitters import registry
    from tracea.tuner.lookup import stored_schedule

    h = host()
    decision = plan(op, h, [v for v in registry.all_variants(backend) if v.id not in skip], backend=backend)
    if decision.chosen is None:
        why = "; ".join(f"{c.variant}: {', '.join(c.reasons)}" for c in decision.candidates) or "none registered"
        return Fallback(_short(f"no {backend} variant can run {op.kind} {op.dtype.value} here ({why})"))
    if decision.precision != op.dtype.value:
        return Fallback(_short(f"{op.dtype.value} is not served on {backend} here ({decision.fallback})"))
    b = registry.backend(backend)
    variant = registry.variant(decision.chosen)
    try:
        stored = stored_schedule(op, variant.id, h, backend)
        if stored is not None:
            schedule = b.schedule_from_json(stored)
            b.validate_schedule(op, variant, schedule, h)
            return variant.id, schedule, "tuned"
    except TraceaError as exc:
        warnings.warn(f"tracea.ops: the tuned {op.kind} schedule is refused ({exc.message}); using the heuristic one",
                      stacklevel=4)
    except (KeyError, TypeError, ValueError) as exc:
        warnings.warn(f"tracea.ops: the stored {op.kind} schedule is unreadable ({exc}); using the heuristic one",
                      stacklevel=4)
    try:
        return variant.id, b.hero_schedule(op, variant, h), "heuristic"
    except (BadInputError, UnsupportedError) as exc:
        return Fallback(_short(f"{variant.id} has no schedule for this shape ({exc.message})"))


def _key(op: Any, backend: str, variant: str, schedule: Any) -> tuple[str, str, str, str]:
    return op.signature, backend, variant, json.dumps(schedule.to_json(), sort_keys=True)


def kernel(op: Any, backend: str, route: Route | None = None, build: bool = True, on_device: bool = False) -> Any:
    """The cached kernel for ``op`` on ``backend`` (built on first use unless ``build`` is False: explain),
    filling ``route``; Fallback when none can be had. The planner's first variant is tried first; one whose
    build refuses the op, or (``on_device``) whose kernel object cannot launch on the caller's device
    buffers, gives way to the next, and the route says so."""
    ready = _READY.get((op, backend, on_device))  # the op value itself is the key: no signature, no JSON
    if ready is not None:
        if build:  # a call served; explain (build=False) counts nothing
            STATS["kernel_hits"] += 1
        if route is not None:
            k, variant, source, schedule_json, passed = ready
            _fill(route, backend, variant, source, dict(schedule_json), True, k, passed)
        return ready[0]
    failed = _FAILED.get((op, backend, on_device))
    if failed is not None:
        raise failed
    passed: dict[str, str] = {}
    while True:
        try:
            variant, schedule, source = choose(op, backend, frozenset(passed))
        except Fallback as fb:
            if passed:
                fb = Fallback(_short(f"{fb.reason}; passed over " + "; ".join(f"{v}: {w}" for v, w in passed.items())))
                _FAILED[(op, backend, on_device)] = fb
            raise fb from None
        if on_device and variant in _NO_LAUNCH_ON:
            passed[variant] = NO_LAUNCH_ON
            continue
        key = _key(op, backend, variant, schedule)
        k = _KERNELS.get(key)
        cached = k is not None
        if k is None and build:
            try:
                k = _build(op, backend, variant, schedule, key)
            except Fallback as fb:
                passed[variant] = fb.reason
                continue
            STATS["builds"] += 1
        elif k is not None and build:
            STATS["kernel_hits"] += 1
        if on_device and k is not None and not launches_in_place(k):
            _NO_LAUNCH_ON.add(variant)
            passed[variant] = NO_LAUNCH_ON
            continue
        break
    if route is not None:
        _fill(route, backend, variant, source, schedule.to_json(), cached, k, passed)
    if k is not None:
        _READY[(op, backend, on_device)] = (k, variant, source, schedule.to_json(), passed)
    return k


NO_LAUNCH_ON = "its kernel object cannot launch on a caller's device buffers yet"


def _fill(route: Route, backend: str, variant: str, source: str, schedule: dict[str, Any], cached: bool, k: Any,
          passed: dict[str, str]) -> None:
    route.backend, route.variant, route.schedule_source = backend, variant, source
    route.schedule, route.in_process = schedule, cached
    route.notes.extend(f"passed over {v}: {why}" for v, why in passed.items())
    if k is not None:
        route.kernel = k.artifact.name
        route.build_cache_hit = getattr(k.artifact, "cache_hit", None)


def _build(op: Any, backend: str, variant: str, schedule: Any, key: tuple[str, str, str, str]) -> Any:
    from tracea.emitters import registry

    h = host()
    with _LOCK:  # one lock per kernel: different kernels build at once (threads), one kernel builds once
        lock = _BUILDING.setdefault(key, threading.Lock())
    with lock:
        k = _KERNELS.get(key)
        if k is not None:
            return k
        try:
            k = registry.backend(backend).build(op, registry.variant(variant), schedule, h)
        except (BadInputError, UnsupportedError, ToolchainMissingError) as exc:
            raise Fallback(_short(f"its build refused the op ({exc.message})")) from None
        except (CompileError, LaunchError) as exc:  # a Tracea defect: say so loudly, still give the right answer
            warnings.warn(f"tracea.ops: building {variant} for {op.signature} failed: {exc.message}", stacklevel=4)
            raise Fallback(_short(f"its build failed ({exc.message.splitlines()[0]})")) from None
        _KERNELS[key] = k
        return k
