"""`format: book` on long paragraphs: split window by window (linear time, the sentences
pysbd gives), and a paragraph over the cap rejected whole with its reason."""

from __future__ import annotations

import pysbd
from viewmill.augment.ingest.book import MAX_PARAGRAPH_CHARS, WINDOW_CHARS, split_sentences
from viewmill.augment.ingest.corpus import ingest

TEXT = (
    'Mr. Smith went to Washington on Monday. He arrived at 5 p.m. and slept. "Is it late?" she asked. '
    "It was. The U.S. economy grew 3.5% in Q1 (see Fig. 2). Dr. Who? Yes! "
)


class Recording:
    """pysbd's segmenter, remembering the length of every text it was given."""

    def __init__(self) -> None:
        self.segmenter = pysbd.Segmenter(language="en", clean=False, char_span=True)
        self.sizes: list[int] = []

    def segment(self, text: str):
        self.sizes.append(len(text))
        return self.segmenter.segment(text)


def _pysbd(text: str) -> list[str]:
    return [s.strip() for s in pysbd.Segmenter(language="en", clean=False).segment(text)]


def test_a_long_paragraph_is_split_window_by_window_into_pysbds_sentences():
    text = TEXT * 200  # 33,000 characters: pysbd alone takes time growing with its square
    recording = Recording()
    sentences = [s.strip() for s in split_sentences(recording, text)]
    assert sentences == _pysbd(text)
    assert len(recording.sizes) > 1 and max(recording.sizes) <= WINDOW_CHARS, "no call sees more than a window"


def test_a_sentence_longer_than_a_window_is_carried_whole_into_the_next():
    text = "Word " * 1000 + "end. A short one follows here. And the last one."
    recording = Recording()
    sentences = [s.strip() for s in split_sentences(recording, text, window=1000)]
    assert sentences == _pysbd(text) and len(sentences[0]) == 5004
    assert max(recording.sizes) <= 1000


def test_a_paragraph_over_the_cap_is_rejected_whole_and_the_rest_is_kept(tmp_path):
    book = tmp_path / "book.txt"
    huge = [TEXT.strip()] * 15_000  # 2.4 MB over 15,000 wrapped lines, no blank line
    book.write_text("A first short paragraph.\n\n" + "\n".join(huge) + "\n\nThe last paragraph is here.\n",
                    encoding="utf-8")  # fmt: skip
    result = ingest([book], corpus="c", fmt="book", lang="en", detokenize=False, min_words=2, max_words=64,
                    limit=None, run_id="r")  # fmt: skip
    assert result.sentences["text"].to_pylist() == ["A first short paragraph.", "The last paragraph is here."]
    assert result.stats.rejected == {"paragraph_too_long": 1}
    (row,) = result.rejected.to_pylist()
    length = len(" ".join(huge))
    assert length > 20 * MAX_PARAGRAPH_CHARS
    assert (row["reason"], row["row"], row["length"], row["file"]) == ("paragraph_too_long", 3, length, str(book))
    assert row["text"] == " ".join(huge)[:300] + f"... ({length} characters)"
