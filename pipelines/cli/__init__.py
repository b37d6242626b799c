"""The `viewmill` command line: the app (`app.py`), what commands share (`common.py`), one module per command group."""
