"""Best-checkpoint selection and early stopping (train/selection.py) on real checkpoints: one dev
task as before, several under the rules mean and mean-no-regression, and their records."""

import random

import pytest
import torch
from pydantic import ValidationError
from torch import nn
from viewmill.train.card import dev_results
from viewmill.train.checkpoints import CheckpointError, Checkpoints, RunState
from viewmill.train.config import TrainConfig
from viewmill.train.dev_scores import DevResult, DevSelection, weighted_mean
from viewmill.train.selection import evaluates_at, patience_spent, record_dev, score_dev, select_weights


def _config(**fields) -> TrainConfig:
    return TrainConfig(head_warmup_steps=0, **fields)  # few steps: no head warm-up


def _run(tmp_path, scores, config=None, weights=None):
    """A model whose weights at each evaluated step are filled with the step number. `scores`:
    (step, score) for one task, or (step, {task: score}) for several (weighted by `weights`)."""
    config = config or _config(steps=8, eval_every=2)
    model, state, checkpoints, saved = nn.Linear(2, 2), RunState(), Checkpoints(tmp_path / "ck", "k"), {}
    for step, score in scores:
        with torch.no_grad():
            for p in model.parameters():
                p.fill_(float(step))
        saved[step] = {k: v.clone() for k, v in model.state_dict().items()}
        state.step = step
        tasks = score if isinstance(score, dict) else {"dev": score}
        result = DevResult.of(tasks, weights or dict.fromkeys(tasks, 1.0))
        record_dev(config, state, step, result, model, checkpoints)
    return model, state, checkpoints, saved


def _selected(tmp_path, scores, **selection) -> int:
    config = _config(steps=8, eval_every=2, selection=DevSelection(**selection))
    model, state, checkpoints, saved = _run(tmp_path, scores, config)
    step = select_weights(config, state, model, checkpoints)
    assert torch.equal(model.weight, saved[step]["weight"]), "the selected state's weights are exported"
    return step


def test_keep_best_exports_the_best_dev_weights(tmp_path):
    model, state, checkpoints, weights = _run(tmp_path, [(0, 50.0), (2, 61.0), (4, 55.0)])
    config = _config(steps=4, eval_every=2, keep_best=True)
    assert select_weights(config, state, model, checkpoints) == 2
    assert torch.equal(model.weight, weights[2]["weight"]) and torch.equal(model.bias, weights[2]["bias"])


def test_the_start_can_be_the_best_and_then_it_is_exported(tmp_path):
    model, state, checkpoints, weights = _run(tmp_path, [(0, 70.0), (2, 61.0), (4, 55.0)])
    assert select_weights(_config(steps=4, eval_every=2, keep_best=True), state, model, checkpoints) == 0
    assert torch.equal(model.weight, weights[0]["weight"])


def test_without_keep_best_the_last_weights_stay(tmp_path):
    model, state, checkpoints, weights = _run(tmp_path, [(0, 50.0), (2, 61.0), (4, 55.0)])
    assert select_weights(_config(steps=4, eval_every=2, keep_best=False), state, model, checkpoints) == 4
    assert torch.equal(model.weight, weights[4]["weight"])
    assert select_weights(_config(steps=4), state, model, checkpoints) == 4


def test_patience_counts_evaluations_since_the_best(tmp_path):
    _, state, _, _ = _run(tmp_path, [(0, 50.0), (2, 61.0), (4, 55.0), (6, 58.0)])
    assert patience_spent(_config(steps=8, eval_every=2, early_stopping_patience=2), state) is True
    assert patience_spent(_config(steps=8, eval_every=2, early_stopping_patience=3), state) is False
    assert patience_spent(_config(steps=8, eval_every=2), state) is False


def test_evaluation_steps_and_dev_scoring_in_eval_mode():
    config = _config(steps=8, eval_every=3)
    assert [s for s in range(1, 9) if evaluates_at(config, s)] == [3, 6]
    assert not any(evaluates_at(_config(steps=8), s) for s in range(1, 9))
    objective = nn.Dropout()
    modes = []
    result = score_dev(lambda _: modes.append(objective.training) or 42, None, objective)
    assert result == DevResult({"dev": 42.0}, 42.0) and modes == [False] and objective.training is True
    several = DevResult.of({"a": 60.0, "b": 40.0}, {"a": 1.0, "b": 1.0})
    assert score_dev(lambda _: several, None, objective) is several


