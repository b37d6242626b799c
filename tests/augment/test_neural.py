"""Neural engines on tiny random-weight FSMT and Marian models built in the tests."""

import pytest
from viewmill.augment.engines import DecodingSpec, EngineError, make_engine
from viewmill.augment.neural import length_batches

from tests.conftest import SENTENCES
from tests.tiny_mt import build_tiny_fsmt, build_tiny_marian

BATCH = [*SENTENCES, "Short.", "A much longer sentence with many more words than most of the others in this batch."]


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory):
    root = tmp_path_factory.mktemp("mt")
    return {"fsmt": build_tiny_fsmt(root / "fsmt"), "marian": build_tiny_marian(root / "marian", SENTENCES * 3)}


@pytest.fixture(autouse=True)
def ct2_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def _divergence_margin(hf, ct2, text: str, max_new: int) -> float:
    """Where HF and CTranslate2 greedy token sequences first differ, the gap between HF's
    two best scores at that step."""
    import torch

    ids = hf.tokenizer(text)["input_ids"]
    pad = hf.tokenizer.pad_token_id
    with torch.inference_mode():
        generated = hf.net.generate(
            input_ids=torch.tensor([ids]),
            num_beams=1,
            do_sample=False,
            max_new_tokens=max_new,
            suppress_tokens=[pad],
            forced_eos_token_id=None,
            output_scores=True,
            return_dict_in_generate=True,
        )
    ours = generated.sequences[0].tolist()[1:]
    result = ct2.translator.translate_batch(
        [hf.tokenizer.convert_ids_to_tokens(ids)],
        beam_size=1,
        max_decoding_length=max_new,
        suppress_sequences=[[hf.tokenizer.pad_token]],
    )
    theirs = hf.tokenizer.convert_tokens_to_ids(result[0].hypotheses[0])
    step = next(k for k, (x, y) in enumerate(zip(ours, theirs, strict=False)) if x != y)
    best = torch.topk(generated.scores[step][0], 2).values
    return float(best[0] - best[1])


@pytest.mark.parametrize("family", ["fsmt", "marian"])
def test_greedy_outputs_of_hf_and_ctranslate2_float32_are_identical(tiny_models, family):
    src, tgt = ("en", "de")
    greedy = DecodingSpec(beam_size=1, max_length_ratio=1.0)
    hf = make_engine("hf", src, tgt, model=str(tiny_models[family]))
    ct2 = make_engine("ctranslate2", src, tgt, model=str(tiny_models[family]), compute_type="float32")
    from_hf = hf.translate(BATCH, src, tgt, greedy)
    from_ct2 = ct2.translate(BATCH, src, tgt, greedy)
    assert len(from_hf) == len(BATCH) and all(len(h) == 1 for h in from_hf)
    assert sum(1 for h in from_hf if h[0]) >= len(BATCH) - 2, "random weights still produce text"
    assert ct2.revision.endswith(":float32") and hf.revision == ct2.revision.split(":")[0]
    mismatches = [i for i in range(len(BATCH)) if from_hf[i] != from_ct2[i]]
    assert len(mismatches) <= 1, mismatches
    for i in mismatches:
        # The one tolerated difference is a float tie: the engines agree up to a step where
        # HF's two best tokens are within 1e-3 of each other (summation order decides).
        max_new = hf._max_new_tokens(len(hf.tokenizer(BATCH[i])["input_ids"]), greedy)
        assert _divergence_margin(hf, ct2, BATCH[i], max_new) < 1e-3, (BATCH[i], from_hf[i], from_ct2[i])


def test_beam_search_and_sampling_return_the_requested_hypotheses(tiny_models):
    engine = make_engine("hf", "en", "de", model=str(tiny_models["marian"]))
    beams = engine.translate(SENTENCES[:3], "en", "de", DecodingSpec(beam_size=4, num_hypotheses=2))
    assert [len(h) for h in beams] == [2, 2, 2]
    sampling = DecodingSpec(sampling=True, top_k=10, top_p=0.9, temperature=1.2, seed=5, num_hypotheses=3)
    first = engine.translate(SENTENCES[:2], "en", "de", sampling)
    assert first == engine.translate(SENTENCES[:2], "en", "de", sampling), "a seed makes sampling repeatable"
    ct2 = make_engine("ctranslate2", "en", "de", model=str(tiny_models["marian"]), compute_type="float32")
    assert [len(h) for h in ct2.translate(SENTENCES[:2], "en", "de", sampling)] == [3, 3]


def test_ctranslate2_decodes_batches_in_parallel_on_cpu_with_the_one_worker_outputs(tiny_models, monkeypatch):
    from viewmill.augment import ctranslate2_engine
    from viewmill.augment.ctranslate2_engine import CT2Engine
    from viewmill.augment.models import release_models

    release_models()  # translators loaded by earlier tests were made for this machine's cores
    monkeypatch.setattr(ctranslate2_engine, "cpu_cores", lambda: 2)
    texts = [*SENTENCES, "Short."] * 2  # within the tiny model's 128 positions at 1.5x
    beam = DecodingSpec(beam_size=4, num_hypotheses=2)
    engine = CT2Engine(str(tiny_models["marian"]), "en", "de", compute_type="float32", max_batch_tokens=64)
    assert len(length_batches([len(engine.tokenizer(t)["input_ids"]) for t in texts], 64, 4)) > 10
    parallel = engine.translate(texts, "en", "de", beam)
    assert engine.translator.num_translators == 2  # two workers, one batch each at a time
    release_models()
    monkeypatch.setattr(CT2Engine, "_parallel", lambda self: False)
    assert engine.translate(texts, "en", "de", beam) == parallel  # same hypotheses, in input order
    assert engine.translator.num_translators == 1
    half = len(texts) // 2
    assert parallel[:half] == parallel[half:] and all(len(h) == 2 and h[0] for h in parallel)
    release_models()


