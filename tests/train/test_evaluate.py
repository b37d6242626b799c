import numpy as np
import pytest

from tests.conftest import REPO, SENTENCES, write_sts_fixture
from train.encoder import EncoderError, encoder_fingerprint, load_sentence_model, resolve_encoder
from train.evaluate import Embedder, EvalDataError, load_sick, load_stsb, spearman_x100


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


@pytest.mark.slow
def test_reproduces_published_minilm_figures_on_stsb_and_sick():
    """all-MiniLM-L6-v2: 82.03 on STS-B test, 77.15 on SentEval's SICK-R test split (4,927 pairs)."""
    vendored = REPO / "recipes" / "data"  # unchanged copies of ../shared/data files
    stsb = load_stsb(vendored / "stsbenchmark" / "sts-test.csv")
    sick = load_sick(vendored / "sick" / "SICK_test_annotated.txt")
    embed = Embedder(load_sentence_model(resolve_encoder("embedded:all-MiniLM-L6-v2")))
    assert len(stsb.gold) == 1379 and len(sick.gold) == 4927
    assert spearman_x100(embed, stsb) == pytest.approx(82.03, abs=0.1)
    assert spearman_x100(embed, sick) == pytest.approx(77.15, abs=0.1)


def test_the_tiny_test_model_tokenises_its_words(tiny_model):
    tokens = load_sentence_model(str(tiny_model)).tokenizer.tokenize(SENTENCES[0])
    assert tokens and "[UNK]" not in tokens
