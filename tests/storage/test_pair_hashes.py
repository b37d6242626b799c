"""The vectorised pair ids and content-hash blocks give exactly the plain definitions' bytes."""

import random

import pyarrow as pa
import pytest
from viewmill.storage.ids import canonical_json, fingerprint, text_hash
from viewmill.storage.pair_hashes import block_json, pair_ids, pairs_content_hash

# Characters JSON escapes or could be tempted to: controls, quotes, backslash, DEL, C1, line and
# paragraph separators, BOM, astral characters.
TRICKY = [chr(i) for i in range(0x30)] + ['"', "\\", "/", "\x7f", "\x85", "\u2028", "\u2029", "\ufeff", "😀", "é", "ß"]


def _text(rng: random.Random) -> str:
    return "".join(rng.choice(TRICKY) for _ in range(rng.randint(0, 9)))


def test_pair_ids_of_hex_ids_equal_the_fingerprint_of_each_row():
    rng = random.Random(3)
    ids = [[text_hash(str(rng.random())) for _ in range(500)] for _ in range(3)]
    pairs = pa.table(dict(zip(("sentence_id", "view_a_id", "view_b_id"), ids, strict=True)))
    expected = [fingerprint(s, a, b) for s, a, b in zip(*ids, strict=True)]
    assert pair_ids(pairs).to_pylist() == expected


@pytest.mark.parametrize("odd", ['s"1', "S1", "s\\1", "é1"])
def test_ids_that_are_not_lowercase_hex_take_the_plain_path(odd):
    pairs = pa.table({"sentence_id": ["ab", odd], "view_a_id": ["cd", "ef"], "view_b_id": ["01", "23"]})
    assert pair_ids(pairs).to_pylist() == [fingerprint("ab", "cd", "01"), fingerprint(odd, "ef", "23")]


def test_a_block_of_strings_integers_and_nulls_is_canonical_json():
    rng = random.Random(7)
    for _ in range(200):
        texts = [_text(rng) if rng.random() > 0.1 else None for _ in range(20)]
        ranks = [rng.randint(-(2**40), 2**40) for _ in range(20)]
        batch = pa.record_batch({"text": texts, "rank": pa.array(ranks, pa.int64())})
        assert block_json(batch) == canonical_json([texts, ranks]).encode("utf-8")


def test_a_block_with_floats_is_canonical_json():
    values = [1e16, 0.1, 2.5e-8, 1e22]  # spellings where JSON writers differ
    batch = pa.record_batch({"text": ["a", "b", "c", "d"], "score": values})
    assert block_json(batch) == canonical_json([["a", "b", "c", "d"], values]).encode("utf-8")


def test_a_block_of_strings_needing_no_escapes_is_canonical_json():
    rng = random.Random(11)
    plain = [c for c in TRICKY if c >= " " and c not in '"\\'] + list("abc xyz")
    for _ in range(100):
        columns = [["".join(rng.choice(plain) for _ in range(rng.randint(0, 9))) for _ in range(30)] for _ in range(3)]
        batch = pa.record_batch({f"c{i}": column for i, column in enumerate(columns)})
        assert block_json(batch) == canonical_json(columns).encode("utf-8")
    empty = pa.record_batch({"text": pa.array([], pa.string())})
    assert block_json(empty) == canonical_json([[]]).encode("utf-8")


def test_a_block_of_quotes_and_backslashes_without_controls_is_canonical_json():
    rng = random.Random(13)
    printable = [c for c in TRICKY if c >= " "] + list('ab\\"')
    for string_type in (pa.string(), pa.large_string()):
        for _ in range(100):
            texts = ["".join(rng.choice(printable) for _ in range(rng.randint(0, 9))) for _ in range(30)]
            if rng.random() < 0.5:  # half with nulls (orjson's path), half without (written from bytes)
                texts = [None if rng.random() < 0.1 else text for text in texts]
            batch = pa.record_batch({"text": pa.array(texts, string_type), "lang": pa.nulls(30)})
            assert block_json(batch) == canonical_json([texts, [None] * 30]).encode("utf-8")


def test_blocks_sliced_from_one_table_are_canonical_json():
    rng = random.Random(17)
    texts = ['say "' + str(rng.random()) + '" \\ ok' for _ in range(1000)]
    table = pa.table({"text": texts, "rank": list(range(1000))})
    start = 0
    for batch in table.to_batches(max_chunksize=300):
        rows = slice(start, start + batch.num_rows)
        assert block_json(batch) == canonical_json([texts[rows], list(range(1000))[rows]]).encode("utf-8")
        start += batch.num_rows


def test_the_content_hash_is_the_same_whatever_order_the_pairs_come_in():
    rng = random.Random(19)
    ids = [text_hash(str(i)) for i in range(300)]
    pairs = pa.table({"pair_id": ids, "sentence_id": ids, "text_a": [_text(rng) for _ in ids],
                      "text_b": ["b"] * 300, "lang_a": ["en"] * 300, "lang_b": [None] * 300})  # fmt: skip
    ascending = pairs.sort_by("pair_id")
    shuffled = pairs.take(pa.array(rng.sample(range(300), 300)))
    descending = pairs.sort_by([("pair_id", "descending")])
    hashes = {pairs_content_hash("r", table) for table in (pairs, ascending, shuffled, descending)}
    assert len(hashes) == 1
