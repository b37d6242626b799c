"""The stages of a recipe run, plain functions returning dataclasses:
preflight, ingest, augment, pair, train, evaluate."""
