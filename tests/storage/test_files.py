import pytest
from viewmill.storage.files import build_dir_atomically


def _write(text):
    def build(staging):
        staging.mkdir()
        (staging / "f.txt").write_text(text)

    return build


def test_a_failed_build_leaves_neither_target_nor_staging(tmp_path):
    def broken(staging):
        _write("half")(staging)
        raise RuntimeError("killed mid-build")

    with pytest.raises(RuntimeError):
        build_dir_atomically(tmp_path / "out", broken)
    assert list(tmp_path.iterdir()) == []


def test_existing_target_is_kept_unless_replaced(tmp_path):
    target = build_dir_atomically(tmp_path / "out", _write("first"))
    build_dir_atomically(target, _write("second"))  # another process finished first: keep its result
    assert (target / "f.txt").read_text() == "first"
    build_dir_atomically(target, _write("third"), replace=True)
    assert (target / "f.txt").read_text() == "third"
    assert [p.name for p in tmp_path.iterdir()] == ["out"]
