"""Explicit Arrow schemas of the lake tables (never inferred from data)."""

from __future__ import annotations

import pyarrow as pa

TS = pa.timestamp("us", tz="UTC")
# DuckDB's JSON type (Arrow's canonical JSON extension): `timings->>'$.total'` works in SQL, and
# lakes made when these columns were VARCHAR are altered to it when a writer opens them.
JSON = pa.json_()

SENTENCES = pa.schema(
    [
        ("corpus", pa.string()),
        ("sentence_id", pa.string()),
        ("text", pa.string()),
        ("lang", pa.string()),
        ("split", pa.string()),
        (
            "origin",
            pa.struct(
                [
                    ("file", pa.string()),
                    ("row", pa.int64()),
                    ("pair_id", pa.string()),
                    ("nli_label", pa.string()),
                ]
            ),
        ),
        ("run_id", pa.string()),
    ]
)

NLI_PAIRS = pa.schema(
    [
        ("corpus", pa.string()),
        ("pair_id", pa.string()),
        ("premise_id", pa.string()),
        ("premise_text", pa.string()),
        ("hypothesis_id", pa.string()),
        ("hypothesis_text", pa.string()),
        ("label", pa.string()),
        ("file", pa.string()),
        ("row", pa.int64()),
        ("run_id", pa.string()),
    ]
)

TRANSLATIONS = pa.schema(
    [
        ("cache_key", pa.string()),
        ("engine", pa.string()),
        ("model", pa.string()),
        ("revision", pa.string()),
        ("src_lang", pa.string()),
        ("tgt_lang", pa.string()),
        ("decoding", pa.string()),
        ("seed", pa.int64()),
        ("src_text_hash", pa.string()),
        ("rank", pa.int32()),
        ("text", pa.string()),
        ("score", pa.float64()),
        ("run_id", pa.string()),
        ("created_at", TS),
    ]
)

QUALITY = pa.struct(
    [
        ("length_ratio", pa.float64()),
        ("chrf_to_source", pa.float64()),
        ("identical_to_source", pa.bool_()),
        ("repeated_ngram", pa.int32()),
        ("cosine_to_source", pa.float64()),
    ]
)

PROVENANCE = pa.struct(
    [
        ("engines", pa.list_(pa.string())),
        ("models", pa.list_(pa.string())),
        ("decoding", pa.string()),
        ("cache_keys", pa.list_(pa.string())),
    ]
)

VIEWS = pa.schema(
    [
        ("view_id", pa.string()),
        ("sentence_id", pa.string()),
        ("augmenter", pa.string()),
        ("config_hash", pa.string()),
        ("method", pa.string()),
        ("path", pa.string()),
        ("text", pa.string()),
        ("lang", pa.string()),
        ("provenance", PROVENANCE),
        ("quality", QUALITY),
        ("status", pa.string()),
        ("reject_reason", pa.string()),
        ("run_id", pa.string()),
    ]
)

PAIRS = pa.schema(
    [
        ("pair_id", pa.string()),
        ("recipe", pa.string()),
        ("snapshot", pa.string()),
        ("sentence_id", pa.string()),
        ("view_a_id", pa.string()),
        ("view_b_id", pa.string()),
        ("text_a", pa.string()),
        ("text_b", pa.string()),
        ("lang_a", pa.string()),
        ("lang_b", pa.string()),
    ]
)

SNAPSHOTS = pa.schema(
    [
        ("snapshot", pa.string()),
        ("recipe", pa.string()),
        ("corpus", pa.string()),
        ("content_hash", pa.string()),
        ("n_pairs", pa.int64()),
        ("lake_version", pa.int64()),
        ("run_id", pa.string()),
        ("created_at", TS),
        ("corpus_version", pa.string()),  # the corpus membership it pairs (see CORPUS_MEMBERS)
        # JSON: source, per_anchor, pairs dropped for lacking them (+ pairings and with_negatives
        # where pair.negatives.pairings gave them to some); null: none
        ("negatives", pa.string()),
        ("identical_dropped", pa.int64()),  # pairs dropped for identical texts (null: made before they were)
    ]
)

# A snapshot's hard negatives, written with its pairs: exactly `per_anchor` rows per pair
# that has them (every pair, unless pair.negatives.pairings chose some), rank 1 first (the
# hardest, for mined ones).
PAIR_NEGATIVES = pa.schema(
    [
        ("snapshot", pa.string()),
        ("pair_id", pa.string()),
        ("rank", pa.int32()),
        ("sentence_id", pa.string()),  # the negative's sentence (an NLI hypothesis, or a corpus sentence)
        ("text", pa.string()),
        ("source", pa.string()),  # nli-contradiction | mined
        ("miner", pa.string()),  # JSON: how it was chosen (encoder name and fingerprint, controls)
        ("score", pa.float64()),  # cosine to the anchor under the miner's encoder; null for NLI
    ]
)

# A corpus version is the exact set of sentence ids one ingest found: re-ingesting a corpus
# that lost sentences makes a new version, and a snapshot pairs exactly its version's members.
CORPUS_VERSIONS = pa.schema(
    [
        ("corpus", pa.string()),
        ("corpus_version", pa.string()),
        ("n_sentences", pa.int64()),
        ("run_id", pa.string()),
        ("created_at", TS),
    ]
)

CORPUS_MEMBERS = pa.schema([("corpus", pa.string()), ("corpus_version", pa.string()), ("sentence_id", pa.string())])

