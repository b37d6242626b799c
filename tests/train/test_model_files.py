"""Model folders that would fail deep inside safetensors or transformers, read a huge file into
memory or lead into the system are refused before anything loads: exit 2, a message naming the
folder or file and the fix, and the lake untouched (issue 30: model folders)."""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner
from viewmill.pipelines.cli.app import app
from viewmill.train.encoder import EncoderError, resolve_encoder
from viewmill.train.model_files import MAX_TEXT_ENV

from tests.conftest import needs_apertium, write_sts_fixture
from tests.lake_state import lake_state, small_lake

runner = CliRunner()
WORDS = "embeddings.word_embeddings.weight"
DOWNLOAD_AGAIN = "the file is cut short or not the model's own: download the model again, or export it again"


def _copy(tiny_model: Path, where: Path) -> Path:
    shutil.copytree(tiny_model, where)
    return where


def _header(path: Path) -> tuple[dict, bytes]:
    data = path.read_bytes()
    length = struct.unpack("<Q", data[:8])[0]
    return json.loads(data[8 : 8 + length]), data[8 + length :]


def _write(path: Path, header: dict, body: bytes) -> None:
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + body)


def _lie_bigger_than_the_file(folder: Path) -> str:
    """The header says the word embeddings have 1000 times their rows (and bytes)."""
    weights = folder / "model.safetensors"
    header, body = _header(weights)
    entry = header[WORDS]
    start, end = entry["data_offsets"]
    rows, width = entry["shape"]
    entry["shape"], entry["data_offsets"] = [rows * 1000, width], [start, start + (end - start) * 1000]
    _write(weights, header, body)
    return (
        f"{weights}'s header says tensor {WORDS} (F32 [{rows * 1000}, {width}]) ends at byte "
        f"{start + (end - start) * 1000:,} of the data, but the file holds {len(body):,} bytes of data: "
        f"{DOWNLOAD_AGAIN}"
    )


def _lie_about_the_shape(folder: Path) -> str:
    """The header says a shape twice the bytes its offsets span."""
    weights = folder / "model.safetensors"
    header, body = _header(weights)
    rows, width = header[WORDS]["shape"]
    header[WORDS]["shape"] = [rows, width * 2]
    _write(weights, header, body)
    return (
        f"{weights}'s header says tensor {WORDS} is F32 [{rows}, {width * 2}] ({rows * width * 8:,} bytes) but "
        f"gives it {rows * width * 4:,} bytes: {DOWNLOAD_AGAIN}"
    )


def _shape_unlike_the_config(folder: Path) -> str:
    """A consistent file whose position embeddings are 48 wide where config.json says 32."""
    import numpy as np
    from safetensors.numpy import load_file, save_file

    weights = folder / "model.safetensors"
    tensors = load_file(str(weights))
    name = "embeddings.position_embeddings.weight"
    tensors[name] = np.zeros((128, 48), dtype=np.float32)
    save_file(tensors, str(weights))
    return (
        f"{weights} holds tensor {name} of shape [128, 48], but {folder / 'config.json'} makes it [128, 32]: the "
        "weights and the config are of different models; put the model's own config.json beside its weights "
        "(download or export the model again)"
    )


def _suite(tmp_path: Path) -> Path:
    write_sts_fixture(tmp_path / "sts.csv")
    suite = tmp_path / "suite.yaml"
    suite.write_text("tasks:\n  - {name: fixture, format: stsb, path: sts.csv}\n", encoding="utf-8")
    return suite


def _eval(tmp_path: Path, model: Path) -> tuple[int, str]:
    """`viewmill eval` on `model` against a lake holding 3 sentences; the lake must not change."""
    state = tmp_path / "state"
    if not (state / "lake").exists():
        small_lake(state / "lake")
    before = lake_state(state / "lake")
    args = ["eval", str(model), "--suite", str(_suite(tmp_path)), "--state-dir", str(state)]
    result = runner.invoke(app, args)
    assert lake_state(state / "lake") == before and "Traceback" not in result.output
    assert not (state / "reports").exists(), "nothing written"
    return result.exit_code, " ".join(result.output.split())


@pytest.mark.parametrize("lie", [_lie_bigger_than_the_file, _lie_about_the_shape, _shape_unlike_the_config],
                         ids=["tensor-past-the-end", "shape-unlike-its-bytes", "shape-unlike-the-config"])  # fmt: skip
def test_a_safetensors_header_that_lies_is_refused_before_any_weights_load(tmp_path, tiny_model, lie):
    folder = _copy(tiny_model, tmp_path / "model")
    expected = lie(folder)
    with pytest.raises(EncoderError) as refused:
        resolve_encoder(str(folder))
    assert str(refused.value) == expected
    code, out = _eval(tmp_path, folder)
    assert code == 2 and f"error: {expected}" in out, out


