import pytest
from viewmill.augment.synonym import replace_synonyms, synonyms

try:
    from viewmill.augment.synonym import wordnet

    wordnet()
    HAVE_WORDNET = True
except Exception:
    HAVE_WORDNET = False

pytestmark = pytest.mark.skipif(not HAVE_WORDNET, reason="WordNet (apt-get install wordnet-base) is not installed")


def test_synonyms_come_from_the_most_frequent_sense_and_skip_inflected_forms():
    assert "parkland" in synonyms("park")
    assert synonyms("dogs") == [] and synonyms("running") == []  # inflected: no base-form swap
    assert all("_" not in s for s in synonyms("car"))


def test_replacement_keeps_function_words_and_capitals_and_is_seeded():
    text = "The happy girl is riding a bicycle down the road."
    first = replace_synonyms(text, 0.3, seed=7)
    assert first == replace_synonyms(text, 0.3, seed=7)
    new, replaced = first
    assert replaced >= 1 and new != text
    assert new.startswith("The ") and " is " in new and new.endswith(".")
    assert replace_synonyms("Is it at the?", 0.3, seed=1) == ("Is it at the?", 0)


def test_the_indefinite_article_follows_the_new_word():
    from viewmill.augment.synonym import _fix_article

    assert _fix_article("He met a ", "instructor") == "He met an "
    assert _fix_article("An ", "dog") == "A "
    assert _fix_article("the ", "owl") == "the "
