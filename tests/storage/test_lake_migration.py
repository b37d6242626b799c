"""A lake made before `runs` and `models` held JSON (timings, counts, train_config as VARCHAR, no
flow-run, host or pid columns) still reads, and a writer's open moves it to the current schema
without rewriting a file: the old rows read as JSON."""

import json

import pyarrow as pa
import viewmill.storage.lake as lake_module
import viewmill.storage.lake_setup as lake_setup
from viewmill.storage.integrity import verify_lake
from viewmill.storage.lake import Lake
from viewmill.storage.schema import MODELS, RUNS, TABLES


def _as_text(schema: pa.Schema) -> list[pa.Field]:
    return [field.with_type(pa.string()) if field.type == pa.json_() else field for field in schema]


OLD_RUNS = pa.schema(_as_text(RUNS)[: RUNS.names.index("counts") + 1])  # before flow_run_id ... pid
OLD_MODELS = pa.schema(_as_text(MODELS))
OLD_RUN = {"run_id": "r0", "recipe": "demo", "status": "succeeded", "timings": '{"ingest":0.5,"total":1.5}',
           "counts": '{"pairs":20,"sentences":20}'}  # fmt: skip
OLD_MODEL = {"model_id": "m0", "path": "/models/m0", "train_config": '{"train_config":{"objective":"bsl"}}'}


def _old_lake(root, monkeypatch):
    """A lake as viewmill made it when these columns were VARCHAR, with one run and one model."""
    with monkeypatch.context() as old:
        old_tables = {**TABLES, "runs": OLD_RUNS, "models": OLD_MODELS}
        old.setattr(lake_setup, "TABLES", old_tables)  # the tables created
        old.setattr(lake_module, "TABLES", old_tables)  # what appends conform to
        old.setattr(lake_setup, "JSON_COLUMNS", [])
        with Lake(root) as lake, lake.transaction():
            lake.append("runs", pa.Table.from_pylist([OLD_RUN], schema=OLD_RUNS))
            lake.append("models", pa.Table.from_pylist([OLD_MODEL], schema=OLD_MODELS))


def _types(lake: Lake, table: str) -> dict[str, str]:
    return dict(lake.con.execute(f"SELECT column_name, column_type FROM (DESCRIBE {table})").fetchall())


def test_an_old_lake_reads_and_a_writer_moves_its_text_columns_to_json(tmp_path, monkeypatch):
    root = tmp_path / "lake"
    _old_lake(root, monkeypatch)
    with Lake(root, read_only=True) as lake:  # a reader changes nothing, and reads the old rows
        assert _types(lake, "runs")["timings"] == "VARCHAR" and "flow_run_id" not in _types(lake, "runs")
        assert json.loads(lake.scalar("SELECT timings FROM runs")) == {"ingest": 0.5, "total": 1.5}
        version = lake.version()
        files = set(lake.arrow("SELECT data_file FROM ducklake_list_files('lake', 'runs')")["data_file"].to_pylist())

    with Lake(root) as lake:  # a writer's open migrates the catalog
        runs, models = _types(lake, "runs"), _types(lake, "models")
        assert (runs["timings"], runs["counts"], models["train_config"]) == ("JSON", "JSON", "JSON")
        assert (runs["flow_run_id"], runs["deployment"], runs["host"], runs["pid"]) == ("VARCHAR",) * 3 + ("BIGINT",)
        old = lake.arrow("SELECT timings->>'$.total' AS total, counts->'$.pairs' AS pairs, flow_run_id, pid "
                         "FROM runs").to_pylist()  # fmt: skip
        assert old == [{"total": "1.5", "pairs": "20", "flow_run_id": None, "pid": None}]
        assert lake.scalar("SELECT train_config->>'$.train_config.objective' FROM models") == "bsl"
        assert json.loads(lake.scalar("SELECT counts FROM runs")) == {"pairs": 20, "sentences": 20}
        assert (
            set(lake.arrow("SELECT data_file FROM ducklake_list_files('lake', 'runs')")["data_file"].to_pylist())
            == files
        )
        assert lake.version() > version
        new = {"run_id": "r1", "status": "running", "timings": '{"total":2}', "host": "h", "pid": 7}
        with lake.transaction():
            lake.append("runs", pa.Table.from_pylist([new], schema=RUNS))
        assert lake.arrow("SELECT run_id, timings->>'$.total' AS t FROM runs ORDER BY run_id").to_pylist() == [
            {"run_id": "r0", "t": "1.5"}, {"run_id": "r1", "t": "2"}
        ]  # fmt: skip
        assert not verify_lake(lake).errors
    with Lake(root) as lake:  # migrated once: the next writer finds the lake set up
        assert lake._is_set_up()
