"""What is trained is what is exported and what a user loads: every objective's training-side
sentence embedding against `SentenceTransformer(exported_dir)`, IS-BERT without viewmill,
models exported before the modeling file, and the model card."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from viewmill.train.assembly import prepare
from viewmill.train.batches import tokenize
from viewmill.train.config import TrainConfig
from viewmill.train.encoder import load_sentence_model
from viewmill.train.export import MANIFEST, ModelIdentityError, export, model_id_of
from viewmill.train.loop import train_model
from viewmill.train.optimisation import make_optimizer, train_step

from tests.conftest import REPO, SENTENCES

MAX_LENGTH = 12
# Mixed lengths: one word, short, and longer than the training max_length (truncated alike).
MIXED = [
    "dog",
    "A cat.",
    SENTENCES[0],
    SENTENCES[4],
    " ".join(SENTENCES[:3]),
    "the man is playing a guitar on the street and two dogs are running through a field in the park",
    SENTENCES[7],
]
OBJECTIVES = {
    "bsl": {"head_warmup_steps": 1, "options": {"predictor_k": 2}},
    "ntxent": {},
    "infonce": {},
    "sgopt": {"head_warmup_steps": 1, "options": {"head_width": 32}},
    "isbert": {"head_warmup_steps": 1, "options": {"filters": 8}},
}


@pytest.fixture(scope="module")
def cls_model(tmp_path_factory, tiny_model) -> Path:
    """The tiny model with [CLS] pooling instead of mean."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Pooling

    transformer = SentenceTransformer(str(tiny_model), device="cpu")[0]
    out = tmp_path_factory.mktemp("cls") / "cls-model"
    pooling = Pooling(transformer.get_embedding_dimension(), pooling_mode="cls")
    SentenceTransformer(modules=[transformer, pooling], device="cpu").save(str(out))
    return out


def _manifest(config: TrainConfig, steps: int) -> dict:
    report = {"steps": steps, "dev_evals": []}
    return {"recipe": "t", "snapshot": "s", "base_model": "tiny", "model_id": "m", "train_config": config.model_dump(),
            "report": report, "selected_step": steps, "max_seq_length": config.max_length}  # fmt: skip


def _train_and_export(base: Path, objective: str, out: Path):
    """Two real training steps through the loop's own pieces, then the loop's export."""
    config = TrainConfig(objective=objective, steps=3, batch_size=8, max_length=MAX_LENGTH, encoder_lr=1e-2,
                         **OBJECTIVES[objective])  # fmt: skip
    model, exported, tokenizer = prepare(config, str(base))
    optimizer = make_optimizer(config, model)
    model.train()
    pairs = [(s, s.replace("a ", "the ", 1)) for s in SENTENCES[:8]]
    for step in (1, 2):
        batch = tokenize(tokenizer, [a for a, _ in pairs] + [b for _, b in pairs], config)
        train_step(model, optimizer, batch, len(pairs), train_encoder=step > config.head_warmup_steps)
    model.eval()
    export(exported, out, _manifest(config, 2))
    with torch.no_grad():
        expected = model.sentence_embedding(tokenize(tokenizer, MIXED, config))
    return expected


def _assert_agree(got, expected) -> None:
    cos = F.cosine_similarity(torch.as_tensor(got, dtype=torch.float32), expected.float(), dim=-1)
    assert cos.min().item() >= 0.9999, cos.tolist()


@pytest.mark.parametrize("objective", list(OBJECTIVES))
@pytest.mark.parametrize("pooling", ["mean", "cls"])
def test_training_embeddings_are_what_the_exported_model_gives(tmp_path, tiny_model, cls_model, objective, pooling):
    from sentence_transformers import SentenceTransformer

    base = tiny_model if pooling == "mean" else cls_model
    out = tmp_path / "model"
    expected = _train_and_export(base, objective, out)
    loaded = SentenceTransformer(str(out), device="cpu", trust_remote_code=objective == "isbert")
    assert loaded.max_seq_length == MAX_LENGTH, "the export truncates where training did"
    for batch_size in (1, 64):
        _assert_agree(loaded.encode(MIXED, batch_size=batch_size, convert_to_tensor=True), expected)


def test_isbert_embeddings_do_not_depend_on_the_batch(tmp_path, tiny_model):
    """The CNN masks [PAD]: a short sentence alone and padded next to a long one agree."""
    model = load_sentence_model(str(_isbert_export(tmp_path, tiny_model)))
    alone = model.encode(["dog"], batch_size=1, convert_to_tensor=True)
    padded = model.encode(["dog", MIXED[5]], batch_size=2, convert_to_tensor=True)[:1]
    assert torch.allclose(alone, padded, atol=1e-6)


