from viewmill.storage.ids import fingerprint, normalize_text, sentence_id


def test_sentence_id_is_stable_across_unicode_forms_and_whitespace():
    composed = "Un caf\u00e9  au lait "
    decomposed = "Un cafe\u0301 au lait"
    assert normalize_text(composed) == "Un caf\u00e9 au lait"
    assert sentence_id(composed) == sentence_id(decomposed)
    assert sentence_id("a b") != sentence_id("a c")
    assert len(sentence_id("x")) == 16


def test_fingerprint_ignores_dict_order_but_not_list_order():
    assert fingerprint({"a": 1, "b": 2}) == fingerprint({"b": 2, "a": 1})
    assert fingerprint([1, 2]) != fingerprint([2, 1])
