"""Where `data:` references resolve: the data directory, else the checkout's ../shared/data."""

from pathlib import Path

from viewmill.storage.datasets import fetching

REPO = Path(__file__).resolve().parents[3]


def test_the_shared_data_folder_is_the_one_beside_the_checkout():
    # A module moved one folder deeper once pointed this inside the checkout, where nothing is.
    assert fetching.shared_data_dir() == REPO.parent / "shared" / "data"


def test_a_reference_missing_from_the_data_directory_resolves_to_the_shared_copy(tmp_path, monkeypatch):
    monkeypatch.setenv(fetching.DATA_ENV, str(tmp_path / "own"))
    shared = tmp_path / "shared"
    (shared / "sick").mkdir(parents=True)
    (shared / "sick" / "SICK_trial.txt").write_text("pair_ID\n")
    monkeypatch.setattr(fetching, "shared_data_dir", lambda: shared)
    assert fetching.resolve("data:sick/SICK_trial.txt") == shared / "sick" / "SICK_trial.txt"
    (tmp_path / "own" / "sick").mkdir(parents=True)
    (tmp_path / "own" / "sick" / "SICK_trial.txt").write_text("pair_ID\n")
    assert fetching.resolve("data:sick/SICK_trial.txt") == tmp_path / "own" / "sick" / "SICK_trial.txt"
