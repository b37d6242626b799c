"""viewmill's own objectives' registry entries and the registry (`OBJECTIVES`), without torch:
each entry's build and hooks are named "module:function" and imported on their first call,
so a recipe's train section is validated (options, flags) before torch is imported."""

from __future__ import annotations

from viewmill.train.encoder import CNN_REF, MODELING_FILE
from viewmill.train.objective_entry import Deferred, Objective, check_objective, paper_citation
from viewmill.train.objective_options import AnchoredOptions, BSLOptions, ISBERTOptions, SGOPTOptions

from viewmill.registry import Registry

SGOPT_HEAD_LR = 5e-5  # the paper's AdamW lr for BERT_T and the projection head

BSL = Objective(
    build=Deferred("viewmill.train.bsl:build"),
    head=True,
    accumulation=True,
    after_step=Deferred("viewmill.train.bsl:ema_step"),
    options=BSLOptions,
    description="BYOL-style bootstrapping (predictor + EMA)",
    title="BSL (bootstrapped sentence representation learning)",
    citation=paper_citation("zhang-etal-2021-bootstrapped"),
)
NTXENT = Objective(
    build=Deferred("viewmill.train.objectives:build_ntxent"), head=False, temperature=0.05, accumulation=True,
    negatives=True, cached_gradients=True, description="NT-Xent over 2n views", title="NT-Xent contrastive",
    citation=paper_citation("chen2020simple"),
)  # fmt: skip
# sentence-transformers' MultipleNegativesRankingLoss cites Henderson et al.; the loss is van den Oord et al.'s InfoNCE.
INFONCE = Objective(
    build=Deferred("viewmill.train.objectives:build_infonce"), head=False, temperature=0.05, accumulation=True,
    negatives=True, cached_gradients=True, description="in-batch InfoNCE (MNRL)",
    title="InfoNCE (in-batch negatives)", citation=paper_citation("henderson2017efficient", "oord2018representation"),
)  # fmt: skip
SGOPT = Objective(
    build=Deferred("viewmill.train.sgopt:build"),
    head=True,
    temperature=0.01,
    options=SGOPTOptions,
    # the paper's AdamW with beta2 = 0.9; its head lr also in preset safe: tau = 0.01 scales logits
    # by 100, and a fresh head at 1e-3 overshoots and the loss climbs (tests/train/test_sgopt_loss.py)
    optimizer=Deferred("viewmill.train.sgopt:optimizer"),
    safe_head_lr=SGOPT_HEAD_LR,
    description="self-guided contrastive (frozen BERT_F)",
    title="SG-OPT (self-guided contrastive)",
    citation=paper_citation("kim-etal-2021-self"),
)
ISBERT = Objective(
    build=Deferred("viewmill.train.isbert:build"),
    head=True,
    options=ISBERTOptions,
    on_export=Deferred("viewmill.train.isbert:carry_modeling_file"),
    description="mutual information with the sentence's n-grams",
    title="IS-BERT (mutual information with n-gram features)",
    citation=paper_citation("zhang-etal-2020-unsupervised"),
    remote_code=f"The IS-BERT CNN is this directory's own code (`{MODELING_FILE}`, module `{CNN_REF}`): loading "
    "needs `trust_remote_code=True` and sentence-transformers, not viewmill.",
)
DISTILL_CITATION = paper_citation("reimers-2020-multilingual-sentence-bert")
INFONCE_DISTILL = Objective(
    build=Deferred("viewmill.train.distill:build_anchored"),
    head=False,
    temperature=0.05,
    needs_source=True,
    negatives=True,  # supervised SimCSE's hard negatives join view a's candidates
    options=AnchoredOptions,
    description="symmetric in-batch InfoNCE between the views plus distill_weight x MSE of the student's source "
    "embedding to a frozen copy of the start model's (aligns translations, keeps the source language's space)",
    title="symmetric in-batch InfoNCE between a sentence's views (e.g. the source and its translation) plus an "
    "MSE anchor of the source's embedding to a frozen copy of the starting model's",
    citation=DISTILL_CITATION,  # its anchor is that paper's distillation
)
DISTILL = Objective(
    build=Deferred("viewmill.train.distill:build_distill"),
    head=False,
    accumulation=True,
    needs_source=True,
    description="multilingual knowledge distillation: student(source) and student(translation) regress onto "
    "a frozen teacher's embedding of the source (MSE)",
    title="multilingual knowledge distillation (Reimers & Gurevych, 2020): the source sentence and its translation "
    "both regress (MSE) onto a frozen copy of the starting model's embedding of the source",
    citation=DISTILL_CITATION,
)

OBJECTIVES: Registry[Objective] = Registry(
    "viewmill.objectives",
    "objective",
    {
        "bsl": "viewmill.train.objective_catalog:BSL",
        "ntxent": "viewmill.train.objective_catalog:NTXENT",
        "infonce": "viewmill.train.objective_catalog:INFONCE",
        "sgopt": "viewmill.train.objective_catalog:SGOPT",
        "isbert": "viewmill.train.objective_catalog:ISBERT",
        "distill": "viewmill.train.objective_catalog:DISTILL",
        "infonce-distill": "viewmill.train.objective_catalog:INFONCE_DISTILL",
    },
    check_objective,
    entry_type=Objective,
)