def _isbert_export(tmp_path: Path, tiny_model: Path) -> Path:
    out = tmp_path / "isbert"
    _train_and_export(tiny_model, "isbert", out)
    return out


def test_the_manifest_records_the_sha256_of_every_file_the_export_wrote(tmp_path, tiny_model):
    """Every module's weights (the CNN's too), configs, tokenizer and carried code; a changed
    CNN weights file means the folder is no longer the model its manifest names."""
    out = _isbert_export(tmp_path, tiny_model)
    recorded = json.loads((out / MANIFEST).read_text())["files_sha256"]
    written = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()}
    assert set(recorded) == written - {MANIFEST, "README.md"}
    assert all(digest == hashlib.sha256((out / name).read_bytes()).hexdigest() for name, digest in recorded.items())
    weights = sorted(name for name in recorded if name.endswith((".safetensors", ".bin", ".pt")))
    assert "model.safetensors" in weights and len(weights) == 2, weights  # the transformer's and the CNN's
    assert "modeling_isbert.py" in recorded
    assert model_id_of(str(out)) == "m"
    cnn = out / next(name for name in weights if name != "model.safetensors")
    cnn.write_bytes(cnn.read_bytes()[:-4] + b"\0\0\0\1")
    with pytest.raises(ModelIdentityError, match=f"^{cnn} does not match the sha256 its viewmill.json recorded"):
        model_id_of(str(out))


NO_VIEWMILL = """
import importlib.util, json, sys
# Drop viewmill's editable-install finders and the repository from the import system.
sys.meta_path[:] = [f for f in sys.meta_path if "__editable__" not in repr(f)]
sys.path_hooks[:] = [h for h in sys.path_hooks if "__editable__" not in repr(h)]
sys.path[:] = [p for p in sys.path if p not in (sys.argv[3], "", ".")]
sys.path_importer_cache.clear()
for name in [n for n in sys.modules if n.split(".")[0] in ("viewmill", "train")]:
    del sys.modules[name]
assert importlib.util.find_spec("viewmill") is None and importlib.util.find_spec("train") is None
from sentence_transformers import SentenceTransformer
model = SentenceTransformer(sys.argv[1], device="cpu", trust_remote_code=True)
assert not any(n.split(".")[0] == "viewmill" for n in sys.modules)
texts = json.loads(sys.argv[2])
print(json.dumps({"one": model.encode(texts, batch_size=1).tolist(), "all": model.encode(texts, batch_size=64).tolist(),
                  "cnn": type(model[1]).__module__}))
"""


