"""What a tuning run is asked to do, in four groups by who reads them: the target (what is tuned, from which
candidates; the run's set-up), the evaluation (how each candidate is measured; the evaluator), the search
limits (how the search goes and when it stops; the strategy and ``Search``) and the outputs (where results
go besides the return value).

    TuneConfig(target=Target(backend="cpu"), limits=SearchLimits(budget=20, seed=1))

Each group is a frozen value: a caller that must change one field makes a new one (``dataclasses.replace``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

DEFAULT_BUDGET = 60
DEFAULT_PATIENCE = 40


@dataclass(frozen=True)
class Target:
    """The kernel to tune and the candidates to try; read once, while the run is set up."""

    backend: str | None = None  # None: the backend of the planner's first choice on this host
    precision: str | None = None
    variant: str | None = None  # tune this variant instead of the planner's choice
    module: str | None = None  # a backend module outside the registry (test backends, plug-ins)
    space_file: str | None = None
    space_filter: Callable[[Any], bool] | None = None  # Python callers: keep only these candidates (hero kept)
    simulate: str | None = None  # a recorded complete space to replay instead of running kernels


@dataclass(frozen=True)
class Evaluation:
    """How one candidate (and the vendor baseline) is measured; the evaluator's settings."""

    warmup: int = 2
    repeats: int = 10
    min_seconds: float = 0.1
    timeout_s: float = 60.0  # per candidate; the worker is killed past it
    compile_ahead: bool = True  # a second worker builds upcoming candidates while one is timed
    quiet_timing: bool = False  # the worker waits before each timing until the "run" phase event returned
    simulate_delay_s: float = 0.0  # a replayed answer's cost (--simulate)
    workers: int = 1  # candidates evaluated at once (tuner/pool.py): a GPU each, or a set of cores each
    cluster: str | None = None  # Ray: "local" (a private instance), "auto" or an address; None: local processes
    lane: int | None = None  # this run evaluates on lane ``lane`` of the ``workers``-way division alone (a
    # suite's problems side by side); None: on all of the members
    lane_members: int = 1  # members a lane owns: lane i has members i * lane_members .. + lane_members - 1


@dataclass(frozen=True)
class SearchLimits:
    """How the search proceeds and when it stops; ``resume`` / ``retune`` say how it starts from what the
    database already knows."""

    strategy: str = "bayes"
    seed: int = 0  # the strategy's and the inputs' random numbers
    hero_first: bool = True  # False: the strategy starts without the hero (to compare search alone)
    budget: int | None = None  # evaluations in this run (default: DEFAULT_BUDGET, or the space for exhaustive)
    time_limit_s: float | None = None
    patience: int | None = DEFAULT_PATIENCE  # stop after this many evaluations without a 0.5 % gain; None: off
    resume: bool = False
    retune: bool = False


@dataclass(frozen=True)
class Outputs:
    """Where the run's results go: the database, the reports run folder, metrics files, IR dumps."""

    db_path: str | None = None  # None: the user's database (a replay: in memory)
    argv: list[str] = field(default_factory=list)  # the command line, for the run folder
    run_folder: bool = False  # a reports run folder (metrics, trials, result) for this run
    metrics_files: list[str] = field(default_factory=list)  # --jsonl / --csv
    dump_ir: str | None = None  # every candidate's kernel stages (reports/irdump.py), written by the worker


@dataclass(frozen=True)
class TuneConfig:
    target: Target = field(default_factory=Target)
    evaluation: Evaluation = field(default_factory=Evaluation)
    limits: SearchLimits = field(default_factory=SearchLimits)
    outputs: Outputs = field(default_factory=Outputs)