RUNS = pa.schema(
    [
        ("run_id", pa.string()),
        ("flow", pa.string()),
        ("recipe", pa.string()),
        ("recipe_hash", pa.string()),
        ("recipe_json", pa.string()),
        ("code_version", pa.string()),
        ("packages", pa.string()),
        ("status", pa.string()),
        ("error", pa.string()),
        ("started_at", TS),
        ("finished_at", TS),
        ("timings", JSON),
        ("counts", JSON),
        # Where the run runs: its Prefect flow run and deployment (null without Prefect), and its
        # process, so a `running` row whose process is gone reads as crashed (`viewmill lake runs`).
        ("flow_run_id", pa.string()),
        ("deployment_id", pa.string()),
        ("deployment", pa.string()),  # flow/deployment, as `prefect deployment run` names it
        ("host", pa.string()),
        ("pid", pa.int64()),
    ]
)

MODELS = pa.schema(
    [
        ("model_id", pa.string()),
        ("path", pa.string()),
        ("base_model", pa.string()),
        ("objective", pa.string()),
        ("snapshot", pa.string()),
        ("train_config", JSON),
        ("run_id", pa.string()),
        ("created_at", TS),
    ]
)

EVALS = pa.schema(
    [
        ("model", pa.string()),
        ("model_label", pa.string()),
        ("task", pa.string()),
        ("subset", pa.string()),
        ("metric", pa.string()),
        ("value", pa.float64()),
        ("n", pa.int64()),
        ("convention", pa.string()),
        ("data_hash", pa.string()),
        ("run_id", pa.string()),
        ("created_at", TS),
    ]
)

# One row per key: a re-evaluation replaces the rows it recomputes.
EVALS_KEY = ("model", "task", "subset", "metric")

SWEEPS = pa.schema(
    [
        ("sweep", pa.string()),  # the recipe's name
        ("sweep_run", pa.string()),
        ("label", pa.string()),
        ("overrides", pa.string()),  # JSON: the settings this configuration changes
        ("train_config", pa.string()),  # JSON: the whole training configuration
        ("snapshot", pa.string()),
        ("model_id", pa.string()),
        ("select_task", pa.string()),
        ("select_value", pa.float64()),
        ("results", pa.string()),  # JSON: {task: value}
        ("selected", pa.bool_()),
        ("created_at", TS),
    ]
)

# Sentences ingest refused (control characters, invalid Unicode, over-long tokens or text),
# kept with their reason; `text` is escaped and cut short (augment/ingest/sanitise.py).
REJECTED_SENTENCES = pa.schema(
    [
        ("corpus", pa.string()),
        ("sentence_id", pa.string()),  # hash of the text as read
        ("text", pa.string()),
        ("length", pa.int64()),
        ("reason", pa.string()),
        ("file", pa.string()),
        ("row", pa.int64()),
        ("run_id", pa.string()),
    ]
)

# Texts' embeddings under one encoder (`storage/embeddings.py`): the meaning filter's and the
# miner's, so mining reuses what the filter embedded and a rerun embeds only new texts.
EMBEDDINGS = pa.schema(
    [
        ("encoder", pa.string()),  # the weights' fingerprint and the precision they embedded in
        ("text_hash", pa.string()),  # xxh3-128 of the text's UTF-8
        ("vector", pa.list_(pa.float32())),  # as the encoder returned it, not normalised
        ("created_at", TS),
    ]
)

TABLES: dict[str, pa.Schema] = {
    "sentences": SENTENCES,
    "rejected_sentences": REJECTED_SENTENCES,
    "nli_pairs": NLI_PAIRS,
    "translations": TRANSLATIONS,
    "views": VIEWS,
    "pairs": PAIRS,
    "snapshots": SNAPSHOTS,
    "pair_negatives": PAIR_NEGATIVES,
    "corpus_versions": CORPUS_VERSIONS,
    "corpus_members": CORPUS_MEMBERS,
    "runs": RUNS,
    "models": MODELS,
    "evals": EVALS,
    "sweeps": SWEEPS,
    "embeddings": EMBEDDINGS,
}

# Hive-style partition columns: queries per augmenter read only their files.
# embeddings by encoder: a store reads its own encoder's files, and a dropped encoder's files go whole.
PARTITIONS: dict[str, tuple[str, ...]] = {
    "views": ("augmenter",), "translations": ("tgt_lang",), "embeddings": ("encoder",)
}  # fmt: skip
# Tables written sorted, in small row groups: a shard reads its sentences' id range through the
# row groups' min/max instead of every row (each of a million sentences' 200 shards read them all).
SORTED: dict[str, tuple[str, int]] = {"sentences": ("sentence_id", 8192)}  # (sort column, rows per row group)

# Key columns that are hashes of other columns (view_id = fingerprint(sentence_id, config_hash),
# and the configuration names its augmenter): rows with the same key agree on these columns, so
# an append's duplicate check looks only where the new rows' values lie (DuckLake skips other
# partitions and files by their min/max) instead of reading every key of the table.
# A cache key is a hash of its engine, direction, decoding and source text's hash: a first hop's
# sources come in sentence-id order (a sentence id is its text's hash), so a commit's range is narrow.
KEY_SOURCES: dict[str, dict[str, tuple[str, ...]]] = {
    "views": {"view_id": ("augmenter", "sentence_id")},
    "translations": {"cache_key": ("engine", "model", "src_lang", "tgt_lang", "decoding", "src_text_hash")},
    "embeddings": {"encoder": ("encoder",)},  # a store's commit checks its own encoder's keys only
}
