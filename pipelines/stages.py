"""Kept for scripts written against it (benchmarks/): a run now lives in
`viewmill.pipelines.run`, its context in `context` and each stage in a module of its own."""

from viewmill.pipelines.context import RunContext, new_run_id
from viewmill.pipelines.run import run_recipe

__all__ = ["RunContext", "new_run_id", "run_recipe"]
