"""One tuning run, end to end: plan the variant, build the space, reuse what the database knows, search
with a strategy over the shared cost function, record every trial, and report the best.

    result = tune(Gemm(512, 512, 512), host, TuneConfig(limits=SearchLimits(budget=20)))

Events for a live view go to ``on_event(kind, data)``: "start", "baseline", "phase", "trial", "done".
``Control`` pauses, resumes and stops a run from another thread (the dashboard's keys).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tracea.doctor.errors import BadInputError, NoSpaceError, UnsupportedError

from .config import DEFAULT_BUDGET, DEFAULT_PATIENCE, Evaluation, Outputs, SearchLimits, Target, TuneConfig
from .db import DatabaseChangedError, TuningDB, tuning_key
from .trial import Measurement, Trial, now_iso

__all__ = ["DEFAULT_BUDGET", "DEFAULT_PATIENCE", "Control", "Evaluation", "Outputs", "SearchLimits", "Target",
           "TuneConfig", "TuneResult", "schedule_name", "tune"]

EventCallback = Callable[[str, dict[str, Any]], None]
IMPROVEMENT = 0.005  # a new best must be 0.5 % faster to reset the patience counter


class Control:
    """Thread-safe pause / resume / stop for a running search."""

    def __init__(self) -> None:
        self._running = threading.Event()
        self._running.set()
        self.stopped = False

    def pause(self) -> None:
        self._running.clear()

    def resume(self) -> None:
        self._running.set()

    def stop(self) -> None:
        self.stopped = True
        self._running.set()

    @property
    def paused(self) -> bool:
        return not self._running.is_set()

    def wait_if_paused(self) -> None:
        self._running.wait()


@dataclass
class TuneResult:
    op: Any
    variant: str
    backend: str
    key: str
    fingerprint: str
    strategy: str
    space_size: int
    run_id: int | None
    reused: bool
    trials: list[Trial]  # evaluated by this run (resumed: the run's earlier trials too)
    best: dict[str, Any] | None  # the best verified trial under the key: schedule, name, p50_ms, ...
    baseline: dict[str, Any] | None
    stop_reason: str
    elapsed_s: float
    db_path: str
    simulated: bool = False
    run_dir: str | None = None
    pruned: list[str] = field(default_factory=list)  # candidates the bank-conflict rule dropped, with why

    @property
    def best_tflops(self) -> float | None:
        return self.op.flops / (self.best["p50_ms"] * 1e-3) / 1e12 if self.best else None

    @property
    def ratio(self) -> float | None:
        """Baseline time / best time (> 1: the tuned kernel is faster than the vendor library); from the
        final interleaved timing of the two where the run made one."""
        base = self.baseline or {}
        b = base.get("p50_ms")
        if b and base.get("tracea_p50_ms"):
            return b / base["tracea_p50_ms"]
        return b / self.best["p50_ms"] if b and self.best else None

    def to_json(self) -> dict[str, Any]:
        counts: dict[str, int] = {}
        for t in self.trials:
            counts[t.measurement.status] = counts.get(t.measurement.status, 0) + 1
        return {
            "schema_version": 1, "op": self.op.to_json(), "variant": self.variant, "backend": self.backend,
            "key": self.key, "env_fingerprint": self.fingerprint, "strategy": self.strategy,
            "space_size": self.space_size, "run_id": self.run_id, "reused": self.reused, "simulated": self.simulated,
            "evaluated": len(self.trials), "statuses": counts, "stop_reason": self.stop_reason,
            "elapsed_s": round(self.elapsed_s, 3), "best": self.best, "best_tflops": self.best_tflops,
            "baseline": self.baseline, "ratio_to_baseline": self.ratio, "database": self.db_path,
            "run_dir": self.run_dir, "pruned_bank_conflicts": self.pruned, "trials": [t.to_json() for t in self.trials],
        }


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


def _best_of(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    ok = [r for r in rows if r["status"] == "ok" and r.get("p50_ms") is not None]
    if not ok:
        return None
    b = min(ok, key=lambda r: r["p50_ms"])
    sched = b["schedule"] if isinstance(b["schedule"], dict) else json.loads(b["schedule"])
    return {"name": b["name"], "schedule": sched, "p50_ms": b["p50_ms"], "p95_ms": b.get("p95_ms"),
            "rel_err": b.get("rel_err"), "trial_id": b.get("id")}


def tune(op: Any, host: Any, config: TuneConfig, on_event: EventCallback | None = None,
         control: Control | None = None, lane: Any = None) -> TuneResult:
    """Run (or resume, or reuse) a tuning search for ``op``; see the module docstring. ``lane``: a suite's
    Ray lane (tuner/ray_lanes.py) to evaluate on alone, ``host`` then being its node's report."""
    t_start = time.monotonic()
    emit = on_event or (lambda kind, data: None)
    control = control or Control()
    setup = _setup_simulated(op, config) if config.target.simulate else _setup_live(op, host, config)
    if config.target.simulate and config.outputs.db_path is None:
        db = TuningDB(":memory:")  # a replay never touches this machine's database
    else:
        db = TuningDB(config.outputs.db_path)
    key = tuning_key(setup.op.signature, setup.variant, setup.fingerprint)
    limits = _with_budget(config.limits, len(setup.schedules))
    base = dict(op=setup.op, variant=setup.variant, backend=setup.backend, key=key, fingerprint=setup.fingerprint,
                strategy=limits.strategy, space_size=len(setup.schedules), db_path=str(db.path),
                simulated=setup.simulated, pruned=setup.pruned)
    reused = _reuse(db, key, limits, base, t_start)
    if reused is not None:  # a stored best under this exact key: evaluate nothing
        emit("done", {"result": reused})
        db.close()
        return reused
    ev = config.evaluation
    pool = None  # made before the run is opened: a bad --workers or --cluster leaves no run behind
    if lane is not None:
        from .ray_pool import RayPool

        lane.ensure()
        pool = RayPool.on_lane(lane, setup.evaluator_factory)
    elif ev.lane is not None:
        setup, pool = _in_lane(setup, ev, host)
    elif ev.workers != 1 or ev.cluster is not None:
        pool = make_pool(setup.evaluator_factory, setup.backend, ev.workers, ev.cluster, host, setup.simulated,
                         setup.environment)
    try:
        run_id, resumed, limits = _open_run(db, key, setup, config, limits)
    except BaseException:
        if pool is not None:
            pool.close()
        db.close()
        raise
    run = _Run(setup, db, key, run_id, emit, control, pool)
    try:
        search, baseline = run.search(limits, resumed, config.outputs, host)
        best = _best_of(db.trials(key))
    finally:
        db.close()  # on every way out: nothing of this process's connection outlives the tune
    result = TuneResult(**base, run_id=run_id, reused=False, trials=search.trials, best=best, baseline=baseline,
                        stop_reason=run.stop_reason, elapsed_s=time.monotonic() - t_start,
                        run_dir=str(run.sink.run.path) if run.sink.run else None)
    run.sink.finish("ok" if best else "error", result)
    emit("done", {"result": result})
    return result


