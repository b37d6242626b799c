import pytest
from viewmill.augment.ingest.corpus import CorpusError, ingest


def _ingest(files, **overrides):
    options = dict(
        corpus="c", fmt="text", lang="en", detokenize=False, min_words=2, max_words=10, limit=None, run_id="r"
    )
    options.update(overrides)
    result = ingest(files, **options)
    return result.sentences, result.stats


def test_normalises_deduplicates_and_filters_by_length(tmp_path):
    f = tmp_path / "a.txt"
    f.write_text("A  cafe\u0301 is open.\nA caf\u00e9 is open.\n\nToo short\nHi\n" + "w " * 11 + "\n", encoding="utf-8")
    table, stats = _ingest([f], min_words=3)
    assert table["text"].to_pylist() == ["A caf\u00e9 is open."]
    assert (stats.duplicates, stats.blank, stats.too_short, stats.too_long) == (1, 1, 2, 1)
    assert table["origin"][0].as_py() == {"file": str(f), "row": 1, "pair_id": None, "nli_label": None}


def test_senteval_layout_detokenises_and_keeps_labels_and_pair_ids(tmp_path):
    (tmp_path / "s1.dev").write_text("Two women are hugging .\nA man ca n't sleep .\n", encoding="utf-8")
    (tmp_path / "labels.dev").write_text("entailment\nneutral\n", encoding="utf-8")
    table, _ = _ingest([tmp_path / "s1.dev"], fmt="senteval", detokenize=True)
    assert table["text"].to_pylist() == ["Two women are hugging.", "A man can't sleep."]
    origins = table["origin"].to_pylist()
    assert [o["nli_label"] for o in origins] == ["entailment", "neutral"]
    assert [o["pair_id"] for o in origins] == ["dev:1", "dev:2"]
    assert table["split"].to_pylist() == ["dev", "dev"]


def test_limit_counts_kept_sentences(tmp_path):
    f = tmp_path / "a.txt"
    f.write_text("".join(f"sentence number {i}\n" for i in range(10)), encoding="utf-8")
    table, _ = _ingest([f], limit=4)
    assert table.num_rows == 4


def test_non_utf8_line_is_named_with_file_and_line(tmp_path):
    f = tmp_path / "latin.txt"
    f.write_bytes(b"first good line\nsecond good line\ncaf\xe9 au lait\n")
    with pytest.raises(CorpusError, match=r"latin.txt:3: not valid UTF-8.*iconv"):
        _ingest([f])


def test_missing_file_and_empty_corpus_name_the_fix(tmp_path):
    with pytest.raises(CorpusError, match="corpus file not found: .*nope.txt.*corpus.files"):
        _ingest([tmp_path / "nope.txt"])
    empty = tmp_path / "empty.txt"
    empty.write_text("\n  \nhi\n", encoding="utf-8")
    with pytest.raises(CorpusError, match="is empty.*2 blank.*1 shorter"):
        _ingest([empty])


def test_label_file_of_wrong_length_is_reported(tmp_path):
    (tmp_path / "s1.test").write_text("one two three\nfour five six\n", encoding="utf-8")
    (tmp_path / "labels.test").write_text("neutral\n", encoding="utf-8")
    with pytest.raises(CorpusError, match="labels.test has 1 lines but .*s1.test has 2"):
        _ingest([tmp_path / "s1.test"], fmt="senteval")


def _nli(tmp_path, split="dev"):
    premises = ["A man plays a guitar .", "A man plays a guitar .", "Kids run .", "A dog sleeps ."]
    hypotheses = ["A person makes music .", "A man is asleep .", "Children are moving .", "An animal rests ."]
    labels = ["entailment", "contradiction", "entailment", "-"]
    for name, lines in (("s1", premises), ("s2", hypotheses), ("labels", labels)):
        (tmp_path / f"{name}.{split}").write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_nli_links_pair_premises_with_labelled_hypotheses(tmp_path):
    _nli(tmp_path)
    result = ingest(
        [tmp_path / "s1.dev"], corpus="c", fmt="senteval", lang="en", detokenize=True, min_words=2, max_words=10,
        limit=1, run_id="r", nli_links=True,
    )  # fmt: skip
    assert result.sentences["text"].to_pylist() == ["A man plays a guitar."], "limit applies to sentences"
    links = result.nli_pairs.to_pylist()
    # s2.dev was read for links although only s1.dev is listed; "-" (no gold label) is dropped.
    assert [(r["premise_text"], r["hypothesis_text"], r["label"]) for r in links] == [
        ("A man plays a guitar.", "A person makes music.", "entailment"),
        ("A man plays a guitar.", "A man is asleep.", "contradiction"),
        ("Kids run.", "Children are moving.", "entailment"),
    ]
    assert links[0]["premise_id"] == result.sentences["sentence_id"][0].as_py()
    assert result.stats.nli_pairs == 3
    both = ingest(
        [tmp_path / "s1.dev", tmp_path / "s2.dev"], corpus="c", fmt="senteval", lang="en", detokenize=True,
        min_words=2, max_words=10, limit=None, run_id="r", nli_links=True,
    )  # fmt: skip
    assert both.nli_pairs.to_pylist() == links
    hypothesis_ids = {r["hypothesis_id"] for r in links}
    assert hypothesis_ids <= set(both.sentences["sentence_id"].to_pylist()), "same normalisation on both sides"