def test_ctranslate2_sampling_follows_each_call_s_seed(tiny_models):
    engine = make_engine("ctranslate2", "en", "de", model=str(tiny_models["marian"]), compute_type="float32")

    def sample(seed: int) -> list[list[str]]:
        spec = DecodingSpec(sampling=True, top_k=50, temperature=1.5, seed=seed, num_hypotheses=2)
        return engine.translate(SENTENCES[:4], "en", "de", spec)

    first = sample(1)
    assert sample(2) != first
    assert sample(1) == first, "a seed gives the same samples whatever was sampled before"


def test_empty_and_over_long_inputs_get_empty_hypotheses_without_failing_the_batch(tiny_models):
    engine = make_engine("hf", "en", "de", model=str(tiny_models["fsmt"]))
    too_long = " ".join(["word"] * 200)  # beyond the tiny model's 128 positions
    out = engine.translate([SENTENCES[0], "", "   ", too_long, SENTENCES[1]], "en", "de", DecodingSpec())
    assert out[1] == [""] and out[2] == [""] and out[3] == [""]
    assert out[0][0] and out[4][0]


@pytest.mark.parametrize("engine_name", ["hf", "ctranslate2"])
def test_outputs_stop_at_the_decoder_s_positions(tiny_models, engine_name):
    """3x (the default ratio) a long source runs past the tiny Marian's 128 positions: the output
    is capped there (transformers indexed past its position table, an IndexError that failed the
    whole run)."""
    engine = make_engine(engine_name, "en", "de", model=str(tiny_models["marian"]), compute_type="float32")
    words = ["guitar"]
    while len(engine.tokenizer(" ".join(words))["input_ids"]) < 100:
        words.append(SENTENCES[len(words) % len(SENTENCES)].split()[0].lower())
    source = " ".join(words)
    assert 100 <= len(engine.tokenizer(source)["input_ids"]) < 128
    assert engine._max_new_tokens(100, DecodingSpec()) == 127
    out = engine.translate([source, SENTENCES[0]], "en", "de", DecodingSpec(beam_size=1))
    assert isinstance(out[0][0], str) and out[1][0]


def test_wrong_direction_and_non_translation_models_are_refused(tiny_models, tiny_model):
    with pytest.raises(EngineError, match="translates en>de, not de>en"):
        make_engine("hf", "de", "en", model=str(tiny_models["fsmt"]))
    with pytest.raises(EngineError, match="not a translation"):
        make_engine("hf", "en", "de", model=str(tiny_model))  # a BERT sentence encoder
    with pytest.raises(EngineError, match="needs a model"):
        make_engine("ctranslate2", "en", "de")


def test_length_batches_sort_and_respect_the_token_budget():
    lengths = [5, 50, 7, 48, 6, 49]
    batches = length_batches(lengths, max_batch_tokens=100)
    assert sorted(i for b in batches for i in b) == list(range(6))
    assert all(max(lengths[i] for i in b) * len(b) <= 100 for b in batches)
    assert batches[0] == [0, 4, 2]
    beams = length_batches(lengths, max_batch_tokens=400, parallel=4)  # a beam of 4: the same batches
    assert beams == batches
    assert length_batches([30, 30], max_batch_tokens=100, parallel=4) == [[0], [1]]  # one over: alone, not lost


@pytest.mark.parametrize("family", ["m2m100", "nllb"])
def test_multilingual_forward_translation_forces_the_target_language(tmp_path, family):
    from tests.tiny_mt import build_tiny_m2m100, build_tiny_nllb

    if family == "m2m100":
        model = str(build_tiny_m2m100(tmp_path / family, SENTENCES * 3))
    else:
        model = str(build_tiny_nllb(tmp_path / family))
    greedy = DecodingSpec(max_length_ratio=1.0)
    outputs = {}
    for tgt in ("de", "fr", "ar"):
        hf = make_engine("hf", "en", tgt, model=model)
        ct2 = make_engine("ctranslate2", "en", tgt, model=model, compute_type="float32")
        outputs[tgt] = hf.translate(SENTENCES[:6], "en", tgt, greedy)
        assert ct2.translate(SENTENCES[:6], "en", tgt, greedy) == outputs[tgt]
    assert len({str(o) for o in outputs.values()}) == 3, "the forced language token changes the output"
    unknown = "M2M100 has no language 'xx'" if family == "m2m100" else "no NLLB language code for 'xx'"
    with pytest.raises(EngineError, match=unknown):
        make_engine("hf", "en", "xx", model=model)


def test_hf_half_precision_is_part_of_the_revision_and_bad_dtypes_are_refused(tiny_models):
    model = str(tiny_models["marian"])
    full = make_engine("hf", "en", "de", model=model)
    half = make_engine("hf", "en", "de", model=model, compute_type="bfloat16")
    assert half.revision == f"{full.revision}:bfloat16", "a cached float32 translation is never reused for bf16"
    assert half.translate(SENTENCES[:2], "en", "de", DecodingSpec())[0][0]
    with pytest.raises(EngineError, match="compute_type 'int8' is not one of float32, float16, bfloat16"):
        make_engine("hf", "en", "de", model=model, compute_type="int8")
