"""Training configuration: one validated model for every objective."""

from __future__ import annotations

from typing import Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, field_validator, model_validator
from viewmill.train.dev_scores import DevSelection
from viewmill.train.objectives import OBJECTIVES

SGOPT_HEAD_LR = 5e-5  # SG-OPT paper: AdamW lr 5e-5 for BERT_T and the projection head
PAPER_LR = 5e-4  # BSL paper: lr 5e-4 (1e-4..5e-4), Adam, batch 64, one epoch


class TrainConfig(BaseModel):
    """Hyperparameters of a training run. The defaults are the safe post-training setting
    for strong encoders: the head (BSL's predictor, SG-OPT's projection, IS-BERT's CNN)
    warms up first with the encoder frozen, then both train, the encoder at a small
    learning rate."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    preset: Literal["safe", "paper"] = Field(
        "safe",
        description="safe: head warm-up, small encoder lr, best dev checkpoint kept; paper: the BSL paper's plain "
        "setting (one lr for encoder and head, default 5e-4, no warm-up, the last step exported)",
    )
    objective: str = Field(
        "bsl", description="a registered objective: bsl, ntxent, infonce, sgopt, isbert, distill, plugins"
    )
    steps: int = Field(120, ge=1)
    batch_size: int = Field(64, ge=2)
    max_length: int = Field(64, ge=8)
    encoder_lr: float = Field(1e-5, gt=0)
    head_lr: float = Field(1e-3, gt=0, validation_alias=AliasChoices("head_lr", "predictor_lr"))
    head_warmup_steps: int | None = Field(
        None,
        ge=0,
        validation_alias=AliasChoices("head_warmup_steps", "predictor_warmup_steps"),
        description="steps that train only the head (default 40; 0 for ntxent and infonce, which have none)",
    )
    grad_accumulation: int = Field(
        1, ge=1, description="pieces a batch is processed in; contrastive losses keep all negatives (GradCache)"
    )
    # BSL
    momentum: float = Field(0.999, ge=0, le=1)
    momentum_schedule: Literal["constant", "cosine"] = Field(
        "constant", description="cosine: BYOL's increase from momentum to 1 over the run"
    )
    predictor_k: int = Field(8, ge=1)
    # contrastive and SG-OPT
    temperature: float | None = Field(None, gt=0, description="default 0.05 (ntxent, infonce), 0.01 (sgopt)")
    hard_negative_weight: float = Field(
        0.0,
        description="SimCSE's weight added to each anchor's logits (after the temperature) of its own hard "
        "negatives; ntxent and infonce on pairs with negatives",
    )
    distill_weight: float = Field(
        200.0, ge=0, description="infonce-distill: weight of the MSE that keeps the source's embedding at the start's"
    )
    # SG-OPT
    sgopt_lambda: float = Field(0.1, ge=0)
    sgopt_head_width: int = Field(4096, ge=1)
    sgopt_partner_view: bool = Field(False, description="BT + SG-OPT: BERT_F reads the partner (back-translation)")
    # IS-BERT
    isbert_filters: int = Field(256, ge=1)
    isbert_windows: tuple[int, ...] = (1, 3, 5)
    # checkpoints and model selection
    checkpoint_every: int = Field(50, ge=0, description="steps between resumable checkpoints (0: none)")
    eval_every: int = Field(0, ge=0, description="steps between dev evaluations (0: none); needs dev data")
    early_stopping_patience: int | None = Field(
        None, ge=1, description="stop after this many dev evaluations without improvement"
    )
    keep_best: bool = Field(True, description="with eval_every: export the best dev checkpoint, the start included")
    selection: DevSelection = Field(
        default_factory=DevSelection, description="how the best dev state is chosen over several dev tasks"
    )
    seed: int = 13
    device: str = "cpu"
    precision: Literal["fp32", "bf16", "fp16"] = Field("fp32", description="autocast dtype; fp16 adds loss scaling")

    @field_validator("objective")
    @classmethod
    def _registered(cls, objective: str) -> str:
        if objective not in OBJECTIVES:
            raise ValueError(OBJECTIVES.unknown(objective))
        return objective

    @model_validator(mode="after")
    def _defaults_and_warmup(self) -> TrainConfig:
        entry = OBJECTIVES.get(self.objective)
        if self.preset == "paper":
            self._apply_paper_preset()
        if self.head_warmup_steps is None:
            self.head_warmup_steps = 40 if entry.head else 0
        if not entry.head and self.head_warmup_steps:
            raise ValueError(f"{self.objective} has no head to warm up: set head_warmup_steps to 0")
        if self.head_warmup_steps >= self.steps:
            raise ValueError(
                f"head_warmup_steps ({self.head_warmup_steps}) must be below steps ({self.steps}), "
                "or the encoder never trains"
            )
        if self.temperature is None and entry.temperature is not None:
            self.temperature = entry.temperature
        if self.objective == "sgopt" and self.preset == "safe" and "head_lr" not in self.model_fields_set:
            # tau = 0.01 scales logits by 100: the fresh head at 1e-3 overshoots and the loss
            # climbs (tests/train/test_sgopt_loss.py); the paper trains everything at 5e-5.
            self.head_lr = SGOPT_HEAD_LR
        if self.grad_accumulation > 1:
            if not entry.accumulation:
                raise ValueError(
                    f"grad_accumulation is for bsl, distill (plain) and ntxent/infonce (cached gradients); "
                    f"{self.objective}'s in-batch negatives would change: lower batch_size instead"
                )
            if self.objective in ("ntxent", "infonce") and self.precision == "fp16":
                raise ValueError("cached-gradient accumulation runs without loss scaling: use precision bf16 or fp32")
        if self.early_stopping_patience is not None and not self.eval_every:
            raise ValueError("early_stopping_patience needs eval_every > 0 (dev evaluations to compare)")
        if any(w < 1 or w % 2 == 0 for w in self.isbert_windows):
            raise ValueError(f"isbert_windows must be odd sizes (same padding), got {list(self.isbert_windows)}")
        return self

    @model_validator(mode="after")
    def _hard_negatives(self) -> TrainConfig:
        if self.hard_negative_weight and not OBJECTIVES.get(self.objective).negatives:
            raise ValueError(
                f"hard_negative_weight weights hard negatives, which {self.objective} does not train on: remove it, "
                "or use objective infonce or ntxent"
            )
        if "distill_weight" in self.model_fields_set and self.objective != "infonce-distill":
            raise ValueError(f"distill_weight weights infonce-distill's anchor, not {self.objective}'s loss: remove it")
        return self

    def _apply_paper_preset(self) -> None:
        """The paper's plain setting, for what the user did not set explicitly."""
        explicit = self.model_fields_set
        if "head_lr" in explicit and ("encoder_lr" not in explicit or self.head_lr != self.encoder_lr):
            raise ValueError("preset paper trains encoder and head with one learning rate: set encoder_lr only")
        if self.head_warmup_steps:
            raise ValueError("preset paper has no head warm-up: remove head_warmup_steps or use preset safe")
        if "encoder_lr" not in explicit:
            self.encoder_lr = PAPER_LR
        self.head_lr = self.encoder_lr
        self.head_warmup_steps = 0
        if "keep_best" not in explicit:
            self.keep_best = False
