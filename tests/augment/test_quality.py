import pytest
from sacrebleu.metrics import CHRF
from viewmill.augment.quality import FilterSpec, quality_signals, reject_reason


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

    monkeypatch.setattr(quality, "_CHRF", None)  # any call fails
    assert quality_signals("A man is playing a flute.", "A man is playing a flute.").chrf_to_source == 100.0


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
