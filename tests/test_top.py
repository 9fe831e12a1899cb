"""`verl-otel top`: frames built from /metrics text written by verl-otel's own exporter (health signals
tripping and not), history across refreshes, the targets-file and Prometheus sources, `--once` through the
CLI, and the live view in a real terminal (tmux): refreshed in place, Ctrl-C ends it cleanly."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from rich.console import Console

from helpers.jaeger import FakeJaeger

from verl_otel import semconv as sc
from verl_otel.cli.main import main
from verl_otel.export.prometheus import StoreCollector, serve
from verl_otel.live.health_table import signals
from verl_otel.live.run_view import History, build_view
from verl_otel.live.sources import PrometheusQuery, Scrape, TargetsFile, parse_metrics_text
from verl_otel.live.view import frame
from verl_otel.process.metrics import MetricStore

RUN = {sc.LABEL_PROJECT: "proj", sc.LABEL_EXPERIMENT: "exp"}
HEALTHY = {
    "critic/score/mean": 0.4,
    "actor/grad_norm": 1.0,
    "actor/ppo_kl": 0.004,
    "actor/kl_loss": 0.002,
    "actor/entropy": 0.5,
    "actor/perf/max_memory_reserved_gb": 40.0,
    "actor/pg_clipfrac": 0.1,
    "timing_s/step": 60.0,
    "timing_s/gen": 40.0,
    "timing_s/update_actor": 15.0,
}


def trainer_state(
    step: int = 12,
    planned: int = 20,
    metrics: dict[str, float] | None = None,
    phase: str | None = sc.PHASE_UPDATE_ACTOR,
    elapsed: float = 20.0,
) -> MetricStore:
    """A trainer process' metrics as verl-otel's trackers hold them: step, ETA, the phase running now, the
    step and phase histograms (mean step 60 s, update_actor 15 s) and verl's last logged scalars."""
    st = MetricStore()
    st.set(sc.TRAINING_STEP, (), step)
    st.set(sc.TRAINING_STEPS_PLANNED, (), planned)
    st.set(sc.TRAINING_ETA, (), 480.0)
    st.set(sc.TRAINING_LAST_STEP, (), time.time() - 30)
    for p in (sc.PHASE_ROLLOUT, sc.PHASE_UPDATE_ACTOR):
        st.set(sc.PHASE_ACTIVE, (p,), 1.0 if p == phase else 0.0)
        st.set(sc.PHASE_ELAPSED, (p,), elapsed if p == phase else 0.0)
    for _ in range(4):
        st.observe(sc.STEP_DURATION, (), 60.0)
        st.observe(sc.PHASE_DURATION, (sc.PHASE_UPDATE_ACTOR,), 15.0)
        st.observe(sc.PHASE_DURATION, (sc.PHASE_ROLLOUT,), 40.0)
    for key, value in {**HEALTHY, "training/global_step": step - 1, **(metrics or {})}.items():
        st.set(sc.TRAINING_METRIC, (key,), value)
    return st


def worker_state(worker: int, done: int, expected: int = 64, oldest: float = 12.0) -> MetricStore:
    st = MetricStore()
    labels = (str(worker), sc.MODE_TRAIN)
    for metric, value in (
        (sc.ROLLOUT_SAMPLES_COMPLETED, done),
        (sc.ROLLOUT_SAMPLES_EXPECTED, expected),
        (sc.ROLLOUT_SAMPLES_INFLIGHT, expected - done),
        (sc.ROLLOUT_OLDEST_INFLIGHT, oldest),
        (sc.ROLLOUT_ELAPSED, 30.0),
        (sc.ROLLOUT_ETA, 10.0),
    ):
        st.set(metric, labels, value)
    return st


def update_state(done: int = 6, expected: int = 12, epoch: int = 2) -> MetricStore:
    st = MetricStore()
    for metric, value in (
        (sc.UPDATE_MINIBATCHES_COMPLETED, done),
        (sc.UPDATE_MINIBATCHES_EXPECTED, expected),
        (sc.UPDATE_EPOCH, epoch),
        (sc.UPDATE_ETA, 40.0),
    ):
        st.set(metric, ("actor",), value)
    return st


