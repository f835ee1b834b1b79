"""Every registered backend (emitters/backend.py) and the variants they offer.

Emitters own their variant lists; this is the one place that gathers them, so the decision engine
(doctor/plan.py) sees every backend without the doctor importing the emitters.
"""

from __future__ import annotations

import importlib
from typing import Any

from tracea.doctor.errors import BadInputError, UnsupportedError
from tracea.doctor.variants import Variant

from .backend import Backend

BACKENDS = {"cpu": "tracea.emitters.cpu.backend", "cuda": "tracea.emitters.cuda.backend",
            "hip": "tracea.emitters.hip.backend",
            "metal": "tracea.emitters.metal.backend"}  # Backend modules


PLANNED: tuple[str, ...] = ()  # backends the design names whose emitters have not landed: unsupported, not a typo


def backend(name: str) -> Backend:
    """The backend registered as ``name`` (emitters/backend.py ``Backend``), imported on first use."""
    module = BACKENDS.get(name)
    if module is None:
        if name in PLANNED:
            raise UnsupportedError(f"backend {name!r} has no emitter yet (available: {', '.join(BACKENDS)})")
        raise BadInputError(f"--backend: unknown backend {name!r}; use {' or '.join(BACKENDS)}")
    return importlib.import_module(module)  # type: ignore[return-value]  # a module implementing Backend


_backend = backend  # for functions whose ``backend`` argument is a name


def environment(host: Any, name: str) -> dict[str, Any]:
    """What a result measured with backend ``name`` on ``host`` depends on: doctor/fingerprint.py's common
    fields plus the backend's own facts (none for a name this Tracea has no backend for)."""
    from tracea.doctor.fingerprint import environment as common

    return common(host, name, backend(name).environment(host) if name in BACKENDS else {})


def fingerprint(host: Any, name: str) -> str:
    """The short hash of ``environment(host, name)``: the key tuned schedules are stored under."""
    from tracea.doctor.fingerprint import digest

    return digest(environment(host, name))


def by_language(language: str | None) -> Backend | None:
    """The registered backend whose sources are in ``language`` (an artifact's), or None."""
    return next((_backend(n) for n in BACKENDS if _backend(n).LANGUAGE == language), None) if language else None


def environments(host: Any) -> dict[str, dict[str, Any]]:
    """{backend: {"fingerprint", "environment"}} for each backend whose device this host has (a run's
    manifest records them, replay compares them)."""
    present = [name for name in BACKENDS if _backend(name).present(host)]
    return {b: {"fingerprint": fingerprint(host, b), "environment": environment(host, b)} for b in present}


def all_variants(backend: str | None = None) -> list[Variant]:
    out: list[Variant] = []
    for name in ([backend] if backend else list(BACKENDS)):
        out.extend(_backend(name).VARIANTS)
    return out


def variant(variant_id: str) -> Variant:
    for v in all_variants():
        if v.id == variant_id:
            return v
    raise UnsupportedError(f"no registered variant {variant_id!r}")


def default_backend(op: Any, host: Any, precision: str | None = None, runs_here: bool = True) -> tuple[str, str]:
    """The backend a command uses when none is named: the one whose variant the decision engine ranks
    first for ``op`` on ``host`` (a GPU variant outranks every CPU one, so a machine with a usable GPU
    gets the GPU), and the sentence that says why. With ``runs_here`` (``host`` is this machine, and the
    command runs kernels), a backend that cannot run them in this process (``Backend.runs_kernels``: no
    runtime, say) is passed over, and the sentence says so. Falls back to the CPU, with the reason, when
    no variant can run the op here (the command then explains that itself)."""
    from tracea.doctor.plan import plan

    variants, passed = all_variants(), []
    while True:
        decision = plan(op, host, variants, precision=precision)
        if decision.chosen is None or decision.backend is None:
            stops = _gpu_stops(decision)
            head = "no variant can run it here" + (f" ({'; '.join(stops)})" if stops else "") + "; trying the CPU"
            return "cpu", "; ".join([head, *passed])
        problem = backend(decision.backend).runs_kernels(host) if runs_here else None
        if not problem:
            break
        passed.append(f"{decision.chosen} is passed over: {problem}")
        variants = [v for v in variants if v.backend != decision.backend]
    why = f"the planner's first choice here is {decision.chosen}"
    device = backend(decision.backend).device_name(host) if decision.backend != "cpu" else None
    if device:
        why += f" on {device}"
    elif decision.backend == "cpu":
        stops = _gpu_stops(decision)
        if stops:
            why += f"; no GPU variant fits ({'; '.join(stops)})"
    return decision.backend, "; ".join([why, *passed])


def _gpu_stops(decision: Any) -> list[str]:
    """Per GPU backend of ``decision``'s candidates, what stops every one of its variants (its first shared reason;
    a precision's own reason last): "cuda: ...". Empty where a GPU variant was accepted or none was ranked."""
    stops = []
    for name in dict.fromkeys(c.backend for c in decision.candidates if c.backend != "cpu"):
        mine = [c for c in decision.candidates if c.backend == name]
        if any(c.accepted for c in mine):
            continue
        shared = sorted(set.intersection(*(set(c.reasons) for c in mine)),
                        key=lambda r: (r.split(" ")[0].endswith(":"), r))
        if shared:
            stops.append(f"{name}: {shared[0]}")
    return stops


def require_runnable(name: str, host: Any) -> None:
    """``--backend NAME`` for a command that runs kernels: ``UnsupportedError`` (exit 3, one line, no run folder
    and no crash bundle: an expected condition, not a crash) when this process cannot run that backend's
    kernels on ``host`` (``Backend.runs_kernels``: no NVIDIA GPU or driver, no AMD GPU or ROCm runtime)."""
    problem = backend(name).runs_kernels(host)
    if problem:
        raise UnsupportedError(f"backend {name} is not available here: {problem}",
                               "`tracea doctor` shows what this machine has; leave out --backend to use what runs here, "
                               "or `tracea emit --arch` to build for a GPU that is not here")


def runnable_backends(host: Any) -> list[str]:
    """The backends with at least one variant this host can run (in any of its precisions) whose kernels
    this process can run (``Backend.runs_kernels``: an AMD host without ROCm's runtime has no HIP here)."""
    out = []
    for name in BACKENDS:
        b = backend(name)
        if any(not v.unmet(host, p) for v in b.VARIANTS for p in v.precisions) and b.runs_kernels(host) is None:
            out.append(name)
    return out
