"""The model card of an exported model: Hugging Face metadata (library, tags, base model, the
training data sets by hub id where known, a model-index of the dev score and of every test
score the training run evaluated) and a body naming the recipe, the pairs snapshot, the
objective and the selected step. Written at export, and again once the run has evaluated it."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from viewmill.train.embedded import EMBEDDED
from viewmill.train.encoder import EMBEDDED_PREFIX
from viewmill.train.evaluation.sts import STS_FORMATS

from viewmill.registry import RegistryError

STAGED_SUFFIX = ".staged"  # the train stage exports to `<model>.staged`, then renames it into place
# Corpus folders (the data registry's, ../shared/data's) whose data set is known.
CORPUS_FOLDERS = {"snli": "stanfordnlp/snli", "snli_senteval": "stanfordnlp/snli"}
EVALUATION = "evaluation"  # manifest key: the test rows of the run that trained the model, as its card shows them


def card_name(out_dir: Path, manifest: Mapping[str, Any]) -> str:
    """The name the model is published under: its final folder's, never the staging folder's."""
    path = manifest.get("path")
    return Path(path).name if path else out_dir.name.removesuffix(STAGED_SUFFIX)


def task_dataset(task: Any) -> dict[str, str | None] | None:
    """{"id", "config", "split"} of an evaluation task's Hugging Face data set where its files
    are a known one (its STS format's `dataset`: STS-B, STS12-16, SICK's full files, STS 2017,
    stsb-multi-mt); None for files of one's own. `task` is a task object or its JSON form (a
    manifest's dev task)."""
    get = task.get if isinstance(task, Mapping) else lambda key: getattr(task, key, None)
    fmt = get("format")
    return STS_FORMATS[fmt].dataset(get) if fmt in STS_FORMATS else None


def corpus_datasets(fmt: str, files: list[Any]) -> list[str]:
    """Hub ids of a corpus where known: an `hf` corpus names them, files in a known data set's folder are that one."""
    ids: list[str] = []
    for file in files:
        path = Path(str(file))
        found = str(file) if fmt == "hf" and not path.exists() else CORPUS_FOLDERS.get(path.parent.name)
        if found and found not in ids:
            ids.append(found)
    return ids


def hub_id(ref: str | None) -> str | None:
    """The Hugging Face id of a base model reference, where it has one (a local folder has none)."""
    if ref is None or ref.startswith(("/", ".", "~")) or Path(ref).exists():
        return None
    if ref.startswith(EMBEDDED_PREFIX):
        model = EMBEDDED.get(ref.removeprefix(EMBEDDED_PREFIX))
        return model.hub_id if model else None
    return ref


def base_license(resolved_base: str | None) -> str:
    """The base model's license from its own card; "other" when it states none."""
    from huggingface_hub import ModelCard

    card = Path(resolved_base) / "README.md" if resolved_base else None
    if card is not None and card.is_file():
        license_ = ModelCard.load(card).data.license
        if license_:
            return license_
    return "other"


def dev_results(manifest: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The selected step's dev scores as result rows, one per dev task (they picked the exported
    weights). One task's score is the selection score (manifests before per-task records too)."""
    report, step = manifest.get("report", {}), manifest["selected_step"]
    per_task = report.get("dev_task_evals") or {}
    if len(per_task) > 1:
        scores = [(task, dict(evals).get(step)) for task, evals in per_task.items()]
    else:
        scores = [(manifest.get("dev_task"), dict(report.get("dev_evals") or []).get(step))]
    configs = manifest["train_config"].get("dev") or []
    configs = configs if isinstance(configs, list) else [configs]
    by_name = {config.get("name"): config for config in configs}
    return [
        {"task": task, "metric": "spearman_cosine_x100", "value": float(score), "n": None,
         "dataset": task_dataset(by_name.get(task) or (configs[0] if len(configs) == 1 else {}))}
        for task, score in scores if task and score is not None
    ]  # fmt: skip


