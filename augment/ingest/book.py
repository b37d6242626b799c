"""`format: book`: running text (books, articles) split into sentences by pysbd.

pysbd's time grows with the square of the text it is given (it rescans the whole text for
every abbreviation it meets; a 2 MB paragraph ran for minutes with no output). A paragraph
is therefore split in windows of `WINDOW_CHARS`: each window's sentences are kept but its
last (which the window may have cut), and the next window starts where that one started, so
time grows linearly. A paragraph shorter than a window, nearly all of them, is split exactly
as pysbd splits it. A paragraph over `MAX_PARAGRAPH_CHARS` is no paragraph but a layout
problem (no blank lines between paragraphs, or not text at all): it is rejected whole, kept
in `rejected_sentences` with its reason and counted, like other unusable text.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from viewmill.augment.ingest.readers import RawLine, Reader, ReadOptions, Record
from viewmill.augment.ingest.source_files import CorpusError, Malformed, iter_lines

MAX_PARAGRAPH_CHARS = 100_000  # some 15,000 words without a blank line
WINDOW_CHARS = 5_000  # pysbd splits this in a few hundredths of a second


def read_book(path: Path, options: ReadOptions) -> Iterator[Record]:
    """Paragraphs are separated by blank lines, lines within a paragraph are joined, and
    pysbd splits each paragraph into sentences (their origin row: the paragraph's first line)."""
    segmenter = _segmenter(options.lang)
    paragraph: list[str] = []
    start = size = 0

    def flush() -> Iterator[Record]:
        text = " ".join(paragraph)
        if size > MAX_PARAGRAPH_CHARS:
            yield RawLine(text, str(path), start, rejected="paragraph_too_long")
        elif text:
            yield from (RawLine(sentence, str(path), start) for sentence in split_sentences(segmenter, text))

    for row, line in iter_lines(path):
        if isinstance(line, Malformed):
            yield line
        elif line.strip():
            if not paragraph:
                start = row
            paragraph.append(line.strip())
            size += len(paragraph[-1]) + 1
        else:
            yield from flush()
            paragraph, size = [], 0
    yield from flush()


def _segmenter(lang: str):
    import pysbd

    try:
        return pysbd.Segmenter(language=lang, clean=False, char_span=True)
    except ValueError:
        raise CorpusError(f"no sentence splitter for language '{lang}' (pysbd); set corpus.lang") from None


def split_sentences(segmenter, text: str, window: int = WINDOW_CHARS) -> Iterator[str]:
    """pysbd's sentences of `text`, `window` characters at a time (one call when it fits)."""
    if len(text) <= window:
        yield from (span.sent for span in segmenter.segment(text))
        return
    begin = start = 0  # where the next sentence begins; where the next window does
    while start < len(text):
        last = len(text) - start <= window
        spans = segmenter.segment(text[start : start + window])
        # Each later sentence's start ends the one before; a window's last sentence may be
        # cut, so it is left for the next window unless this one reaches the end.
        for boundary in (start + span.start for span in spans[1:]):
            if boundary > begin:
                yield text[begin:boundary]
                begin = boundary
        if last:
            break
        start = begin if begin > start else start + window  # no sentence ends here: a long one goes on
    if text[begin:].strip():
        yield text[begin:]


BOOK = Reader(read_book)  # the registry's entry (viewmill.augment.ingest.readers.READERS)
