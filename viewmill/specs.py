"""The base of every recipe section's model (viewmill's and plugins' augmenter specs, objective
options, evaluation tasks): unknown keys refused, and every float finite. pydantic lets `inf`,
`nan` and `1e400` (read as inf) through `gt=0` and `le=` alike; a learning rate of inf trains a
model of NaN weights, so a setting that is not a finite number is refused where it is read."""

from __future__ import annotations

import math
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

SPEC_CONFIG = ConfigDict(extra="forbid", allow_inf_nan=False)
# A seed numpy, torch and CTranslate2 all take (numpy's stops at 2**32 - 1).
Seed = Annotated[int, Field(ge=0, le=2**32 - 1)]


class Spec(BaseModel):
    """A recipe section: extra keys forbidden, floats finite (`allow_inf_nan=False`)."""

    model_config = SPEC_CONFIG


def non_finite(value: Any, where: str) -> str | None:
    """The place of the first float in `value` (a dump of settings: dicts, lists, numbers) that
    is inf or nan, e.g. `options.weight`; None when every one is finite."""
    if isinstance(value, float):
        return None if math.isfinite(value) else where
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list | tuple) else ()
    for key, item in items:
        found = non_finite(item, f"{where}.{key}")
        if found is not None:
            return found
    return None
