"""Training configuration: one validated model for every objective, the objective's own
settings under `options`."""

from __future__ import annotations

import contextlib
import logging
from typing import Any, Literal

from pydantic import (
    AliasChoices,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from viewmill.train.dev_scores import DevSelection
from viewmill.train.objective_catalog import OBJECTIVES

from viewmill.registry import RegistryError
from viewmill.specs import Seed, Spec, non_finite
from viewmill.spelling import did_you_mean

log = logging.getLogger(__name__)
PAPER_LR = 5e-4  # BSL paper: lr 5e-4 (1e-4..5e-4), Adam, batch 64, one epoch
MAX_STEPS = 10_000_000  # far beyond any run: 1e20 steps is a typo, refused with this bound
# Settings spelt flat before each objective had its options: flat key -> (its objective, its option).
LEGACY_OPTIONS = {
    "momentum": ("bsl", "momentum"),
    "momentum_schedule": ("bsl", "momentum_schedule"),
    "predictor_k": ("bsl", "predictor_k"),
    "sgopt_lambda": ("sgopt", "reg_lambda"),
    "sgopt_head_width": ("sgopt", "head_width"),
    "sgopt_partner_view": ("sgopt", "partner_view"),
    "isbert_filters": ("isbert", "filters"),
    "isbert_windows": ("isbert", "windows"),
    "distill_weight": ("infonce-distill", "distill_weight"),
}


class TrainConfig(Spec):
    """Hyperparameters of a training run. The defaults are the safe post-training setting
    for strong encoders: the head (BSL's predictor, SG-OPT's projection, IS-BERT's CNN)
    warms up first with the encoder frozen, then both train, the encoder at a small
    learning rate. `options` holds the objective's own settings, validated by its entry's
    `options` model (defaults filled in) and read as `objective_options`."""

    model_config = ConfigDict(populate_by_name=True)

    preset: Literal["safe", "paper"] = Field(
        "safe",
        description="safe: head warm-up, small encoder lr, best dev checkpoint kept; paper: the BSL paper's plain "
        "setting (one lr for encoder and head, default 5e-4, no warm-up, the last step exported)",
    )
    objective: str = Field(
        "bsl", description=f"a registered objective: {', '.join(OBJECTIVES.builtin_names())} or a plugin's"
    )
    options: dict[str, Any] = Field(
        default_factory=dict,
        validate_default=True,  # the defaults filled in, in every config
        description="the objective's own settings, e.g. bsl's {momentum, momentum_schedule, predictor_k}, sgopt's "
        "{reg_lambda, head_width, partner_view}, isbert's {filters, windows}, infonce-distill's {distill_weight}",
    )
    steps: int = Field(120, ge=1, le=MAX_STEPS)
    batch_size: int = Field(64, ge=2, le=65536)
    max_length: int = Field(64, ge=8, le=32768, description="tokens per text (no encoder reads more than 32768)")
    # No upper bound on learning rates: too high a rate stops training at its first non-finite loss.
    encoder_lr: float = Field(1e-5, gt=0)
    head_lr: float = Field(1e-3, gt=0, validation_alias=AliasChoices("head_lr", "predictor_lr"))
    head_warmup_steps: int | None = Field(
        None,
        ge=0,
        le=MAX_STEPS,
        validation_alias=AliasChoices("head_warmup_steps", "predictor_warmup_steps"),
        description="steps that train only the head (default 40; 0 for objectives without a head)",
    )
    grad_accumulation: int = Field(
        1,
        ge=1,
        le=65536,
        description="pieces a batch is processed in; contrastive losses keep all negatives (GradCache)",
    )
    # contrastive and SG-OPT
    temperature: float | None = Field(
        None, ge=1e-4, le=100, description="default: the objective's (0.05 ntxent, 0.01 sgopt); logits divided by it"
    )
    hard_negative_weight: float = Field(
        0.0,
        description="SimCSE's weight added to each anchor's logits (after the temperature) of its own hard "
        "negatives; objectives that train on hard negatives, on pairs with them",
    )
    # checkpoints and model selection
    checkpoint_every: int = Field(50, ge=0, le=MAX_STEPS, description="steps between resumable checkpoints (0: none)")
    eval_every: int = Field(
        0, ge=0, le=MAX_STEPS, description="steps between dev evaluations (0: none); needs dev data"
    )
    early_stopping_patience: int | None = Field(
        None, ge=1, le=MAX_STEPS, description="stop after this many dev evaluations without improvement"
    )
    keep_best: bool = Field(True, description="with eval_every: export the best dev checkpoint, the start included")
    selection: DevSelection = Field(
        default_factory=DevSelection, description="how the best dev state is chosen over several dev tasks"
    )
    seed: Seed = 13
    device: str = "cpu"
    precision: Literal["auto", "fp32", "bf16", "fp16"] = Field(
        "auto",
        description="autocast dtype; auto: bf16 on a CPU with native bf16 (avx512_bf16, amx_bf16), fp32 elsewhere "
        "(VIEWMILL_AUTO_PRECISION pins it); fp16 adds loss scaling",
    )

    @model_validator(mode="before")
    @classmethod
    def _legacy_options(cls, data: Any) -> Any:
        """Flat keys of LEGACY_OPTIONS moved into `options`, with a warning; one that belongs to
        another objective is refused (it would change nothing)."""
        if not isinstance(data, dict) or not LEGACY_OPTIONS.keys() & data.keys():
            return data
        objective = data.get("objective", cls.model_fields["objective"].default)
        options = data.get("options") or {}
        if not isinstance(options, dict):
            return data  # the options field's own error says why
        data, options = dict(data), dict(options)
        for key in [key for key in data if key in LEGACY_OPTIONS]:
            owner, name = LEGACY_OPTIONS[key]
            if objective != owner and objective in OBJECTIVES:  # an unknown objective has its own error
                raise ValueError(
                    f"{key} is a setting of objective {owner}, not of {objective}: remove it (or train {owner}, "
                    f"with it as train.options.{name})"
                )
            if name in options:
                raise ValueError(f"{key} and options.{name} are one setting, given twice: keep train.options.{name}")
            options[name] = data.pop(key)
            log.warning("train.%s is read as train.options.%s, its spelling now: write it so", key, name)
        data["options"] = options
        return data

    @field_validator("objective")
    @classmethod
    def _registered(cls, objective: str) -> str:
        if objective not in OBJECTIVES:
            raise ValueError(OBJECTIVES.unknown(objective))
        return objective

    @field_validator("options")
    @classmethod
    def _objective_options(cls, options: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        """The options as the objective's model validates them, defaults filled in (so one setting
        spelt or left to its default is one config); a bad value's error is located in them."""
        objective = info.data.get("objective")
        if objective is None:
            return options  # the objective's own error says why
        model = OBJECTIVES.get(objective).options
        try:
            validated = model.model_validate(options).model_dump()
        except ValidationError as exc:
            unknown = [str(e["loc"][0]) for e in exc.errors() if e["type"] == "extra_forbidden" and len(e["loc"]) == 1]
            if not unknown:
                raise
            raise ValueError(_unknown_options(objective, unknown, list(model.model_fields))) from None
        # A plugin's options model may allow inf and nan; a setting of viewmill's never does.
        if (where := non_finite(validated, "options")) is not None:
            raise ValueError(f"{where} is not a finite number (inf and nan are refused): give a number")
        return validated

    @property
    def objective_options(self) -> Any:
        """The objective's options model, validated from `options` (what `build` and the hooks read)."""
        return OBJECTIVES.get(self.objective).options.model_validate(self.options)

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
        if entry.safe_head_lr is not None and self.preset == "safe" and "head_lr" not in self.model_fields_set:
            self.head_lr = entry.safe_head_lr
        if self.grad_accumulation > 1:
            if not entry.accumulation:
                users = ", ".join(objectives_with("accumulation"))
                raise ValueError(
                    f"grad_accumulation splits each batch, and {self.objective}'s loss would change with it (its "
                    f"in-batch negatives): lower batch_size instead, or use an objective that accumulates ({users})"
                )
            if entry.cached_gradients and self.precision == "fp16":
                raise ValueError("cached-gradient accumulation runs without loss scaling: use precision bf16 or fp32")
        if self.early_stopping_patience is not None and not self.eval_every:
            raise ValueError("early_stopping_patience needs eval_every > 0 (dev evaluations to compare)")
        return self

    @model_validator(mode="after")
    def _hard_negatives(self) -> TrainConfig:
        if self.hard_negative_weight and not OBJECTIVES.get(self.objective).negatives:
            users = " or ".join(objectives_with("negatives"))
            raise ValueError(
                f"hard_negative_weight weights hard negatives, which {self.objective} does not train on: remove it, "
                f"or use objective {users}"
            )
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


def _unknown_options(objective: str, unknown: list[str], known: list[str]) -> str:
    """Options the objective does not have, each with a "did you mean", then the ones it has."""
    named = "; ".join(f"'{key}'{did_you_mean(key, known)}" for key in unknown)
    has = f"its options are {', '.join(known)}" if known else "it has none"
    return f"{named}: not an option of objective {objective} ({has}); remove it or fix its spelling"


def objectives_with(capability: str) -> list[str]:
    """The registered objectives whose entry has `capability` set, for a refusal's hint (a
    plugin entry that does not load is left out here; using it names its own error)."""
    names = []
    for name in OBJECTIVES.names():
        with contextlib.suppress(RegistryError):
            if getattr(OBJECTIVES.get(name), capability):
                names.append(name)
    return names