def page(store: MetricStore) -> str:
    """The /metrics page verl-otel's exporter serves for ``store``."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StoreCollector(store))  # type: ignore[arg-type]
    return generate_latest(registry).decode()


def scrape(*stores: MetricStore) -> Scrape:
    out = Scrape(source="test", targets=len(stores))
    for i, st in enumerate(stores):
        out.series += parse_metrics_text(page(st), {**RUN, "instance": f"h:{i}"})
    return out


def render(view, history=None, width: int = 160) -> str:
    history = history if history is not None else History()
    console = Console(width=width, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(frame(view, history, signals(view, history), now=time.time()))
    return console.export_text()


def rows_of(text: str, first: str) -> list[str]:
    return next(ln.split() for ln in text.splitlines() if ln.split()[:1] == [first])


def health(text: str) -> dict[str, str]:
    """signal name -> verdict, from a rendered frame's health table."""
    out = {}
    section = text.split("health (")[1].splitlines()[2:]
    for line in section:
        parts = line.split(None, 1)
        if len(parts) == 2 and parts[0] in ("ok", "TRIPPED", "-"):
            name = next((n for n in NAMES if parts[1].startswith(n)), None)
            if name:
                out[name] = parts[0]
    return out


NAMES = (
    "score stuck at 0",
    "grad-norm spike",
    "KL blow-up",
    "entropy collapse",
    "GPU memory near limit",
    "steps getting slower",
    "phase hung",
    "rollout sample stuck",
    "PPO clipping most samples",
)


def test_frame_of_a_healthy_run():
    view = build_view(scrape(trainer_state(), worker_state(0, 48), worker_state(1, 16), update_state()))
    text = render(view)
    lines = text.splitlines()
    assert "proj/exp" in lines[0] and "2 targets" not in lines[0] and "4 targets" in lines[0]
    # step 12 runs now: 11 of 20 done
    assert "step 12/20 [#############-----------] 55% ETA 8m00s" in text
    assert "running: update_actor 20.0s (mean 15.0s)" in text
    rows = {ln.split()[0]: ln.split() for ln in lines if ln.strip().startswith(("0 ", "1 ", "total "))}
    assert rows["0"][1:4] == ["train", "[##################------]", "48/64"] and rows["0"][4] == "75%"
    assert rows["1"][3] == "16/64" and rows["total"][3] == "64/128" and rows["total"][4] == "50%"
    assert rows_of(text, "actor") == ["actor", "[############------------]", "6/12", "50%", "2", "40.0s"]
    # the last logged step's phases (verl's timer names under ours) and verl's step time
    table = text.split("last steps")[1].splitlines()
    assert table[1].split() == ["step", "step", "(verl)", "rollout", "update_actor"]
    assert table[2].split() == ["11", "60.00", "40.00", "15.00"]
    assert health(text) == dict.fromkeys(NAMES, "ok") | {"grad-norm spike": "-"}  # needs a few steps seen


def test_each_signal_trips():
    metrics = {
        "critic/score/mean": 0.0,
        "actor/ppo_kl": 0.2,
        "actor/entropy": 0.01,
        "actor/perf/max_memory_reserved_gb": 79.0,
        "actor/pg_clipfrac": 0.95,
        "timing_s/step": 200.0,
    }
    view = build_view(scrape(trainer_state(metrics=metrics, elapsed=2000.0), worker_state(0, 10, oldest=900.0)))
    got = health(render(view))
    assert got == dict.fromkeys(NAMES, "TRIPPED") | {"grad-norm spike": "-"}, got
    text = render(view)
    assert text.index("TRIPPED") < text.index(" - ")  # what tripped comes first
    assert "phase hung" in text and "update_actor 2000s vs mean 15.0s" in text
    # the same numbers just under each bar do not trip
    calm = {
        "critic/score/mean": 0.01,
        "actor/ppo_kl": 0.05,
        "actor/entropy": 0.05,
        "actor/perf/max_memory_reserved_gb": 75.0,
        "actor/pg_clipfrac": 0.8,
        "timing_s/step": 90.0,
    }
    view = build_view(scrape(trainer_state(metrics=calm, elapsed=899.0), worker_state(0, 10, oldest=600.0)))
    assert health(render(view)) == dict.fromkeys(NAMES, "ok") | {"grad-norm spike": "-"}


def test_score_at_zero_only_counts_past_the_first_steps():
    view = build_view(scrape(trainer_state(step=3, metrics={"critic/score/mean": 0.0})))
    assert health(render(view))["score stuck at 0"] == "ok"


def test_history_across_refreshes_grad_spike_and_phase_table():
    history = History()
    for step in range(1, 7):
        grad = 50.0 if step == 6 else 1.0 + 0.1 * step
        view = build_view(
            scrape(trainer_state(step=step + 1, metrics={"actor/grad_norm": grad, "timing_s/gen": 40.0 + step}))
        )
        history.add(view)
        history.add(view)  # a second refresh of the same step changes nothing
    assert list(history.steps) == [1, 2, 3, 4, 5, 6]
    text = render(view, history)
    assert health(text)["grad-norm spike"] == "TRIPPED" and "actor/grad_norm 50, median 1.3" in text
    table = text.split("last steps")[1].split("health")[0].splitlines()
    assert [ln.split()[0] for ln in table[2:] if ln.strip()] == ["6", "5", "4", "3", "2"]  # newest first, --steps 5
    assert "46.00" in table[2] and "45.00" in table[3]  # each row its own step's rollout time


