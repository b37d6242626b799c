"""No credential is readable through `viewmill sql`: not the S3 key (httpfs copies AWS_* into
DuckDB settings, which duckdb_settings() and current_setting() showed unredacted), not a
PostgreSQL catalog's password; not in a result, an error or the locked connection's settings."""

from __future__ import annotations

import socket

import pytest
from typer.testing import CliRunner
from viewmill.pipelines.cli.app import app
from viewmill.storage.lake import Lake
from viewmill.storage.sql.policy import CREDENTIAL_SETTINGS
from viewmill.storage.sql.sandbox import open_query_lake

from tests.lake_state import small_lake
from tests.postgres import needs_postgres, postgres_server

moto_server = pytest.importorskip("moto.server", reason="moto[server] is a test dependency: pip install -e .[test]")
runner = CliRunner()

KEY_ID, SECRET, TOKEN = "AKIAVIEWMILLSANDBOX", "Sk-viewmill-not-for-queries-9f3k", "Tok-viewmill-session-7x2"
PASSWORD = "Pw-sandbox-4kd9-not-for-queries"
# Each family that can hold or reveal a credential, as a query would try it.
SECRET_READS = {
    "settings by name": "SELECT current_setting('s3_secret_access_key') AS k",
    "all settings": "SELECT name, value FROM duckdb_settings()",
    "secrets table": "SELECT * FROM duckdb_secrets()",
    "secrets, unredacted": "SELECT * FROM duckdb_secrets(redact := false)",
    "which secret": "SELECT * FROM which_secret('s3://viewmill/lake/x', 's3')",
    "logs": "SELECT * FROM duckdb_logs()",
    "a planted view": "SELECT * FROM (SELECT current_setting('s3_access_key_id'))",
}


@pytest.fixture
def s3_lake(tmp_path, monkeypatch):
    """A lake whose data lives in a bucket of moto's S3 server (loopback), with credentials in the environment."""
    import boto3

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    env = {"AWS_ACCESS_KEY_ID": KEY_ID, "AWS_SECRET_ACCESS_KEY": SECRET, "AWS_SESSION_TOKEN": TOKEN,
           "AWS_REGION": "us-east-1", "VIEWMILL_S3_ENDPOINT": f"127.0.0.1:{port}", "VIEWMILL_S3_URL_STYLE": "path",
           "VIEWMILL_S3_USE_SSL": "false", "VIEWMILL_DATA_PATH": "s3://viewmill/lake/"}  # fmt: skip
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}", region_name="us-east-1").create_bucket(
        Bucket="viewmill"
    )
    small_lake(tmp_path / "lake")
    yield tmp_path
    server.stop()


def _leaks(text: str, *secrets: str) -> list[str]:
    return [secret for secret in secrets if secret in text]


def test_the_s3_key_is_not_readable_through_sql(s3_lake):
    # What the issue found: on a connection that is not locked down, the setting holds the key.
    with Lake(s3_lake / "lake", read_only=True) as plain:
        assert plain.scalar("SELECT current_setting('s3_secret_access_key')") == SECRET
    for family, query in SECRET_READS.items():
        result = runner.invoke(app, ["sql", query, "--state-dir", str(s3_lake), "--format", "csv"])
        assert result.exit_code == 2 and result.stdout == "", (family, result.output)
        assert "viewmill sql cannot run" in result.output, (family, result.output)
        assert _leaks(result.output, KEY_ID, SECRET, TOKEN) == [], family
    for query in ("SELECT count(*) AS n FROM sentences", "SELECT * FROM duckdb_databases()",
                  "SELECT * FROM ducklake_options('lake')", "SELECT * FROM ducklake_settings('lake')",
                  "SELECT * FROM read_parquet('s3://viewmill/lake/missing.parquet')",
                  "SELECT * FROM read_parquet('s3://viewmill/elsewhere/x.parquet')"):  # fmt: skip
        result = runner.invoke(app, ["sql", query, "--state-dir", str(s3_lake), "--format", "csv"])
        assert _leaks(result.output, KEY_ID, SECRET, TOKEN) == [], query
    counted = runner.invoke(app, ["sql", "SELECT count(*) AS n FROM sentences", "--state-dir", str(s3_lake),
                                  "--format", "csv"])  # fmt: skip
    assert counted.stdout == "n\n3\n", "the data is still read, through the (redacted) DuckDB secret"


def test_the_locked_s3_connection_holds_the_key_in_its_redacted_secret_only(s3_lake):
    with open_query_lake(s3_lake / "lake") as lake:
        settings = dict(lake.con.execute("SELECT name, value FROM duckdb_settings()").fetchall())
        present = [name for name in CREDENTIAL_SETTINGS if name in settings]  # pg_* only with postgres loaded
        assert {"s3_access_key_id", "s3_secret_access_key", "s3_session_token"} <= set(present)
        assert {name: settings[name] for name in present} == dict.fromkeys(present, "")
        assert _leaks(repr(settings), KEY_ID, SECRET, TOKEN) == []
        secrets = repr(lake.con.execute("SELECT * FROM duckdb_secrets()").fetchall())
        assert "secret=redacted" in secrets and _leaks(secrets, SECRET, TOKEN) == []


@needs_postgres
def test_a_postgres_catalog_password_is_not_readable_through_sql(tmp_path):
    with postgres_server(database="lake", password=PASSWORD) as dsn:
        catalog = f"postgres:{dsn} password={PASSWORD}"
        small_lake(tmp_path / "lake", catalog=catalog)
        for query in ("SELECT * FROM duckdb_databases()", "SELECT * FROM ducklake_options('lake')",
                      "SELECT * FROM ducklake_settings('lake')", "SELECT count(*) AS n FROM sentences",
                      "SELECT * FROM nope", *SECRET_READS.values(),
                      "SELECT * FROM postgres_query('__ducklake_metadata_lake', 'SELECT current_user')"):  # fmt: skip
            result = runner.invoke(app, ["sql", query, "--state-dir", str(tmp_path), "--catalog", catalog])
            assert _leaks(result.output, PASSWORD) == [], (query, result.output)
            reads = query.startswith(("SELECT * FROM duckdb_d", "SELECT * FROM ducklake", "SELECT count"))
            assert result.exit_code == (0 if reads else 2), (query, result.output)
        with open_query_lake(tmp_path / "lake", catalog) as lake:
            secrets = repr(lake.con.execute("SELECT * FROM duckdb_secrets()").fetchall())
            assert "password=redacted" in secrets and PASSWORD not in secrets
