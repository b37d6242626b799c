"""The soup stage: the recipe's trained model averaged with its `soup.recipes`' models, the mix
chosen on the recipe's dev tasks, exported and recorded in `models` like a trained model, or
reused. Where the recipe's own model alone wins on dev, nothing is exported: that model is the
run's, and the choice is kept beside the models so a rerun does not score the mixes again."""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from viewmill.pipelines.context import RunContext
from viewmill.pipelines.progress import progress_bar
from viewmill.pipelines.recipe import SoupSpec, TrainSpec
from viewmill.pipelines.stages.evaluate import task_data_hash
from viewmill.pipelines.stages.train import TrainResult, dev_scorer, publish_model
from viewmill.storage.ids import fingerprint
from viewmill.train import distributed
from viewmill.train.dev_scores import DevResult
from viewmill.train.encoder import load_sentence_model, resolve_encoder
from viewmill.train.export import export, is_complete_model, model_lock, read_manifest
from viewmill.train.loop import training_code_fingerprint
from viewmill.train.soup import SoupChoice, SoupError, candidate_weights, check_same_structure, choose_soup

__all__ = ["SoupError", "SoupResult", "mix_rows", "soup_model_id", "soup_stage"]


@dataclass(frozen=True)
class SoupResult:
    model_id: str  # the run's final model: the soup, or the recipe's own model where it won alone
    path: str
    reused: bool
    exported: bool  # a soup was exported (False: the recipe's own model alone scored best on dev)
    weights: dict[str, float]  # each ingredient's model id: its weight in the chosen mix
    candidates: list[dict[str, Any]] = field(default_factory=list)  # each mix: weights, dev scores, accepted

    def as_dict(self) -> dict[str, Any]:
        return {"model_id": self.model_id, "path": self.path, "reused": self.reused, "exported": self.exported,
                "weights": self.weights, "candidates": self.candidates}  # fmt: skip