@pytest.mark.parametrize("rule", ["mean", "mean-no-regression"])
def test_one_task_selects_the_first_best_score_as_before_under_either_rule(tmp_path, rule):
    """The selection before several tasks: the first step with the highest score (the start
    included). With one task, mean-no-regression (tolerance 0) accepts exactly the states that
    could beat the start, so it picks the same."""
    rng = random.Random(7)
    for trial in range(20):
        scores = [(step, float(rng.choice([48, 50, 52, 55, 55.5]))) for step in range(0, 12, 2)]
        before = max(scores, key=lambda s: s[1])[0]  # max keeps the first of equals
        assert _selected(tmp_path / f"{rule}{trial}", scores, rule=rule) == before, scores


# Two tasks: step 2 gains most on average but b falls 5 points below its start; step 4 gains
# less and keeps both tasks at or above the start.
TWO = [
    (0, {"a": 50.0, "b": 50.0}),
    (2, {"a": 70.0, "b": 45.0}),
    (4, {"a": 54.0, "b": 51.0}),
    (6, {"a": 40.0, "b": 60.0}),
]


def test_mean_picks_the_best_weighted_mean(tmp_path):
    assert _selected(tmp_path / "equal", TWO, rule="mean") == 2  # means 50, 57.5, 52.5, 50
    config = _config(steps=8, eval_every=2)
    _, state, _, _ = _run(tmp_path / "weighted", TWO, config, weights={"a": 1.0, "b": 3.0})
    assert state.best_step == 6  # b weighs 3: 48.75, 51.25, 51.75, 55
    assert state.evals == [(0, 50.0), (2, 51.25), (4, 51.75), (6, 55.0)], "the selection score is recorded"


def test_mean_no_regression_rejects_a_state_where_one_task_fell(tmp_path):
    assert _selected(tmp_path / "strict", TWO, rule="mean-no-regression") == 4
    assert _selected(tmp_path / "tolerant", TWO, rule="mean-no-regression", tolerance=5.0) == 2  # 45 >= 50 - 5
    assert _selected(tmp_path / "almost", TWO, rule="mean-no-regression", tolerance=4.9) == 4
    fell = [(0, {"a": 50.0, "b": 50.0}), (2, {"a": 90.0, "b": 49.0}), (4, {"a": 49.0, "b": 99.0})]
    assert _selected(tmp_path / "start", fell, rule="mean-no-regression") == 0, "the start is always acceptable"


def test_a_rejected_state_is_no_improvement_for_early_stopping(tmp_path):
    config = _config(steps=8, eval_every=2, early_stopping_patience=2, selection={"rule": "mean-no-regression"})
    _, state, _, _ = _run(tmp_path / "a", TWO[:3], config)
    assert state.best_step == 4 and not patience_spent(config, state)
    rejected = [(0, {"a": 50.0, "b": 50.0}), (2, {"a": 70.0, "b": 45.0}), (4, {"a": 80.0, "b": 40.0})]
    _, state, _, _ = _run(tmp_path / "b", rejected, config)
    assert state.best_step == 0 and patience_spent(config, state)


def test_each_task_trajectory_is_recorded(tmp_path):
    _, state, _, _ = _run(tmp_path, TWO)
    assert state.task_evals == {
        "a": [(0, 50.0), (2, 70.0), (4, 54.0), (6, 40.0)],
        "b": [(0, 50.0), (2, 45.0), (4, 51.0), (6, 60.0)],
    }
    assert state.task_scores_at(0) == {"a": 50.0, "b": 50.0}


def test_weights_are_normalised_so_one_task_keeps_its_exact_score():
    for score in (0.1, 1 / 3, 77.15, 82.0333333):
        assert weighted_mean({"t": score}, {"t": 3.0}) == score
    assert weighted_mean({"a": 60.0, "b": 30.0, "c": 0.0}, {"a": 2.0, "b": 1.0}) == pytest.approx(50.0)
    with pytest.raises(ValueError, match="no score for b"):
        weighted_mean({"a": 1.0}, {"a": 1.0, "b": 1.0})


def test_the_rule_is_validated():
    with pytest.raises(ValidationError, match="tolerance applies to rule mean-no-regression only"):
        DevSelection(rule="mean", tolerance=1.0)
    with pytest.raises(ValidationError, match="rule"):
        DevSelection(rule="median")
    with pytest.raises(ValidationError, match="greater than or equal to 0"):
        DevSelection(rule="mean-no-regression", tolerance=-1.0)


def test_a_checkpoint_keeps_the_per_task_records(tmp_path):
    model = nn.Linear(2, 2)
    optimizer = torch.optim.Adam(model.parameters())
    _, state, _, _ = _run(tmp_path / "run", TWO)
    checkpoints = Checkpoints(tmp_path / "ck", "k")
    checkpoints.save(state, model, optimizer, None)
    restored = checkpoints.restore(model, optimizer, None)
    assert restored == state and restored.best_step == 2


