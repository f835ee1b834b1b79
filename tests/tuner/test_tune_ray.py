"""`tracea tune --workers 2 --cluster ...` on a private local Ray instance started by the test (issue 20): the
same best as the serial run on a recorded space, and on a real small CPU GEMM every candidate measured and
the fastest kept; one worker killed mid-run loses no trial; the command line against a cluster of the test's own started
with `ray start --head`. Every Ray process and folder a test starts is its own and ends with it. Skipped
without Ray (`pip install 'tracea[cluster]'`)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # no usage report from a test run
ray = pytest.importorskip("ray")

# one pytest-xdist worker runs the whole module: one Ray instance at a time, the module's own
pytestmark = pytest.mark.xdist_group("ray")

from test_tune_workers import SPREAD_SPACE, check_timed_runs  # noqa: E402 - tests/tuner/ is on the path

from tracea.tuner.config import Outputs, SearchLimits  # noqa: E402
from tracea.tuner.run import Evaluation, Target, TuneConfig, tune  # noqa: E402

SPACES = Path(__file__).parents[1] / "fixtures" / "spaces"
SPACE = SPACES / "cpu_gemm_512_avx512.json"


def _short_temp() -> Path:
    """A folder of this test's own for Ray's session files, in the run's temporary folder (conftest.py)
    where its name is short enough: Ray's socket paths below it (a session folder of 40 characters, then
    sockets/plasma_store) must stay under 108 bytes. Else in /tmp."""
    import tempfile

    base = tempfile.gettempdir()
    return Path(tempfile.mkdtemp(prefix="r", dir=base if len(base) <= 40 else "/tmp"))


@pytest.fixture(scope="module")
def local_ray():
    """A private local Ray instance (2 CPUs) for this module, as `ray start --head` would give: started
    here (``address="local"`` never joins a cluster that RAY_ADDRESS or /tmp/ray names, a user's own
    included), its session files in a folder of its own, both gone afterwards. Ray ties its processes'
    lives to this one's, so a run killed halfway leaves none behind."""
    temp = _short_temp()
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False,
             _temp_dir=str(temp))
    try:
        yield ray
    finally:
        ray.shutdown()
        shutil.rmtree(temp, ignore_errors=True)


def _simulated(workers: int, cluster: str | None, strategy: str = "exhaustive", budget: int | None = None,
               delay: float = 0.0, on_event=None):
    cfg = TuneConfig(Target(simulate=str(SPACE)),
                     evaluation=Evaluation(workers=workers, cluster=cluster, simulate_delay_s=delay),
                     limits=SearchLimits(strategy=strategy, budget=budget, seed=3, patience=None))
    return tune(None, None, cfg, on_event=on_event)


def test_a_recorded_space_on_two_ray_workers_finds_the_serial_best(local_ray):
    serial = _simulated(1, None)
    par = _simulated(2, "auto")
    assert par.best["schedule"] == serial.best["schedule"]
    assert len(par.trials) == len(serial.trials) == serial.space_size
    bayes_serial, bayes_par = _simulated(1, None, "bayes", 30), _simulated(2, "auto", "bayes", 30)
    assert len(bayes_par.trials) == 30 and bayes_par.best["p50_ms"] <= bayes_serial.best["p50_ms"] * 1.02


def test_a_worker_killed_mid_run_loses_no_trial(local_ray):
    """After the third result, one member's actor is killed: its candidate in flight goes back to the search
    and a new actor takes the member's place; every candidate of the budget is recorded, none as failed."""
    killed: list[str] = []

    def on_event(kind, data):
        if kind == "trial" and data["done"] == 3 and not killed:
            names = [a for a in ray.util.list_named_actors(all_namespaces=True)
                     if a["name"] == "tracea-member-1"]
            actor = ray.get_actor("tracea-member-1", namespace=names[-1]["namespace"])
            killed.append(names[-1]["namespace"])
            threading.Thread(target=ray.kill, args=(actor,)).start()

    r = _simulated(2, "auto", "random", 24, delay=0.15, on_event=on_event)
    assert killed
    assert len(r.trials) == 24 and all(t.measurement.ok for t in r.trials), [t.measurement for t in r.trials]
    assert len({json.dumps(t.schedule, sort_keys=True) for t in r.trials}) == 24


