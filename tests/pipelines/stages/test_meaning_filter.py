"""The meaning filter end to end: a recipe's `filters.meaning` with a tiny random-weight
sentence-transformers model built here, real Apertium round trips, the augment stage's plan
and shard jobs, verdicts checked against the model's own cosines, re-filtering when the
thresholds change, shard jobs run out of order, and `viewmill views report`."""

import os

import numpy as np
import pytest
from typer.testing import CliRunner
from viewmill.augment.meaning import normalised
from viewmill.pipelines.cli.app import app
from viewmill.pipelines.plan_measure import planned_config
from viewmill.pipelines.recipe import load_recipe
from viewmill.pipelines.run import RunContext, run_recipe
from viewmill.pipelines.stages.augment import (
    augment_finish,
    augment_plan,
    recipe_judge,
    run_shards_here,
    shard_jobs,
)
from viewmill.pipelines.stages.ingest import ingest_stage
from viewmill.pipelines.state import StatePaths
from viewmill.storage.lake import Lake
from viewmill.train.encoder import load_sentence_model

from tests.conftest import needs_apertium, write_tiny_recipe

pytestmark = needs_apertium
ORDER = ["same", "bt_es", "bt_ca"]


def _recipe(tmp_path, tiny_model):
    """The tiny recipe with an identity augmenter first, paired with bt_es, and the meaning
    filter on the tiny model (named relative to the recipe's folder)."""
    recipe = write_tiny_recipe(tmp_path, tiny_model)
    encoder = os.path.relpath(tiny_model, tmp_path)
    text = recipe.read_text().replace("augmenters:\n", "augmenters:\n  - {name: same, method: identity}\n")
    text = text.replace("filters: {min_chrf: 0, max_length_ratio: 3.0}",
                        f"filters: {{min_chrf: 0, max_length_ratio: 3.0, meaning: {{encoder: {encoder}, "
                        "min_cosine: -1, max_cosine: 1}}\nexecution: {shard_sentences: 7}")  # fmt: skip
    recipe.write_text(text.replace("pair: {view_a: bt_es, view_b: bt_ca}", "pair: {view_a: same, view_b: bt_es}"))
    return recipe


def _views(lake_path, configs: dict[str, str]) -> dict[tuple[str, str], dict]:
    with Lake(lake_path, read_only=True) as lake:
        rows = lake.arrow(
            "SELECT v.*, s.text AS source FROM views v JOIN sentences s USING (sentence_id) "
            "WHERE list_contains(?, v.config_hash)",
            [list(configs.values())],
        ).to_pylist()
    names = {config: name for name, config in configs.items()}
    return {(names[r["config_hash"]], r["sentence_id"]): r for r in rows}


def _expected_reason(view: dict, earlier: list[dict], cosines: dict, floor: float, ceiling: float) -> str | None:
    """The filter's rules written out once more, over the brute-force cosines."""
    if view["method"] == "identity":
        return None
    cosine = cosines[view["source"], view["text"]]
    if cosine < floor:
        return f"cosine<{floor:g}"
    if cosine > ceiling:
        return f"cosine>{ceiling:g}"
    for ref in earlier:
        if ref["status"] == "kept" and (
            normalised(ref["text"]) == normalised(view["text"]) or cosines[ref["text"], view["text"]] > ceiling
        ):
            return f"near-duplicate:{ref['view_id']}"
    return None


def _check_verdicts(views: dict, model, floor: float, ceiling: float) -> None:
    texts = sorted({t for v in views.values() for t in (v["source"], v["text"])})
    emb = model.encode(texts, convert_to_numpy=True)
    emb = emb / np.linalg.norm(emb, axis=1, keepdims=True)
    index = {t: i for i, t in enumerate(texts)}

    class Cosines(dict):
        def __missing__(self, key):
            return float(emb[index[key[0]]] @ emb[index[key[1]]])

    cosines = Cosines()
    for (name, sid), view in views.items():
        assert view["quality"]["cosine_to_source"] == pytest.approx(cosines[view["source"], view["text"]], abs=1e-4)
        earlier = [views[other, sid] for other in ORDER[: ORDER.index(name)]]
        assert view["reject_reason"] == _expected_reason(view, earlier, cosines, floor, ceiling), (name, view)


def _between(values: list[float], q: float) -> float:
    """A threshold near the q-quantile, well between two stored cosines: floating-point noise
    between this machine's encoder runs cannot move a view across it."""
    ordered = sorted(values)
    for i in range(int(q * len(ordered)), len(ordered) - 1):
        if ordered[i + 1] - ordered[i] > 1e-3:
            return round((ordered[i] + ordered[i + 1]) / 2, 4)
    raise AssertionError(f"no gap in the stored cosines above the {q} quantile: {ordered}")


def _augment(ctx: RunContext, reverse: bool = False) -> dict[str, str]:
    ingest_stage(ctx)
    plan = augment_plan(ctx)
    jobs = shard_jobs(ctx, plan)
    reports = run_shards_here(list(reversed(jobs)) if reverse else jobs)
    for name in ORDER:
        augment_finish(ctx, name, [r for r in reports if r.augmenter == name])
    return plan.configs