def test_an_old_checkpoint_loads_without_dev_scores_and_is_refused_with_them(tmp_path):
    """Checkpoints from before per-task records: without dev evaluations they resume; with
    some, their tasks are unknown, so the run is refused with the fix."""
    model = nn.Linear(2, 2)
    optimizer = torch.optim.Adam(model.parameters())
    checkpoints = Checkpoints(tmp_path / "ck", "k")
    checkpoints.save(RunState(step=4, losses=[1.0, 0.5]), model, optimizer, None)
    saved = torch.load(checkpoints.folder / "state.pt", weights_only=True)
    del saved["run"]["task_evals"]
    checkpoints._write("state.pt", saved)
    assert checkpoints.restore(model, optimizer, None) == RunState(step=4, losses=[1.0, 0.5])
    saved["run"]["evals"] = [(0, 50.0), (2, 51.0)]
    checkpoints._write("state.pt", saved)
    with pytest.raises(CheckpointError, match="dev scores without their tasks .* delete .*ck to start"):
        checkpoints.restore(model, optimizer, None)


def _manifest(report: dict, dev, selected: int = 4, selection=None) -> dict:
    config = {"objective": "bsl", "batch_size": 8, "dev": dev, "selection": selection or {"rule": "mean"}}
    return {"dev_task": None if isinstance(dev, list) else dev["name"], "selected_step": selected,
            "report": {"steps": 6, **report}, "train_config": config}  # fmt: skip


def test_the_card_shows_each_dev_task_at_the_selected_step():
    stsb = {"name": "stsb-dev", "format": "stsb", "path": "data/stsbenchmark/sts-dev.csv"}
    pt = {"name": "pt-dev", "format": "stsb-xling", "path": "data/stsb_multi_mt", "lang_a": "pt", "lang_b": "pt",
          "split": "dev"}  # fmt: skip
    report = {"dev_evals": [(0, 50.0), (4, 55.0)],
              "dev_task_evals": {"stsb-dev": [(0, 60.0), (4, 62.0)], "pt-dev": [(0, 40.0), (4, 48.0)]}}  # fmt: skip
    rows = dev_results(_manifest(report, [stsb, pt]))
    assert [(r["task"], r["value"]) for r in rows] == [("stsb-dev", 62.0), ("pt-dev", 48.0)]
    assert [r["dataset"] for r in rows] == [
        {"id": "mteb/stsbenchmark-sts", "config": None, "split": "validation"},
        {"id": "PhilipMay/stsb_multi_mt", "config": "pt", "split": "dev"},
    ]
    # One task, in a manifest from before per-task records or after: the row it always had.
    for old in ({"dev_evals": [(0, 50.0), (4, 55.0)]}, {**report, "dev_task_evals": {"stsb-dev": [(4, 55.0)]}}):
        (row,) = dev_results(_manifest(old, stsb))
        assert (row["task"], row["value"], row["dataset"]["split"]) == ("stsb-dev", 55.0, "validation")


def test_a_resumed_run_keeps_the_per_task_records_and_the_start_they_are_judged_by(tmp_path, tiny_model):
    """Interrupted after the step-2 checkpoint, the run resumes with steps 0 and 2 recorded (not
    scored again), and mean-no-regression still judges steps 4 and 6 against the start's scores."""
    from viewmill.train.loop import train_model

    from tests.conftest import SENTENCES

    pairs = [(s, s.replace("a ", "the ", 1)) for s in SENTENCES]
    config = TrainConfig(steps=6, head_warmup_steps=1, batch_size=8, options={"predictor_k": 2}, encoder_lr=1e-2,
                         checkpoint_every=2, eval_every=2, selection={"rule": "mean-no-regression"})  # fmt: skip
    weights = {"a": 1.0, "b": 1.0}
    before = iter([{"a": 50.0, "b": 50.0}, {"a": 52.0, "b": 49.0}])  # step 2: b fell, rejected
    after = iter([{"a": 51.0, "b": 50.5}, {"a": 70.0, "b": 40.0}])  # step 6: best mean, but b fell

    def interrupt(step, _):
        if step == 3:
            raise KeyboardInterrupt

    out = tmp_path / "model"
    with pytest.raises(KeyboardInterrupt):
        train_model(pairs, str(tiny_model), config, out, card={}, on_step=interrupt,
                    dev=lambda _: DevResult.of(next(before), weights))  # fmt: skip
    report = train_model(pairs, str(tiny_model), config, out, card={}, dev=lambda _: DevResult.of(next(after), weights))
    assert report.dev_task_evals == {"a": [(0, 50.0), (2, 52.0), (4, 51.0), (6, 70.0)],
                                     "b": [(0, 50.0), (2, 49.0), (4, 50.5), (6, 40.0)]}  # fmt: skip
    assert report.dev_evals == [(0, 50.0), (2, 50.5), (4, 50.75), (6, 55.0)]
    assert report.selected_step == 4
