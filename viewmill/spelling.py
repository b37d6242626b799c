"""'Did you mean ...?' for a mistyped name: the closest known names, for error messages."""

from __future__ import annotations

from collections.abc import Iterable
from difflib import get_close_matches


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """' (did you mean 'x'?)' naming up to three close matches, or '' when none is close."""
    matches = get_close_matches(name, list(known), n=3, cutoff=0.6)
    if not matches:
        return ""
    quoted = [f"'{match}'" for match in matches]
    listed = quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"
    return f" (did you mean {listed}?)"
