"""Through the real CLI: invisible characters and Unicode forms make one sentence (one id, one
view set, one pair), a sentence in a script its corpus's language does not use is rejected
and kept, and a paragraph too long to split is rejected whole while the rest of the book runs."""

from __future__ import annotations

import json
import unicodedata

from typer.testing import CliRunner
from viewmill.pipelines.cli.app import app
from viewmill.storage.lake import Lake

from tests.lake_state import lake_state, small_lake

RECIPE = """
name: trust
corpus: {corpus}
augmenters:
  - {{name: same, method: identity}}
  - {{name: syn, method: synonym, ratio: 0.3, seed: 1}}
pair: {{view_a: same, view_b: syn, keep_identical: true}}
"""
CAFE = "A man plays a guitar in the caf\u00e9."
HEBREW = "שלום עולם, מה שלומך היום?"


def _run(tmp_path, corpus: str) -> tuple[dict, dict, Lake]:
    state = tmp_path / "state"
    small_lake(state / "lake")  # 3 sentences of another corpus, which must stay as they are
    before = lake_state(state / "lake")
    recipe = tmp_path / "trust.yaml"
    recipe.write_text(RECIPE.format(corpus=corpus), encoding="utf-8")
    result = CliRunner().invoke(app, ["run", str(recipe), "--no-prefect", "--state-dir", str(state)])
    assert result.exit_code == 0, result.output
    return before, lake_state(state / "lake"), Lake(state / "lake", read_only=True)


def _added(before: dict, after: dict, tables=("sentences", "views", "pairs", "rejected_sentences")) -> dict:
    """Rows each table gained in the run."""
    return {name: after["counts"][name] - before["counts"][name] for name in tables}


def test_invisible_characters_give_one_sentence_one_view_set_and_one_pair(tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text(
        "\n".join([
            CAFE,
            "A man plays a gui\u200btar in the caf\u00e9.",  # zero-width space
            "A man plays a\u200d guitar in the caf\u00e9.",  # zero-width joiner
            "\ufeffA man plays a guitar in the cafe\u0301.",  # a BOM inside the file, and NFD
            HEBREW,  # not English: no engine for en makes views of it
            "Two dogs run through a field.",
        ]) + "\n",
        encoding="utf-8",
    )  # fmt: skip
    before, after, lake = _run(tmp_path, f"{{files: [{corpus}], lang: en}}")
    with lake:
        texts = lake.arrow("SELECT text FROM sentences WHERE corpus = 'trust' ORDER BY text")["text"].to_pylist()
        pairs = lake.arrow("SELECT text_a FROM pairs ORDER BY text_a")["text_a"].to_pylist()
        rejected = lake.arrow("SELECT reason, row, text FROM rejected_sentences").to_pylist()
        counts = json.loads(lake.scalar("SELECT counts FROM runs"))["ingest"]
        others = lake.scalar("SELECT count(*) FROM sentences WHERE corpus = 'c'")
    assert texts == [CAFE, "Two dogs run through a field."]
    assert pairs == texts, "one pair per visible sentence"
    assert rejected == [{"reason": "wrong_script", "row": 5, "text": HEBREW}]
    assert (counts["lines"], counts["duplicates"], counts["rejected"]) == (6, 3, {"wrong_script": 1})
    assert _added(before, after) == {
        "sentences": 2, "views": 4, "pairs": 2, "rejected_sentences": 1,
    }  # fmt: skip
    assert others == 3, "the other corpus's rows are all there"


def test_a_two_megabyte_paragraph_is_rejected_with_its_reason_and_the_book_runs(tmp_path):
    sentence = "He walked on and on along the river, and the day went by."
    book = tmp_path / "book.txt"
    huge = " ".join([sentence] * 35_000)  # 2 MB on one line, no blank line to end the paragraph
    book.write_text(f"The first paragraph is short.\n\n{huge}\n\nThe last paragraph is short too.\n", encoding="utf-8")
    before, after, lake = _run(tmp_path, f"{{format: book, files: [{book}]}}")
    with lake:
        texts = lake.arrow("SELECT text FROM sentences WHERE corpus = 'trust' ORDER BY text")["text"].to_pylist()
        (rejected,) = lake.arrow("SELECT reason, row, length, text FROM rejected_sentences").to_pylist()
        counts = json.loads(lake.scalar("SELECT counts FROM runs"))["ingest"]
    assert texts == ["The first paragraph is short.", "The last paragraph is short too."]
    assert len(huge.encode()) > 2_000_000
    assert rejected == {
        "reason": "paragraph_too_long", "row": 3, "length": len(huge),
        "text": huge[:300] + f"... ({len(huge)} characters)",
    }  # fmt: skip
    assert counts["rejected"] == {"paragraph_too_long": 1}
    assert _added(before, after) == {
        "sentences": 2, "views": 4, "pairs": 2, "rejected_sentences": 1,
    }  # fmt: skip


def test_bidi_controls_are_kept_and_floods_and_look_alike_letters_are_rejected(tmp_path):
    """Issue 30.7: the stored text reads as the file did (an override kept; the same sentence
    without it is a duplicate), a letter under 90 combining marks and a word with a Cyrillic
    look-alike are rejected with their reasons, and mixed-script text that is no spoof is kept."""
    override = "The label on the box reads \u202e321-CBA\u202c in red."
    flood = "A man plays a g" + "\u0300\u0316\u0489" * 30 + "uitar in the park."
    spoof = "A man plays a guit\u0430r in the caf\u00e9."
    russian = "He said \u041f\u0440\u0438\u0432\u0435\u0442 to his old friend."
    kept = [override, CAFE, "The angle \u03b8 is thirty degrees in the sketch.", russian]
    corpus = tmp_path / "c.txt"
    lines = [override, override.replace("\u202e", "").replace("\u202c", ""), flood, spoof, *kept[1:]]
    corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
    before, after, lake = _run(tmp_path, f"{{files: [{corpus}], lang: en}}")
    with lake:
        texts = lake.arrow("SELECT text FROM sentences WHERE corpus = 'trust'")["text"].to_pylist()
        rejected = lake.arrow("SELECT reason, row, text FROM rejected_sentences ORDER BY row").to_pylist()
        counts = json.loads(lake.scalar("SELECT counts FROM runs"))["ingest"]
    assert sorted(texts) == sorted(kept)
    assert rejected == [
        {"reason": "combining_mark_flood", "row": 3, "text": unicodedata.normalize("NFC", flood)},  # marks in order
        {"reason": "mixed_script_confusable", "row": 4, "text": "A man plays a guit\\u0430r in the caf\u00e9."},
    ]  # fmt: skip
    assert (counts["lines"], counts["duplicates"]) == (7, 1)
    assert counts["rejected"] == {"combining_mark_flood": 1, "mixed_script_confusable": 1}
    assert _added(before, after, ("sentences", "views", "rejected_sentences")) == {
        "sentences": 4, "views": 8, "rejected_sentences": 2,
    }  # fmt: skip
