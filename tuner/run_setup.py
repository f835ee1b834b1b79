"""A run's setup (``_Setup``): the variant the planner picks for the op, its candidate schedules with their
names and model features, and the factory of the evaluator that times them, live on this host
(``_setup_live``) or replaying a recorded space (``_setup_simulated``); ``schedule_name`` labels a schedule."""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tracea.doctor.errors import BadInputError, UnsupportedError

from .config import TuneConfig


def schedule_name(backend: str, schedule: dict[str, Any]) -> str:
    """The schedule's own short name where its class is importable, else a compact field list."""
    try:
        from tracea.emitters import registry

        return registry.backend(backend).schedule_from_json(schedule).name
    except Exception:  # noqa: BLE001 - a label only
        pass
    return ",".join(f"{k}={v}" for k, v in schedule.items() if k not in ("schema_version", "backend"))


@dataclass
class _Setup:
    op: Any
    variant: str
    backend: str
    fingerprint: str
    environment: dict[str, Any]
    schedules: list[dict[str, Any]]
    names: list[str]
    evaluator_factory: Callable[..., Any]  # (worker_env=None) -> an evaluator
    simulated: bool
    pruned: list[str] = field(default_factory=list)
    features: Callable[[dict[str, Any]], dict[str, float]] | None = None  # the backend's tuning_features


def _features(module: Any, op: Any) -> Callable[[dict[str, Any]], dict[str, float]] | None:
    fn = getattr(module, "tuning_features", None)
    return None if fn is None else (lambda s: fn(op, s))


def _setup_simulated(op: Any, config: TuneConfig) -> _Setup:
    from tracea.kernels import Op

    from .evaluate import SimulatedEvaluator
    from .recorded import load_recorded

    simulate = config.target.simulate
    rec = load_recorded(simulate)  # type: ignore[arg-type]
    recorded_op = Op.from_json(rec.op)
    if op is not None and op.signature != recorded_op.signature:
        raise BadInputError(f"--simulate: {simulate} recorded {recorded_op.signature}, not {op.signature}",
                            "give the recorded shape, or no shape flags beyond the required ones match it")
    digest = hashlib.sha256(Path(rec.path).read_bytes()).hexdigest()[:16]
    return _Setup(op=recorded_op, variant=rec.variant, backend=rec.backend, fingerprint=f"simulated-{digest}",
                  environment={"simulated": rec.path, "device": rec.device}, schedules=rec.schedules,
                  names=[schedule_name(rec.backend, s) for s in rec.schedules],
                  evaluator_factory=lambda worker_env=None: SimulatedEvaluator(rec, config.evaluation.simulate_delay_s),
                  simulated=True,
                  features=_features(_backend_or_none(rec.backend), recorded_op))


def _backend_or_none(backend: str) -> Any:
    """The backend's module for its model features, when this install has it (a recorded space of a
    backend that is not here still replays, on the schedule fields alone)."""
    from tracea.emitters import registry

    try:
        return registry.backend(backend)
    except (UnsupportedError, ImportError):
        return None


def _setup_live(op: Any, host: Any, tune_config: TuneConfig) -> _Setup:
    """The planner's variant of ``op`` on this host (or the one named), its candidates and a live evaluator."""
    import importlib

    from tracea.doctor.plan import plan
    from tracea.emitters import registry
    from tracea.emitters.registry import environment, fingerprint

    from .evaluate import LiveEvaluator
    from .space import build_space

    config = tune_config.target
    evaluation, seed, dump_ir = tune_config.evaluation, tune_config.limits.seed, tune_config.outputs.dump_ir
    if config.backend is None and not config.module:
        config = dataclasses.replace(config, backend=registry.default_backend(op, host, config.precision)[0])
    if config.module:
        module_name = config.module
        mod = importlib.import_module(module_name)
        variants = list(mod.VARIANTS)
        if config.backend is None:  # a plug-in module's own backend
            config = dataclasses.replace(config, backend=variants[0].backend)
    else:
        module_name = registry.BACKENDS.get(config.backend) or ""
        mod = registry.backend(config.backend)
        variants = registry.all_variants(config.backend)
    if config.variant:
        chosen = [v for v in variants if v.id == config.variant]
        if not chosen:
            raise BadInputError(f"--variant: no {config.backend} variant {config.variant!r}; known: "
                                f"{', '.join(v.id for v in variants)}")
        variants = chosen
    decision = plan(op, host, variants, precision=config.precision, backend=config.backend)
    variant_id = decision.require()
    op = decision.planned_op(op)
    variant = next(v for v in variants if v.id == variant_id)
    pruned: list[str] = []
    cands = build_space(op, variant, host, mod, config.space_file, pruned=pruned)
    if config.space_filter is not None:
        cands = cands[:1] + [s for s in cands[1:] if config.space_filter(s)]
    fair = mod.pool_filter(host, evaluation.workers) if evaluation.workers > 1 else None
    if fair is not None:  # several workers share this machine: only what each can time uncrowded
        kept = [s for s in cands if fair(s)]
        if not kept:
            raise BadInputError(f"--workers {evaluation.workers}: no candidate fits one worker's share of this "
                                "machine", "fewer --workers")
        cands = kept
    schedules = [s.to_json() for s in cands]
    # pool members build their own candidate: nothing is proposed ahead of them to compile; a lane of a
    # suite keeps compiling ahead where its member owns a whole device (no core share to crowd)
    alone = evaluation.workers == 1 or (evaluation.lane is not None and evaluation.lane_members == 1 and fair is None)
    member_evaluation = evaluation if alone and (evaluation.cluster is None or evaluation.lane is not None) else \
        dataclasses.replace(evaluation, compile_ahead=False)
    return _Setup(
        op=op, variant=variant_id, backend=config.backend, fingerprint=fingerprint(host, config.backend),
        environment=environment(host, config.backend), schedules=schedules, names=[s.name for s in cands],
        evaluator_factory=lambda worker_env=None: LiveEvaluator(
            op, variant_id, module_name, host, member_evaluation, seed=seed, dump_ir=dump_ir, worker_env=worker_env),
        simulated=False, pruned=pruned, features=_features(mod, op))