def model_card(name: str, manifest: Mapping[str, Any], tests: list[dict[str, Any]] | None = None):
    """The Hugging Face / sentence-transformers card. `tests`: the run's evaluation rows
    ({"task", "metric", "value", "n", "dataset", "same_as"}), by default those the manifest
    records (`EVALUATION`); each is in the model-index and the body's table."""
    from huggingface_hub import ModelCard, ModelCardData

    objective = manifest["train_config"]["objective"]
    dev = dev_results(manifest)
    tests = manifest.get(EVALUATION) if tests is None else tests
    results = list(tests or []) + dev
    data = ModelCardData(
        library_name="sentence-transformers",
        pipeline_tag="sentence-similarity",
        tags=["sentence-transformers", "sentence-similarity", "feature-extraction", "viewmill", objective],
        base_model=hub_id(manifest.get("base_model")),
        datasets=manifest.get("corpus_datasets") or None,
        license=manifest.get("license") or "other",
        model_name=name,
        eval_results=_model_index(results) or None,
    )
    body = card_body(name, manifest, dev) + results_section(manifest, dev, tests)
    return ModelCard(f"---\n{data.to_yaml()}\n---\n\n{body}")


def _model_index(results: list[dict[str, Any]]) -> list:
    """Every scored task as sentence-transformers' own cards list it: task type and name ("semantic-similarity",
    "Semantic Similarity"), the data set by hub id where known (else the task's name, as their evaluators'
    names), metric `spearman_cosine` or `accuracy` on 0-1. A task the run evaluated appears once, as
    evaluated, even when it was also a dev task (`results`: evaluated rows first)."""
    from huggingface_hub import EvalResult

    index, seen = [], set()
    for row in results:
        if row["task"] in seen:
            continue
        seen.add(row["task"])
        accuracy, dataset = row["metric"].startswith("accuracy"), row["dataset"] or {}
        index.append(EvalResult(
            task_type="text-classification" if accuracy else "semantic-similarity",
            task_name="Text Classification" if accuracy else "Semantic Similarity",
            dataset_type=dataset.get("id") or row["task"], dataset_name=row["task"],
            dataset_config=dataset.get("config"), dataset_split=dataset.get("split"),
            metric_type="accuracy" if accuracy else "spearman_cosine",
            metric_name="Accuracy" if accuracy else "Spearman Cosine",
            metric_value=round(float(row["value"]) / (100 if row["metric"].endswith("_x100") else 1), 6),
        ))  # fmt: skip
    return index


def card_body(name: str, manifest: Mapping[str, Any], dev: list[dict[str, Any]]) -> str:
    config, objective = manifest["train_config"], manifest["train_config"]["objective"]
    selected, steps = manifest["selected_step"], manifest["report"]["steps"]
    best = _best(manifest, dev)
    lines = [
        f"# {name}",
        "",
        f"A sentence encoder trained by viewmill with {objective_name(objective)} (objective `{objective}`) "
        f"from `{manifest.get('base_model')}`.",
        "",
        f"- recipe: `{manifest.get('recipe')}`; corpus: `{manifest.get('corpus')}`",
        f"- pairs snapshot: `{manifest.get('snapshot')}`",
        f"- objective: `{objective}`; {steps} steps run, batch size {config['batch_size']}",
        f"- selected step: {selected}{best}",
        f"- max_seq_length: {manifest['max_seq_length']} tokens, the length training truncated at; "
        "longer inputs are truncated the same way",
    ]
    lines += _soup_lines(manifest.get("soup"))
    if selected == 0 and not manifest.get("soup"):
        lines += ["", "**No improvement over the start.** No dev evaluation beat the starting model, so this "
                  f"directory holds `{manifest.get('base_model')}` unchanged (selected_step: 0). "
                  "It is not a trained result."]  # fmt: skip
    entry = _entry(objective)
    remote = entry.remote_code if entry is not None else ""
    lines += [
        "",
        "## Usage",
        "",
        "```python",
        "from sentence_transformers import SentenceTransformer",
        "",
        f'model = SentenceTransformer("{name}"' + (", trust_remote_code=True)" if remote else ")"),
        'embeddings = model.encode(["A man is playing a guitar.", "Someone plays the guitar."])',
        "```",
    ]
    if remote:
        lines += ["", remote]
    if entry is not None and entry.citation:
        lines += ["", "## Citation", "", "```bibtex", entry.citation, "```"]
    return "\n".join(lines) + "\n"


