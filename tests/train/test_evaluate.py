import numpy as np
import pytest
from viewmill.train.encoder import EncoderError, encoder_fingerprint, load_sentence_model, resolve_encoder
from viewmill.train.evaluation.sts import Embedder, EvalDataError, load_sick, load_stsb, spearman_x100

from tests.conftest import REPO, SENTENCES, write_sts_fixture


def test_stsb_reader_takes_score_and_sentences_and_tolerates_extra_columns(tmp_path):
    data = load_stsb(write_sts_fixture(tmp_path / "sts.csv"))
    assert len(data.s1) == 6 and data.gold[0] == 5.0 and data.s2[2] == "A woman is chopping vegetables."


def test_malformed_eval_files_name_file_and_line(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("a\tb\tc\n", encoding="utf-8")
    with pytest.raises(EvalDataError, match="bad.csv:1: expected at least 7"):
        load_stsb(bad)
    bad.write_text("g\tf\ty\t1\tnot-a-score\ts1\ts2\n", encoding="utf-8")
    with pytest.raises(EvalDataError, match="score 'not-a-score'"):
        load_stsb(bad)
    with pytest.raises(EvalDataError, match="SICK header"):
        load_sick(bad)
    with pytest.raises(EvalDataError, match="not found"):
        load_stsb(tmp_path / "missing.csv")
    latin = tmp_path / "latin.csv"
    latin.write_bytes(b"caf\xe9")
    with pytest.raises(EvalDataError, match="not valid UTF-8"):
        load_stsb(latin)


def test_spearman_with_an_oracle_embedder_is_100(tmp_path):
    data = load_stsb(write_sts_fixture(tmp_path / "sts.csv"))
    gold = dict(zip(zip(data.s1, data.s2, strict=True), data.gold, strict=True))

    def oracle(texts):  # 2-d vectors whose cosine with the partner rises with the gold score
        out = []
        for t in texts:
            partner_scores = [g for (a, b), g in gold.items() if t in (a, b)]
            angle = (5.0 - partner_scores[0]) / 5.0 * (np.pi / 2) if t in data.s2 else 0.0
            out.append([np.cos(angle), np.sin(angle)])
        return np.asarray(out)

    assert spearman_x100(oracle, data) == pytest.approx(100.0)


def test_embedder_encodes_each_text_once(tiny_model):
    model = load_sentence_model(str(tiny_model))
    calls = []
    original = model.encode
    model.encode = lambda texts, **kw: calls.append(len(texts)) or original(texts, **kw)
    embed = Embedder(model)
    first = embed(SENTENCES[:3] + SENTENCES[:2])
    second = embed(SENTENCES[:3])
    assert calls == [3] and np.allclose(first[:3], second)


def test_encoder_references_resolve_with_clear_errors(tmp_path, tiny_model):
    assert resolve_encoder(str(tiny_model)) == str(tiny_model.resolve())
    assert resolve_encoder("sentence-transformers/all-MiniLM-L6-v2") == "sentence-transformers/all-MiniLM-L6-v2"
    with pytest.raises(EncoderError, match="unknown embedded encoder"):
        resolve_encoder("embedded:nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(EncoderError, match="no config.json"):
        resolve_encoder(str(tmp_path / "empty"))
    assert encoder_fingerprint(str(tiny_model)) == encoder_fingerprint(str(tiny_model))


@pytest.fixture(scope="module")
def minilm():
    """The real all-MiniLM-L6-v2 and one Embedder for this module's published-figure checks: a text
    that two checks score (SICK's test pairs are in SICK-R's 9,927) is encoded once."""
    return Embedder(load_sentence_model(resolve_encoder("embedded:all-MiniLM-L6-v2")))


@pytest.mark.slow
def test_reproduces_published_minilm_figures_and_sentence_transformers_evaluator(minilm):
    """all-MiniLM-L6-v2: 82.03 on STS-B test, 77.15 on SentEval's SICK-R test split (4,927
    pairs); on STS-B test viewmill's Spearman equals EmbeddingSimilarityEvaluator's to 1e-6.
    The real model loads once and encodes each distinct text once: the evaluator reads STS-B's
    embeddings from the Embedder's cache (its embed_inputs hook), so the check compares the two
    similarity and Spearman computations; that both encode alike is checked on the tiny model
    (test_spearman_matches_sentence_transformers_evaluator_on_the_tiny_model)."""
    from viewmill.train.evaluation.sts import model_spearman_x100

    vendored = REPO / "recipes" / "data"  # unchanged copies of ../shared/data files
    stsb = load_stsb(vendored / "stsbenchmark" / "sts-test.csv")
    sick = load_sick(vendored / "sick" / "SICK_test_annotated.txt")
    embed, model = minilm, minilm.model
    assert len(stsb.gold) == 1379 and len(sick.gold) == 4927
    ours = spearman_x100(embed, stsb)
    assert ours == pytest.approx(82.03, abs=0.1)
    encoded = []
    original = model.encode
    model.encode = lambda texts, **kw: encoded.extend(texts) or original(texts, **kw)
    try:
        theirs = model_spearman_x100(model, stsb, cache=dict(embed.cache))
    finally:
        model.encode = original
    assert encoded == [] and abs(ours / 100 - theirs / 100) < 1e-6
    assert spearman_x100(embed, sick) == pytest.approx(77.15, abs=0.1)


def test_the_tiny_test_model_tokenises_its_words(tiny_model):
    tokens = load_sentence_model(str(tiny_model)).tokenizer.tokenize(SENTENCES[0])
    assert tokens and "[UNK]" not in tokens


SHARED = REPO.parent / "shared" / "data"
needs_shared = pytest.mark.skipif(not SHARED.is_dir(), reason=f"{SHARED} is absent (the shared evaluation data)")


def _sts_year(folder, subsets):
    folder.mkdir(parents=True, exist_ok=True)
    for name, (pairs, scores) in subsets.items():
        (folder / f"STS.input.{name}.txt").write_text("".join(f"{a}\t{b}\n" for a, b in pairs), encoding="utf-8")
        (folder / f"STS.gs.{name}.txt").write_text("".join(f"{s}\n" for s in scores), encoding="utf-8")
    return folder


PAIRS = [(SENTENCES[i], SENTENCES[i + 1]) for i in range(6)]


def test_senteval_sts_skips_unscored_pairs_and_reports_all_and_mean(tmp_path, tiny_model):
    from viewmill.train.evaluation.sts import StsTask, load_sts_subsets, score_task

    year = _sts_year(
        tmp_path / "STS15-en-test",
        {"a": (PAIRS[:4], ["5.0", "", "1.0", "3.2"]), "b": (PAIRS[2:], ["1", "2", "3", "4"])},
    )
    (year / "STS.gs.SMT.txt").write_text("1\n", encoding="utf-8")  # gold without inputs, as STS13's SMT: skipped
    subsets = load_sts_subsets(year)
    assert list(subsets) == ["a", "b"] and len(subsets["a"].gold) == 3 and subsets["a"].unscored == 1
    embed = Embedder(load_sentence_model(str(tiny_model)))
    rows = {r["subset"]: r for r in score_task(embed, StsTask(name="sts15", format="senteval-sts", path=year))}
    assert set(rows) == {"a", "b", "all", "mean"}
    assert rows["all"]["n"] == 7 and rows["all"]["unscored"] == 1
    assert rows["mean"]["value"] == pytest.approx((rows["a"]["value"] + rows["b"]["value"]) / 2)
    assert "SentEval" in rows["mean"]["convention"] and "concatenated" in rows["all"]["convention"]


def test_sts_format_errors_name_the_file(tmp_path):
    from viewmill.train.evaluation.sts import load_sts_subsets

    year = _sts_year(tmp_path / "y", {"a": (PAIRS[:3], ["1", "2"])})
    with pytest.raises(EvalDataError, match=r"STS.gs.a.txt has 2 lines but .*STS.input.a.txt has 3"):
        load_sts_subsets(year)
    (year / "STS.gs.a.txt").unlink()
    with pytest.raises(EvalDataError, match="STS.input.a.txt has no gold file"):
        load_sts_subsets(year)
    (year / "STS.gs.a.txt").write_bytes(b"1\n2\n\xff\n")
    with pytest.raises(EvalDataError, match="not valid UTF-8"):
        load_sts_subsets(year)
    with pytest.raises(EvalDataError, match="STS folder not found"):
        load_sts_subsets(tmp_path / "nowhere")


def test_sts17_reads_one_track_with_gold_from_its_own_folder(tmp_path):
    from viewmill.train.evaluation.sts import StsTask, load_task

    inputs = tmp_path / "STS2017.eval.v1.1"
    _sts_year(inputs, {"track5.en-en": (PAIRS[:3], ["1", "2", "3"]), "track3.es-es": (PAIRS[3:5], ["4", "0"])})
    gold = tmp_path / "STS2017.gs"
    gold.mkdir()
    for name in ("track5.en-en", "track3.es-es"):
        (inputs / f"STS.gs.{name}.txt").rename(gold / f"STS.gs.{name}.txt")
    data = load_task(StsTask(name="STS17 en-en", format="sts17", path=inputs, gold_path=gold, track="en-en"))
    assert list(data) == ["all"] and data["all"].gold.tolist() == [1, 2, 3] and data["all"].skipped is None
    assert data["all"].convention == "3 scored pairs of STS 2017 track5.en-en"
    es = load_task(StsTask(name="STS17 es-es", format="sts17", path=inputs, gold_path=gold, track="es-es"))["all"]
    assert es.s1 == [PAIRS[3][0], PAIRS[4][0]] and es.gold.tolist() == [4, 0]


def test_sts17_is_scored_per_track_never_as_a_concatenation(tmp_path):
    from pydantic import ValidationError
    from viewmill.train.evaluation.sts import StsTask

    with pytest.raises(ValidationError, match="sts17 is scored per track: set track to one of ar-ar, ar-en"):
        StsTask(name="STS17", format="sts17", path=tmp_path)
    with pytest.raises(ValidationError, match="sts17 is scored per track"):
        StsTask(name="STS17", format="sts17", path=tmp_path, track="all")
    with pytest.raises(ValidationError, match="apply to format sts17 only"):
        StsTask(name="x", format="stsb", path=tmp_path, track="en-en")


def test_sts17_tr_en_with_twice_the_input_lines_is_skipped_not_fatal(tmp_path, tiny_model):
    """The official track 6 input has 500 lines for 250 gold scores: by default the track is
    skipped with the reason (value NaN, n 0); first-lines alignment scores the first lines."""
    from viewmill.train.evaluation.sts import StsTask, load_task, score_task
    from viewmill.train.evaluation.suite import markdown_table

    inputs = tmp_path / "STS2017.eval.v1.1"
    _sts_year(inputs, {"track6.tr-en": (PAIRS, ["5", "1", "3"])})  # 6 input lines, 3 gold scores
    strict = StsTask(name="STS17 tr-en", format="sts17", path=inputs, track="tr-en")
    embed = Embedder(load_sentence_model(str(tiny_model)))
    (row,) = score_task(embed, strict)
    assert row["subset"] == "all" and np.isnan(row["value"]) and row["n"] == 0
    assert row["convention"] == (
        "skipped: STS.input.track6.tr-en.txt has 6 lines but STS.gs.track6.tr-en.txt 3: track skipped "
        "(gold_alignment: first-lines scores the first input lines, as SentEval does)"
    )
    table = markdown_table([{"model": "m", "task": "STS17 tr-en", "value": row["value"]},
                            {"model": "m", "task": "STS-B", "value": 80.0}], ["STS17 tr-en", "STS-B"])  # fmt: skip
    assert table.splitlines()[2] == "| m | skipped | 80.00 | n/a |"
    aligned = strict.model_copy(update={"gold_alignment": "first-lines"})
    data = load_task(aligned)["all"]
    assert data.s1 == [a for a, _ in PAIRS[:3]] and data.gold.tolist() == [5, 1, 3]
    assert data.convention == (
        "3 scored pairs of STS 2017 track6.tr-en (first 3 input lines, gold_alignment first-lines)"
    )
    (scored,) = score_task(embed, aligned)
    assert scored["n"] == 3 and scored["value"] == pytest.approx(spearman_x100(embed, data))


def test_spearman_matches_sentence_transformers_evaluator_on_the_tiny_model(tmp_path, tiny_model):
    from viewmill.train.evaluation.sts import model_spearman_x100

    data = load_stsb(write_sts_fixture(tmp_path / "sts.csv"))
    model = load_sentence_model(str(tiny_model))
    ours, theirs = spearman_x100(Embedder(model), data), model_spearman_x100(model, data)
    assert abs(ours / 100 - theirs / 100) < 1e-6
    assert -100 <= ours <= 100 and len(data.gold) == 6


# stsb-multi-mt's layout: one file per language and split, rows lined up, one score per row;
# a sentence with a comma or a line break is quoted.
MULTI_MT = {
    "en": [("A man sings.", "A man, singing.", "4.5"), ("A dog runs.", "A cat sleeps.", "1.0"),
           ("Two women talk.", "Two women are talking.", "5.0")],
    "pt": [("Um homem canta.", "Um homem, a cantar.", "4.5"), ("Um cão corre.", "Um gato dorme.", "1.0"),
           ("Duas mulheres falam.", "Duas mulheres\nestão a falar.", "5.0")],
    "es": [("Un hombre canta.", "Un hombre cantando.", "4.5"), ("Un perro corre.", "Un gato duerme.", "1.0"),
           ("Dos mujeres hablan.", "Dos mujeres están hablando.", "5.0")],
}  # fmt: skip


def _multi_mt(folder, split="dev", rows=MULTI_MT):
    import csv

    folder.mkdir(parents=True, exist_ok=True)
    for lang, lines in rows.items():
        with (folder / f"stsb-{lang}-{split}.csv").open("w", encoding="utf-8", newline="") as f:
            csv.writer(f).writerows(lines)
    return folder


def _pair(folder, lang_a=None, lang_b="pt", split="dev"):
    from viewmill.train.evaluation.sts import StsTask, load_task

    settings = {"lang_a": lang_a} if lang_a else {}
    task = StsTask(name="x", format="stsb-xling", path=folder, lang_b=lang_b, split=split, **settings)
    return load_task(task)["all"]


@pytest.mark.parametrize(("lang_a", "lang_b"), [("pt", "pt"), ("en", "pt"), ("pt", "es"), ("es", "en")])
def test_stsb_multi_mt_pairs_any_two_languages_row_by_row(tmp_path, lang_a, lang_b):
    data = _pair(_multi_mt(tmp_path), lang_a, lang_b)
    assert data.s1 == [row[0] for row in MULTI_MT[lang_a]] and data.s2 == [row[1] for row in MULTI_MT[lang_b]]
    assert data.gold.tolist() == [4.5, 1.0, 5.0]
    kind = "one language" if lang_a == lang_b else "cross-lingual"
    assert data.convention == f"all 3 pairs of STS-B dev, s1 {lang_a}, s2 {lang_b} ({kind}, stsb-multi-mt)"


def test_stsb_xling_keeps_english_first_sentences_and_the_test_split_by_default(tmp_path):
    from viewmill.train.evaluation.sts import StsTask

    _multi_mt(tmp_path, split="test")
    task = StsTask(name="x", format="stsb-xling", path=tmp_path, lang_b="pt")
    assert (task.lang_a, task.split) == ("en", "test")
    assert _pair(tmp_path, lang_b="pt", split="test").s1 == [row[0] for row in MULTI_MT["en"]]


def test_stsb_multi_mt_files_that_do_not_line_up_are_refused(tmp_path):
    short = _multi_mt(tmp_path / "short", rows={**MULTI_MT, "pt": MULTI_MT["pt"][:2]})
    with pytest.raises(EvalDataError, match="stsb-pt-dev.csv has 2 rows, stsb-en-dev.csv 3: .* line up row by row"):
        _pair(short, "en", "pt")
    other = [*MULTI_MT["es"][:2], (*MULTI_MT["es"][2][:2], "4.0")]
    shifted = _multi_mt(tmp_path / "scores", rows={**MULTI_MT, "es": other})
    with pytest.raises(EvalDataError, match="stsb-es-dev.csv row 3 has score 4.0, stsb-pt-dev.csv 5.0: .* not line up"):
        _pair(shifted, "pt", "es")
    (tmp_path / "short" / "stsb-pt-dev.csv").write_text("a,b\n", encoding="utf-8")
    with pytest.raises(EvalDataError, match="stsb-pt-dev.csv: row 1 has 2 columns"):
        _pair(short, "pt", "pt")
    with pytest.raises(EvalDataError, match="stsb-fr-dev.csv"):
        _pair(short, "en", "fr")
    with pytest.raises(EvalDataError, match="stsb-multi-mt folder not found"):
        _pair(tmp_path / "absent", "en", "pt")


def test_stsb_multi_mt_settings_are_checked(tmp_path):
    from pydantic import ValidationError
    from viewmill.train.evaluation.sts import StsTask

    for bad, message in [
        ({"format": "stsb-xling"}, "stsb-xling needs lang_b"),
        ({"format": "stsb-xling", "lang_b": "../de"}, "String should match pattern"),
        ({"format": "stsb-xling", "lang_b": "de", "split": "validation"}, "'dev', 'test' or 'train'"),
        ({"format": "stsb", "lang_a": "pt"}, "split, lang_a and lang_b apply to format stsb-xling only"),
    ]:
        with pytest.raises(ValidationError, match=message):
            StsTask(name="x", path=tmp_path, **bad)


def test_one_pass_over_several_tasks_encodes_each_distinct_text_once(tmp_path, tiny_model):
    """pt-pt and en-pt share every Portuguese second sentence, en-en and en-pt every English
    first one: each text is encoded once per pass, and each set scores as it would alone."""
    from viewmill.train.evaluation.sts import model_scores, model_spearman_x100

    folder = _multi_mt(tmp_path, rows={lang: MULTI_MT[lang] for lang in ("en", "pt")})
    sets = {f"{a}-{b}": _pair(folder, a, b) for a, b in [("pt", "pt"), ("en", "pt"), ("en", "en")]}
    model = load_sentence_model(str(tiny_model))
    encoded = []
    original = model.encode
    model.encode = lambda texts, **kw: encoded.extend(texts) or original(texts, **kw)
    scores = model_scores(model, sets)
    distinct = {t for data in sets.values() for t in data.s1 + data.s2}
    assert sorted(encoded) == sorted(distinct) and len(distinct) == 12, "each text once (pt and en, s1 and s2)"
    alone = {name: model_spearman_x100(model, data) for name, data in sets.items()}
    assert scores == pytest.approx(alone, abs=1e-6)
    encoded.clear()
    model_scores(model, sets)
    assert sorted(encoded) == sorted(distinct), "a new pass encodes again: the weights may have changed"
    # A suite (viewmill eval, the run's evaluate stage) shares one Embedder over its tasks too.
    from viewmill.train.evaluation import suite
    from viewmill.train.evaluation.sts import StsTask

    encoded.clear()
    embed = Embedder(model)
    for a, b in [("pt", "pt"), ("en", "pt"), ("en", "en")]:
        suite.score(embed, StsTask(name=a + b, format="stsb-xling", path=folder, lang_a=a, lang_b=b, split="dev"))
    assert sorted(encoded) == sorted(distinct)


def test_one_dev_task_scores_as_sentence_transformers_evaluator_did(tmp_path, tiny_model):
    """Training's one-task dev figure is unchanged: the evaluator reading through the cache gives
    the plain evaluator's figure exactly (no text is shared by s1 and s2 here)."""
    from sentence_transformers.sentence_transformer.evaluation import EmbeddingSimilarityEvaluator
    from viewmill.train.evaluation.sts import model_scores

    data = load_stsb(write_sts_fixture(tmp_path / "sts.csv"))
    model = load_sentence_model(str(tiny_model))
    plain = EmbeddingSimilarityEvaluator(data.s1, data.s2, data.gold.tolist(), batch_size=64,
                                         similarity_fn_names=["cosine"], name="sts", write_csv=False)  # fmt: skip
    assert model_scores(model, {"dev": data}) == {"dev": float(plain(model)["sts_spearman_cosine"] * 100)}


@needs_shared
def test_the_shared_sts_samples_load_every_year():
    from viewmill.train.evaluation.sts import load_sts_subsets

    years = {p.name: load_sts_subsets(p) for p in sorted((SHARED / "senteval_sts_sample").iterdir())}
    assert sorted(years) == [f"STS{y}-en-test" for y in range(12, 17)]
    assert "SMT" not in years["STS13-en-test"] and "ALL" not in years["STS12-en-test"]
    sts15 = years["STS15-en-test"]
    assert (len(sts15["answers-forums"].gold), sts15["answers-forums"].unscored) == (8, 32), "blank gold lines"
    assert sum(d.unscored for d in years["STS12-en-test"].values()) == 0


@needs_shared
@pytest.mark.slow
def test_reproduces_minilm_on_sick_r_as_mteb_scores_it(minilm):
    """all-MiniLM-L6-v2 on all 9,927 SICK pairs (MTEB's SICK-R): 77.58."""
    from viewmill.train.evaluation.sts import load_sick_all

    data = load_sick_all(SHARED / "sick")
    assert len(data.gold) == 9927
    assert spearman_x100(minilm, data) == pytest.approx(77.58, abs=0.1)


@needs_shared
def test_the_shared_stsb_multi_mt_pairs_line_up_and_sick_trial_is_a_dev_set():
    """Every language's dev file lines up with English (row count and scores); pt-pt, en-pt and
    pt-es load with STS-B dev's 1,500 pairs; SICK's trial split reads as format sick (500 pairs)."""
    from viewmill.train.evaluation.sts import StsTask, load_task

    folder = SHARED / "stsb_multi_mt"
    for lang in ("de", "es", "fr", "it", "ja", "nl", "pl", "pt", "ru", "zh"):
        assert len(_pair(folder, "en", lang).gold) == 1500
    pt = _pair(folder, "pt", "pt")
    assert pt.s1[0] == "Um homem de chapéu duro está a dançar." and pt.gold[:2].tolist() == [5.0, 4.75]
    assert _pair(folder, "pt", "es").gold.tolist() == pt.gold.tolist() == _pair(folder, "en", "pt").gold.tolist()
    assert len(_pair(folder, "en", "pt", split="test").gold) == 1379
    trial = load_task(StsTask(name="sick-trial", format="sick", path=SHARED / "sick" / "SICK_trial.txt"))["all"]
    assert len(trial.gold) == 500 and trial.convention == "all 500 pairs of SICK_trial.txt"


@needs_shared
def test_senteval_transfer_sets_load_with_senteval_sizes():
    from viewmill.train.evaluation.senteval import TransferTask, load_transfer

    sizes = {}
    for task in ("MR", "CR", "SUBJ", "MPQA", "SST2", "TREC", "MRPC"):
        folder = SHARED / "senteval_classification" / ("SST" if task == "SST2" else task)
        data = load_transfer(TransferTask(name=task, task=task, path=folder))
        sizes[task] = {split: len(d.labels) for split, d in data.items()}
    assert sizes == {
        "MR": {"all": 10662}, "CR": {"all": 3775}, "SUBJ": {"all": 10000}, "MPQA": {"all": 10606},
        "SST2": {"train": 67349, "dev": 872, "test": 1821}, "TREC": {"train": 5452, "test": 500},
        "MRPC": {"train": 4076, "test": 1725},
    }  # fmt: skip


def test_transfer_errors_name_the_file(tmp_path):
    from viewmill.train.evaluation.senteval import TransferTask, load_transfer

    with pytest.raises(EvalDataError, match=r"SentEval file not found: .*rt-polarity.pos"):
        load_transfer(TransferTask(name="MR", task="MR", path=tmp_path))
    (tmp_path / "binary").mkdir()
    for split in ("train", "dev", "test"):
        (tmp_path / "binary" / f"sentiment-{split}").write_text("no label here\n", encoding="utf-8")
    with pytest.raises(EvalDataError, match="sentiment-train: expected 'sentence TAB label'"):
        load_transfer(TransferTask(name="SST2", task="SST2", path=tmp_path))
