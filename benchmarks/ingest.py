"""Ingest at book-corpus scale (issue 24.8): viewmill's ingest stage against a plain DuckDB
`read_csv` + polars script doing the same normalisation, length filter and dedup, side by side.

Corpora are generated (deterministic): words drawn from the demo corpus's SNLI sentences with
their natural frequencies, BookCorpus-like lengths (median 13 words), 10% duplicates of an
earlier sentence, 4% too short and 1% too long, about a quarter with a curly quote or an
accented word, 1% in NFD, with a zero-width space or doubled spaces (which normalisation must fold). `text` has
one sentence a line, `parquet` one a row, `book` paragraphs of `--paragraph` sentences (a
third of them wrapped over two lines) separated by blank lines.

The viewmill side runs the real ingest stage (`ingest_stage`: the corpus read and streamed into
a DuckLake lake in a temporary state folder, with its corpus version); the read side runs the
stage's read alone, its rows dropped as they come; the baseline reads the lines
with DuckDB's `read_csv`, paragraphs and sentences (a regex split, not pysbd) with polars,
then removes invisible characters, NFCs, folds whitespace, drops control characters and
texts over 1,000 characters, filters by length, dedupes and writes one Parquet file. Each run
is its own process, so its peak RSS (VmHWM) is its own; sides alternate, `--repeats` times.
`--sweep` times book ingest per sentence at several paragraph lengths, taking turns (linear:
flat).

    .venv/bin/python benchmarks/ingest.py [--sizes 1000000 10000000] [--formats text book parquet]
        [--repeats 3] [--sweep 10 100 1000] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from viewmill.cpu import cpu_cores, flags_label

ROOT = Path(__file__).resolve().parents[1]
FORMATS = ("text", "book", "parquet")
MIN_WORDS, MAX_WORDS = 3, 64  # the recipe defaults
CHUNK = 1_000_000  # sentences generated at a time
# Non-ASCII words a book has (curly quotes, accents), drawn as often as a common word each.
EXTRA_WORDS = ["café", "naïve", "señor", "“indeed”", "don’t", "it’s", "déjà", "fiancée", "—", "‘well’"]


def word_pool() -> pa.Array:
    """The demo corpus's words as often as they occur there, plus a few non-ASCII ones."""
    snli = ROOT / "recipes" / "data" / "snli"
    text = "\n".join((snli / name).read_text(encoding="utf-8") for name in ("s1.dev", "s2.dev"))
    words = [word for word in text.lower().split() if word.isalpha()]
    return pa.array(words + EXTRA_WORDS * (len(words) // 400))


def sentences(n: int, seed: int, pool: pa.Array) -> pa.Array:
    """`n` sentences: lengths, duplicates, too short/long ones and Unicode variants as above."""
    rng = np.random.default_rng(seed)
    lengths = np.clip(np.rint(rng.lognormal(np.log(13), 0.45, n)), MIN_WORDS, MAX_WORDS).astype(np.int64)
    kind = rng.random(n)
    lengths[kind < 0.04] = rng.integers(1, MIN_WORDS, int((kind < 0.04).sum()))
    long = (kind >= 0.04) & (kind < 0.05)
    lengths[long] = rng.integers(MAX_WORDS + 1, 2 * MAX_WORDS, int(long.sum()))
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    words = pool.take(pa.array(rng.integers(0, len(pool), int(offsets[-1]))))
    text = pc.utf8_capitalize(pc.binary_join(pa.ListArray.from_arrays(pa.array(offsets), words), " "))
    text = pc.binary_join_element_wise(text, ".", "")
    earlier = np.arange(n)
    dup = rng.random(n) < 0.10
    earlier[dup] = (rng.random(int(dup.sum())) * np.flatnonzero(dup)).astype(np.int64)
    text = text.take(pa.array(earlier))
    variants = (
        (0.004, "é", "e\u0301"),
        (0.003, " the ", " the\u200b "),
        (0.003, " a ", "  a "),
    )  # NFD, invisible, spaces
    for share, pattern, replacement in variants:
        chosen = pa.array(rng.random(n) < share)
        text = pc.if_else(chosen, pc.replace_substring(text, pattern, replacement), text)
    return text


def write_corpus(path: Path, fmt: str, n: int, paragraph: int, seed: int = 0) -> None:
    pool = word_pool()
    writer = pq.ParquetWriter(path, pa.schema([("text", pa.string())])) if fmt == "parquet" else None
    with path.open("wb") if writer is None else open(os.devnull, "wb") as out:
        for start in range(0, n, CHUNK):
            chunk = sentences(min(CHUNK, n - start), seed + start, pool)
            if writer is not None:
                writer.write_table(pa.table({"text": chunk}), row_group_size=128_000)
            elif fmt == "text":
                out.write(("\n".join(chunk.to_pylist()) + "\n").encode())
            else:
                out.write(book_text(chunk, paragraph, np.random.default_rng(seed + start)).encode())
    if writer is not None:
        writer.close()


def book_text(chunk: pa.Array, paragraph: int, rng: np.random.Generator) -> str:
    """Paragraphs of `paragraph` sentences, a sentence a line, a third wrapped after a word."""
    wrap = pa.array(rng.random(len(chunk)) < 1 / 3)
    wrapped = pc.if_else(wrap, pc.replace_substring(chunk, " ", "\n", max_replacements=1), chunk)
    lines = wrapped.to_pylist()
    return "".join("\n".join(lines[i : i + paragraph]) + "\n\n" for i in range(0, len(lines), paragraph))


def peak_rss_gib(field: str = "VmHWM") -> float:
    """This process's peak resident memory (VmHWM: its own, not the parent's it was forked
    from), or with "VmRSS" its resident memory now."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 2**20
    raise SystemExit("no /proc/self/status: this benchmark measures memory on Linux")


def bench_context(corpus: Path, fmt: str, workdir: Path):
    """A run's context for the corpus (two identity views; the stage reads only the corpus)."""
    from viewmill.pipelines.context import RunContext
    from viewmill.pipelines.recipe import load_recipe
    from viewmill.pipelines.state import StatePaths

    spec = {"files": [str(corpus)], "format": fmt, "min_words": MIN_WORDS, "max_words": MAX_WORDS}
    recipe = {"name": "bench", "corpus": spec | ({"text_column": "text"} if fmt == "parquet" else {}),
              "augmenters": [{"name": "a", "method": "identity"}, {"name": "b", "method": "identity"}],
              "pair": {"view_a": "a", "view_b": "b"}}  # fmt: skip
    path = workdir / "bench.yaml"
    path.write_text(json.dumps(recipe), encoding="utf-8")  # JSON is YAML
    return RunContext(load_recipe(path), StatePaths(workdir / "state"))


def viewmill_side(corpus: Path, fmt: str, workdir: Path) -> dict:
    """The ingest stage as a run calls it: the corpus streamed into a new lake, with its version."""
    from viewmill.pipelines.stages.ingest import ingest_stage

    ctx = bench_context(corpus, fmt, workdir)
    floor = peak_rss_gib("VmRSS")  # the modules a run imports, before any reading
    start = time.perf_counter()
    report = ingest_stage(ctx)
    return {"seconds": time.perf_counter() - start, "kept": report.sentences, "peak_gib": peak_rss_gib(),
            "floor_gib": floor}  # fmt: skip


def read_side(corpus: Path, fmt: str, workdir: Path) -> dict:
    """The stage's read alone (`corpus_stream`'s batches, dropped as they come): no lake."""
    from viewmill.pipelines.stages.ingest import corpus_stream

    stream = corpus_stream(bench_context(corpus, fmt, workdir))
    start = time.perf_counter()
    for _ in stream.batches():
        pass
    return {"seconds": time.perf_counter() - start, "kept": stream.stats.kept, "peak_gib": peak_rss_gib()}


def baseline_side(corpus: Path, fmt: str, workdir: Path) -> dict:
    """DuckDB reads the lines (or the Parquet column), polars does the rest."""
    import duckdb
    import polars as pl

    start = time.perf_counter()
    if fmt == "parquet":
        frame = duckdb.sql(f"SELECT text FROM read_parquet('{corpus}')").pl()
    else:
        frame = duckdb.sql(
            f"SELECT line AS text FROM read_csv('{corpus}', header = false, columns = {{'line': 'VARCHAR'}}, "
            "delim = '\\x01', quote = '', escape = '', auto_detect = false, strict_mode = false)"
        ).pl()
    if fmt == "book":  # lines joined into paragraphs, paragraphs split after . ! ? (no lookbehind in polars)
        blank = pl.col("text").is_null() | (pl.col("text").str.strip_chars() == "")
        frame = (
            frame.with_columns(paragraph=blank.cum_sum())
            .filter(~blank)
            .group_by("paragraph", maintain_order=True)
            .agg(pl.col("text").str.strip_chars().str.join(" "))
            .select(pl.col("text").str.replace_all(r"([.!?][\"”’]?)\s+", "$1\n").str.split("\n"))
            .explode("text")
        )
    text = (
        pl.col("text").str.replace_all(r"\p{Default_Ignorable_Code_Point}", "").str.normalize("NFC")
        .str.replace_all(r"\s+", " ").str.strip_chars()
    )  # fmt: skip
    words = pl.col("text").str.count_matches(" ") + 1
    kept = (
        frame.select(text)
        .filter(pl.col("text") != "", ~pl.col("text").str.contains(r"\p{Cc}"), pl.col("text").str.len_chars() <= 1000)
        .filter(words.is_between(MIN_WORDS, MAX_WORDS))
        .unique("text", keep="first", maintain_order=True)
    )
    kept.write_parquet(workdir / "sentences.parquet")
    return {"seconds": time.perf_counter() - start, "kept": kept.height, "peak_gib": peak_rss_gib()}


def book_sweep_side(corpus: Path, n: int) -> dict:
    """viewmill's read alone (no lake) over a book: seconds per sentence."""
    result = read_side(corpus, "book", corpus.parent)
    return {**result, "us_per_sentence": result["seconds"] / n * 1e6}


def child(side: str, corpus: Path, fmt: str, workdir: Path, n: int) -> dict:
    args = [sys.executable, __file__, "--side", side, "--corpus", str(corpus), "--format", fmt,
            "--workdir", str(workdir), "--sizes", str(n)]  # fmt: skip
    out = subprocess.run(args, capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"{side} run failed on {corpus}:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def spread(values: list[float], fmt: str = ",.0f") -> str:
    return " / ".join(format(v, fmt) for v in (min(values), statistics.median(values), max(values)))


def compare(n: int, fmt: str, repeats: int, paragraph: int, tmp: Path) -> dict:
    tmp.mkdir(parents=True)
    corpus = tmp / f"corpus-{n}.{'parquet' if fmt == 'parquet' else 'txt'}"
    write_corpus(corpus, fmt, n, paragraph)
    runs: dict[str, list[dict]] = {"viewmill": [], "read": [], "baseline": []}
    for repeat in range(repeats):
        for side in runs:
            workdir = tmp / f"{side}-{repeat}"
            workdir.mkdir()
            runs[side].append(child(side, corpus, fmt, workdir, n))
    corpus.unlink()
    rate = {side: [n / r["seconds"] for r in rs] for side, rs in runs.items()}
    ratios = [v / b for v, b in zip(rate["viewmill"], rate["baseline"], strict=True)]
    read = rate["read"]
    read_ratios = [v / b for v, b in zip(read, rate["baseline"], strict=True)]
    print(f"{n:,} sentences, {fmt}: viewmill {spread(rate['viewmill'])} sentences/s (read alone "
          f"{spread(read)}, peak {max(r['peak_gib'] for r in runs['read']):.2f} GiB; "
          f"{max(r['floor_gib'] for r in runs['viewmill']):.2f} GiB of imports), "
          f"peak {max(r['peak_gib'] for r in runs['viewmill']):.2f} GiB, kept "
          f"{runs['viewmill'][0]['kept']:,}; baseline {spread(rate['baseline'])} sentences/s, peak "
          f"{max(r['peak_gib'] for r in runs['baseline']):.2f} GiB, kept {runs['baseline'][0]['kept']:,}; "
          f"ratio to baseline: stage {spread(ratios, '.2f')}x, read {spread(read_ratios, '.2f')}x "
          "(min / median / max)", flush=True)  # fmt: skip
    return {"sentences": n, "format": fmt, "runs": runs, "ratios": ratios, "read_ratios": read_ratios}


def sweep(n: int, paragraphs: list[int], repeats: int, tmp: Path) -> list[dict]:
    """Book ingest per sentence at each paragraph length, the lengths taking turns in every
    repeat so that each sees the same load."""
    for paragraph in paragraphs:
        write_corpus(tmp / f"book-{paragraph}.txt", "book", n, paragraph, seed=1)
    per: dict[int, list[float]] = {paragraph: [] for paragraph in paragraphs}
    for _ in range(repeats):
        for paragraph in paragraphs:
            per[paragraph].append(child("sweep", tmp / f"book-{paragraph}.txt", "book", tmp, n)["us_per_sentence"])
    for paragraph, times in per.items():
        print(f"book, paragraphs of {paragraph:,} sentences ({n:,} sentences): {spread(times, '.1f')} us per "
              "sentence (min / median / max)", flush=True)  # fmt: skip
    return [{"paragraph": paragraph, "us_per_sentence": times} for paragraph, times in per.items()]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="*", default=[1_000_000, 10_000_000])
    parser.add_argument("--formats", nargs="+", choices=FORMATS, default=list(FORMATS))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--paragraph", type=int, default=20, help="book: sentences per paragraph")
    parser.add_argument("--sweep", type=int, nargs="*", default=[10, 100, 1000], help="book paragraph lengths")
    parser.add_argument("--sweep-sentences", type=int, default=20_000)
    parser.add_argument("--quick", action="store_true", help="a smoke run: 20,000 sentences, one repeat")
    parser.add_argument("--json", type=Path, help="write every run's figures here")
    parser.add_argument("--side", choices=["viewmill", "read", "baseline", "sweep"], help=argparse.SUPPRESS)
    parser.add_argument("--corpus", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--format", help=argparse.SUPPRESS)
    parser.add_argument("--workdir", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:  # a child process: one run, its figures as JSON on the last line
        if args.side == "sweep":
            print(json.dumps(book_sweep_side(args.corpus, args.sizes[0])))
        else:
            side = {"viewmill": viewmill_side, "read": read_side, "baseline": baseline_side}[args.side]
            print(json.dumps(side(args.corpus, args.format, args.workdir)))
        return
    if args.quick:
        args.sizes, args.repeats, args.sweep_sentences = [20_000], 1, 2_000
    print(f"CPU flags: {flags_label()}; {cpu_cores()} cores; load average {os.getloadavg()[0]:.1f}", flush=True)
    results: dict = {"compare": [], "sweep": []}
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        for n in args.sizes:
            for fmt in args.formats:
                results["compare"].append(compare(n, fmt, args.repeats, args.paragraph, tmp / f"{fmt}-{n}"))
        if args.sweep:
            (tmp / "sweep").mkdir()
            results["sweep"] = sweep(args.sweep_sentences, args.sweep, args.repeats, tmp / "sweep")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
