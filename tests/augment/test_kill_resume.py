"""An augment run killed with SIGKILL part-way resumes without losing or repeating work."""

import pyarrow as pa
from viewmill.augment.augmenters import BackTranslation
from viewmill.augment.quality import FilterSpec
from viewmill.storage.ids import sentence_id
from viewmill.storage.lake import Lake
from viewmill.storage.schema import SENTENCES

from tests.augment.killed_augment import kill_mid_augment
from tests.conftest import SENTENCES as TEXTS
from tests.conftest import needs_apertium
from tests.views import make_views

pytestmark = needs_apertium


def test_sigkill_mid_run_then_rerun_gives_every_view_once_and_keeps_earlier_work(tmp_path):
    lake_dir = tmp_path / "lake"
    with Lake(lake_dir) as lake:
        rows = [{"corpus": "c", "sentence_id": sentence_id(t), "text": t, "lang": "en"} for t in TEXTS]
        lake.append("sentences", pa.Table.from_pylist(rows, schema=SENTENCES))

    kill_mid_augment(lake_dir, "apertium", "en", "es")

    with Lake(lake_dir) as lake:
        views_before = lake.arrow("SELECT view_id, sentence_id, text FROM views ORDER BY view_id").to_pylist()
        translations_before = lake.arrow("SELECT cache_key, text FROM translations ORDER BY cache_key").to_pylist()
        assert 8 <= len(views_before) < 20, "the kill must land part-way through"

        report = make_views(
            lake, "c", BackTranslation(name="bt", path=["en", "es", "en"]), FilterSpec(), run_id="resumed", chunk_size=4
        )
        assert report.reused_views == len(views_before)
        assert report.new_views == 20 - len(views_before)
        # Only sentences without a view were sent to the engine: at most 2 legs for each.
        assert report.cache.misses <= 2 * report.new_views

        views_after = lake.arrow("SELECT view_id, sentence_id, text FROM views ORDER BY view_id").to_pylist()
        assert len(views_after) == 20 and len({v["sentence_id"] for v in views_after}) == 20
        assert all(v in views_after for v in views_before)
        translations_after = lake.arrow("SELECT cache_key, text FROM translations ORDER BY cache_key").to_pylist()
        assert all(t in translations_after for t in translations_before)
        assert len({t["cache_key"] for t in translations_after}) == len(translations_after)
        assert lake.scalar("SELECT count(*) FROM translations WHERE run_id = 'killed'") == len(translations_before)
