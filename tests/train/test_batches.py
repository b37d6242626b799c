"""A batch's texts taken from a snapshot's chunked columns."""

import pyarrow as pa
from viewmill.train.batches import PairTexts, rows_of


def test_rows_of_a_chunked_column_are_its_rows_in_the_order_asked():
    values = [f"text {i}" for i in range(50)]
    chunked = pa.chunked_array([values[:7], [], values[7:30], values[30:31], values[31:]], pa.string())
    index = [49, 0, 7, 6, 30, 31, 7, 29, 12, 49]
    assert rows_of(chunked, index) == [values[i] for i in index]
    assert rows_of(pa.array(values), index) == rows_of(pa.chunked_array([values]), index) == [values[i] for i in index]
    assert rows_of(chunked, []) == []


def test_a_batch_of_a_chunked_snapshot_is_view_a_then_view_b():
    a, b = [f"a{i}" for i in range(20)], [f"b{i}" for i in range(20)]
    table = pa.Table.from_batches(
        [pa.record_batch({"text_a": a[s : s + 6], "text_b": b[s : s + 6]}) for s in range(0, 20, 6)]
    )
    assert table["text_a"].num_chunks == 4
    assert PairTexts(table).texts([13, 2, 19]) == ["a13", "a2", "a19", "b13", "b2", "b19"]
