import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sacrebleu.metrics import CHRF
from viewmill.augment.quality import FilterSpec, chrf_scores, quality_signals, quality_signals_batch, reject_reason


def test_signals_for_identical_and_changed_views():
    same = quality_signals("A man is playing a flute.", "a man is playing a flute.")
    assert same.identical_to_source and same.length_ratio == 1.0 and same.chrf_to_source > 90
    changed = quality_signals("A man is playing a flute.", "A man is touching a flute.")
    assert not changed.identical_to_source and 40 < changed.chrf_to_source < 90


@pytest.mark.parametrize("text", ["A man is playing a flute.", "a", ".", "é", "a  b\tc", "\u200b", "x " * 300, " ", ""])
def test_a_view_equal_to_its_source_gets_the_signals_sacrebleu_gives_it(text):
    """The shortcut for a copy (issue 32: identity views skip the per-sentence chrF) changes no value."""
    signals = quality_signals(text, text)
    assert signals.chrf_to_source == CHRF().sentence_score(text, [text]).score
    assert (signals.length_ratio, signals.identical_to_source, signals.repeated_ngram) == (
        len(text) / max(1, len(text)),
        True,
        0,
    )


def test_a_copy_is_scored_without_the_per_sentence_chrf(monkeypatch):
    """Issue 32: sacrebleu's chrF, one sentence at a time, held identity views to ~1,000/s."""
    import viewmill.augment.quality as quality

    monkeypatch.setattr(quality, "fastchrf", None)  # any call fails
    assert quality_signals("A man is playing a flute.", "A man is playing a flute.").chrf_to_source == 100.0


PAIRS = [
    ("A man is playing a flute.", "A flute is played by a man."),
    ("", "abc"), ("abc", ""), ("", ""), (" ", "x"), ("a b", "ab"), ("ab", "ab "),
    ("é\u00a0x\x1cy", "éx y"),  # whitespace to Python's str.split that other languages may not call whitespace
    ("日本語のテキスト", "日本語テキスト"), ("(hi) there, you!", "there (hi) you!"), ("x " * 300, "x " * 299 + "y"),
]  # fmt: skip


@pytest.mark.parametrize(("source", "view"), PAIRS)
def test_chrf_is_sacrebleus_sentence_score_to_the_last_bit(source, view):
    """Issue 32: the batched chrF replaced sacrebleu's per-sentence call; views must not change."""
    assert chrf_scores([(source, view)]) == [CHRF().sentence_score(view, [source]).score]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.text(max_size=40), st.text(max_size=40)), max_size=8))
def test_batched_signals_equal_one_at_a_time_sacrebleu(pairs):
    batch = quality_signals_batch([s for s, _ in pairs], [v for _, v in pairs])
    for (source, view), signals in zip(pairs, batch, strict=True):
        assert signals == quality_signals(source, view)
        assert signals.chrf_to_source == CHRF().sentence_score(view, [source]).score


def test_repeated_ngrams_count_only_what_the_source_lacks():
    looped = quality_signals("the dog runs fast", "the dog runs the dog runs the dog runs")
    assert looped.repeated_ngram == 2
    assert quality_signals("a b c a b c", "a b c a b c").repeated_ngram == 0


def test_reject_reasons_follow_the_filter_spec():
    spec = FilterSpec(min_length_ratio=0.5, max_length_ratio=2.0, min_chrf=20, reject_identical=True)
    source = "A child holds a football and runs from other children."
    assert reject_reason("", quality_signals(source, ""), spec) == "empty"
    assert reject_reason(source, quality_signals(source, source), spec) == "identical_to_source"
    assert reject_reason("A child.", quality_signals(source, "A child."), spec) == "length_ratio<0.5"
    odd = "Of hospital at band with some many words that go nowhere."
    assert reject_reason(odd, quality_signals(source, odd), spec) == "chrf<20"
    good = "A kid holds a football and runs away from other kids."
    assert reject_reason(good, quality_signals(source, good), spec) is None
