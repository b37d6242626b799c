"""The train stage's join of each pair's source sentence (for objectives that read it)."""

import pyarrow as pa
import pytest
from viewmill.pipelines.stages.train import with_sources
from viewmill.storage.ids import sentence_id
from viewmill.storage.lake import Lake
from viewmill.storage.schema import SENTENCES

from tests.conftest import SENTENCES as TEXTS


def test_each_pair_gets_its_sentence_text_in_pair_order(tmp_path):
    rows = [{"corpus": "c", "sentence_id": sentence_id(t), "text": t, "lang": "en"} for t in TEXTS[:4]]
    order = [3, 0, 3, 1]  # two pairs of one sentence, not in the table's order
    pairs = pa.table({"sentence_id": [sentence_id(TEXTS[i]) for i in order], "text_a": ["a"] * 4,
                      "text_b": ["b"] * 4})  # fmt: skip
    with Lake(tmp_path / "lake") as lake:
        lake.append("sentences", pa.Table.from_pylist(rows, schema=SENTENCES))
        joined = with_sources(lake, pairs, "train")
        assert joined["text_source"].to_pylist() == [TEXTS[i] for i in order]
        assert joined.column_names == ["sentence_id", "text_a", "text_b", "text_source"]
        lost = pairs.set_column(0, "sentence_id", pa.array(["nope", *pairs["sentence_id"].to_pylist()[1:]]))
        with pytest.raises(ValueError, match=r"1 pairs name sentences the lake's sentences table lacks \(e.g. nope\)"):
            with_sources(lake, lost, "train")