def _with_budget(limits: SearchLimits, n: int) -> SearchLimits:
    """``limits`` with a number for the budget: the one given, else the space (exhaustive) or at most
    DEFAULT_BUDGET."""
    budget = limits.budget if limits.budget is not None else (n if limits.strategy == "exhaustive" else
                                                              min(n, DEFAULT_BUDGET))
    if budget <= 0:
        raise BadInputError(f"--budget: expected a positive number of evaluations, got {budget}")
    return dataclasses.replace(limits, budget=budget)


def _reuse(db: TuningDB, key: str, limits: SearchLimits, base: dict[str, Any], t_start: float) -> TuneResult | None:
    """The result of the last finished run under ``key`` when it has a verified best and neither --resume
    nor --retune asks for a search."""
    latest = db.latest_run(key)
    if (limits.resume or limits.retune) or latest is None or latest["state"] not in ("done", "stopped"):
        return None
    best = _best_of(db.trials(key))
    if best is None:
        return None
    return TuneResult(**base, run_id=latest["id"], reused=True, trials=[], best=best,
                      baseline=json.loads(latest["baseline"]) if latest.get("baseline") else None,
                      stop_reason="reused the stored best (--retune searches again)",
                      elapsed_s=time.monotonic() - t_start)


def _open_run(db: TuningDB, key: str, setup: _Setup, config: TuneConfig,
              limits: SearchLimits) -> tuple[int, dict[str, Any] | None, SearchLimits]:
    """The run to record into: the latest unfinished one (--resume, with its budget unless one was given),
    else a new one; and the limits it runs under."""
    resumed = db.latest_run(key, ("running", "stopped", "interrupted")) if limits.resume else None
    if resumed is not None:
        if config.limits.budget is None:
            limits = dataclasses.replace(limits, budget=int(resumed["budget"] or limits.budget))
        return int(resumed["id"]), resumed, limits
    run_id = db.start_run(key=key, op=setup.op, variant=setup.variant, backend=setup.backend,
                          fingerprint=setup.fingerprint, environment=setup.environment,
                          strategy=limits.strategy, seed=limits.seed, budget=limits.budget,
                          space_size=len(setup.schedules),
                          options={"time_limit_s": limits.time_limit_s, "patience": limits.patience,
                                   "space_file": config.target.space_file, "simulate": config.target.simulate})
    return run_id, None, limits


