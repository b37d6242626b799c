"""Shared fixtures: tiny real-architecture models built locally, small corpora, real Apertium."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Training's precision `auto` is bf16 on CPUs with native bf16: pinned, every test trains and
# compares figures in fp32 on every machine (tests of `auto` itself unpin it).
os.environ["VIEWMILL_AUTO_PRECISION"] = "fp32"
# Prefect reads its settings at import: keep its home out of the user's and telemetry off.
os.environ["PREFECT_HOME"] = tempfile.mkdtemp(prefix="viewmill-prefect-")
os.environ["DO_NOT_TRACK"] = "1"
os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
os.environ.pop("PREFECT_API_URL", None)
# A `viewmill run` subprocess leaves its state's temporary Prefect server up for the next run:
# in tests it stops after 2 idle minutes instead of 30.
os.environ.setdefault("VIEWMILL_PREFECT_IDLE_S", "120")
# pytest-xdist runs one worker per core: a torch thread pool per core in every worker (and in
# every `viewmill` subprocess it starts) oversubscribes the cores, which ran torch up to 10x
# slower here. Each worker and its children get their share of the cores instead.
_CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
_SHARE = str(max(1, _CORES // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))))
for _name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_name, _SHARE)

REPO = Path(__file__).resolve().parents[1]

SENTENCES = [
    "A man is playing a guitar on the street.",
    "Two dogs are running through a field.",
    "A woman is cutting vegetables in the kitchen.",
    "The children are playing football in the park.",
    "A group of people are sitting at a table.",
    "A girl is riding a bicycle down the road.",
    "An old man is reading a newspaper.",
    "The cat is sleeping on the sofa.",
    "A boy is jumping into a swimming pool.",
    "Two women are talking in a cafe.",
    "A man is climbing a high mountain.",
    "The dog is catching a red ball.",
    "A child is eating an apple.",
    "People are walking along the beach.",
    "A woman is singing on a stage.",
    "The men are working on a house.",
    "A small bird is sitting on a branch.",
    "A chef is cooking in a restaurant.",
    "Students are listening to a teacher.",
    "A couple is dancing at a wedding.",
]

needs_apertium = pytest.mark.skipif(
    shutil.which("apertium") is None, reason="Apertium is not installed (the quick start installs it with apt-get)"
)


def build_tiny_sentence_model(out: Path, texts: list[str], seed: int = 0) -> Path:
    """A random-weight BERT sentence-transformers model (mean pooling) with a WordPiece
    vocabulary written from `texts`: the real architecture at a size tests can train."""
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer
    from transformers import BertConfig, BertModel, BertTokenizerFast

    torch.manual_seed(seed)
    words = sorted({w.strip(".,!?").lower() for t in texts for w in t.split()} | set(".,!?'"))
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]
    hf_dir = out / "hf"
    hf_dir.mkdir(parents=True, exist_ok=True)
    (hf_dir / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    tokenizer = BertTokenizerFast(vocab=str(hf_dir / "vocab.txt"), do_lower_case=True)
    config = BertConfig(
        vocab_size=len(vocab),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
    )
    BertModel(config).save_pretrained(hf_dir)
    tokenizer.save_pretrained(hf_dir)
    transformer = Transformer(str(hf_dir), max_seq_length=64)
    pooling = Pooling(transformer.get_embedding_dimension(), pooling_mode="mean")
    model_dir = out / "sentence-model"
    SentenceTransformer(modules=[transformer, pooling], device="cpu").save(str(model_dir))
    return model_dir


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    extra = ["a", "the", "is", "are", "un", "el", "la", "una", "in", "on"]
    return build_tiny_sentence_model(tmp_path_factory.mktemp("tiny-model"), [*SENTENCES, " ".join(extra)])


def write_sts_fixture(path: Path) -> Path:
    """A small STS-B-format file (extra trailing column on one line, as the real file has)."""
    rows = [
        ("5.0", SENTENCES[0], "A man plays a guitar on the street."),
        ("0.5", SENTENCES[1], SENTENCES[7]),
        ("3.8", SENTENCES[2], "A woman is chopping vegetables."),
        ("1.0", SENTENCES[3], SENTENCES[10]),
        ("4.2", SENTENCES[4], "Some people sit at a table."),
        ("0.0", SENTENCES[5], SENTENCES[17]),
    ]
    lines = [f"main-captions\tMSRvid\t2012test\t{i:04d}\t{score}\t{a}\t{b}" for i, (score, a, b) in enumerate(rows)]
    lines[2] += "\textra-source-column"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture
def tiny_recipe(tmp_path, tiny_model) -> Path:
    """A complete recipe over 20 sentences, real Apertium, the tiny model and an STS fixture."""
    return write_tiny_recipe(tmp_path, tiny_model)


@pytest.fixture(scope="session")
def tiny_snapshot(tmp_path_factory, tiny_model) -> tuple[Path, Path, dict]:
    """The tiny recipe, a state directory holding its pairs snapshot and no model, and the
    snapshot's summary: built once; tests copy the state directory (shutil.copytree) and
    never change this one."""
    from viewmill.pipelines.recipe import load_recipe
    from viewmill.pipelines.run import RunContext, run_recipe
    from viewmill.pipelines.state import StatePaths

    folder = tmp_path_factory.mktemp("tiny-snapshot")
    recipe = write_tiny_recipe(folder, tiny_model)
    state = StatePaths(folder / "state")
    summary = run_recipe(RunContext(load_recipe(recipe), state), train=False)
    return recipe, state.root, summary["snapshot"]


@pytest.fixture(scope="session")
def tiny_run_in_small_commits(tmp_path_factory, tiny_model) -> tuple[Path, Path, dict]:
    """The tiny recipe, a state directory after one plain run of it in small commits
    (execution.chunk_sentences=6: many files), and the run's summary: made once; tests copy
    the state directory (shutil.copytree) and never change this one."""
    from viewmill.pipelines.recipe import load_recipe
    from viewmill.pipelines.run import RunContext, run_recipe
    from viewmill.pipelines.state import StatePaths

    folder = tmp_path_factory.mktemp("tiny-run")
    recipe = write_tiny_recipe(folder, tiny_model)
    state = StatePaths(folder / "state")
    summary = run_recipe(RunContext(load_recipe(recipe, ["execution.chunk_sentences=6"]), state))
    return recipe, state.root, summary


def write_tiny_recipe(folder: Path, tiny_model: Path) -> Path:
    """tiny.yaml in `folder`, beside its corpus and STS fixture (what the `tiny_recipe` fixture returns)."""
    corpus = folder / "corpus.txt"
    corpus.write_text("\n".join(SENTENCES) + "\n\n" + SENTENCES[0] + "\n", encoding="utf-8")
    sts = write_sts_fixture(folder / "sts.csv")
    recipe = folder / "tiny.yaml"
    recipe.write_text(
        f"""
