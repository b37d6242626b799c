"""The `viewmill` command's entry point: the allocator first (a restart, before anything heavy
is imported), then the app."""

from __future__ import annotations

import sys

from viewmill.allocator import AllocatorError, restart_with_allocator


def main() -> None:
    try:
        restart_with_allocator()
    except AllocatorError as error:
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    from viewmill.pipelines.cli.app import app

    app()