def _soup_lines(soup: Mapping[str, Any] | None) -> list[str]:
    """What a soup averaged: its models' weights, and the dev tasks' choice of the mix."""
    if not soup:
        return []
    folders = {item["model_id"]: item["folder"] for item in soup["ingredients"]}
    parts = ", ".join(f"`{folders[model]}` x {weight:.2f}" for model, weight in soup["weights"].items())
    return ["", f"**A model soup**: the weights of {len(folders)} fine-tunes of one start averaged ({parts}); "
            f"the mix chosen on the dev tasks among {len(soup['candidates'])} candidates. The training above is "
            "the first model's."]  # fmt: skip


def _entry(objective: str):
    """The objective's registry entry; None for a plugin no longer installed (a card written again later)."""
    from viewmill.train.objectives import OBJECTIVES  # here: card.py itself loads without torch

    try:
        return OBJECTIVES.get(objective)
    except RegistryError:
        return None


def objective_name(objective: str) -> str:
    """The entry's title for the objective; a plugin without one: its name and description (its
    bare name where it has none or is no longer installed)."""
    entry = _entry(objective)
    if entry is not None and entry.title:
        return entry.title
    description = entry.description if entry is not None else ""
    return f"the plugin objective {objective}" + (f" ({description})" if description else "")


def _best(manifest: Mapping[str, Any], dev: list[dict[str, Any]]) -> str:
    """Why the selected step: its dev score, or over several tasks the rule and the selection score."""
    if len(dev) == 1:
        return f" (best {dev[0]['task']} score, {dev[0]['value']:.2f})"
    if not dev:
        return ""
    score = dict(manifest["report"]["dev_evals"])[manifest["selected_step"]]
    rule = manifest["train_config"].get("selection") or {}
    how = "weighted mean of the dev tasks"
    if rule.get("rule") == "mean-no-regression":
        how += f" with no task below its start by more than {rule.get('tolerance', 0.0):g}"
    return f" (best {how}, {score:.2f})"


def results_section(manifest: Mapping[str, Any], dev: list[dict[str, Any]], tests: list[dict] | None) -> str:
    """The dev score and every test score of the run that trained the model, as a table."""
    lines = ["", "## Evaluation", ""]
    where = f"the viewmill lake's `evals` table (model id `{manifest.get('model_id')}`)"
    if tests is None:
        lines.append(f"Not evaluated by its run yet: results of recipe runs and of `viewmill eval` are in {where}.")
    else:
        lines.append(f"Scored by the run that trained it; later `viewmill eval` results are in {where} only.")
    if any(row.get("same_as") for row in tests or []):
        start = manifest.get("base_model")
        lines += ["", f"Its weights are those of the model it started from (`{start}`), tensor for tensor, so its "
                  "test scores below are that model's, reused rather than scored again."]  # fmt: skip
    rows = dev + list(tests or [])
    if rows:
        lines += ["", "| task | data set | split | metric | value | n |", "|---|---|---|---|---|---|"]
        for i, row in enumerate(rows):
            dataset = row["dataset"] or {}
            hub = dataset.get("id") or "own files (no hub id)"
            role = " (model selection)" if i < len(dev) else ""
            n = "" if row["n"] is None else row["n"]
            lines.append(f"| {row['task']}{role} | {hub} | {dataset.get('split') or ''} | {row['metric']} | "
                         f"{row['value']:.2f} | {n} |")  # fmt: skip
    return "\n".join(lines) + "\n"
