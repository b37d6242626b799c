"""Recipes, stages, Prefect flows and the `viewmill` command line."""
