"""Bad input reaches the user as one message naming the input and the fix, with exit code
2, and the lake is as it was (row counts, version, snapshot hashes)."""

from __future__ import annotations

import shutil

import pytest
from typer.testing import CliRunner
from viewmill.pipelines.cli.app import app

from tests.lake_state import lake_state, small_lake
from tests.tmpfs import fill, tmpfs

runner = CliRunner()

RECIPE = """
name: bad
corpus: {corpus}
augmenters:
  - {{name: same, method: identity}}
  - {{name: syn, method: synonym, ratio: 0.3, seed: 1}}
pair: {{view_a: same, view_b: syn}}
"""


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    """One small lake, built once: each test works on a copy of its state directory."""
    root = tmp_path_factory.mktemp("pristine")
    small_lake(root / "lake")
    return root


@pytest.fixture
def state(tmp_path, pristine):
    return shutil.copytree(pristine, tmp_path / "state")


def _run(state, recipe, *extra):
    before = lake_state(state / "lake")
    result = runner.invoke(app, ["run", str(recipe), "--no-prefect", "--state-dir", str(state), *extra])
    assert "Traceback" not in result.output
    assert lake_state(state / "lake") == before, "the lake changed"
    return result, " ".join(result.output.split())  # rich wraps long lines


def _recipe(tmp_path, corpus: str, extra: str = "") -> str:
    path = tmp_path / "bad.yaml"
    path.write_text(RECIPE.format(corpus=corpus) + extra, encoding="utf-8")
    return path


# -- 15: CSV parsed strictly ------------------------------------------------------------
def test_an_unterminated_csv_quote_stops_the_run_at_its_line(tmp_path, state):
    corpus = tmp_path / "corpus.csv"
    corpus.write_text('text,id\n"A man plays a guitar.",1\n"Two dogs run, 2\nA cat sleeps.,3\n', encoding="utf-8")
    recipe = _recipe(tmp_path, f"{{format: csv, files: [{corpus}], text_column: text}}")
    result, out = _run(state, recipe)
    assert result.exit_code == 2
    assert (
        f"error: {corpus}:3: CSV cannot be parsed from this line on (unexpected end of data): a quote opened here "
        'is never closed? close it, or double a quote inside a quoted field ("")'
    ) in out


def test_a_quote_that_swallows_records_is_reported_not_merged(tmp_path, state):
    corpus = tmp_path / "corpus.csv"
    corpus.write_text('text,id\n"A man plays,1\nTwo dogs run.",2\nA cat sleeps.,3\n', encoding="utf-8")
    recipe = _recipe(tmp_path, f"{{format: csv, files: [{corpus}], text_column: text}}")
    result, out = _run(state, recipe)
    assert result.exit_code == 2
    assert (
        f"error: {corpus}:2: one record runs over lines 2-3: an unbalanced quote? close it, or double a quote "
        'inside a quoted field ("") (or set corpus.on_error: skip to skip and count such records)'
    ) in out


def test_strict_csv_reading_keeps_good_records_and_reports_the_bad_ones():
    from pathlib import Path
    from tempfile import mkdtemp

    from viewmill.augment.ingest.readers import Malformed, RawLine, ReadOptions, read_csv

    path = Path(mkdtemp()) / "c.csv"
    path.write_text('text,id\n"ok, quoted",1\n"open,2\nrest",3\nfine,4\n"a ""quoted"" word",5\n', encoding="utf-8")
    records = list(read_csv(path, ReadOptions(text_column="text")))
    assert records == [
        RawLine("ok, quoted", str(path), 2),
        Malformed(str(path), 3, 'one record runs over lines 3-4: an unbalanced quote? close it, or double a '
                  'quote inside a quoted field ("")'),
        RawLine("fine", str(path), 5),
        RawLine('a "quoted" word', str(path), 6),
    ]  # fmt: skip


# -- 16: grids and YAML that would eat memory ----------------------------------------------
SWEEP = """
train: {{encoder: embedded:all-MiniLM-L6-v2, steps: 2}}
evaluate: {{tasks: [{{name: dev, format: stsb, path: sts.csv}}]}}
sweep:
  select_on: dev
  grid:
{grid}
"""


