"""The meaning filter: verdicts against hand-computed cosines under a deterministic fake encoder
(floor, ceiling, exemptions, near-duplicates), what the lake stores, re-filtering when the
thresholds or the encoder change, and the report's view of the stored cosines."""

from typing import Any, ClassVar, Literal

import numpy as np
import pyarrow as pa
import pytest
from pydantic import ValidationError
from viewmill.augment.augmenter_base import AugmenterConfig, ProducedView
from viewmill.augment.data_augmenters import Identity
from viewmill.augment.meaning import Candidate, MeaningJudge, MeaningSpec, Reference, judge, normalised
from viewmill.augment.meaning_report import CosineFilter, histogram, text_histogram
from viewmill.augment.quality import FilterSpec
from viewmill.augment.views import config_hash
from viewmill.augment.views_report import build_report, cosine_filter_sql, to_markdown
from viewmill.storage.ids import canonical_json, fingerprint, sentence_id
from viewmill.storage.lake import Lake
from viewmill.storage.schema import RUNS, SENTENCES

from tests.views import make_views

S1, S2, S3, S4 = (
    "A man is playing a guitar on the street.",
    "Two dogs are running through a field.",
    "A woman is cutting vegetables in the kitchen.",
    "The children are playing football in the park.",
)
# Every source points along x; a view's cosine to its source is its x over its length.
VECTORS: dict[str, tuple[float, float, float]] = {
    S1: (1, 0, 0), S2: (1, 0, 0), S3: (1, 0, 0), S4: (1, 0, 0),
    "A man is playing a guitar in the street.": (4, 3, 0),  # 0.8
    "Two dogs run across a field.": (3, 4, 0),  # 0.6
    "A woman is cutting vegetables in a kitchen.": (7, 1, 0),  # 7 / sqrt(50) = 0.98995
    "The children play football in the park.": (24, 7, 0),  # 0.96
    "a man is playing a guitar, in the street": (24, 7, 0),  # 0.96; a's S1 view up to case and punctuation
    "Two dogs are running through a meadow.": (4, 3, 0),  # 0.8
    "A woman chops vegetables in a kitchen.": (4, 3, 0),  # 0.8
    "Children are playing soccer in the park.": (48, 14, 0),  # 0.96; a's S4 view's direction: cosine 1
}  # fmt: skip
A_VIEWS = dict(zip((S1, S2, S3, S4), list(VECTORS)[4:8], strict=True))
B_VIEWS = dict(zip((S1, S2, S3, S4), list(VECTORS)[8:12], strict=True))


