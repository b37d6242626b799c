"""`viewmill lake embeddings`: the embedding store's encoders listed, one dropped, a wrong key
or a folder without a lake refused with exit 2 (and no lake made there)."""

import numpy as np
from typer.testing import CliRunner
from viewmill.pipelines.cli.app import app
from viewmill.storage.embeddings import EmbeddingStore
from viewmill.storage.lake import Lake


def _embed(texts: list[str]) -> np.ndarray:
    return np.ones((len(texts), 3))


def test_the_store_is_listed_and_an_encoder_dropped(tmp_path):
    state = tmp_path / "state"
    with Lake(state / "lake") as lake:
        EmbeddingStore(lake, "weights+bf16", _embed)(["one", "two"])
    on_state = ["--state-dir", str(state)]
    listed = CliRunner().invoke(app, ["lake", "embeddings", *on_state])
    assert listed.exit_code == 0, listed.output
    assert "weights+bf16" in listed.output and "texts" in listed.output
    unknown = CliRunner().invoke(app, ["lake", "embeddings", "--drop", "other+fp32", *on_state])
    assert unknown.exit_code == 2 and "no embeddings under encoder 'other+fp32'" in unknown.output
    dropped = CliRunner().invoke(app, ["lake", "embeddings", "--drop", "weights+bf16", *on_state])
    assert dropped.exit_code == 0 and "dropped 2 embeddings" in dropped.output
    with Lake(state / "lake", read_only=True) as lake:
        assert lake.scalar("SELECT count(*) FROM embeddings") == 0
    empty = CliRunner().invoke(app, ["lake", "embeddings", *on_state])
    assert empty.exit_code == 0 and "the lake stores no embeddings" in empty.output


def test_a_folder_without_a_lake_is_refused_and_left_alone(tmp_path):
    result = CliRunner().invoke(app, ["lake", "embeddings", "--drop", "x+fp32", "--state-dir", str(tmp_path / "none")])
    assert result.exit_code == 2 and not (tmp_path / "none").exists()
