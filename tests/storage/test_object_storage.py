"""An s3:// data path, against a real S3 API (moto's server on loopback)."""

import socket

import pyarrow as pa
import pytest
from viewmill.storage.lake import Lake
from viewmill.storage.schema import SENTENCES

moto_server = pytest.importorskip("moto.server", reason="moto[server] is a test dependency: pip install -e .[test]")


@pytest.fixture
def s3_endpoint(monkeypatch):
    import boto3

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    settings = {
        "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_REGION": "us-east-1",
        "VIEWMILL_S3_ENDPOINT": f"127.0.0.1:{port}", "VIEWMILL_S3_URL_STYLE": "path", "VIEWMILL_S3_USE_SSL": "false",
    }  # fmt: skip
    for key, value in settings.items():
        monkeypatch.setenv(key, value)
    client = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}", region_name="us-east-1")
    client.create_bucket(Bucket="viewmill")
    yield client
    server.stop()


def test_parquet_files_go_to_the_bucket_and_read_back(tmp_path, s3_endpoint, monkeypatch):
    monkeypatch.setenv("VIEWMILL_DATA_PATH", "s3://viewmill/lake/")
    rows = [{"corpus": "c", "sentence_id": f"s{i}", "text": f"sentence {i}", "lang": "en"} for i in range(50)]
    with Lake(tmp_path / "lake") as lake, lake.transaction():
        lake.append("sentences", pa.Table.from_pylist(rows, schema=SENTENCES))
    keys = [o["Key"] for o in s3_endpoint.list_objects_v2(Bucket="viewmill")["Contents"]]
    assert any(k.startswith("lake/main/sentences/") and k.endswith(".parquet") for k in keys)
    assert not (tmp_path / "lake" / "data").exists(), "nothing written locally but the catalog"
    with Lake(tmp_path / "lake", read_only=True) as reader:
        assert reader.scalar("SELECT count(*) FROM sentences") == 50


def test_file_hashes_are_recorded_in_the_bucket_and_a_changed_object_is_refused(tmp_path, s3_endpoint, monkeypatch):
    from viewmill.storage.integrity import verify_lake
    from viewmill.storage.lake import LakeError

    monkeypatch.setenv("VIEWMILL_DATA_PATH", "s3://viewmill/hashed/")  # moto's bucket outlives one test
    words = ["alpha", "bravo", "charlie", "delta", "echo"]  # distinct: stored as literals, uncompressed
    rows = [{"corpus": "c", "sentence_id": f"s{i}", "text": word, "lang": "en"} for i, word in enumerate(words)]
    with Lake(tmp_path / "lake") as lake, lake.transaction():
        lake.append("sentences", pa.Table.from_pylist(rows, schema=SENTENCES))
    keys = [o["Key"] for o in s3_endpoint.list_objects_v2(Bucket="viewmill")["Contents"]]
    (data,) = [k for k in keys if k.startswith("hashed/main/sentences/")]
    assert [k for k in keys if k.startswith("hashed/_viewmill/file-hashes/")], "the record sits beside the data"
    with Lake(tmp_path / "lake", read_only=True) as reader:
        report = verify_lake(reader)
        assert report.files == 1 and report.problems == []
        reader.require_intact(("sentences",), "read sentences")
    body = s3_endpoint.get_object(Bucket="viewmill", Key=data)["Body"].read()
    assert b"charlie" in body
    s3_endpoint.put_object(Bucket="viewmill", Key=data, Body=body.replace(b"charlie", b"CHARLIE"))
    with Lake(tmp_path / "lake", read_only=True) as reader:
        assert reader.scalar("SELECT text FROM sentences WHERE sentence_id = 's2'") == "CHARLIE"
        report = verify_lake(reader)
        assert [(p.kind, p.path) for p in report.errors] == [("content", f"s3://viewmill/{data}")]
        quick = verify_lake(reader, quick=True)
        assert quick.ok, "same size, same footer: only the hash tells"
        with pytest.raises(LakeError, match=f"cannot read sentences: the sentences data file s3://viewmill/{data} "):
            reader.require_intact(("sentences",), "read sentences")
