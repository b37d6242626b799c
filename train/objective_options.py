"""The built-in objectives' own settings (`train.options`), without torch: a recipe's train
section is validated against them before anything trains."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator

from viewmill.specs import Spec


class BSLOptions(Spec):
    """BSL's settings (`train.options`)."""

    momentum: float = Field(0.999, ge=0, le=1, description="the target's EMA momentum (1: frozen, 0: a copy)")
    momentum_schedule: Literal["constant", "cosine"] = Field(
        "constant", description="cosine: BYOL's increase from momentum to 1 over the run"
    )
    predictor_k: int = Field(8, ge=1, le=64, description="the predictor's hidden width, in embedding widths")


class SGOPTOptions(Spec):
    """SG-OPT's settings (`train.options`)."""

    reg_lambda: float = Field(0.1, ge=0, description="weight of the regulariser ||theta_T - theta_F||^2")
    head_width: int = Field(4096, ge=1, le=65536, description="hidden width of the projection head")
    partner_view: bool = Field(False, description="BT + SG-OPT: BERT_F reads the partner (back-translation)")


class ISBERTOptions(Spec):
    """IS-BERT's settings (`train.options`)."""

    filters: int = Field(256, ge=1, le=65536, description="filters per window")
    windows: tuple[Annotated[int, Field(le=511)], ...] = Field(
        (1, 3, 5), description="the CNN's window sizes (odd: same padding)"
    )

    @field_validator("windows")
    @classmethod
    def _odd(cls, windows: tuple[int, ...]) -> tuple[int, ...]:
        if any(w < 1 or w % 2 == 0 for w in windows):
            raise ValueError(f"windows must be odd sizes (same padding), got {list(windows)}")
        return windows


class AnchoredOptions(Spec):
    """infonce-distill's settings (`train.options`)."""

    distill_weight: float = Field(
        200.0, ge=0, description="weight of the MSE that keeps the source's embedding at the start's"
    )
