"""One tuning run, end to end: plan the variant, build the space, reuse what the database knows, search
with a strategy over the shared cost function, record every trial, and report the best.

    result = tune(Gemm(512, 512, 512), host, TuneConfig(limits=SearchLimits(budget=20)))

Events for a live view go to ``on_event(kind, data)``: "start", "baseline", "phase", "trial", "done".
``Control`` pauses, resumes and stops a run from another thread (the dashboard's keys).
The run's setup (variant, candidates, evaluator) is made in tuner/run_setup.py, its answer is a
``TuneResult`` (tuner/result.py), and the files each trial goes to besides the database (metrics files,
the run folder) are written by tuner/trial_sinks.py.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections.abc import Callable
from typing import Any

from tracea.doctor.errors import BadInputError, NoSpaceError

from .config import DEFAULT_BUDGET, DEFAULT_PATIENCE, Evaluation, Outputs, SearchLimits, Target, TuneConfig
from .db import DatabaseChangedError, TuningDB, tuning_key
from .result import TuneResult, _best_of
from .run_setup import _Setup, _setup_live, _setup_simulated
from .trial import Measurement, Trial
from .trial_sinks import _Sinks

# TuneResult is re-exported: tracea.tuner.TuneResult (tuner/__init__.py) is read from this module
__all__ = ["DEFAULT_BUDGET", "DEFAULT_PATIENCE", "Control", "Evaluation", "Outputs", "SearchLimits", "Target",
           "TuneConfig", "TuneResult", "tune"]

EventCallback = Callable[[str, dict[str, Any]], None]


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
