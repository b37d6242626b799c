"""Augmentation: ingest, translation engines, round trips, quality signals."""