def test_a_real_cpu_gemm_on_two_ray_workers_measures_every_candidate_and_keeps_its_fastest(local_ray, tmp_path):
    """As test_tune_workers.py's real GEMM, on Ray actors (test_tune_workers.check_timed_runs)."""
    from tracea.doctor import probe
    from tracea.kernels import Gemm

    space = tmp_path / "space.toml"
    space.write_text(SPREAD_SPACE)
    host, runs = probe(), []
    for workers, cluster in ((1, None), (2, "auto")):
        cfg = TuneConfig(Target(backend="cpu", space_file=str(space)),
                         evaluation=Evaluation(workers=workers, cluster=cluster, repeats=20, warmup=3),
                         limits=SearchLimits(strategy="exhaustive", retune=True),
                         outputs=Outputs(db_path=str(tmp_path / f"{workers}.sqlite")))
        runs.append(tune(Gemm(256, 256, 256), host, cfg))
    check_timed_runs(*runs)


def test_suite_lanes_on_ray_store_each_result_under_the_node_s_kind(local_ray, tmp_path):
    """Two real CPU problems on two lane actors (disjoint cores): the cluster's one kind of machine is this
    machine (the node's own report, as a process there sees it), both problems measure every candidate
    (verified) and keep the fastest they measured, and each result is stored under the key a plain local
    tune looks up (it is reused)."""
    from tracea.doctor import probe
    from tracea.emitters.registry import fingerprint
    from tracea.kernels import Gemm
    from tracea.tune_lanes import Job, run_ray_lanes
    from tracea.tuner.ray_lanes import RayLanes

    space = tmp_path / "space.toml"
    space.write_text(SPREAD_SPACE)
    db = str(tmp_path / "suite.sqlite")
    lanes = RayLanes(2, "cpu")
    try:
        assert list(lanes.kinds) == [fingerprint(probe(), "cpu")]
        assert {ln.kind for ln in lanes.lanes} == set(lanes.kinds)
        assert not set(lanes.lanes[0].cpus) & set(lanes.lanes[1].cpus) and all(ln.cpus for ln in lanes.lanes)
        kind = next(iter(lanes.kinds))
        jobs = [Job((i, 0), f"p{i}", Gemm(m, 256, 256), _cpu_config(space, db), kind=kind, machine="here")
                for i, m in enumerate((256, 192))]
        rows = run_ray_lanes(jobs, lanes, quiet=True, row=lambda label, op, r: {
            "problem": label, "best": r.best["p50_ms"], "ok": [t.measurement.ok for t in r.trials], "key": r.key,
            "fastest": min(t.measurement.p50_ms for t in r.trials)})
        assert [ln.actor is not None for ln in lanes.lanes] == [True, True]  # kept for the next problem
    finally:
        lanes.close()
    assert sorted(r["lane"] for r in rows.values()) == [0, 1]
    assert all(r["ok"] == [True, True] and r["best"] == r["fastest"] and r["fingerprint"] == kind for r in rows.values())
    again = tune(Gemm(256, 256, 256), probe(), _cpu_config(space, db, retune=False))
    assert again.reused and again.key == rows[(0, 0)]["key"]


def _cpu_config(space, db, retune=True):
    return TuneConfig(Target(backend="cpu", space_file=str(space)),
                      evaluation=Evaluation(workers=2, cluster="auto", repeats=20, warmup=3),
                      limits=SearchLimits(strategy="exhaustive", retune=retune), outputs=Outputs(db_path=db))


def test_a_lane_actor_killed_mid_suite_loses_no_trial_and_the_lane_goes_on(local_ray):
    """Three replayed problems on two lanes; lane 1's actor is killed after its third result: its candidate
    goes back to that problem's search, a new actor takes the lane, and the lane takes its next problem."""
    from tracea.kernels import Op
    from tracea.tune_lanes import Job, run_ray_lanes
    from tracea.tuner.ray_lanes import RayLanes
    from tracea.tuner.recorded import load_recorded

    spaces = sorted(SPACES.glob("*.json"))[:3]
    lanes = RayLanes(2, "cpu")
    kind = next(iter(lanes.kinds))
    killed: list[int] = []
    done = {"n": 0}

    def row(label, op, r):
        return {"problem": label, "trials": len(r.trials), "ok": all(t.measurement.ok for t in r.trials),
                "distinct": len({json.dumps(t.schedule, sort_keys=True) for t in r.trials})}

    def watch():
        import time

        while not killed and done["n"] < 100:
            time.sleep(0.1)
            done["n"] += 1
            if done["n"] == 15:  # about 1.5 s in: a few answers of 0.15 s each on both lanes
                killed.append(lanes.lanes[1].actor)
                ray.kill(killed[0])

    jobs = []
    for i, space in enumerate(spaces):
        cfg = TuneConfig(Target(simulate=str(space)), evaluation=Evaluation(workers=2, cluster="auto",
                                                                            simulate_delay_s=0.15),
                         limits=SearchLimits(strategy="random", budget=12, seed=3, patience=None))
        jobs.append(Job((i, 0), space.stem, Op.from_json(load_recorded(space).op), cfg, kind=kind))
    t = threading.Thread(target=watch)
    t.start()
    try:
        rows = run_ray_lanes(jobs, lanes, quiet=True, row=row)
    finally:
        killed.append(None)
        t.join()
        lanes.close()
    assert killed[0] is not None and lanes.lanes[1].actor is not None
    assert lanes.lanes[1].actor._actor_id != killed[0]._actor_id  # the lane went on with a new actor
    assert len(rows) == 3 and all(r["trials"] == r["distinct"] == 12 and r["ok"] for r in rows.values()), rows