class _Run:
    """One run's search, once its database row exists: what the key already knows, the baseline, the
    search itself and the final interleaved timing, each trial recorded as it comes."""

    def __init__(self, setup: _Setup, db: TuningDB, key: str, run_id: int, emit: EventCallback,
                 control: Control, pool: Any = None) -> None:
        self.setup, self.db, self.key, self.run_id = setup, db, key, run_id
        self.pool = pool  # several workers (tuner/pool.py), or None: one evaluator
        self.emit, self.control = emit, control
        self.stop_reason = ""
        self.sink: _Sinks  # set when the search starts (after the strategy is made, as the run folder is)

    def known(self) -> tuple[dict[int, float | None], list[Trial]]:
        """What this key already knows (every run, every process): observed, never evaluated again; and
        this run's own trials so far (a resumed run)."""
        from .recorded import schedule_key

        schedules = self.setup.schedules
        index_of = {schedule_key(s): i for i, s in enumerate(schedules)}
        observed: dict[int, float | None] = {}
        run_trials: list[Trial] = []
        for r in self.db.trials(self.key):
            i = index_of.get(r["schedule_key"])
            if i is None:
                continue
            m = Measurement.from_json(r)
            observed[i] = m.p50_ms if m.ok else None
            if r["run_id"] == self.run_id:
                run_trials.append(Trial(i, schedules[i], r["name"], m, r["seconds"] or 0.0, r["created"]))
        return observed, run_trials

    def set_baseline(self, baseline: dict[str, Any] | None, store: bool = True) -> None:
        if store:
            self.db.set_baseline(self.run_id, baseline)
        self.sink.baseline = baseline
        self.emit("baseline", {"baseline": baseline})

    def search(self, limits: SearchLimits, resumed: dict[str, Any] | None, outputs: Outputs,
               host: Any) -> tuple[Any, dict[str, Any] | None]:
        """The search and its baselines; on any exception the run is closed as interrupted (or its trials'
        other home named) and the run folder records the crash."""
        from .space import encode
        from .strategies import make_strategy

        setup = self.setup
        observed, run_trials = self.known()
        strategy = make_strategy(limits.strategy, encode(setup.schedules, setup.features), limits.seed,
                                 n_hero=int(limits.hero_first))
        self.sink = sink = _Sinks(outputs, setup, host)
        evaluator = self.pool if self.pool is not None else setup.evaluator_factory()
        try:
            baseline = json.loads(resumed["baseline"]) if resumed and resumed.get("baseline") else None
            self.emit("start", {
                "op": setup.op, "variant": setup.variant, "backend": setup.backend,
                "space_size": len(setup.schedules), "budget": limits.budget, "strategy": limits.strategy,
                "known": len(observed), "run_id": self.run_id, "resumed": resumed is not None,
                "names": setup.names, "simulated": setup.simulated, "pruned": len(setup.pruned),
                "workers": getattr(self.pool, "size", 1), "ray": type(self.pool).__name__ == "RayPool"})
            if baseline is None:
                self.emit("phase", {"index": None, "name": "baseline", "phase": "baseline"})
                baseline = evaluator.baseline(
                    on_phase=lambda p: self.emit("phase", {"index": None, "name": "baseline", "phase": p}))
                self.db.set_baseline(self.run_id, baseline)
            self.set_baseline(baseline, store=False)
            search = self.run_search(strategy, evaluator, observed, run_trials, limits)
            baseline = self.final(evaluator, search, baseline)
            self.db.finish_run(self.run_id, "stopped" if self.control.stopped else "done")
        except BaseException as exc:
            _close_db_run(self.db, self.run_id, exc, sink)
            sink.crash(exc)
            raise
        finally:
            evaluator.close()
        return search, baseline

    def run_search(self, strategy: Any, evaluator: Any, observed: dict[int, float | None],
                   run_trials: list[Trial], limits: SearchLimits) -> Any:
        from .parallel import ParallelSearch
        from .search import Search

        kind = Search if self.pool is None else ParallelSearch
        search = kind(strategy, evaluator, self.setup.schedules, self.setup.names, observed, run_trials, limits,
                        control=self.control, emit=self.emit,
                        record=lambda t: (self.db.add_trial(self.run_id, self.key, t), self.sink.trial(t)))
        self.stop_reason = search.run()
        return search

    def final(self, evaluator: Any, search: Any, baseline: dict[str, Any] | None) -> dict[str, Any] | None:
        """The ratio comes from the best and the baseline timed interleaved (same conditions, as in
        `tracea bench`), not from the baseline alone at the start while a neighbour may have been busy."""
        best_now = _best_of(self.db.trials(self.key))
        if self.setup.simulated or not search.trials or best_now is None:
            return baseline
        self.emit("phase", {"index": None, "name": best_now["name"], "phase": "baseline"})
        final = _final_baseline(evaluator, best_now, baseline, self.emit)
        if final is None:
            return baseline
        self.set_baseline(final)
        return final


