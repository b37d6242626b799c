"""`viewmill data fetch` against a local HTTP server serving archives built here: the real
registry's layouts, checksums (registry-pinned and trust-on-first-use), resumed downloads."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import threading
import zipfile
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from typer.testing import CliRunner
from viewmill.pipelines.cli.app import app
from viewmill.pipelines.recipe import load_recipe, load_suite
from viewmill.storage.datasets import fetching as datasets
from viewmill.storage.datasets import sources as dataset_sources
from viewmill.storage.datasets.sources import BY_NAME, Dataset
from viewmill.train.evaluation.sts import EvalDataError, StsTask, load_stsb, load_task

from tests.conftest import REPO

STSB_ROW = "main-captions\tMSRvid\t2012test\t0001\t5.000\tA man plays a guitar.\tA man is playing a guitar.\n"


class Server:
    """Serves `files` (path -> bytes) with HTTP Range support; `cut[path] = n` makes the next
    n responses for that path stop half way with the connection closed."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.cut: dict[str, int] = {}
        self.requests: list[tuple[str, str | None]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # quiet test output
                pass

            def do_GET(self) -> None:
                body = server.files.get(self.path)
                server.requests.append((self.path, self.headers.get("Range")))
                if body is None:
                    self.send_error(404)
                    return
                start = int(self.headers["Range"].removeprefix("bytes=").rstrip("-")) if self.headers["Range"] else 0
                if start >= len(body):
                    self.send_response(416)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self.send_response(206 if start else 200)
                if start:
                    self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
                self.send_header("Content-Length", str(len(body) - start))
                self.end_headers()
                rest = body[start:]
                if server.cut.get(self.path, 0) > 0:
                    server.cut[self.path] -= 1
                    self.wfile.write(rest[: len(rest) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    self.connection.shutdown(2)  # the client sees a body shorter than announced
                    return
                self.wfile.write(rest)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()


@pytest.fixture
def server():
    srv = Server()
    yield srv
    srv.httpd.shutdown()


@pytest.fixture
def data_root(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "data"
    monkeypatch.setenv(datasets.DATA_ENV, str(root))
    return root


def _served(server: Server, monkeypatch, name: str, payloads: list[bytes], **changes) -> Dataset:
    """The real registry entry `name` with each source's URL moved to the local server."""
    real = BY_NAME[name]
    sources = []
    for i, (source, payload) in enumerate(zip(real.sources, payloads, strict=True)):
        path = f"/{name}/{i}/{source.url.rsplit('/', 1)[-1]}"
        server.files[path] = payload
        sources.append(replace(source, url=server.url + path))
    served = replace(real, sources=tuple(sources), **changes)
    monkeypatch.setitem(datasets.BY_NAME, name, served)
    return served


def _tar_gz(members: dict[str, str]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as archive:
        for name, text in members.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return out.getvalue()


def _zip(members: dict[str, str]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        for name, text in members.items():
            archive.writestr(name, text)
    return out.getvalue()


def _stsb_archive(rows: int = 3) -> bytes:
    return _tar_gz({f"stsbenchmark/sts-{split}.csv": STSB_ROW * rows for split in ("train", "dev", "test")}
                   | {"stsbenchmark/LICENSE.txt": "licence\n"})  # fmt: skip


def _leftovers(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file() and ".lock" not in p.name)


def test_fetch_unpacks_the_registry_layout_pins_the_checksum_and_recipes_find_it(server, monkeypatch, data_root):
    archive = _stsb_archive()
    served = _served(server, monkeypatch, "stsb", [archive])
    logs: list[str] = []
    target = datasets.fetch("stsb", log=logs.append)
    assert target == data_root / "stsbenchmark"
    assert _leftovers(data_root) == [f"stsbenchmark/{n}" for n in ("LICENSE.txt", "sts-dev.csv", "sts-test.csv",
                                                                   "sts-train.csv")]  # fmt: skip
    lock = json.loads((data_root / datasets.LOCK_FILE).read_text())
    assert lock[served.sources[0].url]["sha256"] == hashlib.sha256(archive).hexdigest()
    assert lock[served.sources[0].url]["size"] == len(archive)
    assert any("pinned in" in line and hashlib.sha256(archive).hexdigest() in line for line in logs)
    # A recipe path names the data set; the evaluator reads the fetched file.
    assert datasets.resolve("data:stsbenchmark/sts-test.csv") == data_root / "stsbenchmark" / "sts-test.csv"
    assert load_stsb(datasets.resolve("data:stsbenchmark/sts-test.csv")).gold.tolist() == [5.0, 5.0, 5.0]
    # Fetched once: a second fetch downloads nothing.
    before = len(server.requests)
    datasets.fetch("stsb", log=logs.append)
    assert len(server.requests) == before and logs[-1] == f"stsb: already in {target}"


def test_a_changed_source_is_refused_against_the_first_download_and_nothing_is_left(server, monkeypatch, data_root):
    _served(server, monkeypatch, "stsb", [_stsb_archive(rows=3)])
    datasets.fetch("stsb", log=lambda _: None)
    before = {p: p.read_bytes() for p in (data_root / "stsbenchmark").iterdir()}
    _served(server, monkeypatch, "stsb", [_stsb_archive(rows=4)])  # the source now serves other bytes
    with pytest.raises(datasets.DataFetchError, match=r"sha256 [0-9a-f]{64} does not match [0-9a-f]{64} recorded"):
        datasets.fetch("stsb", force=True, log=lambda _: None)
    assert {p: p.read_bytes() for p in (data_root / "stsbenchmark").iterdir()} == before
    assert not list((data_root / ".downloads").iterdir())  # no .part, no archive
    assert [p.name for p in data_root.iterdir() if "partial" in p.name] == []


def test_a_registry_checksum_mismatch_leaves_nothing_behind(server, monkeypatch, data_root):
    served = _served(server, monkeypatch, "stsb", [_stsb_archive()])
    pinned = replace(served, sources=(replace(served.sources[0], sha256="0" * 64),))
    monkeypatch.setitem(datasets.BY_NAME, "stsb", pinned)
    with pytest.raises(datasets.DataFetchError, match="does not match 0{64} recorded in the registry"):
        datasets.fetch("stsb", log=lambda _: None)
    assert _leftovers(data_root) == [] and not (data_root / datasets.LOCK_FILE).exists()


def test_an_interrupted_download_resumes_with_a_range_request(server, monkeypatch, data_root):
    archive = _stsb_archive(rows=400)  # large enough to cut in half
    served = _served(server, monkeypatch, "stsb", [archive])
    path = served.sources[0].url.removeprefix(server.url)
    server.cut[path] = 1
    logs: list[str] = []
    datasets.fetch("stsb", log=logs.append)
    half = (len(archive)) // 2
    assert server.requests == [(path, None), (path, f"bytes={half}-")]
    assert any("interrupted" in line and "resuming" in line for line in logs)
    assert len(load_stsb(data_root / "stsbenchmark" / "sts-test.csv").gold) == 400
    lock = json.loads((data_root / datasets.LOCK_FILE).read_text())
    assert lock[served.sources[0].url]["sha256"] == hashlib.sha256(archive).hexdigest()


def test_a_download_cut_every_time_stays_a_part_file_and_the_next_run_resumes(server, monkeypatch, data_root):
    archive = _stsb_archive(rows=400)
    served = _served(server, monkeypatch, "stsb", [archive])
    path = served.sources[0].url.removeprefix(server.url)
    server.cut[path] = datasets.ATTEMPTS
    with pytest.raises(datasets.DataFetchError, match=r"interrupted 3 times .*run the same command again to resume"):
        datasets.fetch("stsb", log=lambda _: None)
    (part,) = (data_root / ".downloads").iterdir()
    assert part.name.endswith(".part") and 0 < part.stat().st_size < len(archive)
    assert not (data_root / "stsbenchmark").exists()
    have = part.stat().st_size
    datasets.fetch("stsb", log=lambda _: None)
    assert server.requests[-1] == (path, f"bytes={have}-")
    assert len(load_stsb(data_root / "stsbenchmark" / "sts-test.csv").gold) == 400
    assert list((data_root / ".downloads").iterdir()) == []


def test_sts16_names_sts17_tracks_and_snli_conversion_follow_senteval(server, monkeypatch, data_root):
    sts16 = _zip({"sts2016-english-with-gs-v1.0/STS2016.input.headlines.txt": "a b\tc d\ne f\tg h\n",
                  "sts2016-english-with-gs-v1.0/STS2016.gs.headlines.txt": "4\n\n",
                  "__MACOSX/._junk": "x"})  # fmt: skip
    _served(server, monkeypatch, "sts16", [sts16])
    datasets.fetch("sts16", log=lambda _: None)
    year = data_root / "senteval_sts" / "STS16-en-test"
    assert sorted(p.name for p in year.iterdir()) == ["STS.gs.headlines.txt", "STS.input.headlines.txt"]
    suite_task = StsTask(name="STS16", format="senteval-sts", path=datasets.resolve("data:senteval_sts/STS16-en-test"))
    data = load_task(suite_task)["headlines"]
    assert data.s1 == ["a b"] and data.unscored == 1

    inputs = _zip({"STS2017.eval.v1.1/STS.input.track6.tr-en.txt": "a\tb\n" * 4})
    gold = _zip({"STS2017.gs/STS.gs.track6.tr-en.txt": "1\n2\n"})
    _served(server, monkeypatch, "sts17", [inputs, gold])
    datasets.fetch("sts17", log=lambda _: None)
    track = load_task(StsTask(name="tr-en", format="sts17", track="tr-en", path=datasets.resolve("data:sts17")))
    assert track["all"].skipped.startswith("STS.input.track6.tr-en.txt has 4 lines but STS.gs.track6.tr-en.txt 2")

    header = "gold_label\tbinary_parse\tparse\tsentence1_binary\tsentence2_binary\tsentence1\tsentence2\tx\n"
    snli = {f"snli_1.0/snli_1.0_{split}.txt": header + "entailment\t.\t.\t.\t.\tA dog runs.\tAn animal moves.\tx\n"
            "-\t.\t.\t.\t.\tNo label.\tDropped.\tx\n" for split in ("train", "dev", "test")}  # fmt: skip
    _served(server, monkeypatch, "snli", [_zip(snli | {"snli_1.0/snli_1.0_dev.jsonl": "{}"})])
    datasets.fetch("snli", log=lambda _: None)
    folder = data_root / "snli_senteval"
    assert sorted(p.name for p in folder.iterdir()) == sorted(f"{n}.{s}" for n in ("labels", "s1", "s2")
                                                              for s in ("train", "dev", "test"))  # fmt: skip
    assert (folder / "s1.dev").read_text() == "A dog runs.\n" and (folder / "labels.test").read_text() == "entailment\n"


def test_cli_lists_fetches_and_uses_exit_codes(server, monkeypatch, data_root):
    runner = CliRunner()
    _served(server, monkeypatch, "stsb", [_stsb_archive()])
    missing = _served(server, monkeypatch, "sick", [b"", b"", b""])
    monkeypatch.setitem(datasets.BY_NAME, "sick", replace(missing, sources=(replace(
        missing.sources[0], url=server.url + "/nowhere/sick_train.zip"),)))  # fmt: skip
    result = runner.invoke(app, ["data", "fetch", "nope"])
    assert result.exit_code == 2 and "unknown data set 'nope': choose from sts12" in result.output
    result = runner.invoke(app, ["data", "fetch", "stsb"])
    assert result.exit_code == 0 and (data_root / "stsbenchmark" / "sts-dev.csv").is_file()
    # Issue 33.4: a folder's name, as recipes write it, names its data set; a typo gets a suggestion
    result = runner.invoke(app, ["data", "fetch", "stsbenchmark", "stsb"])
    assert result.exit_code == 0 and result.stdout == f"stsb: already in {data_root / 'stsbenchmark'}\n"
    result = runner.invoke(app, ["data", "fetch", "stsb", "stsb_mult_mt", "stsbenchmrk"])
    assert result.exit_code == 2 and result.stdout == ""
    assert " ".join(result.stderr.split()).startswith(
        "error: unknown data set 'stsb_mult_mt' (did you mean 'stsb_multi_mt' or 'stsb-multi-mt'?), 'stsbenchmrk' "
        "(did you mean "
        "'stsbenchmark'?): choose from sts12, "
    ), result.stderr
    result = runner.invoke(app, ["data", "fetch", "sick"])
    assert result.exit_code == 1 and "sick_train.zip: the server answered 404" in result.output
    result = runner.invoke(app, ["data", "list"])
    assert result.exit_code == 0
    row = next(line for line in result.output.splitlines() if "│ stsb " in line)
    assert "data:stsbenchmark/" in row and "│ yes " in row


def test_shipped_recipes_and_suites_name_data_sets_that_the_registry_provides(data_root, monkeypatch):
    """After `viewmill data fetch`, every data: path in recipes/ resolves inside the data
    directory to a folder some registry entry fills; without it the reader names the fetch."""
    monkeypatch.setattr(datasets, "shared_data_dir", lambda: data_root / "no-shared")
    suite = load_suite("papers")
    recipes = [load_recipe(REPO / "recipes" / name) for name in ("snli-bsl-sweep.yaml", "snli-view-sources.yaml")]
    paths = [t.path for t in suite.tasks] + [f for r in recipes for f in r.corpus.files]
    referenced = [p for p in paths if data_root in p.parents]
    assert len(referenced) == 5 + 2 + 1 + 6 + 7 + 8  # STS12-16, STS-B, SICK-R, en-de, STS17, transfer, SNLI
    for path in referenced:
        assert datasets.dataset_for(path.relative_to(data_root).as_posix()) is not None, path
    with pytest.raises(EvalDataError, match="STS folder not found: .*; fetch it with: viewmill data fetch sts12"):
        load_task(suite.tasks[0])
    assert {d.name for d in dataset_sources.DATASETS} == set(datasets.BY_NAME)


def test_the_shared_checkout_is_the_fallback_only_where_it_has_the_file(data_root, monkeypatch, tmp_path):
    shared = tmp_path / "shared-data"
    (shared / "stsbenchmark").mkdir(parents=True)
    (shared / "stsbenchmark" / "sts-dev.csv").write_text(STSB_ROW)
    monkeypatch.setattr(datasets, "shared_data_dir", lambda: shared)
    assert datasets.resolve("data:stsbenchmark/sts-dev.csv") == shared / "stsbenchmark" / "sts-dev.csv"
    assert datasets.resolve("data:stsbenchmark/sts-test.csv") == data_root / "stsbenchmark" / "sts-test.csv"
    (data_root / "stsbenchmark").mkdir(parents=True)
    (data_root / "stsbenchmark" / "sts-dev.csv").write_text(STSB_ROW)
    assert datasets.resolve("data:stsbenchmark/sts-dev.csv") == data_root / "stsbenchmark" / "sts-dev.csv"
    with pytest.raises(datasets.DataFetchError, match="is not a data set path"):
        datasets.resolve("data:../etc/passwd")
