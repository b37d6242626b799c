"""Reading corpora into the lake: formats, files, sentence splitting and the ingest policy."""