def make_pool(factory: Callable[..., Any], backend: str, workers: int, cluster: str | None, host: Any,
              simulated: bool = False, environment: dict[str, Any] | None = None) -> Any:
    """``workers`` members: Ray actors with ``cluster``, else local ones with a GPU or a core set each (a
    replayed space needs neither)."""
    from .pool import LocalPool, member_envs

    if workers < 1:
        raise BadInputError(f"--workers: expected a positive number, got {workers}")
    if cluster is not None:
        from .ray_pool import RayPool

        return RayPool(factory, workers, cluster, None if simulated else backend, None if simulated else environment)
    envs: list[dict[str, str] | None] = [None] * workers if simulated else list(member_envs(backend, workers, host))
    return LocalPool([(lambda e=e: factory(worker_env=e)) for e in envs])


def _in_lane(setup: _Setup, ev: Any, host: Any) -> tuple[_Setup, Any]:
    """A run on lane ``ev.lane`` of ``ev.workers`` members alone (a suite tunes its problems side by side):
    the serial search with the lane's one member's worker environment (its GPU, its cores), or, where a
    lane owns several members (more workers than problems), a pool of them. On Ray a suite's lanes are
    actors of tuner/ray_lanes.py instead (``tune(..., lane=)``)."""
    first, n = ev.lane * ev.lane_members, ev.lane_members
    if ev.lane < 0 or n < 1 or first + n > ev.workers:
        raise BadInputError(f"lane {ev.lane} of {n} members does not fit {ev.workers} workers")
    from .pool import LocalPool, member_envs

    envs = [None] * n if setup.simulated else member_envs(setup.backend, ev.workers, host)[first:first + n]
    make = setup.evaluator_factory
    if n == 1:
        return dataclasses.replace(setup, evaluator_factory=lambda worker_env=None: make(worker_env=envs[0])), None
    return setup, LocalPool([(lambda e=e: make(worker_env=e)) for e in envs])


def _final_baseline(evaluator: Any, best: dict[str, Any], start: dict[str, Any] | None,
                    emit: EventCallback) -> dict[str, Any] | None:
    """The best and the baseline timed interleaved, taken again while it disagrees with itself (a wide
    spread) or with what this run measured before (the baseline at the start, the best during the search);
    if it never settles, a baseline without a time, whose reason says why: no ratio is made from it."""
    from tracea.emitters.stability import drift_problem, measure_stable, spread_problem

    def problem(f: dict[str, Any] | None) -> str | None:
        if not f or not f.get("p50_ms") or not f.get("tracea_p50_ms"):
            return None  # no final timing (an error or no baseline): nothing to check
        return (spread_problem({f.get("name") or "the baseline": f,
                                "the best": {"p50_ms": f["tracea_p50_ms"], "p95_ms": f.get("tracea_p95_ms")}})
                or drift_problem("the baseline", (start or {}).get("p50_ms"), f["p50_ms"])
                or drift_problem("the best candidate", best.get("p50_ms"), f["tracea_p50_ms"]))

    on_phase = lambda p: emit("phase", {"index": None, "name": best["name"], "phase": p})  # noqa: E731
    final, unstable = measure_stable(lambda: evaluator.final(best["schedule"], on_phase=on_phase), problem)
    if unstable and final is not None:
        return {"name": final.get("name"), "unstable": True, "reason": f"the final timing was {unstable}",
                "rel_err": final.get("rel_err"), "start_p50_ms": (start or {}).get("p50_ms"),
                "last": {k: final.get(k) for k in ("p50_ms", "p95_ms", "tracea_p50_ms", "tracea_p95_ms")}}
    return final


