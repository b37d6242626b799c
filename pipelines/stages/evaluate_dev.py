"""Dev scores the train stage already made, reused by the evaluate stage: training scored each
dev task on the start (step 0) and on the state it exported, so an evaluate task that is one of
them is read from the model's manifest instead of encoded again, where the weights, modules,
truncation, device, precision and batch size are the stage's own. The figure equals a fresh scoring
to within 1e-4 (training's evaluator and the stage batch and normalise differently; tested)."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from pathlib import Path

from viewmill.pipelines.recipe import TrainSpec
from viewmill.train.encoder import load_sentence_model
from viewmill.train.evaluation.sts import StsTask, load_task, model_scores
from viewmill.train.manifest import read_manifest

from viewmill.cpu import auto_precision

# The batch size training's dev scoring encodes with (model_scores' own default).
DEV_BATCH_SIZE = inspect.signature(model_scores).parameters["batch_size"].default


def reusable_dev_scores(
    spec: TrainSpec, trained_path: str, start_path: str | None, tasks: list, batch_size: int,
    task_hash: Callable[[StsTask], str],
) -> dict[str, dict[str, float]]:  # fmt: skip
    """{"trained" | "start": {evaluate task name: score}} for the tasks whose dev score of the
    exported state (and of step 0, for the start) may stand for the stage's own scoring."""
    precision = auto_precision(spec.device) if spec.precision == "auto" else spec.precision
    if not (spec.eval_every and precision == "fp32" and spec.device == "cpu" and batch_size == DEV_BATCH_SIZE):
        return {}
    manifest = read_manifest(Path(trained_path))
    per_task = (manifest.get("report") or {}).get("dev_task_evals") or {}
    dev_hashes = {task_hash(StsTask.model_validate(dev.model_dump(exclude={"weight"}))): dev.name
                  for dev in spec.dev_tasks}  # fmt: skip
    # One-set tasks only: a dev score is the concatenated set's, the stage also stores each subset's.
    matches = {task.name: dev_hashes[task_hash(task)] for task in tasks if isinstance(task, StsTask)
               and task_hash(task) in dev_hashes and len(load_task(task)) == 1}  # fmt: skip
    if not matches:
        return {}
    reused = {"trained": _at_step(per_task, matches, manifest.get("selected_step"))}
    texts = [text for task in tasks if task.name in matches for text in _texts(task)]
    began_at_start = start_path is not None and not spec.continues_a_model
    if began_at_start and _start_scores_alike(spec, trained_path, start_path, texts):
        reused["start"] = _at_step(per_task, matches, 0)
    return reused


def _at_step(per_task: Mapping[str, list], matches: Mapping[str, str], step: int | None) -> dict[str, float]:
    """Each matched evaluate task's dev score at `step`, where training scored that step."""
    scores = {}
    for name, dev_name in matches.items():
        at = dict((s, v) for s, v in per_task.get(dev_name, []))
        if step in at:
            scores[name] = float(at[step])
    return scores


def _texts(task: StsTask) -> list[str]:
    data = next(iter(load_task(task).values()))
    return [*data.s1, *data.s2]


def _start_scores_alike(spec: TrainSpec, trained_path: str, start_path: str, texts: list[str]) -> bool:
    """Whether step 0 of training is the start as the stage loads it: the same modules (the
    objective's pooling may differ from the base's) and no text truncated by either length
    (training truncates at max_length, the base at its own max_seq_length)."""
    start, trained = load_sentence_model(start_path), load_sentence_model(trained_path)
    structure = _structure(start)
    if structure is None or structure != _structure(trained):
        return False
    limit = min(spec.max_length, start.max_seq_length or spec.max_length)
    lengths = start.tokenizer(texts, truncation=False, verbose=False)["input_ids"]
    return max((len(ids) for ids in lengths), default=0) <= limit


def _structure(model) -> list | None:
    """The model's module types, and their settings but the transformer's (its length differs);
    None where a module has no settings to compare (IS-BERT's CNN): such a model is never alike."""
    if not all(hasattr(m, "get_config_dict") for m in list(model)[1:]):
        return None
    return [(type(m).__name__, None if i == 0 else m.get_config_dict()) for i, m in enumerate(model)]
