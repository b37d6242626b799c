"""Dev scores of one or several tasks and the rule that turns them into a choice of weights:
the per-task scores, their weighted mean (the selection score) and which states may be chosen.
Plain values only (no torch): the recipe schema reads the rule."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from pydantic import Field, model_validator

from viewmill.specs import Spec


def weighted_mean(scores: Mapping[str, float], weights: Mapping[str, float]) -> float:
    """The scores' mean, each task counted by its weight. The weights are normalised first, so one
    task's mean is its score exactly (a one-task selection is the same as before)."""
    missing = [name for name in weights if name not in scores]
    if missing:
        raise ValueError(f"no score for {', '.join(missing)} (scored: {', '.join(scores) or 'none'})")
    total = sum(weights.values())
    return float(sum(weight / total * scores[name] for name, weight in weights.items()))


@dataclass(frozen=True)
class DevResult:
    """One dev evaluation of a state: each task's Spearman x100 and the selection score."""

    scores: dict[str, float]
    score: float  # the tasks' weighted mean

    @classmethod
    def of(cls, scores: Mapping[str, float], weights: Mapping[str, float]) -> DevResult:
        return cls(dict(scores), weighted_mean(scores, weights))


class DevSelection(Spec):
    """How the exported state is chosen from its dev evaluations (`train.selection`)."""

    rule: Literal["mean", "mean-no-regression"] = Field(
        "mean",
        description="mean: the best weighted mean of the dev tasks; mean-no-regression: the same, among the "
        "states where no dev task fell below its start score minus tolerance (the start always qualifies)",
    )
    tolerance: float = Field(
        0.0, ge=0, le=100, description="mean-no-regression: how far (Spearman x100) a task may fall"
    )

    @model_validator(mode="after")
    def _tolerance_for_its_rule(self) -> DevSelection:
        if self.rule == "mean" and self.tolerance:
            raise ValueError("tolerance applies to rule mean-no-regression only: set rule: mean-no-regression")
        return self

    def accepts(self, start: Mapping[str, float], scores: Mapping[str, float]) -> bool:
        """Whether a state with `scores` may be chosen, given the start's scores."""
        if self.rule == "mean":
            return True
        return all(scores[name] >= value - self.tolerance for name, value in start.items())
