"""Progress outside a terminal (issue 23.4): plain lines at a steady interval, into Prefect's run
log inside a flow run, nothing for a stage with nothing to do, and no library's own tqdm bar."""

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner
from viewmill.pipelines.cli.app import app
from viewmill.pipelines.progress import INTERVAL_ENV, PlainProgress, progress_bar
from viewmill.pipelines.recipe import load_recipe
from viewmill.pipelines.run import RunContext, run_recipe
from viewmill.pipelines.state import StatePaths
from viewmill.train.config import TrainConfig
from viewmill.train.loop import train_model

from tests.conftest import SENTENCES, needs_apertium, write_tiny_recipe

runner = CliRunner()
PERIODIC = r"\d+/\d+ \(\d+%\), \d+\S* elapsed"


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_plain_lines_say_where_a_stage_stands():
    clock, lines = FakeClock(), []
    progress = PlainProgress("train bsl (10 steps)", 10, lines.append, clock=clock)
    clock.now += 60
    progress.advance(1, 10)
    progress.tick()  # one step counted from: no rate yet, so no estimate
    clock.now += 40
    progress.advance(5, 10)
    progress.tick()
    clock.now += 3600
    progress.advance(10, 10)
    progress.close()
    assert lines == [
        "train bsl (10 steps): started (0/10)",
        "train bsl (10 steps): 1/10 (10%), 1m00s elapsed",
        "train bsl (10 steps): 5/10 (50%), 1m40s elapsed, about 50s left",
        "train bsl (10 steps): done, 10/10 in 1h01m",
    ]


DEV_TASKS = ["stsb-dev", "stsb-pt-dev", "stsb-es-dev", "en-pt", "en-es", "sick-trial"]


def _score_dev(progress, clock: FakeClock, seconds_per_task: float) -> None:
    """What the train stage's dev scorer does: a phase, each task said as it starts."""
    with progress.phase("scoring dev"):
        for i, name in enumerate(DEV_TASKS, start=1):
            progress.doing(f"scoring dev: {name} {i}/{len(DEV_TASKS)}")
            clock.now += seconds_per_task
            if i == 2:
                progress.tick()


def test_the_estimate_is_the_rate_of_steps_with_model_loading_and_dev_scoring_left_out():
    clock, lines = FakeClock(), []
    progress = PlainProgress("train bsl (20 steps)", 20, lines.append, clock=clock, unit="steps")
    with progress.phase("loading model m"):
        clock.now += 5  # too short to be shown: no line
    _score_dev(progress, clock, 70)  # the start's dev scores: 7 minutes, no step done
    progress.tick()
    for step in range(1, 11):  # 10 s a step
        progress.advance(step, 20)
        clock.now += 10
        if step == 1:
            progress.tick()  # one step seen: still no rate
    _score_dev(progress, clock, 20)  # at step 10: 2 minutes of scoring, not steps
    progress.advance(11, 20)
    progress.tick()
    assert lines[0] == "train bsl (20 steps): started (0/20)"
    assert lines[1:4] == [
        "train bsl (20 steps): scoring dev: stsb-pt-dev 2/6, 2m20s so far (0/20, 2m25s elapsed)",
        "train bsl (20 steps): scoring dev: done in 7m00s",
        "train bsl (20 steps): 0/20 (0%), 7m05s elapsed",
    ], "no estimate before a rate exists"
    assert lines[4] == "train bsl (20 steps): 1/20 (5%), 7m15s elapsed"
    assert lines[5:] == [
        "train bsl (20 steps): scoring dev: stsb-pt-dev 2/6, 40s so far (10/20, 9m25s elapsed)",
        "train bsl (20 steps): scoring dev: done in 2m00s",
        # 10 steps in 100 s of training: 9 steps left at 10 s each, not at (100 + 120 s of scoring) / 10
        "train bsl (20 steps): 11/20 (55%), 10m45s elapsed, 10.0 s/step, about 1m30s left",
    ]
    clock.now += 90
    progress.advance(20, 20)
    progress.close()
    assert lines[-1] == "train bsl (20 steps): done, 20/20 in 12m15s (10.0 s/step)"