name: tiny
corpus: {{format: text, files: [{corpus.name}], min_words: 3}}
augmenters:
  - {{name: bt_es, method: backtranslation, engine: apertium, path: [en, es, en]}}
  - {{name: bt_ca, method: backtranslation, engine: apertium, path: [en, ca, en]}}
filters: {{min_chrf: 0, max_length_ratio: 3.0}}
pair: {{view_a: bt_es, view_b: bt_ca}}
train:
  encoder: {tiny_model}
  steps: 4
  head_warmup_steps: 1
  batch_size: 8
  encoder_lr: 1.0e-3
evaluate:
  tasks: [{{name: sts-fixture, format: stsb, path: {sts.name}}}]
""",
        encoding="utf-8",
    )
    return recipe


def write_round_trip_recipe(folder: Path, name: str, sentences: list[str] = SENTENCES, extra: str = "") -> Path:
    """NAME.yaml in `folder`, beside its corpus of `sentences`: two Apertium round trips (es, ca),
    paired, no training (a quick run); `extra`: more top-level YAML."""
    (folder / "corpus.txt").write_text("\n".join(sentences) + "\n", encoding="utf-8")
    recipe = folder / f"{name}.yaml"
    recipe.write_text(
        f"""
name: {name}
corpus: {{format: text, files: [corpus.txt], min_words: 3}}
augmenters:
  - {{name: bt_es, method: backtranslation, engine: apertium, path: [en, es, en]}}
  - {{name: bt_ca, method: backtranslation, engine: apertium, path: [en, ca, en]}}
filters: {{min_chrf: 0, max_length_ratio: 3.0}}
pair: {{view_a: bt_es, view_b: bt_ca}}
{extra}""",
        encoding="utf-8",
    )
    return recipe


@pytest.fixture(scope="session")
def postgres_dsn():
    """A libpq connection string to a real PostgreSQL server started for this test session."""
    from tests.postgres import postgres_bin, postgres_server

    if postgres_bin() is None:
        pytest.skip("PostgreSQL is not installed: apt-get install postgresql")
    with postgres_server() as dsn:
        yield dsn


@pytest.fixture(scope="session")
def prefect_server():
    """Prefect's own test server (SQLite, loopback), shared by the flow tests."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=180):
        yield


@pytest.fixture(scope="session", autouse=True)
def _prefect_database_template(tmp_path_factory):
    """Every Prefect server a test starts (a run's temporary one, the integration tests') begins
    from one migrated database, which the first of them writes (local_server.TEMPLATE_ENV): one
    per session, shared by the xdist workers, whose base folders sit side by side."""
    from viewmill.pipelines.orchestration.local_server import TEMPLATE_ENV

    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    os.environ.setdefault(TEMPLATE_ENV, str(shared / "prefect-template.db"))


@pytest.fixture(scope="session", autouse=True)
def _stop_temporary_prefect_servers(tmp_path_factory):
    """Runs under test leave their state directory's reusable Prefect server up (by design, it
    idles for 30 minutes): stop every one this session started once the session ends."""
    yield
    from viewmill.pipelines.orchestration import local_server

    for record in tmp_path_factory.getbasetemp().glob("**/server.json"):
        try:
            local_server.stop(record.parent, force=True)
        except Exception as exc:  # a teardown must not hide the tests' own result
            print(f"could not stop the Prefect server of {record.parent}: {exc}")