@pytest.fixture(scope="module")
def first_run(tmp_path_factory, tiny_model):
    """The recipe run once (ingest, augment in recipe order, pair): floor -1, ceiling 1."""
    folder = tmp_path_factory.mktemp("meaning")
    recipe = _recipe(folder, tiny_model)
    state = StatePaths(folder / "state")
    run = run_recipe(RunContext(load_recipe(recipe), state), train=False)
    configs = {name: report["config_hash"] for name, report in run["augment"].items()}
    return recipe, state, configs, run


def test_augment_stage_filters_by_meaning_and_refilters_on_new_thresholds(first_run, tiny_model, tmp_path):
    recipe, state, configs, run = first_run
    model = load_sentence_model(str(tiny_model))
    views = _views(state.lake, configs)
    assert len(views) == 3 * 20 and run["snapshot"]["n_pairs"] > 0
    _check_verdicts(views, model, -1, 1)  # near-duplicates by text only (ceiling 1)
    bt = [v["quality"]["cosine_to_source"] for (name, _), v in views.items() if name != "same"]

    # Thresholds near the quartiles of what the first run stored: a new configuration judged
    # afresh from the lake's translation cache (nothing translated again), the old verdicts kept.
    floor, ceiling = _between(bt, 0.25), _between(bt, 0.75)
    overrides = [f"filters.meaning.min_cosine={floor}", f"filters.meaning.max_cosine={ceiling}"]
    with Lake(state.lake, read_only=True) as lake:
        translations = lake.scalar("SELECT count(*) FROM translations")
    stricter = run_recipe(RunContext(load_recipe(recipe, overrides), state), train=False)
    strict_configs = {name: report["config_hash"] for name, report in stricter["augment"].items()}
    assert set(strict_configs.values()).isdisjoint(configs.values())
    assert all(stricter["augment"][name]["new_views"] == 20 for name in ORDER)
    strict_views = _views(state.lake, strict_configs)
    _check_verdicts(strict_views, model, floor, ceiling)
    reasons = {v["reject_reason"].split(":")[0] for v in strict_views.values() if v["reject_reason"]}
    assert {f"cosine<{floor:g}", f"cosine>{ceiling:g}"} <= reasons
    assert _views(state.lake, configs) == views
    with Lake(state.lake, read_only=True) as lake:
        assert lake.scalar("SELECT count(*) FROM translations") == translations

    # `viewmill views report` draws the stored cosines against the run's floor and ceiling.
    result = CliRunner().invoke(app, ["views", "report", "--state-dir", str(state.root), "--out",
                                      str(tmp_path / "report"), "--cosine-sample", "0"])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert f"floor {floor:g}: below it the meaning changed" in result.output
    assert f"ceiling {ceiling:g}: above it nothing changed" in result.output
    assert f"cosine<{floor:g}: " in result.output and "identity: exempt, not filtered" in result.output
    markdown = (tmp_path / "report" / "report.md").read_text()
    assert f"floor {floor:g} (" in markdown and "## Meaning filter" in markdown


def test_shard_jobs_out_of_order_give_the_same_verdicts(first_run, tmp_path):
    recipe, state, configs, _ = first_run
    # The last augmenter's jobs first (as parallel workers may run them): each makes the views
    # of the augmenters before it where missing, so the near-duplicate verdicts cannot differ.
    other = StatePaths(tmp_path / "reversed")
    assert _augment(RunContext(load_recipe(recipe), other), reverse=True) == configs
    first, second = _views(state.lake, configs), _views(other.lake, configs)

    def verdicts(views: dict) -> dict:
        return {key: (v["view_id"], v["text"], v["status"], v["reject_reason"]) for key, v in views.items()}

    assert verdicts(first) == verdicts(second)
    assert len(second) == 60


def test_a_recipe_s_own_chunk_makes_its_own_configuration_that_the_shards_agree_with(first_run, tmp_path):
    """The filter embeds per chunk, so `execution.chunk_sentences` is part of what decides the
    views: the plan's hashes and each shard job's (checked in `augment_shard`) take it alike."""
    recipe, _, configs, _ = first_run
    own = StatePaths(tmp_path / "own-chunk")
    with_chunk = load_recipe(recipe, ["execution.chunk_sentences=7"])
    chunked = _augment(RunContext(with_chunk, own))
    assert set(chunked.values()).isdisjoint(configs.values())
    assert len(_views(own.lake, chunked)) == 3 * 20
    # `viewmill plan` names them alike, or it would count none of these views as present.
    judge, planned = recipe_judge(with_chunk), []
    with Lake(own.lake, read_only=True) as lake:
        for spec in with_chunk.augmenters:
            planned.append(planned_config(spec, with_chunk.filters, 7, lake, judge, planned[:]))
    assert planned == list(chunked.values())
