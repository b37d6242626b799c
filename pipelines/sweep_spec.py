"""A recipe's `sweep:` block: training configurations over the recipe's pairs, and how the
best is chosen (one dev task, or the weighted mean of several)."""

from __future__ import annotations

import itertools
import json
import math
from typing import Annotated, Any

from pydantic import Field, model_validator

from viewmill.specs import Spec


class SweepConfig(Spec):
    """One configuration of a sweep: recipe settings as `--set` would give them."""

    label: str = Field(pattern=r"^[A-Za-z0-9_.,=+-]+$")
    set: dict[str, Any] = Field(default_factory=dict, description="e.g. {train.encoder_lr: 2.0e-5}")

    def overrides(self) -> list[str]:
        return [f"{key}={json.dumps(value)}" for key, value in self.set.items()]  # JSON is YAML


MAX_SWEEP_CONFIGS = 256  # each one trains and evaluates a model


class SweepSpec(Spec):
    """Training configurations run over the recipe's pairs (or the pairs each one asks for)
    and compared; the best is chosen on one evaluation task, e.g. STS-B dev, or on the
    weighted mean of several."""

    select_on: str | list[str] | dict[str, Annotated[float, Field(gt=0)]] = Field(
        description="the evaluate task that chooses the best configuration (a dev set); a list of tasks (their "
        "mean) or a mapping of tasks to weights (their weighted mean)"
    )
    grid: dict[str, list[Any]] = Field(default_factory=dict, description="every combination of these settings")
    configs: list[SweepConfig] = Field(default_factory=list, description="configurations listed one by one")

    @property
    def select_weights(self) -> dict[str, float]:
        """Each selection task and its weight."""
        if isinstance(self.select_on, str):
            return {self.select_on: 1.0}
        return dict.fromkeys(self.select_on, 1.0) if isinstance(self.select_on, list) else dict(self.select_on)

    @property
    def select_label(self) -> str:
        """What the selection score is called in tables and the lake's `sweeps.select_task`."""
        weights = self.select_weights
        if isinstance(self.select_on, str):
            return self.select_on
        if len(set(weights.values())) == 1:
            return f"mean({', '.join(weights)})"
        return f"weighted mean({', '.join(f'{name}: {weight:g}' for name, weight in weights.items())})"

    @model_validator(mode="after")
    def _something_to_run(self) -> SweepSpec:
        if not self.select_on:
            raise ValueError("select_on names no task: name one evaluate task, or a list of them")
        if isinstance(self.select_on, list) and len(set(self.select_on)) != len(self.select_on):
            raise ValueError(f"select_on names a task twice: {self.select_on}")
        if not self.grid and not self.configs:
            raise ValueError("a sweep needs grid or configs (or both)")
        for key, values in self.grid.items():
            if not values:
                raise ValueError(f"grid setting {key} has no values")
        sizes = [len(values) for values in self.grid.values()]
        if math.prod(sizes) + len(self.configs) > MAX_SWEEP_CONFIGS:  # counted before anything is expanded
            raise ValueError(
                f"the sweep has {math.prod(sizes) + len(self.configs):,} configurations "
                f"(grid {' x '.join(map(str, sizes)) or '0'}, plus {len(self.configs)} listed), more than "
                f"{MAX_SWEEP_CONFIGS}: narrow sweep.grid or split it into several sweeps"
            )
        labels = [c.label for c in self.expand()]
        if len(set(labels)) != len(labels):
            raise ValueError(f"sweep configuration labels must be unique, got {labels}")
        return self

    def expand(self) -> list[SweepConfig]:
        """The grid's combinations (labelled by their settings), then the listed configs."""
        keys = list(self.grid)
        combos = [
            SweepConfig(
                label=",".join(f"{key.rsplit('.', 1)[-1]}={value}" for key, value in zip(keys, values, strict=True)),
                set=dict(zip(keys, values, strict=True)),
            )
            for values in itertools.product(*(self.grid[key] for key in keys))
        ] if keys else []  # fmt: skip
        return combos + list(self.configs)
