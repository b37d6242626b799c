from viewmill.augment.cache import translate_cached
from viewmill.augment.engines import DecodingSpec
from viewmill.storage.ids import sentence_id
from viewmill.storage.lake import Lake


class Upper:
    name, model, revision = "upper", "upper", "1"

    def __init__(self) -> None:
        self.calls: list[str] = []

    def translate(self, texts, src, tgt, decoding):
        self.calls += texts
        return [[text.upper()] for text in texts]


def _texts_by_hash(n: int) -> list[str]:
    """Texts in the order of their hashes, as augment meets them (sentence-id order)."""
    return sorted((f"sentence number {i}" for i in range(n)), key=sentence_id)


def test_the_cache_reads_only_files_of_its_direction_and_source_hash_range(tmp_path):
    # The lookup and the write's duplicate check once read every row of `translations`
    # (650k+ at a million sentences). Files they must not read are removed from disk.
    texts, engine, decoding = _texts_by_hash(300), Upper(), DecodingSpec()
    with Lake(tmp_path / "lake") as lake:
        for part in (texts[:100], texts[100:200]):
            translate_cached(lake, engine, part, "en", "es", decoding, run_id="r")
        translate_cached(lake, engine, texts, "en", "de", decoding, run_id="r")
        files = {
            str(path): lake.scalar(f"SELECT bool_or(src_text_hash = ?) FROM '{path}'", [sentence_id(texts[150])])
            for path in (tmp_path / "lake" / "data").rglob("*.parquet")
            if "tgt_lang=" in str(path)
        }
        for path, holds_150 in files.items():
            if not holds_150 or "tgt_lang=de" in path:
                (tmp_path / "lake" / "data" / path).unlink()
        engine.calls.clear()
        found, stats = translate_cached(lake, engine, texts[150:250], "en", "es", decoding, run_id="r")
    assert (stats.hits, stats.misses) == (50, 50)
    assert engine.calls == texts[200:250]
    assert found[texts[150]][0] == texts[150].upper()


def _translation_files(root) -> int:
    return sum(1 for path in (root / "data").rglob("*.parquet") if "tgt_lang=" in str(path))


def test_new_translations_commit_once_per_call_unless_a_chunk_size_is_set(tmp_path):
    # A million sentences in commits of 256 made thousands of translation files; a batch-invariant
    # engine's translations of one views chunk (already sized to about a second) now commit at once.
    texts, decoding = _texts_by_hash(600), DecodingSpec()
    with Lake(tmp_path / "once") as lake:
        translate_cached(lake, Upper(), texts, "en", "es", decoding, run_id="r", chunk_size=None)
    with Lake(tmp_path / "chunked") as lake:
        translate_cached(lake, Upper(), texts, "en", "es", decoding, run_id="r")
    assert (_translation_files(tmp_path / "once"), _translation_files(tmp_path / "chunked")) == (1, 3)


def test_only_batch_variant_engines_translate_in_fixed_chunks():
    from viewmill.augment.translation_augmenters import Forward, TranslationProducer

    producer = TranslationProducer(Forward(name="fwd", engine="apertium", target="es"))
    try:
        assert producer.commit_chunk is None  # Apertium translates each sentence on its own
    finally:
        producer.close()
