"""A process's shards share one open lake inside `keeping_lakes()`, and only there."""

import duckdb
import pytest
from viewmill.pipelines.stages.shard_lakes import keeping_lakes, shard_lake

from viewmill.settings import Settings


def _closed(lake) -> bool:
    try:
        lake.scalar("SELECT 1")
    except duckdb.ConnectionException:
        return True
    return False


def test_inside_the_block_the_next_shard_gets_the_lake_the_last_gave_back(tmp_path):
    settings, root = Settings(), tmp_path / "lake"
    with keeping_lakes():
        with shard_lake(settings, root) as first:
            pass
        with shard_lake(settings, root) as second, shard_lake(settings, root) as beside:
            assert second is first and beside is not first, "two shards at once get two lakes"
        assert not _closed(first)
    assert _closed(first) and _closed(beside), "the block's end closes every kept lake"


def test_outside_the_block_and_after_a_failure_a_shards_lake_is_closed(tmp_path):
    settings, root = Settings(), tmp_path / "lake"
    with shard_lake(settings, root) as alone:
        pass
    assert _closed(alone)
    with keeping_lakes():
        with pytest.raises(RuntimeError), shard_lake(settings, root) as failed:
            raise RuntimeError("the shard failed")
        assert _closed(failed), "a failed shard's lake is not lent again"
        with shard_lake(settings, root) as fresh:
            assert fresh is not failed