def test_several_runs_in_one_source_pick_the_latest():
    old, new = trainer_state(step=5), trainer_state(step=2)
    old.set(sc.TRAINING_LAST_STEP, (), 1000.0)
    s = Scrape(source="prom", targets=2)
    s.series += parse_metrics_text(page(old), {sc.LABEL_PROJECT: "p", sc.LABEL_EXPERIMENT: "old"})
    s.series += parse_metrics_text(page(new), {sc.LABEL_PROJECT: "p", sc.LABEL_EXPERIMENT: "new"})
    view = build_view(s)
    assert view.run == "p/new" and view.other_runs == ["p/old"] and view.step == 2
    assert build_view(s, "p/old").step == 5


def test_prometheus_history_is_one_runs_scrapes_in_time_order():
    def series(experiment: str, key: str, points: list[tuple[float, float]]) -> dict:
        return {
            "metric": {
                "__name__": sc.TRAINING_METRIC.name,
                sc.LABEL_PROJECT: "p",
                sc.LABEL_EXPERIMENT: experiment,
                sc.LABEL_KEY: key,
                "instance": "h:1",
            },
            "values": [[t, str(v)] for t, v in points],
        }

    matrix = [
        series("new", "training/global_step", [(20, 2), (10, 1)]),
        series("new", "timing_s/gen", [(10, 5), (20, 6)]),
        series("old", "training/global_step", [(15, 9)]),
    ]
    queries: list[str] = []

    def answer(path: str, query: dict) -> tuple[int, bytes]:
        queries.append(query["query"][0])
        return 200, json.dumps({"status": "success", "data": {"resultType": "matrix", "result": matrix}}).encode()

    fake = FakeJaeger({"/api/v1/query": answer})  # any JSON-over-HTTP stand-in will do
    try:
        got = PrometheusQuery(fake.url).history("p/new", "timing_s/.+|training/global_step", window="1h")
    finally:
        fake.close()
    assert got == [
        {"training/global_step": 1.0, "timing_s/gen": 5.0},
        {"training/global_step": 2.0, "timing_s/gen": 6.0},
    ]
    assert queries == ['verl_training_metric{key=~"timing_s/.+|training/global_step"}[1h]']


def _targets_file(tmp_path: Path, addresses: list[str]) -> Path:
    path = tmp_path / sc.PROM_TARGETS_FILE
    path.write_text(
        json.dumps(
            [
                {"targets": [a], "labels": {**RUN, sc.LABEL_PROCESS_ROLE: "trainer", "__verl_otel_pid": "1"}}
                for a in addresses
            ]
        )
    )
    return path


def _serve(store: MetricStore) -> str:
    return f"127.0.0.1:{serve(store, '127.0.0.1', 0)}"


def test_once_scrapes_each_target_of_the_file(tmp_path, capsys):
    addresses = [_serve(trainer_state()), _serve(worker_state(0, 8, expected=8)), "127.0.0.1:9"]  # 9: nobody
    path = _targets_file(tmp_path, addresses)
    got = TargetsFile(path).read()
    assert got.targets == 3 and len(got.failed) == 1 and got.failed[0].startswith("127.0.0.1:9: ")
    assert {s.labels["instance"] for s in got.series} == set(addresses[:2])
    assert not any(k.startswith("__") for s in got.series for k in s.labels)
    assert main(["top", "--once", "--targets", str(tmp_path), "--width", "150"]) == 0
    out, err = capsys.readouterr()
    flat = " ".join(out.split())  # the long header may wrap
    assert err == "" and "3 targets, 1 unreachable" in flat and "step 12/20" in out and "8/8" in out
    assert "unreachable: 127.0.0.1:9" in out


def test_a_run_that_has_ended(tmp_path, capsys):
    _targets_file(tmp_path, ["127.0.0.1:9", "127.0.0.1:9"])
    assert main(["top", "--once", "--targets", str(tmp_path), "--width", "150"]) == 0
    out = " ".join(capsys.readouterr().out.split())  # the long header may wrap
    assert "2 targets, 2 unreachable" in out and "no process of the run answers" in out