def test_a_sweep_grid_of_ten_billion_configurations_is_refused_before_expanding(tmp_path, state):
    grid = "\n".join(f"    train.setting_{i}: [{', '.join(map(str, range(10)))}]" for i in range(10))
    corpus = tmp_path / "c.txt"
    corpus.write_text("A man plays a guitar.\n", encoding="utf-8")
    recipe = _recipe(tmp_path, f"{{files: [{corpus}]}}", SWEEP.format(grid=grid))
    before = lake_state(state / "lake")
    result = runner.invoke(app, ["sweep", str(recipe), "--no-prefect", "--state-dir", str(state)])
    out = " ".join(result.output.split())
    assert result.exit_code == 2 and "Traceback" not in out
    assert (
        "the sweep has 10,000,000,000 configurations (grid 10 x 10 x 10 x 10 x 10 x 10 x 10 x 10 x 10 x 10, plus 0 "
        "listed), more than 256: narrow sweep.grid or split it into several sweeps"
    ) in out
    assert lake_state(state / "lake") == before


def test_a_yaml_alias_bomb_is_refused_without_expanding(tmp_path, state):
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 10)]
    recipe = tmp_path / "bomb.yaml"
    recipe.write_text("\n".join(lines) + "\nname: *a9\n", encoding="utf-8")
    result, out = _run(state, recipe)
    assert result.exit_code == 2
    assert (
        f"error: recipe {recipe}: the YAML expands to more than 100,000 values (anchors and *aliases repeated "
        "inside one another, from line 1): write the settings out, without nested aliases"
    ) in out


def test_a_recursive_alias_and_a_bomb_in_an_override_are_refused(tmp_path, state):
    recipe = tmp_path / "loop.yaml"
    recipe.write_text("name: &n [*n]\n", encoding="utf-8")
    assert "the YAML expands to more than 100,000 values" in _run(state, recipe)[1]
    corpus = tmp_path / "c.txt"
    corpus.write_text("A man plays a guitar.\n", encoding="utf-8")
    good = _recipe(tmp_path, f"{{files: [{corpus}]}}")
    bomb = "[" + ", ".join(["&a [" + ", ".join(["1"] * 400) + "]"] + ["*a"] * 400) + "]"
    result, out = _run(state, good, "--set", f"execution.retries={bomb}")
    assert result.exit_code == 2
    assert f"override 'execution.retries={bomb}': the value is not usable YAML (the YAML expands to more than" in out


def test_ordinary_anchors_still_load(tmp_path):
    from viewmill.pipelines.safe_yaml import load_yaml

    assert load_yaml("base: &b {x: 1}\nother: *b\nlist: [*b, *b]\n") == {
        "base": {"x": 1}, "other": {"x": 1}, "list": [{"x": 1}, {"x": 1}],
    }  # fmt: skip


# -- 17: one message instead of a traceback ------------------------------------------------
def _links(folder, kind: str) -> str:
    """A corpus path under `folder` that leads nowhere, as `kind` makes it (relative to `folder`)."""
    if kind == "one link":
        (folder / "loop.txt").symlink_to("loop.txt")
        return "loop.txt"
    if kind == "two links":
        (folder / "a.txt").symlink_to("b.txt")
        (folder / "b.txt").symlink_to("a.txt")
        return "a.txt"
    if kind == "a folder on the way":
        (folder / "d1").symlink_to("d2")
        (folder / "d2").symlink_to("d1")
        return "d1/corpus.txt"
    (folder / "gone.txt").symlink_to(folder / "moved-away.txt")  # its target is gone
    return "gone.txt"


@pytest.mark.parametrize("kind", ["one link", "two links", "a folder on the way", "a dangling link"])
@pytest.mark.parametrize("written", ["relative", "absolute"])
def test_a_symlink_loop_in_the_corpus_files_is_named(tmp_path, state, kind, written):
    name = _links(tmp_path, kind)
    corpus = name if written == "relative" else str(tmp_path / name)
    result, out = _run(state, _recipe(tmp_path, f"{{files: [{corpus}]}}"))
    assert result.exit_code == 2, out
    assert (
        f"error: corpus file {tmp_path / name} is a symbolic link that leads nowhere (a loop, or its target is "
        "gone): point corpus.files at the real file"
    ) in out


def test_a_text_file_given_as_parquet_is_named(tmp_path, state):
    fake = tmp_path / "corpus.parquet"
    fake.write_text("A man plays a guitar.\n", encoding="utf-8")
    result, out = _run(state, _recipe(tmp_path, f"{{format: parquet, files: [{fake}], text_column: text}}"))
    assert result.exit_code == 2
    assert f"error: {fake} is not a readable Parquet file (" in out
    assert "): set corpus.format to the file's real format (text, csv, nli-jsonl, ...) or convert it to Parquet" in out