def test_isbert_export_loads_without_viewmill(tmp_path, tiny_model):
    out = tmp_path / "isbert"
    expected = _train_and_export(tiny_model, "isbert", out)
    modules = json.loads((out / "modules.json").read_text())
    assert [m["type"] for m in modules if "ReLUCNN" in m["type"]] == ["modeling_isbert.ReLUCNN"]
    assert "trust_remote_code=True" in (out / "README.md").read_text()
    env = {"HF_HUB_OFFLINE": "1", "HF_MODULES_CACHE": str(tmp_path / "modules"), "PATH": "/usr/bin:/bin",
           "HOME": str(tmp_path)}  # fmt: skip
    done = subprocess.run([sys.executable, "-I", "-c", NO_VIEWMILL, str(out), json.dumps(MIXED), str(REPO)],
                          capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["cnn"].endswith("modeling_isbert"), "the class came from the model directory's own file"
    _assert_agree(result["one"], expected)
    _assert_agree(result["all"], expected)


@pytest.mark.parametrize("legacy_ref", ["viewmill.train.objectives.ReLUCNN", "train.objectives.ReLUCNN"])
def test_isbert_models_exported_before_the_modeling_file_still_load(tmp_path, tiny_model, legacy_ref):
    """The old format (cnn.pt, modules.json naming viewmill's class), built here, loads
    through viewmill and gives the masked CNN's embeddings."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Pooling
    from viewmill.train.objectives import ReLUCNN

    base = SentenceTransformer(str(tiny_model), device="cpu")
    torch.manual_seed(0)
    cnn = ReLUCNN(base.get_embedding_dimension(), filters=4)
    old = SentenceTransformer(modules=[base[0], cnn, Pooling(12, "mean")], device="cpu")
    out = tmp_path / "legacy"
    old.save(str(out))
    modules_path = out / "modules.json"
    modules = json.loads(modules_path.read_text())
    assert modules[1]["type"].endswith(".ReLUCNN") and (out / modules[1]["path"] / "cnn.pt").is_file()
    modules[1]["type"] = legacy_ref
    modules_path.write_text(json.dumps(modules))
    loaded = load_sentence_model(str(out))
    assert type(loaded[1]) is ReLUCNN
    assert torch.equal(loaded[1].convs[0].weight, cnn.convs[0].weight)
    assert torch.allclose(loaded.encode(MIXED, convert_to_tensor=True), old.encode(MIXED, convert_to_tensor=True))


def test_viewmill_refuses_a_model_that_needs_unknown_code(tmp_path, tiny_model):
    import shutil

    from viewmill.train.encoder import EncoderError

    out = tmp_path / "odd"
    shutil.copytree(tiny_model, out)
    modules = json.loads((out / "modules.json").read_text())
    modules[1]["type"] = "modeling_odd.Pooling"
    (out / "modules.json").write_text(json.dumps(modules))
    with pytest.raises(EncoderError, match="modeling_odd.Pooling"):
        load_sentence_model(str(out))


def _dev(scores: list[float]):
    calls = iter(scores)
    return lambda model: next(calls)


CARD = {"recipe": "tiny", "snapshot": "tiny@1", "base_model": "embedded:all-MiniLM-L6-v2", "model_id": "abc",
        "corpus": "tiny-corpus", "license": "apache-2.0", "dev_task": "stsb-dev",
        "corpus_datasets": ["stanfordnlp/snli"]}  # fmt: skip


def _with_dev(**settings) -> TrainConfig:
    """A recipe's train section with STS-B dev (the file is not read: the tests score dev themselves)."""
    from viewmill.pipelines.recipe import TrainSpec
    from viewmill.train.evaluation.sts import StsTask

    dev = StsTask(name="stsb-dev", format="stsb", path=Path("data/stsbenchmark/sts-dev.csv"))
    return TrainSpec(steps=4, batch_size=8, head_warmup_steps=1, options={"predictor_k": 2}, encoder_lr=1e-2,
                     eval_every=2,
                     dev=dev, **settings)  # fmt: skip


def test_card_is_the_hub_format_with_the_dev_result(tmp_path, tiny_model):
    from huggingface_hub import ModelCard

    config = _with_dev(max_length=MAX_LENGTH)
    pairs = [(s, s.lower()) for s in SENTENCES]
    out = tmp_path / "bsl"
    report = train_model(pairs, str(tiny_model), config, out, card=CARD, dev=_dev([10.0, 20.0, 30.0]))
    assert report.selected_step == 4
    card = ModelCard.load(out / "README.md")
    data = card.data
    assert data.library_name == "sentence-transformers" and data.pipeline_tag == "sentence-similarity"
    assert data.tags == ["sentence-transformers", "sentence-similarity", "feature-extraction", "viewmill", "bsl"]
    assert data.base_model == "sentence-transformers/all-MiniLM-L6-v2"
    assert data.datasets == ["stanfordnlp/snli"] and data.license == "apache-2.0"
    (result,) = data.eval_results
    assert (result.dataset_name, result.metric_type, result.metric_value) == ("stsb-dev", "spearman_cosine", 0.3)
    assert (result.dataset_type, result.dataset_split) == ("mteb/stsbenchmark-sts", "validation")
    assert "pairs snapshot: `tiny@1`" in card.text and "recipe: `tiny`" in card.text and "objective `bsl`" in card.text
    assert f"max_seq_length: {MAX_LENGTH} tokens" in card.text and "No improvement" not in card.text
    manifest = json.loads((out / MANIFEST).read_text())
    assert manifest["selected_step"] == 4 and manifest["improved_over_start"] is True
    assert manifest["train_config"]["dev"]["split"] is None, "a stsb file has no split setting (only stsb-xling)"


def test_a_run_that_never_beat_the_start_says_so(tmp_path, tiny_model):
    from huggingface_hub import ModelCard
    from sentence_transformers import SentenceTransformer

    pairs = [(s, s.lower()) for s in SENTENCES]
    out = tmp_path / "bsl"
    report = train_model(pairs, str(tiny_model), _with_dev(), out, card=CARD, dev=_dev([50.0, 40.0, 30.0]))
    assert (report.best_step, report.selected_step) == (0, 0)
    manifest = json.loads((out / MANIFEST).read_text())
    assert manifest["selected_step"] == 0 and manifest["improved_over_start"] is False
    card = ModelCard.load(out / "README.md")
    assert "**No improvement over the start.**" in card.text and "selected_step: 0" in card.text
    assert card.data.eval_results[0].metric_value == 0.5  # 0-1, as sentence-transformers cards
    start = SentenceTransformer(str(tiny_model), device="cpu").encode(MIXED, convert_to_tensor=True)
    exported = SentenceTransformer(str(out), device="cpu").encode(MIXED, convert_to_tensor=True)
    assert torch.allclose(start, exported, atol=1e-6), "the export is the starting model"