def test_missing_targets_file_is_one_line_on_stderr(tmp_path, capsys):
    assert main(["top", "--once", "--targets", str(tmp_path / "nope")]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("verl-otel top: cannot read ") and len(err.splitlines()) == 1


@pytest.mark.prometheus
def test_prometheus_source_with_the_steps_before(prom_factory):
    """From Prometheus, `--once` also shows the steps logged before it started (a range query): three
    steps pass through the trainer's real /metrics page while Prometheus scrapes it."""
    trainer = trainer_state(step=1)
    address = _serve(trainer)
    prom = prom_factory(
        config={
            "global": {"scrape_interval": "1s"},
            "scrape_configs": [{"job_name": "verl", "static_configs": [{"targets": [address], "labels": RUN}]}],
        }
    )
    for step in (1, 2, 3):
        trainer.set(sc.TRAINING_STEP, (), step + 1)
        for key, value in {"training/global_step": step, "timing_s/gen": 40.0 + step}.items():
            trainer.set(sc.TRAINING_METRIC, (key,), value)
        deadline = time.time() + 30
        while time.time() < deadline and [
            r["value"][1] for r in prom.query('verl_training_metric{key="training/global_step"}')
        ] != [str(step)]:
            time.sleep(0.3)
        time.sleep(1.5)  # a scrape or two of this step
    proc = subprocess.run(
        [sys.executable, "-m", "verl_otel.cli.main", "top", "--once", "--width", "150", "--prometheus", prom.url],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "proj/exp" in out and "step 4/20" in out and "Prometheus at" in out
    table = out.split("last steps")[1].split("health")[0].splitlines()
    rows = [ln.split() for ln in table[2:] if ln.strip()]
    assert [(r[0], r[2]) for r in rows] == [("3", "43.00"), ("2", "42.00"), ("1", "41.00")], out


def _tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], capture_output=True, text=True, timeout=10).stdout


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (apt-get install tmux)")
def test_live_view_in_a_terminal(tmp_path):
    """The live view in a real terminal, started before the run wrote its targets file: it waits, then one
    frame redrawn in place as the run moves; Ctrl-C exits 0."""
    trainer = trainer_state(step=4, phase=sc.PHASE_ROLLOUT)
    worker = worker_state(0, 10)
    session = f"verl-otel-top-{tmp_path.name}"
    rc_file = tmp_path / "rc"
    cmd = (
        f"{sys.executable} -m verl_otel.cli.main top --targets {tmp_path} --interval 0.5; echo $? > {rc_file}; sleep 30"
    )
    _tmux("new-session", "-d", "-s", session, "-x", "150", "-y", "60", cmd)
    try:

        def screen_with(text: str) -> str:
            deadline = time.time() + 30
            while time.time() < deadline:
                screen = _tmux("capture-pane", "-p", "-t", session)
                if "".join(text.split()) in "".join(screen.split()):  # a long line may wrap anywhere
                    return screen
                time.sleep(0.3)
            raise AssertionError(f"{text!r} never showed:\n{screen}")

        waiting = screen_with("trying again every 0.5s")
        assert "cannot read" in waiting and "prometheus_targets.json" in "".join(waiting.split())  # may wrap
        _targets_file(tmp_path, [_serve(trainer), _serve(worker)])
        first = screen_with("10/64")
        worker.set(sc.ROLLOUT_SAMPLES_COMPLETED, ("0", sc.MODE_TRAIN), 40.0)
        trainer.set(sc.TRAINING_STEP, (), 5.0)
        second = screen_with("40/64")
        assert "step 4/20" in first and "step 5/20" in second
        for screen in (first, second):  # redrawn in place: one frame on the screen, not a scrolling log
            assert screen.count("verl-otel top") == 1 and screen.count("rollout (agent-loop workers)") == 1
        _tmux("send-keys", "-t", session, "C-c")
        deadline = time.time() + 15
        while time.time() < deadline and not rc_file.exists():
            time.sleep(0.2)
        assert rc_file.read_text().strip() == "0"
        assert "Traceback" not in _tmux("capture-pane", "-p", "-t", session, "-S", "-200")
    finally:
        _tmux("kill-session", "-t", session)


def test_the_last_steps_gpu_split():
    """The trainer's last finished step's GPU time by bucket (verl_step_gpu_seconds), largest first, its goodput
    ahead of them (a narrow terminal cuts the smallest shares, not the goodput); none before the first step ends."""
    assert "GPU time" not in render(build_view(scrape(trainer_state())))
    st = trainer_state()
    for bucket, gpu_s in (("generating", 40.0), ("long_tail", 30.0), ("update_actor", 20.0), ("idle", 10.0)):
        st.set(sc.STEP_GPU_SECONDS, (bucket,), gpu_s)
    st.set(sc.GOODPUT_RATIO, (), 0.6)
    text = render(build_view(scrape(st)))
    assert "GPU time, last step (goodput 60%): generating 40%, long_tail 30%, update_actor 20%, idle 10%" in text