class FakeEncoder:
    """A deterministic encoder: a table lookup, recording each call's texts."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def __call__(self, texts: list[str]) -> np.ndarray:
        self.calls.append(list(texts))
        return np.array([VECTORS[t] for t in texts], dtype=np.float32)


class Table(AugmenterConfig):
    """Views looked up by source text: known texts, so cosines are known."""

    method: Literal["table"] = "table"
    views: dict[str, str]

    def producer(self, lake: Lake | None) -> Any:
        return TableProducer(self)


class TableProducer:
    lang = None
    identity: ClassVar[list[Any]] = []

    def __init__(self, spec: Table) -> None:
        self.spec = spec

    def produce(self, chunk, ctx):
        return [ProducedView(self.spec.views[text]) for _, text in chunk]

    def close(self) -> None:
        pass


def _spec(**meaning: Any) -> FilterSpec:
    return FilterSpec(meaning=MeaningSpec(encoder="fake", **meaning))


def test_spec_defaults_validation_and_unchanged_hashes_without_it():
    spec = MeaningSpec()
    assert (spec.encoder, spec.min_cosine, spec.max_cosine, spec.near_duplicate) == (
        "embedded:all-MiniLM-L6-v2", 0.7, 0.98, 0.98)  # fmt: skip
    assert MeaningSpec(max_cosine=0.9) == MeaningSpec(max_cosine=0.9, near_duplicate=0.9)  # one hash for both
    with pytest.raises(ValidationError, match="min_cosine 0.9 is above max_cosine 0.8"):
        MeaningSpec(min_cosine=0.9, max_cosine=0.8)
    with pytest.raises(ValidationError, match="extra"):
        MeaningSpec(min_cosin=0.5)
    # Without the filter the filters dump as before it existed: configuration hashes stay valid.
    before = ["min_length_ratio", "max_length_ratio", "min_chrf", "max_chrf", "reject_identical", "max_repeated_ngram"]
    assert list(FilterSpec().model_dump()) == before
    assert FilterSpec(meaning={"min_cosine": 0.5}).model_dump(mode="json")["meaning"]["min_cosine"] == 0.5


def test_the_device_enters_the_hash_only_off_the_cpu():
    """Views judged before `device` existed keep their configuration hashes; a GPU judge's
    cosines differ in their last digits, so its views are another configuration."""
    before = {"encoder": "embedded:all-MiniLM-L6-v2", "min_cosine": 0.7, "max_cosine": 0.98, "near_duplicate": 0.98}
    assert MeaningSpec().model_dump() == before
    assert MeaningSpec(device="cpu").model_dump(mode="json") == before
    on_gpu = FilterSpec(meaning={"device": "cuda:1"})
    assert on_gpu.meaning.device == "cuda:1"
    assert on_gpu.model_dump()["meaning"] == before | {"device": "cuda:1"}
    assert fingerprint(on_gpu.model_dump()) != fingerprint(FilterSpec(meaning={}).model_dump())
    assert FilterSpec.model_validate(on_gpu.model_dump(mode="json")) == on_gpu  # travels to shard workers whole
    assert MeaningSpec(device="cpu:0").device == "cpu" and "device" not in MeaningSpec(device="cpu:0").model_dump()
    with pytest.raises(ValidationError, match="should match pattern"):
        MeaningSpec(device="gpu")  # a typo is refused when the recipe loads, not after ingest


def test_normalised_text_ignores_case_punctuation_and_spaces_only():
    assert normalised("  Hello,   World! ") == normalised("hello world") == "hello world"
    assert normalised("ＡＢＣ — «def»") == "abc def"  # NFKC, Unicode punctuation
    assert normalised("hello world") != normalised("hello, word")


def test_verdicts_against_hand_computed_cosines():
    spec = MeaningSpec(min_cosine=0.6, max_cosine=0.98)
    encoder = FakeEncoder()
    candidates = [Candidate(S1, text, "backtranslation") for text in A_VIEWS.values()]
    candidates += [
        Candidate(S2, "Two dogs run across a field.", "identity"),  # exempt by method
        Candidate(S3, "A woman is cutting vegetables in a kitchen.", "entailment"),
        Candidate(S4, "  ", "backtranslation"),  # empty: no cosine
        Candidate(S1, "Two dogs run across a field.", "synonym", rejected=True),  # judged by another filter
    ]
    verdicts = judge(candidates, spec, encoder)
    expected_cosines = [0.8, 0.6, 7 / 50**0.5, 0.96, 0.6, 7 / 50**0.5, None, 0.6]
    assert [v.cosine for v in verdicts] == pytest.approx(expected_cosines)
    # 0.6 equals the floor (kept); only cosines strictly outside [floor, ceiling] are rejected.
    assert [v.reason for v in verdicts] == [None, None, "cosine>0.98", None, None, None, None, None]
    # Each distinct non-empty text was embedded once, in one batch (no references to embed after).
    assert len(encoder.calls) == 1 and sorted(encoder.calls[0]) == sorted({S1, S2, S3, *A_VIEWS.values()})
    assert judge(candidates[:2], MeaningSpec(min_cosine=0.7), encoder)[1].reason == "cosine<0.7"


def test_near_duplicates_by_normalised_text_or_cosine_first_reference_wins():
    spec = MeaningSpec(min_cosine=0.5, max_cosine=0.98)
    a = Reference("view-a", A_VIEWS[S1])  # (4, 3): 0.936 to (24, 7)
    b = Reference("view-b", B_VIEWS[S2])  # (4, 3) as well
    c = Reference("view-c", A_VIEWS[S4])  # (24, 7)
    encoder = FakeEncoder()
    candidates = [
        Candidate(S1, B_VIEWS[S1], "backtranslation", references=(a,)),  # text equal up to case, punctuation
        Candidate(S4, B_VIEWS[S4], "backtranslation", references=(a, c)),  # cosine 1 to c, 0.936 to a
        Candidate(S4, B_VIEWS[S4], "backtranslation", references=(c, a)),
        Candidate(S2, A_VIEWS[S1], "backtranslation", references=(b,)),  # same vector as b: first match
        Candidate(S4, A_VIEWS[S4], "identity", references=(c,)),  # exempt
        Candidate(S2, "Two dogs run across a field.", "backtranslation", references=(a,)),  # 0.6 < 0.5? no: kept
    ]
    reasons = [v.reason for v in judge(candidates, spec, encoder)]
    assert reasons == ["near-duplicate:view-a", "near-duplicate:view-c", "near-duplicate:view-c",
                       "near-duplicate:view-b", None, None]  # fmt: skip
    # A lower near-duplicate threshold catches the 0.936 pair; 1 leaves only the text rule.
    lower = MeaningSpec(min_cosine=0.5, max_cosine=0.98, near_duplicate=0.9)
    assert judge([Candidate(S1, B_VIEWS[S4], "mlm", references=(a,))], lower, encoder)[0].reason == (
        "near-duplicate:view-a")  # fmt: skip
    text_only = MeaningSpec(min_cosine=0.5, max_cosine=0.98, near_duplicate=1.0)
    assert [v.reason for v in judge(candidates[:2], text_only, encoder)] == ["near-duplicate:view-a", None]


def test_a_bad_encoder_output_is_named():
    with pytest.raises(ValueError, match="returned shape"):
        judge([Candidate(S1, A_VIEWS[S1], "mlm")], MeaningSpec(), lambda texts: np.zeros((1, 3)))


def _lake(tmp_path) -> Lake:
    lake = Lake(tmp_path / "lake")
    rows = [{"corpus": "c", "sentence_id": sentence_id(t), "text": t, "lang": "en"} for t in (S1, S2, S3, S4)]
    lake.append("sentences", pa.Table.from_pylist(rows, schema=SENTENCES))
    return lake


def _views(lake: Lake, config: str) -> dict[str, dict]:
    rows = lake.arrow("SELECT * FROM views WHERE config_hash = ?", [config]).to_pylist()
    by_source = {sentence_id(t): t for t in (S1, S2, S3, S4)}
    return {by_source[row["sentence_id"]]: row for row in rows}


def _run_three(lake: Lake, filters: FilterSpec, encoder: FakeEncoder, identity: str = "fake-1") -> list:
    """identity, a and b in recipe order, each judged against the ones before it."""
    reports, earlier = [], []
    for spec in (Identity(name="same"), Table(name="a", views=A_VIEWS), Table(name="b", views=B_VIEWS)):
        judge_ = MeaningJudge(identity, encoder, tuple(earlier))
        reports.append(make_views(lake, "c", spec, filters, run_id="r", chunk_size=3, judge=judge_))
        earlier.append(reports[-1].config_hash)
    return reports


def test_the_lake_keeps_cosines_and_reasons_and_new_thresholds_refilter(tmp_path):
    encoder = FakeEncoder()
    with _lake(tmp_path) as lake:
        same, a, b = _run_three(lake, _spec(), encoder)
        views = _views(lake, a.config_hash)
        assert {s: (v["status"], v["reject_reason"]) for s, v in views.items()} == {
            S1: ("kept", None),
            S2: ("rejected", "cosine<0.7"),
            S3: ("rejected", "cosine>0.98"),
            S4: ("kept", None),
        }
        assert [views[s]["quality"]["cosine_to_source"] for s in (S1, S2, S3, S4)] == pytest.approx(
            [0.8, 0.6, 7 / 50**0.5, 0.96])  # fmt: skip
        b_views = _views(lake, b.config_hash)
        assert {s: v["reject_reason"] for s, v in b_views.items()} == {
            S1: f"near-duplicate:{views[S1]['view_id']}", S2: None, S3: None,  # a's S2, S3 were rejected
            S4: f"near-duplicate:{views[S4]['view_id']}"}  # fmt: skip
        assert all(v["status"] == "kept" and v["quality"]["cosine_to_source"] == pytest.approx(1.0)
                   for v in _views(lake, same.config_hash).values())  # exempt: recorded, kept  # fmt: skip
        assert (b.kept, b.rejected, b.reasons) == (2, 2, {"near-duplicate": 2})  # counted by kind

        # The same configuration again: nothing judged twice. A new floor: a new configuration,
        # judged afresh, the old verdicts kept beside it.
        calls = len(encoder.calls)
        assert [r.new_views for r in _run_three(lake, _spec(), encoder)] == [0, 0, 0] and len(encoder.calls) == calls
        looser = _run_three(lake, _spec(min_cosine=0.5), encoder)
        assert looser[1].config_hash != a.config_hash and looser[1].new_views == 4
        assert _views(lake, looser[1].config_hash)[S2]["status"] == "kept"
        assert _views(lake, a.config_hash)[S2]["reject_reason"] == "cosine<0.7"
        # b's verdicts depend on a's: its configuration changed with a's, though b's spec did not.
        assert looser[2].config_hash != b.config_hash
        other_weights = _run_three(lake, _spec(), encoder, identity="fake-2")
        assert {r.config_hash for r in other_weights}.isdisjoint({same.config_hash, a.config_hash, b.config_hash})


def test_the_judge_goes_with_the_filter_and_needs_earlier_views(tmp_path):
    encoder = FakeEncoder()
    spec = Table(name="b", views=B_VIEWS)
    with _lake(tmp_path) as lake:
        with pytest.raises(ValueError, match="filters.meaning and the meaning judge go together"):
            make_views(lake, "c", spec, _spec(), run_id="r")
        with pytest.raises(ValueError, match="go together"):
            make_views(lake, "c", spec, FilterSpec(), run_id="r", judge=MeaningJudge("fake", encoder))
        with pytest.raises(RuntimeError, match="4 views of the augmenters listed before this one are missing"):
            make_views(lake, "c", spec, _spec(), run_id="r", judge=MeaningJudge("fake", encoder, ("nope",)))
        assert lake.scalar("SELECT count(*) FROM views") == 0
        # Without the filter, the hash is the one from before the filter existed.
        producer = spec.producer(lake)
        assert config_hash(spec, FilterSpec(), producer) == fingerprint(
            spec.model_dump(), FilterSpec().model_dump(), producer.identity)  # fmt: skip


def test_report_shows_stored_cosines_with_the_run_thresholds(tmp_path):
    filters = _spec(min_cosine=0.7, max_cosine=0.98)
    with _lake(tmp_path) as lake:
        _run_three(lake, filters, FakeEncoder())
        recipe = {"name": "t", "filters": filters.model_dump(mode="json")}
        run = {"run_id": "r", "recipe": "t", "recipe_json": canonical_json(recipe), "status": "succeeded"}
        lake.append("runs", pa.Table.from_pylist([run], schema=RUNS))
        report = build_report(lake, None, examples=1)
        rows = {r.augmenter: r for r in report.augmenters}
        a = rows["a"].meaning
        assert (a.floor, a.ceiling, a.encoder, a.n, a.below, a.above) == (0.7, 0.98, "fake", 4, 1, 1)
        assert a.p50 == pytest.approx(np.quantile([0.8, 0.6, 7 / 50**0.5, 0.96], 0.5), abs=1e-4)
        assert rows["b"].reasons == {"near-duplicate": 2} and rows["a"].reasons == {"cosine<0.7": 1, "cosine>0.98": 1}
        assert rows["same"].meaning.exempt and lake.arrow(cosine_filter_sql()).num_rows == 3

        bins = histogram(a)
        assert sum(b.count for b in bins) == 4
        assert [(b.lo, b.hi) for b in bins if b.count] == [(0.6, 0.65), (0.8, 0.85), (0.95, 0.98), (0.98, 1.0)]
        assert [b.rejected for b in bins if b.count] == [True, False, False, True]
        lines = text_histogram(a)
        floor = next(i for i, line in enumerate(lines) if "floor 0.7" in line)
        assert lines[floor - 1].startswith(" 0.65– 0.70 ✗") and lines[floor + 1].startswith(" 0.70– 0.75  ")
        assert any("ceiling 0.98" in line for line in lines)
        markdown = to_markdown(report)
        assert "## Meaning filter: cosine to source (every view)" in markdown
        assert "floor 0.7 (1 below), ceiling 0.98 (1 above)" in markdown and "same: exempt" not in markdown
        assert "identity: exempt, not filtered" in markdown


def test_histogram_of_values_all_at_one():
    cf = CosineFilter("identity", 3, 1, 1, 1, 1, 1, None, None, None, values=[1.0, 1.0, 1.0])
    assert [(b.lo, b.hi, b.count) for b in histogram(cf)] == [(0.95, 1.0, 3)]
