"""Exported models: the sentence-transformers directory with its model card and manifest,
the lock that keeps two runs off one model, and the one model id evaluations record."""

from __future__ import annotations

import json
import os
import shutil
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from filelock import FileLock, Timeout
from viewmill.storage.files import build_dir_atomically
from viewmill.train import modeling_isbert
from viewmill.train.embedded import EMBEDDED
from viewmill.train.encoder import CNN_REF, EMBEDDED_PREFIX, encoder_fingerprint

MANIFEST = "viewmill.json"
MODELING_FILE = "modeling_isbert.py"
CRASH_ENV = "VIEWMILL_TEST_CRASH_AT"  # tests name a point; the process kills itself there
OBJECTIVE_NAMES = {
    "bsl": "BSL (bootstrapped sentence representation learning)",
    "ntxent": "NT-Xent contrastive",
    "infonce": "InfoNCE (in-batch negatives)",
    "sgopt": "SG-OPT (self-guided contrastive)",
    "isbert": "IS-BERT (mutual information with n-gram features)",
}


class ModelBusyError(RuntimeError):
    """Another run holds the lock on a model being trained."""


@contextmanager
def model_lock(target: Path, what: str = "model") -> Iterator[None]:
    """Hold `<target>.lock` or refuse at once: two runs training one model would share its
    checkpoints and overwrite each other. The OS drops the lock when its process dies."""
    target.parent.mkdir(parents=True, exist_ok=True)
    path = target.with_name(target.name + ".lock")
    lock = FileLock(str(path), timeout=0)
    try:
        lock.acquire()
    except Timeout:
        raise ModelBusyError(
            f"another run is training the {what} {target} (it holds {path}): wait for it to finish and run "
            "again; the finished model is then reused"
        ) from None
    try:
        yield
    finally:
        lock.release()


def crash_point(name: str) -> None:
    """Kill this process here when the test hook names this point (kill tests of lineage)."""
    if os.environ.get(CRASH_ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)


def read_manifest(model_dir: Path) -> dict:
    return json.loads((model_dir / MANIFEST).read_text(encoding="utf-8"))


def is_complete_model(path: Path) -> bool:
    return (path / MANIFEST).is_file()


def model_id_of(resolved: str) -> str:
    """The id evaluations and the `models` table share: a viewmill model's own id (from its
    manifest), otherwise the content hash of the directory (a hub id is its own)."""
    manifest = Path(resolved) / MANIFEST
    if manifest.is_file():
        model_id = read_manifest(Path(resolved)).get("model_id")
        if model_id:
            return model_id
    return encoder_fingerprint(resolved)


def export(sentence_model, out_dir: Path, manifest: dict) -> None:
    """Save a sentence-transformers directory with its card and manifest, whole or not at all.

    An IS-BERT model carries its CNN's code (`modeling_isbert.py`) so it loads with
    `trust_remote_code=True` without viewmill.
    """

    def write(staging: Path) -> None:
        sentence_model.save(str(staging), create_model_card=False)
        if manifest["train_config"]["objective"] == "isbert":
            carry_modeling_file(staging)
        crash_point("export-partial")
        model_card(out_dir.name, manifest).save(staging / "README.md")
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=2, default=str), encoding="utf-8")

    build_dir_atomically(out_dir, write, replace=True)


def carry_modeling_file(folder: Path) -> None:
    """Copy the CNN's module file into the model and point modules.json at it."""
    shutil.copyfile(modeling_isbert.__file__, folder / MODELING_FILE)
    modules_path = folder / "modules.json"
    modules = json.loads(modules_path.read_text(encoding="utf-8"))
    for module in modules:
        if module["type"].endswith("modeling_isbert.ReLUCNN"):
            module["type"] = CNN_REF
    modules_path.write_text(json.dumps(modules, indent=2), encoding="utf-8")


def hub_id(ref: str | None) -> str | None:
    """The Hugging Face id of a base model reference, where it has one."""
    if ref is None:
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


def model_card(name: str, manifest: dict):
    """The Hugging Face / sentence-transformers model card: YAML metadata (library,
    pipeline, tags, base model, datasets, license, model-index of the dev results) and a
    body that names the recipe, the pairs snapshot, the objective and the selected step."""
    from huggingface_hub import EvalResult, ModelCard, ModelCardData

    config, objective = manifest["train_config"], manifest["train_config"]["objective"]
    dev = manifest.get("dev_task")
    selected = dict(manifest.get("report", {}).get("dev_evals") or [])
    score = selected.get(manifest["selected_step"])
    results = None
    if dev and score is not None:
        results = [EvalResult(task_type="sentence-similarity", dataset_type=dev, dataset_name=dev,
                              metric_type="spearman_cosine", metric_name="Spearman x100 (cosine)",
                              metric_value=round(float(score), 4))]  # fmt: skip
    data = ModelCardData(
        library_name="sentence-transformers",
        pipeline_tag="sentence-similarity",
        tags=["sentence-transformers", "sentence-similarity", "feature-extraction", "viewmill", objective],
        base_model=hub_id(manifest.get("base_model")),
        datasets=[manifest["corpus"]] if manifest.get("corpus") else None,
        license=manifest.get("license") or "other",
        model_name=name,
        eval_results=results,
    )
    body = card_body(name, manifest, config, objective, dev, score)
    return ModelCard(f"---\n{data.to_yaml()}\n---\n\n{body}")


def card_body(name: str, manifest: dict, config: dict, objective: str, dev: str | None, score) -> str:
    selected, steps = manifest["selected_step"], manifest["report"]["steps"]
    lines = [
        f"# {name}",
        "",
        f"A sentence encoder trained by viewmill with {OBJECTIVE_NAMES[objective]} (objective `{objective}`) "
        f"from `{manifest.get('base_model')}`.",
        "",
        f"- recipe: `{manifest.get('recipe')}`",
        f"- pairs snapshot: `{manifest.get('snapshot')}`",
        f"- objective: `{objective}`; {steps} steps run, batch size {config['batch_size']}",
        f"- selected step: {selected}" + (f" (best {dev} score, {score:.2f})" if score is not None else ""),
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
    lines += ["", "## Evaluation", "", "Results of `viewmill eval` and of recipe runs are in the viewmill lake's "
              "`evals` table (model id `" + str(manifest.get("model_id")) + "`) and its reports folder; evaluation "
              "never rewrites this card."]  # fmt: skip
    return "\n".join(lines) + "\n"