def test_dev_scoring_at_a_step_counts_that_step_as_done(tiny_model, tmp_path):
    clock, lines = FakeClock(), []
    progress = PlainProgress("train bsl (4 steps)", 4, lines.append, clock=clock, unit="steps")

    def dev(model) -> float:  # as the train stage's scorer: a phase, its line shown
        with progress.phase("scoring dev"):
            progress.tick()
        return 50.0

    config = TrainConfig(steps=4, batch_size=8, head_warmup_steps=1, options={"predictor_k": 2}, eval_every=2)
    train_model([(s, s.lower()) for s in SENTENCES], str(tiny_model), config, tmp_path / "model", card={}, dev=dev,
                on_trained=lambda step: progress(step, 4), phase=progress.phase)  # fmt: skip
    scoring = [line for line in lines if "scoring dev, " in line]
    # the start, then after steps 2 and 4: never one step behind (3/4 while scoring at step 4)
    assert [re.search(r"\((\d)/4, ", line)[1] for line in scoring] == ["0", "2", "4"], lines


def test_throughput_reads_as_units_a_second():
    clock, lines = FakeClock(), []
    progress = PlainProgress("augment bt_es (apertium) shard 1/1", None, lines.append, clock=clock, unit="sentences")
    progress.advance(0, 3000)
    clock.now += 70  # the first chunk, the engine's model loading in it: no rate yet
    progress.advance(600, 3000)
    progress.tick()
    clock.now += 50
    progress.advance(1200, 3000)
    progress.tick()
    assert lines == [
        "augment bt_es (apertium) shard 1/1: started (0/3000)",
        "augment bt_es (apertium) shard 1/1: 600/3000 (20%), 1m10s elapsed",
        "augment bt_es (apertium) shard 1/1: 1200/3000 (40%), 2m00s elapsed, 12 sentences/s, about 2m30s left",
    ], "the rate leaves the first chunk's warm-up out"
    clock.now += 150
    progress.advance(3000, 3000)
    progress.close()
    assert lines[-1] == "augment bt_es (apertium) shard 1/1: done, 3000/3000 in 4m30s (11 sentences/s)"


def test_off_a_terminal_a_slow_stage_says_what_it_does_and_estimates_only_from_its_steps(monkeypatch, capsys):
    monkeypatch.setenv(INTERVAL_ENV, "0.05")
    assert not sys.stderr.isatty()
    with progress_bar("train fake (8 steps)", total=8, unit="steps") as progress:
        with progress.phase("loading model fake"):
            time.sleep(0.3)
        with progress.phase("scoring dev"):
            progress.doing("scoring dev: stsb-pt-dev 2/6")
            time.sleep(0.3)
        for step in range(1, 9):
            time.sleep(0.05)
            progress(step, 8)
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "train fake (8 steps): started (0/8)" and err[-1].startswith("train fake (8 steps): done, 8/8 in ")
    stage = "train fake (8 steps): "
    loading = [i for i, line in enumerate(err) if line.startswith(f"{stage}loading model fake, ")]
    scoring = [i for i, line in enumerate(err) if line.startswith(f"{stage}scoring dev: stsb-pt-dev 2/6, ")]
    assert loading and scoring and max(loading) < min(scoring), err
    assert "train fake (8 steps): loading model fake: done in 0s" in err
    assert "train fake (8 steps): scoring dev: done in 0s" in err
    before_rate = err[: min(scoring) + 1]
    assert not any("left" in line for line in before_rate), "no estimate before a step was counted"


def test_nothing_is_said_for_a_stage_with_nothing_to_do():
    lines = []
    progress = PlainProgress("augment bt shard 1/1", None, lines.append)
    progress.advance(0, 0)  # every view of the shard was already in the lake
    progress.tick()
    progress.close()
    assert lines == []


def test_a_failed_stage_says_where_it_stopped(monkeypatch, capsys):
    monkeypatch.setenv(INTERVAL_ENV, "60")
    with pytest.raises(RuntimeError), progress_bar("evaluate m", total=4) as advance:
        advance(1, 4)
        raise RuntimeError("boom")
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "evaluate m: started (0/4)" and err[-1].startswith("evaluate m: stopped at 1/4 after ")