def test_links_are_not_collected_unless_asked(tmp_path):
    _nli(tmp_path)
    result = ingest(
        [tmp_path / "s1.dev"], corpus="c", fmt="senteval", lang="en", detokenize=True, min_words=2, max_words=10,
        limit=None, run_id="r",
    )  # fmt: skip
    assert result.nli_pairs.num_rows == 0


# -- issue 21, item 8: invisible characters and scripts --------------------------------------
def test_invisible_characters_and_nfd_give_one_sentence_not_several(tmp_path):
    f = tmp_path / "a.txt"
    lines = [
        "A man plays a guitar in the caf\u00e9.",
        "A man plays a gui\u200btar in the caf\u00e9.",  # zero-width space
        "A man plays a\u200d guitar in the caf\u00e9.",  # zero-width joiner
        "\ufeffA man plays a guitar in the cafe\u0301.",  # BOM inside the file, NFD
        "Two dogs run\u2060 through a field.",  # word joiner
    ]
    f.write_text("\n".join(lines) + "\n", encoding="utf-8")
    table, stats = _ingest([f])
    assert table["text"].to_pylist() == ["A man plays a guitar in the caf\u00e9.", "Two dogs run through a field."]
    assert (stats.lines, stats.kept, stats.duplicates) == (5, 2, 3)


HEBREW = "שלום עולם, מה שלומך?"
QUOTING = "The word שלום means peace."  # English quoting one Hebrew word


def test_a_sentence_mostly_in_a_script_the_language_does_not_use_is_rejected_and_kept(tmp_path):
    f = tmp_path / "mixed.txt"
    f.write_text(f"A man plays a guitar.\n{HEBREW}\n{QUOTING}\n", encoding="utf-8")
    result = _ingest_result([f], lang="en")
    assert result.sentences["text"].to_pylist() == ["A man plays a guitar.", QUOTING]
    assert result.stats.rejected == {"wrong_script": 1}
    assert [(r["row"], r["reason"], r["text"]) for r in result.rejected.to_pylist()] == [(2, "wrong_script", HEBREW)]
    hebrew = _ingest_result([f], lang="he")
    assert hebrew.sentences["text"].to_pylist() == [HEBREW] and hebrew.stats.rejected == {"wrong_script": 2}
    unknown = _ingest_result([f], lang="xx")
    assert unknown.sentences.num_rows == 3 and unknown.stats.rejected == {}, "a language not in the table: no check"


def _ingest_result(files, **overrides):
    options = dict(corpus="c", fmt="text", detokenize=False, min_words=2, max_words=10, limit=None, run_id="r")
    return ingest(files, **{**options, **overrides})


def test_a_corpus_all_in_another_script_says_to_set_its_language(tmp_path):
    f = tmp_path / "he.txt"
    f.write_text(f"{HEBREW}\n", encoding="utf-8")
    with pytest.raises(CorpusError) as err:
        _ingest_result([f], lang="en")
    assert str(err.value) == (
        "corpus 'c' is empty after reading 1 file(s) (1 lines, 0 blank, 0 shorter than 2 words, 0 longer than 10, "
        "0 malformed, 1 rejected as unusable text {'wrong_script': 1}): set corpus.lang to the language the corpus "
        "is written in; point corpus.files at non-empty files or relax corpus.min_words/max_words"
    )


def test_a_corpus_all_of_look_alike_spoofs_says_what_to_check(tmp_path):
    f = tmp_path / "spoof.txt"
    f.write_text("A man plays a guit\u0430r in the park.\n", encoding="utf-8")
    with pytest.raises(CorpusError) as err:
        _ingest_result([f], lang="en")
    assert "{'mixed_script_confusable': 1}): words mix look-alike letters of two scripts" in str(err.value)
    assert 'viewmill sql "SELECT text FROM rejected_sentences"' in str(err.value)