def test_a_cuda_device_without_a_gpu_is_refused_before_anything_is_written(tmp_path, state):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    corpus = tmp_path / "c.txt"
    corpus.write_text("A man plays a guitar.\n", encoding="utf-8")
    recipe = _recipe(tmp_path, f"{{files: [{corpus}]}}", "train: {encoder: embedded:all-MiniLM-L6-v2, device: cuda}\n")
    result, out = _run(state, recipe)
    assert result.exit_code == 2
    assert (
        "error: train.device is 'cuda' but this machine has no usable CUDA GPU (torch.cuda.is_available() is "
        "False): set train.device: cpu (or --set train.device=cpu), or run on a GPU worker"
    ) in out


@pytest.mark.parametrize(
    ("setting", "override"),
    [
        ("filters.meaning.device", "filters.meaning={device: cuda}"),
        ("pair.negatives.device", "pair.negatives={source: mined, device: cuda}"),
    ],
)
def test_an_encoder_on_cuda_without_a_gpu_is_refused_by_its_setting(tmp_path, state, setting, override):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    corpus = tmp_path / "c.txt"
    corpus.write_text("A man plays a guitar.\n", encoding="utf-8")
    result, out = _run(state, _recipe(tmp_path, f"{{files: [{corpus}]}}"), "--set", override)
    assert result.exit_code == 2
    assert f"error: {setting} is 'cuda' but this machine has no usable CUDA GPU" in out
    assert f"set {setting}: cpu (or --set {setting}=cpu), or run on a GPU worker" in out


@pytest.fixture
def tiny_disk(tmp_path):
    """A 4 MiB tmpfs."""
    with tmpfs(tmp_path / "disk", "size=4m") as where:
        yield where


def test_a_full_disk_says_so_and_where_and_the_lake_keeps_its_last_commit(tmp_path, tiny_disk, pristine):
    state = shutil.copytree(pristine, tiny_disk / "state")
    before = lake_state(state / "lake")
    corpus = tmp_path / "c.txt"
    corpus.write_text("A man plays a guitar.\nTwo dogs run in a field.\n", encoding="utf-8")
    recipe = _recipe(tmp_path, f"{{files: [{corpus}]}}")
    filler = tiny_disk / "filler"
    fill(filler)
    result = runner.invoke(app, ["run", str(recipe), "--no-prefect", "--state-dir", str(state)])
    out = " ".join(result.output.split())
    filler.unlink()
    assert lake_state(state / "lake") == before
    assert result.exit_code == 1 and "Traceback" not in out
    lake = state / "lake"
    assert (
        f"error: failed: no space left on device while writing the lake at {lake} (catalog {lake}/catalog.sqlite, "
        f"data {lake}/data): the write was rolled back and the lake keeps its last commit; free space there "
        "(df -h) or move the state directory to a larger disk"
    ) in out


def test_a_read_only_state_directory_is_named_with_the_fix(tmp_path, tiny_disk, pristine):
    import subprocess

    state = shutil.copytree(pristine, tiny_disk / "state")
    before = lake_state(state / "lake")
    corpus = tmp_path / "c.txt"
    corpus.write_text("A man plays a guitar.\nTwo dogs run in a field.\n", encoding="utf-8")
    recipe = _recipe(tmp_path, f"{{files: [{corpus}]}}")
    subprocess.run(["mount", "-o", "remount,ro", str(tiny_disk)], check=True)  # read-only even for root
    try:
        run = runner.invoke(app, ["run", str(recipe), "--no-prefect", "--state-dir", str(state)])
    finally:
        subprocess.run(["mount", "-o", "remount,rw", str(tiny_disk)], check=True)
    message = (
        f"the lake directory {state / 'lake'} is read-only (the SQLite catalog needs to write even to be read): "
        "make it writable, or copy the state directory somewhere writable and point --state-dir there"
    )
    assert run.exit_code == 1 and f"error: failed: {message}" in " ".join(run.output.split())
    assert lake_state(state / "lake") == before


# -- issue 21, item 10: one message naming the input and the fix ----------------------------
def _unblock_later(fifo, after_s: float = 30.0) -> None:
    """Open the pipe's writing end after a while, so a reader stuck on it fails instead of hanging."""
    import contextlib
    import os
    import threading

    def unblock() -> None:
        with contextlib.suppress(OSError):  # no reader: nothing is stuck
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))

    timer = threading.Timer(after_s, unblock)
    timer.daemon = True
    timer.start()


