"""The soup stage: the recipe's trained model averaged with its `soup.recipes`' models, the mix
chosen on the recipe's dev tasks (`train.soup`), exported and recorded in `models` like a
trained model, or reused."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from viewmill.pipelines.context import RunContext
from viewmill.pipelines.progress import progress_bar
from viewmill.pipelines.recipe import SoupSpec, TrainSpec
from viewmill.pipelines.stages.evaluate import task_data_hash
from viewmill.pipelines.stages.train import TrainResult, dev_scorer, publish_model
from viewmill.storage.ids import fingerprint
from viewmill.train.dev_scores import DevResult
from viewmill.train.encoder import load_sentence_model, resolve_encoder
from viewmill.train.export import export, is_complete_model, model_lock, read_manifest
from viewmill.train.loop import training_code_fingerprint
from viewmill.train.soup import SoupError, candidate_weights, choose_soup

__all__ = ["SoupError", "SoupResult", "soup_model_id", "soup_stage"]


@dataclass(frozen=True)
class SoupResult:
    model_id: str
    path: str
    reused: bool
    weights: dict[str, float]  # each ingredient's model id: its weight in the exported mix
    candidates: list[dict[str, Any]] = field(default_factory=list)  # each mix: weights, dev scores, accepted

    def as_dict(self) -> dict[str, Any]:
        return {"model_id": self.model_id, "path": self.path, "reused": self.reused, "weights": self.weights,
                "candidates": self.candidates}  # fmt: skip


def soup_model_id(spec: TrainSpec, soup: SoupSpec, ingredients: list[TrainResult]) -> str:
    """What decides the soup: its ingredients (this recipe's model first), the candidate shares,
    the dev tasks with their data and the rule that choose, and the code that averages."""
    dev = [(task.name, task.weight, task_data_hash(task)) for task in spec.dev_tasks]
    return fingerprint("soup", [i.model_id for i in ingredients], soup.shares, dev,
                       spec.selection.model_dump(mode="json"), training_code_fingerprint())  # fmt: skip


def soup_stage(ctx: RunContext, ingredients: list[TrainResult]) -> SoupResult:
    """Average `ingredients` (the recipe's own trained model first); a soup made before from
    the same models, shares, dev tasks and code is reused. Exported to `<dir>.staged`, recorded,
    then renamed into place, as the train stage does."""
    spec, soup = ctx.recipe.train, ctx.recipe.soup
    assert spec is not None and soup is not None
    model_id = soup_model_id(spec, soup, ingredients)
    out_dir = ctx.state.models / f"{ctx.recipe.name}-soup-{model_id[:12]}"
    staged = out_dir.with_name(out_dir.name + ".staged")
    with model_lock(out_dir, "soup"):
        made = not is_complete_model(out_dir) and not is_complete_model(staged)
        if made:
            _cook(ctx, ingredients, model_id, out_dir, staged)
        publish_model(ctx, staged, out_dir, model_id)
    recorded = read_manifest(out_dir)["soup"]
    return SoupResult(model_id, str(out_dir), reused=not made, weights=recorded["weights"],
                      candidates=recorded["candidates"])  # fmt: skip


def _cook(ctx: RunContext, ingredients: list[TrainResult], model_id: str, out_dir: Path, staged: Path) -> None:
    spec, soup = ctx.recipe.train, ctx.recipe.soup
    assert spec is not None and soup is not None
    names = [Path(i.path).name for i in ingredients]
    models = [load_sentence_model(i.path) for i in ingredients]
    # The first model takes each mix's weights in place: its own are copied first.
    states = [{k: v.clone() for k, v in models[0].state_dict().items()}, *(m.state_dict() for m in models[1:])]
    own = read_manifest(Path(ingredients[0].path))
    candidates = candidate_weights(soup.shares, len(ingredients))
    score = dev_scorer(spec.dev_tasks)
    assert score is not None  # the schema requires dev tasks
    start = _start_scores(own, spec) or score(load_sentence_model(resolve_encoder(spec.encoder))).scores
    with progress_bar(f"soup of {len(ingredients)} models", total=len(candidates), unit="mixes") as progress:

        def scored(mix: tuple[float, ...], result: DevResult) -> None:
            shares = " + ".join(f"{weight:.2f} {name}" for weight, name in zip(mix, names, strict=True))
            scores = ", ".join(f"{task} {value:.2f}" for task, value in result.scores.items())
            progress.note(f"dev of {shares}: {scores} (mean {result.score:.2f})")
            progress(progress.done + 1, len(candidates))

        # Scoring is the counted work here (one mix a unit), not a phase between units.
        choice = choose_soup(models[0], states, names, candidates, score, start, spec.selection, scored)
    ids = [i.model_id for i in ingredients]
    rows = [
        {"weights": dict(zip(ids, mix, strict=True)), "dev": result.scores, "score": result.score,
         "accepted": choice.accepted[mix]}
        for mix, result in choice.dev.items()
    ]  # fmt: skip
    folders = [{"model_id": i, "folder": name} for i, name in zip(ids, names, strict=True)]
    recorded = {"weights": dict(zip(ids, choice.weights, strict=True)), "candidates": rows, "ingredients": folders}
    export(models[0], staged, _manifest(ctx, own, model_id, out_dir, choice.dev[choice.weights], recorded))


def _start_scores(own: dict, spec: TrainSpec) -> dict[str, float]:
    """The start's dev scores as the recipe's training recorded them (step 0), where it scored every dev task."""
    evals = (own.get("report") or {}).get("dev_task_evals") or {}
    scores = {task: score for task, steps in evals.items() for step, score in steps if step == 0}
    return scores if set(scores) == {task.name for task in spec.dev_tasks} else {}


def _manifest(ctx: RunContext, own: dict, model_id: str, out_dir: Path, chosen, soup: dict) -> dict:
    """The own model's manifest (its training, card fields and dev tasks) as the soup's: its
    dev scores at the selected step are the soup's, and `soup` says what was averaged."""
    manifest = {key: value for key, value in copy.deepcopy(own).items() if key not in ("files_sha256", "evaluation")}
    step = manifest.get("selected_step") or 0
    manifest["report"] = {
        **manifest.get("report", {}),
        "dev_evals": [[step, chosen.score]],
        "dev_task_evals": {task: [[step, value]] for task, value in chosen.scores.items()},
    }
    return manifest | {"recipe": ctx.recipe.name, "model_id": model_id, "path": str(out_dir), "soup": soup}