def test_without_a_terminal_lines_come_at_the_interval_while_a_step_is_slow(monkeypatch, capsys):
    monkeypatch.setenv(INTERVAL_ENV, "0.05")
    assert not sys.stderr.isatty()
    with progress_bar("slow stage", total=2) as advance:
        time.sleep(0.6)  # one long step (a model loading): the timer still reports
        advance(1, 2)
        time.sleep(0.3)
        advance(2, 2)
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert captured.out == "" and "\r" not in captured.err and "━" not in captured.err
    assert lines[0] == "slow stage: started (0/2)" and lines[-1].startswith("slow stage: done, 2/2 in ")
    periodic = lines[1:-1]
    assert len(periodic) >= 5 and all(re.fullmatch(rf"slow stage: {PERIODIC}.*", line) for line in periodic)
    assert any(line.startswith("slow stage: 0/2 (0%)") for line in periodic), "reported during the slow step"
    assert any(line.startswith("slow stage: 1/2 (50%)") for line in periodic)


def test_a_terminal_gets_a_bar_but_none_for_a_stage_with_nothing_to_do(monkeypatch, capsys):
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)  # rich draws for a terminal
    with progress_bar("augment bt shard 1/2") as advance:
        advance(0, 0)  # all cached: no 0/0 bar
    assert capsys.readouterr().err == ""
    with progress_bar("augment bt shard 2/2") as advance:
        advance(0, 3)
        advance(3, 3)
    err = capsys.readouterr().err
    assert "augment bt shard 2/2" in err and "3/3" in err and "started" not in err  # a bar, not plain lines


def test_a_bad_interval_is_refused_naming_the_variable(monkeypatch):
    monkeypatch.setenv(INTERVAL_ENV, "often")
    result = runner.invoke(app, ["plugins"])
    assert result.exit_code == 2
    assert result.stderr.startswith(f"error: {INTERVAL_ENV}='often' is not a number of seconds above 0")


@needs_apertium
def test_a_run_without_a_terminal_prints_plain_progress_lines(tmp_path, tiny_recipe, monkeypatch):
    monkeypatch.setenv(INTERVAL_ENV, "0.01")
    args = ["run", str(tiny_recipe), "--no-prefect", "--state-dir", str(tmp_path / "state")]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    err = result.stderr
    train = [line for line in err.splitlines() if line.startswith("train ")]
    assert re.fullmatch(r"train \w+ \(\d+ steps\): started \(0/\d+\)", train[0]), train
    done = r"train \w+ \(\d+ steps\): done, (\d+)/\1 in \d+s \([\d.]+ (steps/s|s/step)\)"
    assert re.fullmatch(done, train[-1]), train
    steps = [line for line in train[1:-1] if re.search(PERIODIC, line)]
    doing = [line for line in train[1:-1] if line not in steps]
    assert len(steps) >= 2 and any(
        re.search(r"^train \w+ \(\d+ steps\): loading model .*, \d+s so far", line) for line in doing
    ), train
    assert all(re.search(r": (loading model \S+|scoring dev)(: done in \d+s|, \d+s so far)", line) for line in doing)
    assert re.search(
        r"^augment \S+ \(apertium\) shard 1/1: done, 20/20 in \d+s \([\d.]+ (sentences/s|s/sentence)\)$", err, re.M
    ), err
    assert re.search(r"^evaluate .*: done, \d+/\d+ in ", err, re.M)
    assert "\r" not in err and "━" not in err and "Loading weights" not in err

    again = runner.invoke(app, args)  # every shard's views are cached now: no 0/0 lines for them
    assert again.exit_code == 0, again.output
    assert "augment " not in again.stderr and "0/0" not in again.stderr


@pytest.fixture(scope="module")
def report_lake(tmp_path_factory, tiny_model):
    folder = tmp_path_factory.mktemp("report-lake")
    state = StatePaths(folder / "state")
    run_recipe(RunContext(load_recipe(write_tiny_recipe(folder, tiny_model)), state))
    return state