def _free_ports(n: int) -> list[int]:
    """``n`` ports that nothing listens on now (held open together, so they differ)."""
    import socket

    socks = [socket.socket() for _ in range(n)]
    try:
        for sk in socks:
            sk.bind(("127.0.0.1", 0))
        return [sk.getsockname()[1] for sk in socks]
    finally:
        for sk in socks:
            sk.close()


class RayHead:
    """``ray start --head --block`` of this test's own: every port it listens on chosen free, its session
    in a folder of its own (so neither a user's Ray nor another test's is touched or joined), in this
    process group, its services tied to its life (Ray's fate sharing under --block). Stopping it stops
    what it started and nothing else: never ``ray stop``, which ends every Ray process of the machine."""

    PORTS = ("--port", "--node-manager-port", "--object-manager-port",
             "--dashboard-agent-listen-port", "--dashboard-agent-grpc-port", "--runtime-env-agent-port",
             "--metrics-export-port")

    def __init__(self, env: dict[str, str], start_s: float = 180) -> None:
        import time

        self.temp = _short_temp()
        ports = _free_ports(len(self.PORTS))
        self.address = f"127.0.0.1:{ports[0]}"
        self.log = self.temp / "start.log"
        args = [f"{flag}={port}" for flag, port in zip(self.PORTS, ports, strict=True)]
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(["ray", "start", "--head", "--block", "--num-cpus=2", "--include-dashboard=false",
                                          "--disable-usage-stats", f"--temp-dir={self.temp}", *args],
                                         stdout=log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + start_s
        while "Ray runtime started" not in self.log.read_text(errors="replace"):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                said = self.log.read_text(errors="replace")[-2000:]
                self.stop()
                pytest.fail(f"ray start --head failed: {said}")
            time.sleep(0.2)

    def stop(self) -> None:
        import psutil

        try:
            family = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            family = []
        self.proc.terminate()  # --block's handler stops the services it started
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        _, alive = psutil.wait_procs(family, timeout=30)
        for p in alive:  # what did not stop on its own: only this head's own processes
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        shutil.rmtree(self.temp, ignore_errors=True)


@pytest.mark.skipif(shutil.which("ray") is None, reason="the ray command is not on PATH")
def test_the_command_line_against_ray_start_head(tmp_path):
    """`ray start --head` (a private one: RayHead), then `tracea tune gemm ... --workers 2 --cluster ADDRESS`
    in another process, and a suite over the cluster's lanes."""
    env = {**os.environ, "TRACEA_HOME": str(tmp_path / "home"), "RAY_USAGE_STATS_ENABLED": "0",
           "RAY_AUTH_MODE": "disabled"}  # a private test cluster: no token to hand around
    env.pop("RAY_ADDRESS", None)
    head = RayHead(env)
    try:
        out = subprocess.run([sys.executable, "-m", "tracea", "tune", "gemm", "--m", "512", "--simulate", str(SPACE),
                              "--strategy", "random", "--budget", "12", "--workers", "2", "--cluster",
                              head.address, "--json"], capture_output=True, text=True, env=env, timeout=300)
        assert out.returncode == 0, out.stderr[-3000:]
        res = json.loads(out.stdout)
        assert res["evaluated"] == 12 and res["statuses"] == {"ok": 12} and res["best"]
        probs = tmp_path / "problems.json"  # and a suite over the cluster's lanes: a row per problem and kind
        probs.write_text(json.dumps([{"op": "gemm", "m": 64, "n": 48, "k": 40}, {"op": "softmax", "rows": 33, "cols": 130}]))
        out = subprocess.run([sys.executable, "-m", "tracea", "tune", "--suite", str(probs), "--backend", "cpu",
                              "--budget", "2", "--workers", "2", "--cluster", head.address, "--json"],
                             capture_output=True, text=True, env=env, timeout=300)
        assert out.returncode == 0, out.stderr[-3000:]
        rows = json.loads(out.stdout)
        assert [r["problem"] for r in rows] == ["0", "1"] and all(r["best"] for r in rows), rows
        assert sorted(r["lane"] for r in rows) == [0, 1] and len({r["fingerprint"] for r in rows}) == 1
        assert all(r["machine"] for r in rows)
    finally:
        head.stop()