NOT_FILES = {
    "character device": "a character device (like /dev/zero or a terminal), not a file: reading it never ends or "
    "waits for input; point corpus.files at a regular file",
    "named pipe": "a named pipe (FIFO), not a file: a run reads its corpus more than once (the checks, then "
    "ingest), so write the pipe's content to a regular file and point corpus.files at it",
    "folder": "a folder, not a file: list the files inside it in corpus.files",
}


@pytest.mark.parametrize("kind", NOT_FILES)
def test_a_device_a_pipe_or_a_folder_as_corpus_is_named_as_what_it_is(tmp_path, state, kind):
    import os
    from pathlib import Path

    source = {"character device": Path("/dev/zero"), "named pipe": tmp_path / "corpus.fifo"}.get(kind, tmp_path / "c")
    if kind == "named pipe":
        os.mkfifo(source)
        _unblock_later(source)  # were it opened, the read would wait for a writer for ever
    elif kind == "folder":
        source.mkdir()
    what = NOT_FILES[kind]
    result, out = _run(state, _recipe(tmp_path, f"{{files: [{source}]}}"))
    assert result.exit_code == 2
    assert f"error: corpus file {source} is {what}" in out
    assert "not found" not in out


@pytest.mark.parametrize("mark", [True, False], ids=["with a byte-order mark", "without"])
def test_a_utf16_corpus_is_named_with_the_iconv_line_that_converts_it(tmp_path, state, mark):
    corpus = tmp_path / "corpus.txt"
    text = "A man plays a guitar.\nTwo dogs run in a field.\n"
    corpus.write_bytes(text.encode("utf-16") if mark else text.encode("utf-16-le"))
    result, out = _run(state, _recipe(tmp_path, f"{{files: [{corpus}]}}"))
    converted = tmp_path / "corpus.utf8.txt"
    evidence = "it starts with the UTF-16 byte-order mark FF FE" if mark else "every other byte is NUL"
    source = "UTF-16" if mark else "UTF-16LE"  # iconv reads the mark itself; without one it needs the order
    assert result.exit_code == 2
    assert (
        f"error: {corpus} is UTF-16LE text ({evidence}), not UTF-8: convert it with iconv -f {source} -t UTF-8 "
        f"{corpus} > {converted} and point corpus.files at {converted}"
    ) in out
    assert "latin1" not in out


def test_a_recipe_name_too_long_for_a_file_name_is_refused_before_anything_runs(tmp_path, state):
    corpus = tmp_path / "c.txt"
    corpus.write_text("A man plays a guitar.\n", encoding="utf-8")
    recipe = _recipe(tmp_path, f"{{files: [{corpus}]}}")
    recipe.write_text(recipe.read_text(encoding="utf-8").replace("name: bad", "name: " + "n" * 300), encoding="utf-8")
    result, out = _run(state, recipe)
    assert result.exit_code == 2
    assert (
        f"error: recipe {recipe} is not valid: - name: the name is 300 characters long, more than 100: "
        "viewmill names files after it (models/<name>-<model id>, reports/sweep-<name>-<run>.md) and a file name "
        "may have at most 255 bytes; shorten the name"
    ) in out


def test_a_read_only_prefect_home_is_named_with_the_fix(tmp_path, state, monkeypatch):
    home = state / "prefect"
    monkeypatch.delenv("PREFECT_API_URL", raising=False)  # no configured server: the state's own one
    corpus = tmp_path / "c.txt"
    corpus.write_text("A man plays a guitar.\nTwo dogs run in a field.\n", encoding="utf-8")
    before = lake_state(state / "lake")
    recipe = _recipe(tmp_path, f"{{files: [{corpus}]}}")
    with tmpfs(home, "size=1m,ro"):  # with Prefect: the state's temporary server would live there
        result = runner.invoke(app, ["run", str(recipe), "--state-dir", str(state)])
    out = " ".join(result.output.split())
    assert result.exit_code == 2 and "Traceback" not in out
    assert (
        f"error: the Prefect home {home} cannot be written (Read-only file system): the temporary Prefect server "
        "keeps its database, lock and record there; make it writable, or point --state-dir at a writable state "
        "directory, or set PREFECT_API_URL to a running server, or pass --no-prefect to run without Prefect"
    ) in out
    assert lake_state(state / "lake") == before