def test_the_checks_pass_the_model_as_exported_and_a_sharded_one(tmp_path, tiny_model):
    """The tiny model itself, and its weights cut in two shards with an index, are accepted."""
    from safetensors.numpy import load_file, save_file

    assert resolve_encoder(str(tiny_model)) == str(tiny_model.resolve())
    folder = _copy(tiny_model, tmp_path / "sharded")
    tensors = load_file(str(folder / "model.safetensors"))
    names = sorted(tensors)
    (folder / "model.safetensors").unlink()
    shards = {"model-00001-of-00002.safetensors": names[:10], "model-00002-of-00002.safetensors": names[10:]}
    for shard, part in shards.items():
        save_file({name: tensors[name] for name in part}, str(folder / shard))
    index = {"metadata": {}, "weight_map": {name: shard for shard, part in shards.items() for name in part}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index), encoding="utf-8")
    assert resolve_encoder(str(folder)) == str(folder)


def _huge_tokenizer(folder: Path) -> Path:
    """tokenizer.json as a sparse 500 MiB file: no data is written."""
    tokenizer = folder / "tokenizer.json"
    tokenizer.unlink()
    with tokenizer.open("wb") as handle:
        handle.truncate(500 * 1024 * 1024)
    return tokenizer


def test_a_500_mb_tokenizer_is_refused_unless_the_limit_is_raised(tmp_path, tiny_model, monkeypatch):
    tokenizer = _huge_tokenizer(_copy(tiny_model, tmp_path / "model"))
    expected = (
        f"model file {tokenizer} is 524 MB, more than the 64 MB a tokenizer or configuration file may have (the "
        "largest common tokenizer.json files are 20-35 MB, and it would be read whole into memory): check that it "
        f"is the model's own file, or raise the limit with {MAX_TEXT_ENV}"
    )
    code, out = _eval(tmp_path, tokenizer.parent)
    assert code == 2 and f"error: {expected}" in out, out
    monkeypatch.setenv(MAX_TEXT_ENV, "600")
    assert resolve_encoder(str(tokenizer.parent)) == str(tokenizer.parent), "a raised limit lets it through"
    monkeypatch.setenv(MAX_TEXT_ENV, "lots")
    with pytest.raises(EncoderError, match=f"{MAX_TEXT_ENV}='lots' is not a size: give megabytes above 0"):
        resolve_encoder(str(tokenizer.parent))


def test_refusing_a_500_mb_tokenizer_reads_none_of_it(tmp_path, tiny_model):
    """In a process whose address space may grow by 64 MiB only: reading the file would fail."""
    tokenizer = _huge_tokenizer(_copy(tiny_model, tmp_path / "model"))
    probe = (
        "import resource, sys\n"
        "from viewmill.train.encoder import EncoderError, resolve_encoder\n"
        "size = int(open('/proc/self/statm').read().split()[0]) * resource.getpagesize()\n"
        "resource.setrlimit(resource.RLIMIT_AS, (size + 64 * 2**20, resource.RLIM_INFINITY))\n"
        "try:\n    resolve_encoder(sys.argv[1])\nexcept EncoderError as exc:\n    print(exc)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe, str(tokenizer.parent)], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.startswith(f"model file {tokenizer} is 524 MB"), done.stderr[-2000:]


@pytest.mark.parametrize("system", ["/etc", "/usr/lib"])
def test_a_model_folder_linked_to_a_system_folder_is_refused(tmp_path, system):
    link = tmp_path / "model"
    link.symlink_to(system)
    expected = (
        f"model folder {link} is a symbolic link to the system folder {system}, not a model: a model folder holds a "
        "model's own files (config.json, weights, tokenizer); point the setting at one, or use an embedded:NAME encoder"
    )
    code, out = _eval(tmp_path, link)
    assert code == 2 and f"error: {expected}" in out, out
    with pytest.raises(EncoderError, match="^model folder /etc is a system folder, not a model: "):
        resolve_encoder("/etc")


def test_a_tokenizer_file_linked_to_a_device_or_a_system_file_is_refused(tmp_path, tiny_model):
    folder = _copy(tiny_model, tmp_path / "model")
    tokenizer = folder / "tokenizer.json"
    for target in ("/dev/zero", "/etc/passwd"):
        tokenizer.unlink()
        tokenizer.symlink_to(target)
        with pytest.raises(EncoderError) as refused:
            resolve_encoder(str(folder))
        assert str(refused.value) == (
            f"model file {tokenizer} is a link to {target}, which a model never holds: replace it with the model's "
            "own file (download the model again)"
        )


@needs_apertium
def test_a_run_whose_encoder_is_such_a_folder_stops_in_preflight(tmp_path, tiny_model, tiny_recipe):
    """`viewmill run`: exit 2 before ingest, the recipe key named; the lake is as it was."""
    folder = _copy(tiny_model, tmp_path / "model")
    expected = _shape_unlike_the_config(folder)
    state = tmp_path / "state"
    small_lake(state / "lake")
    before = lake_state(state / "lake")
    args = ["run", str(tiny_recipe), "--no-prefect", "--state-dir", str(state), "--set", f"train.encoder={folder}"]
    result = runner.invoke(app, args)
    out = " ".join(result.output.split())
    assert result.exit_code == 2 and "Traceback" not in out, out
    assert f"error: train.encoder '{folder}' cannot be used: {expected}; set train.encoder to an" in out
    assert lake_state(state / "lake") == before