def mix_rows(soup: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """The candidate mixes as a table (SoupResult.as_dict): the header, then a row per mix with
    `*` on the chosen one, each model's weight, each dev score, the mean and the rule's answer."""
    models = list(soup["weights"])
    tasks = list(soup["candidates"][0]["dev"]) if soup["candidates"] else []
    header = ["", *(m[:12] for m in models), *tasks, "mean", "rule"]
    rows = [
        ["*" if mix["weights"] == soup["weights"] else "", *(f"{mix['weights'][m]:.2f}" for m in models),
         *(f"{mix['dev'][t]:.2f}" for t in tasks), f"{mix['score']:.2f}", "allowed" if mix["accepted"] else "refused"]
        for mix in soup["candidates"]
    ]  # fmt: skip
    return header, rows


def soup_model_id(spec: TrainSpec, soup: SoupSpec, ingredients: list[TrainResult]) -> str:
    """What decides the soup: its ingredients (this recipe's model first), the candidate shares,
    the dev tasks with their data and the rule that choose, and the code that averages and records."""
    dev = [(task.name, task.weight, task_data_hash(task)) for task in spec.dev_tasks]
    stage_code = Path(__file__).read_text(encoding="utf-8")
    return fingerprint("soup", [i.model_id for i in ingredients], soup.shares, dev,
                       spec.selection.model_dump(mode="json"), training_code_fingerprint(), stage_code)  # fmt: skip


def soup_stage(ctx: RunContext, ingredients: list[TrainResult]) -> SoupResult:
    """Average `ingredients` (the recipe's own trained model first); a soup made before from
    the same models, shares, dev tasks and code is reused. Exported to `<dir>.staged`, recorded,
    then renamed into place, as the train stage does; under torchrun rank 0 alone makes it."""
    spec, soup = ctx.recipe.train, ctx.recipe.soup
    assert spec is not None and soup is not None
    ids = [i.model_id for i in ingredients]
    if len(set(ids)) != len(ids):
        raise SoupError(
            f"the soup of {ctx.recipe.name} names one model twice ({', '.join(i.path for i in ingredients)}): "
            "soup.recipes must name recipes that train other models than each other and this recipe"
        )
    model_id = soup_model_id(spec, soup, ingredients)
    out_dir = ctx.state.models / f"{ctx.recipe.name}-soup-{model_id[:12]}"
    staged, kept_alone = out_dir.with_name(out_dir.name + ".staged"), out_dir.with_name(out_dir.name + ".json")
    made = False
    if distributed.is_main():
        with model_lock(out_dir, "soup"):
            made = not any(is_complete_model(p) for p in (out_dir, staged)) and not kept_alone.is_file()
            if made:
                _cook(ctx, ingredients, model_id, out_dir, staged, kept_alone)
            if not kept_alone.is_file():
                publish_model(ctx, staged, out_dir, model_id)
    distributed.barrier()
    if kept_alone.is_file():  # the recipe's own model won alone: it is the run's model
        recorded = json.loads(kept_alone.read_text(encoding="utf-8"))
        return SoupResult(ids[0], ingredients[0].path, not made, False, recorded["weights"], recorded["candidates"])
    recorded = read_manifest(out_dir)["soup"]
    return SoupResult(model_id, str(out_dir), not made, True, recorded["weights"], recorded["candidates"])


def _cook(
    ctx: RunContext, ingredients: list[TrainResult], model_id: str, out_dir: Path, staged: Path, kept_alone: Path
) -> None:
    """Score the mixes and export the chosen one to `staged`, or where the recipe's own model
    alone wins, write the choice to `kept_alone` (whole or not at all)."""
    spec = ctx.recipe.train
    assert spec is not None and ctx.recipe.soup is not None
    names = [Path(i.path).name for i in ingredients]
    check_same_structure([Path(i.path) for i in ingredients], names)
    models = [load_sentence_model(i.path) for i in ingredients]  # on the CPU: averaging needs no accelerator
    states = [model.state_dict() for model in models]
    own = read_manifest(Path(ingredients[0].path))
    candidates = candidate_weights(ctx.recipe.soup.shares, len(ingredients))
    score = dev_scorer(spec.dev_tasks)
    assert score is not None  # the schema requires dev tasks
    recorded = {} if spec.continues_a_model else _start_scores(own, spec)
    start = recorded or score(load_sentence_model(resolve_encoder(spec.encoder))).scores
    with progress_bar(f"soup of {len(ingredients)} models", total=len(candidates), unit="mixes") as progress:

        def scored(mix: tuple[float, ...], result: DevResult) -> None:
            shares = " + ".join(f"{weight:.2f} {name}" for weight, name in zip(mix, names, strict=True))
            scores = ", ".join(f"{task} {value:.2f}" for task, value in result.scores.items())
            progress.note(f"dev of {shares}: {scores} (mean {result.score:.2f})")
            progress(progress.done + 1, len(candidates))

        # Scoring is the counted work here (one mix a unit), not a phase between units.
        choice = choose_soup(models[0], states, names, candidates, score, start, spec.selection, scored)
    recorded = _recorded(choice, [i.model_id for i in ingredients], names)
    if choice.weights == candidates[0]:
        partial = kept_alone.with_name(kept_alone.name + ".partial")
        partial.write_text(json.dumps(recorded, indent=2), encoding="utf-8")
        partial.replace(kept_alone)
        return
    export(models[0], staged, _manifest(ctx, own, model_id, out_dir, start, choice.dev[choice.weights], recorded))


def _recorded(choice: SoupChoice, ids: list[str], names: list[str]) -> dict[str, Any]:
    rows = [
        {"weights": dict(zip(ids, mix, strict=True)), "dev": result.scores, "score": result.score,
         "accepted": choice.accepted[mix]}
        for mix, result in choice.dev.items()
    ]  # fmt: skip
    folders = [{"model_id": i, "folder": name} for i, name in zip(ids, names, strict=True)]
    return {"weights": dict(zip(ids, choice.weights, strict=True)), "candidates": rows, "ingredients": folders}


def _start_scores(own: dict, spec: TrainSpec) -> dict[str, float]:
    """The start's dev scores as the recipe's training recorded them (step 0), where it scored every dev task."""
    evals = (own.get("report") or {}).get("dev_task_evals") or {}
    scores = {task: score for task, steps in evals.items() for step, score in steps if step == 0}
    return scores if set(scores) == {task.name for task in spec.dev_tasks} else {}


def _manifest(ctx: RunContext, own: dict, model_id: str, out_dir: Path, start: dict, chosen: DevResult,
              soup: dict) -> dict:  # fmt: skip
    """The own model's manifest (its training, card fields and dev tasks) as the soup's. Step 0
    keeps the start's dev scores (the evaluate stage may reuse them as the start's); the soup's
    are recorded at its `selected_step`: the own model's, or its last step where it exported the
    start (a soup is never the start), and `soup` says what was averaged."""
    spec = ctx.recipe.train
    assert spec is not None
    manifest = {key: value for key, value in copy.deepcopy(own).items() if key not in ("files_sha256", "evaluation")}
    weights = {task.name: task.weight for task in spec.dev_tasks}
    report = manifest.get("report", {})
    step = manifest.get("selected_step") or max(int(report.get("steps") or 0), 1)
    manifest["report"] = {
        **report,
        "dev_evals": [[0, DevResult.of(start, weights).score], [step, chosen.score]],
        "dev_task_evals": {task: [[0, start[task]], [step, value]] for task, value in chosen.scores.items()},
    }
    return manifest | {"recipe": ctx.recipe.name, "model_id": model_id, "path": str(out_dir), "selected_step": step,
                       "improved_over_start": True, "soup": soup}  # fmt: skip
