"""`viewmill eval`: models (and their untrained baselines) on a suite, side by side."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from pathlib import Path

from viewmill.pipelines.context import new_run_id
from viewmill.pipelines.recipe import EvaluateSpec
from viewmill.pipelines.stages.evaluate import EvalTarget, evaluate_models
from viewmill.pipelines.stages.train import trained_models
from viewmill.pipelines.state import StatePaths
from viewmill.storage.ids import fingerprint
from viewmill.storage.lake import open_lake
from viewmill.storage.output_paths import OutputGuard
from viewmill.train.encoder import EncoderError, resolve_encoder
from viewmill.train.evaluation.suite import bar_chart, check, markdown_table
from viewmill.train.export import MANIFEST, model_id_of, read_manifest

from viewmill.settings import Settings


@dataclass
class EvalReport:
    markdown: str
    conventions: list[str]
    markdown_path: Path
    plot_path: Path


MODEL_ID = re.compile(r"[0-9a-f]{12,64}")


def recorded_models(refs: list[str], state: StatePaths, settings: Settings) -> list[str]:
    """`refs`, each model id of this state's `models` (or its first 12 hex digits or more, as
    `viewmill models trained` shows it) replaced by the model's folder in this state."""
    asked = [ref for ref in refs if MODEL_ID.fullmatch(ref) and not Path(ref).exists()]
    if not asked:
        return refs
    with open_lake(settings, state.lake, read_only=True) as lake:
        rows = trained_models(lake, state)
    folders = {}
    for ref in asked:
        found = [row["folder"] for row in rows if row["model_id"].startswith(ref)]
        if len(found) != 1:
            raise EncoderError(
                f"{ref} names {'several models' if found else 'no model'} of {state.root}: viewmill models trained "
                "lists them (give the model id, or its folder)"
            )
        folders[ref] = str(found[0])
    return [folders.get(ref, ref) for ref in refs]


def model_entries(refs: list[str], baselines: bool) -> list[EvalTarget]:
    """Each model, then each distinct untrained start
    (a viewmill model's base model, or the model itself) with mean and with [CLS] pooling.

    Every id is checked before any model loads: a viewmill model's manifest id holds only
    while its files are those it recorded at export (`model_id_of` refuses a folder whose
    files differ), so stored scores are never reported for other weights.
    """
    entries, starts, ids = [], {}, {}

    def identity(path: str) -> str:
        if path not in ids:  # each folder hashed once per command
            ids[path] = model_id_of(path)
        return ids[path]

    for ref in refs:
        path = resolve_encoder(ref)
        label = Path(path).name if Path(path).is_dir() and not ref.startswith("embedded:") else ref
        entries.append(EvalTarget(label, path, identity(path)))  # its id as in `models`
        base_ref = read_manifest(Path(path)).get("base_model", ref) if (Path(path) / MANIFEST).is_file() else ref
        starts.setdefault(base_ref, resolve_encoder(base_ref))
    if baselines:
        for base_ref, base in starts.items():
            for pooling, name in (("mean", "mean pooling"), ("cls", "[CLS]")):
                model_id = fingerprint(identity(base), pooling)
                entries.append(EvalTarget(f"{base_ref} ({name})", base, model_id, pooling=pooling))
    return entries


def evaluate_cli(
    refs: list[str],
    suite: EvaluateSpec,
    state: StatePaths,
    *,
    baselines: bool,
    out: Path | None,
    settings: Settings | None = None,
) -> EvalReport:
    run_id = new_run_id()
    settings = settings or Settings()
    folder = out or state.root / "reports"
    OutputGuard.at(state.lake, settings.catalog_spec(), settings.data_path).check(folder)  # before any model loads
    for task in suite.tasks:  # every file readable before any model is loaded
        check(task)
    entries = model_entries(refs, baselines)
    with open_lake(settings, state.lake) as lake:
        guard = OutputGuard.of(lake)
        rows = evaluate_models(lake, entries, suite.tasks, run_id=run_id, batch_size=suite.batch_size)
    results = [asdict(row) for row in rows]  # the table and chart read plain rows
    names = [task.name for task in suite.tasks]
    table = markdown_table(results, names)
    conventions = sorted({f"{r['task']}: {r['convention']}" for r in results})
    guard.folder(folder)
    notes = "\n".join(f"- {line}" for line in conventions)
    markdown_path = guard.write_text(folder / f"eval-{run_id}.md", f"# viewmill eval {run_id}\n\n{table}\n{notes}\n")
    plot_path = folder / f"eval-{run_id}.png"
    with guard.atomic(plot_path) as partial:
        bar_chart(results, names, partial)
    return EvalReport(table, conventions, markdown_path, plot_path)