def _close_db_run(db: TuningDB, run_id: int, exc: BaseException, sink: _Sinks) -> None:
    """Mark the run interrupted in the database, unless the database is what failed: then say where this
    run's trials are kept instead (the run folder), and leave the database alone."""
    import sqlite3

    if isinstance(exc, (DatabaseChangedError, NoSpaceError)):  # the database is what failed: leave it alone
        kept = [str(sink.run.trials_path)] if sink.run is not None else []
        kept += [str(w.path) for w in sink.writers if str(w.path) not in kept]
        where = ("this run's trials are kept in " + ", ".join(kept) if kept else
                 "this run's trials were not kept elsewhere (no run folder or metrics file)")
        exc.hint = f"{exc.hint}; {where}" if isinstance(exc, NoSpaceError) and exc.hint else where
        return
    try:
        db.finish_run(run_id, "interrupted")
    except (DatabaseChangedError, sqlite3.Error) as again:  # the original exception is the one to report
        import sys

        sys.stderr.write(f"warning: could not mark tuning run {run_id} interrupted: {again}\n")


class _Sinks:
    """Where each trial goes besides the database: --jsonl/--csv metrics files and the run folder."""

    def __init__(self, outputs: Outputs, setup: _Setup, host: Any) -> None:
        from tracea.reports.metrics import MetricsWriter

        self.setup = setup
        self.baseline: dict[str, Any] | None = None
        self.writers = [MetricsWriter(p) for p in outputs.metrics_files]
        self.run = None
        if outputs.run_folder and not setup.simulated:
            # HOOK(reports): the run folder of this tune run (reports/runs.py); trials.jsonl + metrics.jsonl
            from tracea.reports.runs import start_run

            self.run = start_run("tune", outputs.argv, host)
            self.writers.append(MetricsWriter(self.run.metrics_path))

    def row(self, t: Trial) -> Any:
        from tracea.reports.metrics import MetricsRow

        op, m = self.setup.op, t.measurement
        shape = {k: v for k, v in op.to_json().items() if k not in ("op", "schema_version", "dtype")}
        secs = m.p50_ms * 1e-3 if m.ok else None
        b = self.baseline or {}
        return MetricsRow(
            timestamp=t.timestamp, op=op.kind, shape=json.dumps(shape, sort_keys=True), dtype=op.dtype.value,
            backend=self.setup.backend, variant=self.setup.variant, schedule=json.dumps(t.schedule, sort_keys=True),
            status=m.status, p50_ms=m.p50_ms, p95_ms=m.p95_ms, tflops=op.flops / secs / 1e12 if secs else None,
            gbps=op.bytes / secs / 1e9 if secs else None, rel_err=m.rel_err, baseline=b.get("name"),
            baseline_p50_ms=b.get("p50_ms"), ratio=b["p50_ms"] / m.p50_ms if secs and b.get("p50_ms") else None,
            env_fingerprint=self.setup.fingerprint, note=b.get("reason") if b.get("unstable") else b.get("note"))

    def trial(self, t: Trial) -> None:
        """The trial in the metrics files and the run folder (after the database: the source of truth)."""
        from tracea.doctor.files import is_no_space, no_space

        row = self.row(t)
        try:
            for w in self.writers:
                w.write(row)
            if self.run is not None:
                with open(self.run.trials_path, "a") as f:
                    f.write(json.dumps(t.to_json()) + "\n")
        except OSError as exc:
            if not is_no_space(exc):
                raise
            where = exc.filename or (self.run.path if self.run is not None else ".")
            raise no_space(where, f"trial {t.index} is in the tuning database, but not in the run folder or metrics "
                           "files") from None

    def crash(self, exc: BaseException) -> None:
        """The search raised: the run folder keeps the traceback and is marked "error" ("interrupted" for
        Ctrl-C), and, unless the input was bad or the host cannot do what was asked (``UnsupportedError``: no
        such GPU or compiler, a full disk), a crash bundle is written and its path printed."""
        if self.run is None:
            return
        import traceback

        from tracea.reports.record import crash_bundle

        interrupted = isinstance(exc, KeyboardInterrupt)
        try:
            self.run.add_file("log.txt", "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
            self.run.finish("interrupted" if interrupted else "error", f"{type(exc).__name__}: {exc}")
            if not interrupted and not isinstance(exc, (BadInputError, DatabaseChangedError, UnsupportedError)):
                crash_bundle(self.run)
        except OSError as again:  # a full disk: the exception being raised is the one to report
            import sys

            sys.stderr.write(f"warning: the run folder {self.run.path} could not record the error ({again})\n")

    def finish(self, status: str, result: TuneResult | None) -> None:
        if self.run is None:
            return
        if result is not None:
            self.run.add_json("result.json", {k: v for k, v in result.to_json().items() if k != "trials"})
            self.run.record(best=result.best, tuning_key=result.key, finished=now_iso())
        self.run.finish(status)
