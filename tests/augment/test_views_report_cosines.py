"""The views report's cosine to source: the meaning filter's stored cosines where it judged with
the report's encoder (nothing embedded), the same figures as embedding anew, and where a cosine
must be embedded, each distinct text once (issue 32: the report re-embedded every source and
view, 68-155 s at 2k-10k sentences)."""

import pyarrow as pa
from viewmill.augment.quality import FilterSpec
from viewmill.augment.views_report import build_report, to_markdown
from viewmill.storage.ids import canonical_json
from viewmill.storage.schema import RUNS

from tests.augment.test_meaning import A_VIEWS, FakeEncoder, Table, _lake, _run_three, _spec
from tests.views import make_views


def _judged_lake(tmp_path, encoder_name="embedded:fake"):
    """identity, a and b judged by the meaning filter under the encoder the recipe names `encoder_name`."""
    lake = _lake(tmp_path)
    filters = _spec()
    _run_three(lake, filters, FakeEncoder())
    filters = FilterSpec(meaning=filters.meaning.model_copy(update={"encoder": encoder_name}))
    recipe = {"name": "t", "filters": filters.model_dump(mode="json")}
    run = {"run_id": "r", "recipe": "t", "recipe_json": canonical_json(recipe), "status": "succeeded"}
    lake.append("runs", pa.Table.from_pylist([run], schema=RUNS))
    return lake


def test_stored_cosines_stand_in_for_embedding_with_the_same_figures(tmp_path):
    with _judged_lake(tmp_path) as lake:
        same_encoder, other_encoder = FakeEncoder(), FakeEncoder()
        stored = build_report(lake, None, encode=same_encoder, encoder_name="embedded:fake", examples=1)
        embedded = build_report(lake, None, encode=other_encoder, encoder_name="fake-copy", examples=1)
    assert same_encoder.calls == []  # every kept view has a cosine under this encoder
    texts = [t for call in other_encoder.calls for t in call]
    assert len(texts) == len(set(texts)) == 8  # 4 sources, 2 kept views each of a and b: each embedded once
    figures = [[(r.augmenter, r.cosine, r.cosine_n, r.cosine_mean) for r in report.augmenters]
               for report in (stored, embedded)]  # fmt: skip
    assert figures[0] == figures[1] and all(n for *_, n, _ in figures[0])
    markdown = to_markdown(embedded).replace("Cosine to source: fake-copy", "Cosine to source: embedded:fake")
    assert to_markdown(stored) == markdown


def test_only_sampled_views_without_a_stored_cosine_are_embedded(tmp_path):
    with _judged_lake(tmp_path) as lake:
        make_views(lake, "c", Table(name="c", views=A_VIEWS), FilterSpec(), run_id="r2")  # no meaning filter
        encoder = FakeEncoder()
        report = build_report(lake, None, encode=encoder, encoder_name="embedded:fake", cosine_sample=2)
    texts = [t for call in encoder.calls for t in call]
    assert len(texts) == 4 and set(texts) < set(A_VIEWS) | set(A_VIEWS.values())  # c's 2 sampled views and sources
    assert [(r.augmenter, r.cosine_n) for r in report.augmenters] == [("a", 2), ("b", 2), ("c", 2), ("same", 2)]


def test_a_model_folder_or_hub_id_is_embedded_again_its_weights_may_have_changed(tmp_path):
    with _judged_lake(tmp_path, encoder_name="/models/my-encoder") as lake:
        encoder = FakeEncoder()
        build_report(lake, None, encode=encoder, encoder_name="/models/my-encoder", examples=1)
    assert len({t for call in encoder.calls for t in call}) == 8  # the same name, embedded anew
