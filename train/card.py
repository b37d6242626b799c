"""The model card of an exported model: Hugging Face metadata (library, tags, base model, the
training data sets by hub id where known, a model-index of the dev score and of every test
score the training run evaluated) and a body naming the recipe, the pairs snapshot, the
objective and the selected step. Written at export, and again once the run has evaluated it."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from viewmill.train.embedded import EMBEDDED
from viewmill.train.encoder import CNN_REF, EMBEDDED_PREFIX, MODELING_FILE

OBJECTIVE_NAMES = {
    "bsl": "BSL (bootstrapped sentence representation learning)",
    "ntxent": "NT-Xent contrastive",
    "infonce": "InfoNCE (in-batch negatives)",
    "sgopt": "SG-OPT (self-guided contrastive)",
    "isbert": "IS-BERT (mutual information with n-gram features)",
}
STAGED_SUFFIX = ".staged"  # the train stage exports to `<model>.staged`, then renames it into place
# Evaluation files and folders whose Hugging Face data set is known: name -> (hub id, split).
STS_FILES = {
    "sts-train.csv": ("mteb/stsbenchmark-sts", "train"),
    "sts-dev.csv": ("mteb/stsbenchmark-sts", "validation"),
    "sts-test.csv": ("mteb/stsbenchmark-sts", "test"),
    **{f"STS{year}-en-test": (f"mteb/sts{year}-sts", "test") for year in range(12, 17)},
}
# Corpus folders (the data registry's, ../shared/data's) whose data set is known.
CORPUS_FOLDERS = {"snli": "stanfordnlp/snli", "snli_senteval": "stanfordnlp/snli"}


def card_name(out_dir: Path, manifest: Mapping[str, Any]) -> str:
    """The name the model is published under: its final folder's, never the staging folder's."""
    path = manifest.get("path")
    return Path(path).name if path else out_dir.name.removesuffix(STAGED_SUFFIX)


def task_dataset(task: Any) -> dict[str, str | None] | None:
    """{"id", "config", "split"} of an evaluation task's Hugging Face data set where its files
    are a known one (STS-B, STS12-16, SICK's full files, STS 2017, stsb-multi-mt); None for
    files of one's own. `task` is a task object or its JSON form (a manifest's dev task)."""
    get = task.get if isinstance(task, Mapping) else lambda key: getattr(task, key, None)
    fmt, name = get("format"), Path(str(get("path") or "")).name
    if fmt in ("stsb", "senteval-sts") and name in STS_FILES:
        hub, split = STS_FILES[name]
        return {"id": hub, "config": None, "split": split}
    known = {
        "sick-all": ("mteb/sickr-sts", None, "test"),  # MTEB's SICK-R is all 9,927 pairs, as sick-all scores
        "sts17": ("mteb/sts17-crosslingual-sts", get("track"), "test"),
        "stsb-xling": ("PhilipMay/stsb_multi_mt", get("lang_b"), get("split")),
    }
    if fmt in known:
        hub, config, split = known[fmt]
        return {"id": hub, "config": config, "split": split}
    return None


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


def dev_result(manifest: Mapping[str, Any]) -> dict[str, Any] | None:
    """The selected step's dev score, as a result row (the dev task picked the exported weights)."""
    dev = manifest.get("dev_task")
    score = dict(manifest.get("report", {}).get("dev_evals") or []).get(manifest["selected_step"])
    if not dev or score is None:
        return None
    dataset = task_dataset(manifest["train_config"].get("dev") or {})
    return {"task": dev, "metric": "spearman_cosine_x100", "value": float(score), "n": None, "dataset": dataset}


def model_card(name: str, manifest: Mapping[str, Any], tests: list[dict[str, Any]] | None = None):
    """The Hugging Face / sentence-transformers card. `tests`: the run's evaluation rows
    ({"task", "metric", "value", "n", "dataset"}); a row whose data set has no known hub id is
    in the body's table but not the model-index (which needs one)."""
    from huggingface_hub import ModelCard, ModelCardData

    objective = manifest["train_config"]["objective"]
    dev = dev_result(manifest)
    results = ([dev] if dev else []) + list(tests or [])
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
    from huggingface_hub import EvalResult

    index = []
    for row in results:
        if row["dataset"] is None:
            continue
        accuracy = row["metric"].startswith("accuracy")
        index.append(EvalResult(
            task_type="text-classification" if accuracy else "sentence-similarity",
            dataset_type=row["dataset"]["id"], dataset_name=row["task"], dataset_config=row["dataset"]["config"],
            dataset_split=row["dataset"]["split"], metric_type="accuracy" if accuracy else "spearman_cosine",
            metric_name="Accuracy x100" if accuracy else "Spearman x100 (cosine)",
            metric_value=round(float(row["value"]), 4),
        ))  # fmt: skip
    return index


def card_body(name: str, manifest: Mapping[str, Any], dev: dict[str, Any] | None) -> str:
    config, objective = manifest["train_config"], manifest["train_config"]["objective"]
    selected, steps = manifest["selected_step"], manifest["report"]["steps"]
    best = f" (best {dev['task']} score, {dev['value']:.2f})" if dev else ""
    lines = [
        f"# {name}",
        "",
        f"A sentence encoder trained by viewmill with {OBJECTIVE_NAMES[objective]} (objective `{objective}`) "
        f"from `{manifest.get('base_model')}`.",
        "",
        f"- recipe: `{manifest.get('recipe')}`; corpus: `{manifest.get('corpus')}`",
        f"- pairs snapshot: `{manifest.get('snapshot')}`",
        f"- objective: `{objective}`; {steps} steps run, batch size {config['batch_size']}",
        f"- selected step: {selected}{best}",
        f"- max_seq_length: {manifest['max_seq_length']} tokens, the length training truncated at; "
        "longer inputs are truncated the same way",
    ]
    if selected == 0:
        lines += ["", "**No improvement over the start.** No dev evaluation beat the starting model, so this "
                  f"directory holds `{manifest.get('base_model')}` unchanged (selected_step: 0). "
                  "It is not a trained result."]  # fmt: skip
    remote = objective == "isbert"
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
        lines += ["", f"The IS-BERT CNN is this directory's own code (`{MODELING_FILE}`, module `{CNN_REF}`): "
                  "loading needs `trust_remote_code=True` and sentence-transformers, not viewmill."]  # fmt: skip
    return "\n".join(lines) + "\n"


def results_section(manifest: Mapping[str, Any], dev: dict[str, Any] | None, tests: list[dict] | None) -> str:
    """The dev score and every test score of the run that trained the model, as a table."""
    lines = ["", "## Evaluation", ""]
    where = f"the viewmill lake's `evals` table (model id `{manifest.get('model_id')}`)"
    if tests is None:
        lines.append(f"Not evaluated by its run yet: results of recipe runs and of `viewmill eval` are in {where}.")
    else:
        lines.append(f"Scored by the run that trained it; later `viewmill eval` results are in {where} only.")
    rows = ([dev] if dev else []) + list(tests or [])
    if rows:
        lines += ["", "| task | data set | split | metric | value | n |", "|---|---|---|---|---|---|"]
        for row in rows:
            dataset = row["dataset"] or {}
            hub = dataset.get("id") or "own files (no hub id)"
            role = " (model selection)" if row is dev else ""
            n = "" if row["n"] is None else row["n"]
            lines.append(f"| {row['task']}{role} | {hub} | {dataset.get('split') or ''} | {row['metric']} | "
                         f"{row['value']:.2f} | {n} |")  # fmt: skip
    return "\n".join(lines) + "\n"
