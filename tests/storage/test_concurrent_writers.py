"""Two processes appending at the same time lose nothing and write nothing twice."""

import subprocess
import sys
import textwrap

import pytest
from viewmill.storage.lake import Lake

from tests.postgres import needs_postgres

WORKER = textwrap.dedent("""
    import random, sys, time
    from pathlib import Path
    import pyarrow as pa
    from viewmill.storage.lake import Lake
    from viewmill.storage.schema import SENTENCES

    root, catalog, first, last, go = sys.argv[1], sys.argv[2] or None, int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    keys = list(range(first, last))
    random.Random(first).shuffle(keys)
    inserted = 0
    with Lake(root, catalog=catalog) as lake:
        print("ready", flush=True)
        while not Path(go).exists():
            time.sleep(0.01)
        for start in range(0, len(keys), 40):
            rows = [{"corpus": "c", "sentence_id": f"s{k:05d}", "text": f"sentence {k}", "lang": "en"}
                    for k in keys[start:start + 40]]
            with lake.transaction():
                inserted += lake.append("sentences", pa.Table.from_pylist(rows, schema=SENTENCES),
                                        unique_on=("corpus", "sentence_id"))
    print(inserted, flush=True)
""")


def _race(tmp_path, catalog: str) -> list[int]:
    root, go = tmp_path / "lake", tmp_path / "go"
    Lake(root, catalog=catalog or None).close()  # create the tables once, before the race
    ranges = [(0, 600), (300, 900)]  # 300 keys both workers try to insert
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, str(root), catalog, str(a), str(b), str(go)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for a, b in ranges
    ]
    for worker in workers:
        assert worker.stdout.readline().strip() == "ready"
    go.touch()
    counts = []
    for worker in workers:
        out, _ = worker.communicate(timeout=240)
        assert worker.returncode == 0
        counts.append(int(out.strip().splitlines()[-1]))
    return counts


def _check(tmp_path, catalog, counts):
    with Lake(tmp_path / "lake", catalog=catalog or None, read_only=True) as lake:
        total, distinct = lake.con.execute("SELECT count(*), count(DISTINCT sentence_id) FROM sentences").fetchone()
        expected = {f"s{k:05d}" for k in range(900)}
        assert set(lake.arrow("SELECT sentence_id FROM sentences")["sentence_id"].to_pylist()) == expected
    assert (total, distinct) == (900, 900), "no key lost, none written twice"
    assert sum(counts) == 900, "each worker reports exactly what it wrote"


def test_two_local_writers_on_the_sqlite_catalog(tmp_path):
    counts = _race(tmp_path, "sqlite")
    _check(tmp_path, "sqlite", counts)


@needs_postgres
@pytest.mark.slow
def test_two_writers_on_a_postgresql_catalog(tmp_path, postgres_dsn):
    catalog = f"postgres:{postgres_dsn}"
    counts = _race(tmp_path, catalog)
    _check(tmp_path, catalog, counts)