@needs_apertium
def test_views_report_prints_progress_and_no_library_bar(report_lake, tiny_model, tmp_path):
    # A real process with stderr on a pipe, the hub's bar setting not inherited: what a log gets.
    env = {k: v for k, v in os.environ.items() if not k.endswith("DISABLE_PROGRESS_BARS")}
    env[INTERVAL_ENV] = "0.01"
    exe = Path(sys.executable).with_name("viewmill")
    args = [str(exe), "views", "report", "--state-dir", str(report_lake.root), "--out", str(tmp_path / "report"),
            "--encoder", str(tiny_model), "--cosine-sample", "5"]  # fmt: skip
    done = subprocess.run(args, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr
    err = done.stderr
    assert re.search(r"^views report: cosine to source \(views\): started \(0/\d+\)$", err, re.M), err
    assert re.search(r"^views report: cosine to source \(views\): done, (\d+)/\1 in ", err, re.M), err
    assert re.search(r"^views report: self-BLEU \(sentences\): done, (\d+)/\1 in ", err, re.M), err
    assert "Loading weights" not in err and "it/s" not in err and "\r" not in err
    assert done.stdout.strip() == str(tmp_path / "report" / "report.md")


@pytest.mark.slow
def test_inside_a_prefect_flow_run_lines_go_to_the_run_log(prefect_server, monkeypatch):
    import logging

    from prefect import flow

    monkeypatch.setenv(INTERVAL_ENV, "0.02")

    class Records(logging.Handler):
        def __init__(self) -> None:
            super().__init__()
            self.records: list[logging.LogRecord] = []

        def emit(self, record: logging.LogRecord) -> None:
            self.records.append(record)

    @flow(name="progress-probe")
    def probe() -> None:
        with progress_bar("probe stage", total=2) as advance:
            time.sleep(0.2)
            advance(2, 2)

    seen = Records()
    run_log = logging.getLogger("prefect.flow_runs")  # what the API handler sends to the server
    run_log.addHandler(seen)
    try:
        probe()
    finally:
        run_log.removeHandler(seen)
    ours = [r for r in seen.records if r.getMessage().startswith("probe stage")]
    lines = [r.getMessage() for r in ours]
    assert lines[0] == "probe stage: started (0/2)" and lines[-1].startswith("probe stage: done, 2/2 in ")
    assert any(re.fullmatch(rf"probe stage: {PERIODIC}.*", line) for line in lines[1:-1]), lines
    assert all(getattr(r, "flow_run_id", None) for r in ours), "each line is tied to the flow run"


def test_a_stage_that_fails_between_steps_says_what_it_was_doing():
    clock, lines = FakeClock(), []
    progress = PlainProgress("train bsl (20 steps)", 20, lines.append, clock=clock, unit="steps")
    progress.advance(3, 20)
    progress.doing("scoring dev: stsb-dev 1/2")
    clock.now += 90
    progress.close(failed=True)
    assert lines[-1] == "train bsl (20 steps): stopped at 3/20 while scoring dev: stsb-dev 1/2 after 1m30s"


def test_each_dev_evaluation_says_its_scores_and_step(monkeypatch):
    from types import SimpleNamespace

    from viewmill.pipelines.stages import train as train_stage

    monkeypatch.setattr(train_stage, "_dev_data", lambda task: None)
    scores = {"stsb-dev": 86.724, "sick-trial": 79.8}
    monkeypatch.setattr(train_stage, "model_scores", lambda model, sets, on_set=None: scores)
    lines: list[str] = []
    progress = PlainProgress("train bsl (20 steps)", 20, lines.append)
    progress.advance(10, 20)
    tasks = [SimpleNamespace(name=name, weight=1.0) for name in scores]
    result = train_stage.dev_scorer(tasks, progress)(None)
    assert result.score == pytest.approx(83.262)
    assert lines[-1] == "train bsl (20 steps): dev at step 10: stsb-dev 86.72, sick-trial 79.80 (mean 83.26)"
