"""The ingest stage streams the corpus into the lake in one transaction: a bad record found
after rows were written rolls all of them back (no row, no stray file), a second ingest adds
only sentences the lake lacks, and the corpus version lists every sentence the read kept."""

from __future__ import annotations

import pytest
from viewmill.augment.ingest.corpus import ingest
from viewmill.augment.ingest.readers import CorpusError
from viewmill.pipelines.context import RunContext
from viewmill.pipelines.recipe import load_recipe
from viewmill.pipelines.stages.ingest import ingest_stage
from viewmill.pipelines.state import StatePaths
from viewmill.storage.ids import fingerprint
from viewmill.storage.integrity import verify_lake
from viewmill.storage.lake import Lake

from tests.lake_state import lake_state

RECIPE = """
name: stream
corpus: {{format: text, files: [{corpus}], min_words: 3}}
augmenters:
  - {{name: a, method: identity}}
  - {{name: b, method: identity}}
pair: {{view_a: a, view_b: b}}
"""
LINES = 120_000  # some 5 MiB: more than one of the reader's 4 MiB blocks


def _context(folder, lines: list[str], state) -> RunContext:
    corpus = folder / "corpus.txt"
    corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
    (folder / "stream.yaml").write_text(RECIPE.format(corpus=corpus.name), encoding="utf-8")
    return RunContext(load_recipe(folder / "stream.yaml"), StatePaths(state))


def _lines(n: int, start: int = 0) -> list[str]:
    return [f"sentence number {i} of the streamed corpus" for i in range(start, start + n)]


def _files(lake_root) -> set[str]:
    return {str(path.relative_to(lake_root)) for path in lake_root.rglob("*.parquet")}


def test_a_bad_record_past_the_first_rows_written_rolls_the_whole_ingest_back(tmp_path):
    state = tmp_path / "state"
    ingest_stage(_context(tmp_path, _lines(50), state))
    before, files = lake_state(state / "lake"), _files(state / "lake")
    folder = tmp_path / "big"
    folder.mkdir()
    ctx = _context(folder, _lines(LINES, start=50), state)
    with (folder / "corpus.txt").open("ab") as handle:
        handle.write(b"caf\xe9 au lait for everyone\n")
    with pytest.raises(CorpusError, match=rf"corpus.txt:{LINES + 1}: not valid UTF-8"):
        ingest_stage(ctx)
    assert lake_state(state / "lake") == before
    assert _files(state / "lake") == files, "the rolled-back rows left no Parquet file behind"
    with Lake(state / "lake", read_only=True) as lake:
        assert not verify_lake(lake).errors


def test_a_second_ingest_adds_only_new_sentences_and_versions_all_it_kept(tmp_path):
    state = tmp_path / "state"
    first = ingest_stage(_context(tmp_path, _lines(3000), state))
    folder = tmp_path / "more"
    folder.mkdir()
    # 2,010 sentences the lake has (1,000-2,999 and 0-9), 10 repeated within this read
    lines = _lines(LINES - 2000, start=1000) + _lines(10) + _lines(10, start=5000)
    ctx = _context(folder, lines, state)
    second = ingest_stage(ctx)
    assert (first.new_sentences, second.sentences, second.new_sentences) == (3000, LINES - 1990, LINES - 4000)
    read = ingest([folder / "corpus.txt"], corpus=ctx.recipe.corpus_name, fmt="text", lang="en", detokenize=False,
                  min_words=3, max_words=64, limit=None, run_id="check")  # fmt: skip
    ids = sorted(read.sentences["sentence_id"].to_pylist())
    assert second.corpus_version == fingerprint(ctx.recipe.corpus_name, ids)
    with Lake(state / "lake", read_only=True) as lake:
        assert lake.scalar("SELECT count(*) FROM sentences") == 3000 + LINES - 4000
        members = lake.arrow("SELECT sentence_id FROM corpus_members WHERE corpus_version = ?",
                             [second.corpus_version])  # fmt: skip
        assert sorted(members["sentence_id"].to_pylist()) == ids
        assert lake.scalar("SELECT count(*) - count(DISTINCT sentence_id) FROM sentences") == 0


def test_ids_written_outside_viewmill_are_passed_over_by_the_stored_id_check(tmp_path):
    state = tmp_path / "state"
    ctx = _context(tmp_path, _lines(20), state)
    from tests.lake_state import small_lake

    small_lake(state / "lake")  # corpus "c", ids "s0".."s2"
    with Lake(state / "lake") as lake:
        lake.con.execute("UPDATE sentences SET corpus = ?", [ctx.recipe.corpus_name])
    report = ingest_stage(ctx)
    assert (report.sentences, report.new_sentences) == (20, 20)
