"""Multilingual knowledge distillation: the loss against its formula computed term by term,
the frozen teacher, the source rows, accumulation, and a run that exports the student only."""

import copy
import json

import pyarrow as pa
import pytest
import torch
from viewmill.train.batches import PairTexts
from viewmill.train.config import TrainConfig
from viewmill.train.distill import AnchoredContrastive, Distill
from viewmill.train.layout import BatchLayout
from viewmill.train.loop import train_model
from viewmill.train.optimisation import make_optimizer, train_step
from viewmill.train.pooling import mean_pool

from tests.conftest import SENTENCES
from tests.train.test_bsl import TinyEncoder


def _batch(rows, length=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, 50, (rows, length), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 3:] = 0
    return {"input_ids": ids, "attention_mask": mask}


def _pooled(encoder, batch, rows):
    out = encoder(input_ids=batch["input_ids"][rows], attention_mask=batch["attention_mask"][rows])
    return mean_pool(out.last_hidden_state, batch["attention_mask"][rows])


def _squared_error(x, y):
    """Mean over every element of (x - y)^2, written out."""
    return sum(float(x[i, j] - y[i, j]) ** 2 for i in range(x.shape[0]) for j in range(x.shape[1])) / x.numel()


def _trained(seed=0):
    """A Distill whose student has moved away from its teacher (so the two differ)."""
    torch.manual_seed(seed)
    model = Distill(TinyEncoder()).double()
    with torch.no_grad():
        for p in model.encoder.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return model.eval()


@pytest.mark.parametrize("sources", [False, True])
def test_loss_is_both_views_regressed_onto_the_teachers_source(sources):
    n = 3
    model = _trained()
    batch, layout = _batch(3 * n if sources else 2 * n), BatchLayout(n, sources=sources)
    source_rows = slice(2 * n, 3 * n) if sources else slice(0, n)
    with torch.no_grad():
        target = _pooled(model.teacher, batch, source_rows)
        expected = _squared_error(_pooled(model.encoder, batch, slice(0, n)), target) + _squared_error(
            _pooled(model.encoder, batch, slice(n, 2 * n)), target
        )
        loss = float(model.loss(batch, n, layout=layout if sources else None))
    assert loss == pytest.approx(expected, rel=1e-9)


def test_the_source_rows_decide_the_target_and_view_a_stands_in_without_them():
    n = 3
    model = _trained()
    batch = _batch(3 * n)
    with torch.no_grad():
        with_sources = float(model.loss(batch, n, layout=BatchLayout(n, sources=True)))
        a_as_source = {k: torch.cat([v[: 2 * n], v[:n]]) for k, v in batch.items()}
        same_as_a = float(model.loss(a_as_source, n, layout=BatchLayout(n, sources=True)))
        without = float(model.loss({k: v[: 2 * n] for k, v in batch.items()}, n))
    assert same_as_a == pytest.approx(without, rel=1e-12)
    assert with_sources != pytest.approx(without, rel=1e-3)


def test_the_teacher_stays_frozen_in_eval_mode_and_out_of_the_optimizer():
    torch.manual_seed(0)
    model = Distill(TinyEncoder())
    start = copy.deepcopy(model.teacher.state_dict())
    model.train()
    assert model.encoder.training and not model.teacher.training
    config = TrainConfig(objective="distill", steps=3, encoder_lr=1e-2)
    optimizer = make_optimizer(config, model)
    in_optimizer = {id(p) for group in optimizer.param_groups for p in group["params"]}
    assert not in_optimizer & {id(p) for p in model.teacher.parameters()}
    student = copy.deepcopy(model.encoder.state_dict())
    for seed in range(3):
        train_step(model, optimizer, _batch(9, seed=seed), 3, train_encoder=True, layout=BatchLayout(3, sources=True))
    assert all(p.grad is None for p in model.teacher.parameters())
    for name, value in model.teacher.state_dict().items():
        torch.testing.assert_close(value, start[name], rtol=0, atol=0)
    assert any(not torch.equal(v, student[k]) for k, v in model.encoder.state_dict().items()), "the student trained"


def test_plain_accumulation_keeps_each_pairs_source():
    n, grads = 6, []
    for pieces in (1, 3):
        model = _trained()  # eval: no dropout, the same function in every piece
        optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
        loss = train_step(model, optimizer, _batch(3 * n, length=6), n, train_encoder=True, accumulation=pieces,
                          layout=BatchLayout(n, sources=True))  # fmt: skip
        grads.append((loss, [p.grad.clone() for p in model.encoder.parameters()]))
    assert grads[0][0] == pytest.approx(grads[1][0], rel=1e-6), "the pieces' total is summed in float32"
    for whole, accumulated in zip(grads[0][1], grads[1][1], strict=True):
        torch.testing.assert_close(accumulated, whole, rtol=1e-9, atol=1e-12)


def _translations(with_source: bool) -> pa.Table:
    """English sources; view a "translated" (words reversed), view b another rendering."""
    columns = {"text_a": [" ".join(reversed(s.split())) for s in SENTENCES], "text_b": [s.lower() for s in SENTENCES]}
    return pa.table({**columns, "text_source": SENTENCES} if with_source else columns)


def test_distillation_trains_and_exports_the_student_alone(tmp_path, tiny_model):
    from safetensors import safe_open
    from sentence_transformers import SentenceTransformer

    config = TrainConfig(objective="distill", steps=3, batch_size=8, encoder_lr=1e-2)
    assert config.head_warmup_steps == 0 and config.temperature is None
    runs = {}
    for with_source in (True, False):
        out = tmp_path / f"source-{with_source}"
        train_model(_translations(with_source), str(tiny_model), config, out, card={"snapshot": "s"})
        runs[with_source] = SentenceTransformer(str(out)).encode(SENTENCES[:3])
    out = tmp_path / "source-True"
    with safe_open(str(out / "model.safetensors"), "pt") as exported:
        names = set(exported.keys())
    with safe_open(str(next(tiny_model.rglob("model.safetensors"))), "pt") as base:
        base_names = set(base.keys())
    assert not any("teacher" in name for name in names) and len(names) == len(base_names), "one encoder, no teacher"
    assert json.loads(next(out.glob("*Pooling/config.json")).read_text())["pooling_mode"] == "mean"
    before = SentenceTransformer(str(tiny_model)).encode(SENTENCES[:3])
    assert not torch.allclose(torch.tensor(runs[True]), torch.tensor(before)), "the student moved"
    assert not torch.allclose(torch.tensor(runs[True]), torch.tensor(runs[False])), "the source is the target"
    readme = (out / "README.md").read_text()
    assert "multilingual knowledge distillation" in readme and "(objective `distill`)" in readme
    assert "## Citation" in readme and "Making Monolingual Sentence Embeddings Multilingual" in readme


def test_sources_are_read_for_distill_and_missing_ones_refused():
    table = _translations(True)
    assert PairTexts(table, sources=True).texts([0])[-1] == SENTENCES[0]
    holes = table.set_column(2, "text_source", pa.array([None, *SENTENCES[1:]], pa.string()))
    with pytest.raises(ValueError, match="1 pairs have no text_source"):
        PairTexts(holes, sources=True)


def test_sources_equal_to_view_a_are_embedded_once():
    """Identity pairings (view a is the source sentence): the batch carries no second copy."""
    same = pa.table({"text_a": SENTENCES, "text_b": [s.lower() for s in SENTENCES], "text_source": SENTENCES})
    texts = PairTexts(same, sources=True)
    assert texts.layout([0, 1]) is None, "the plain [a..., b...] batch"
    assert texts.texts([0, 1]) == [*SENTENCES[:2], *(s.lower() for s in SENTENCES[:2])]
    differ = PairTexts(_translations(True), sources=True)
    assert differ.layout([0, 1]) == BatchLayout(2, sources=True) and differ.texts([0])[-1] == SENTENCES[0]


def _cross_entropy_by_hand(scores, target):
    """-log softmax(scores)[target], written out."""
    import math

    top = max(scores)
    return -(scores[target] - top - math.log(sum(math.exp(s - top) for s in scores)))


@pytest.mark.parametrize("sources", [False, True])
def test_infonce_distill_is_both_directions_of_infonce_plus_the_weighted_source_anchor(sources):
    n, temperature, weight = 3, 0.5, 7.0
    torch.manual_seed(0)
    model = AnchoredContrastive(TinyEncoder(), temperature, weight).double()
    with torch.no_grad():
        for p in model.encoder.parameters():
            p.add_(0.3 * torch.randn_like(p))
    model.eval()
    batch = _batch(3 * n if sources else 2 * n)
    source_rows = slice(2 * n, 3 * n) if sources else slice(0, n)
    with torch.no_grad():
        a, b = _pooled(model.encoder, batch, slice(0, n)), _pooled(model.encoder, batch, slice(n, 2 * n))
        a, b = a / a.norm(dim=-1, keepdim=True), b / b.norm(dim=-1, keepdim=True)
        cos = [[float(a[i] @ b[j]) / temperature for j in range(n)] for i in range(n)]
        forward = sum(_cross_entropy_by_hand(cos[i], i) for i in range(n)) / n
        backward = sum(_cross_entropy_by_hand([cos[j][i] for j in range(n)], i) for i in range(n)) / n
        anchor = _squared_error(_pooled(model.encoder, batch, source_rows), _pooled(model.teacher, batch, source_rows))
        expected = (forward + backward) / 2 + weight * anchor
        loss = float(model.loss(batch, n, layout=BatchLayout(n, sources=True) if sources else None))
    assert loss == pytest.approx(expected, rel=1e-9)
    assert anchor > 0, "the student moved, so the anchor pulls"


def test_infonce_distill_hard_negatives_join_view_a_candidates_weighted_on_their_own_pair():
    n, k, temperature, weight, hard_weight = 3, 1, 0.5, 7.0, 1.0
    torch.manual_seed(0)
    model = AnchoredContrastive(TinyEncoder(), temperature, weight, hard_weight).double().eval()
    batch = _batch((2 + k) * n)
    with torch.no_grad():
        a, b = _pooled(model.encoder, batch, slice(0, n)), _pooled(model.encoder, batch, slice(n, 2 * n))
        neg = _pooled(model.encoder, batch, slice(2 * n, 3 * n))
        a, b, neg = (x / x.norm(dim=-1, keepdim=True) for x in (a, b, neg))
        cos = [[float(a[i] @ b[j]) / temperature for j in range(n)] for i in range(n)]
        hard = [[float(a[i] @ neg[j]) / temperature + (hard_weight if i == j else 0.0) for j in range(n)]
                for i in range(n)]  # fmt: skip
        forward = sum(_cross_entropy_by_hand(cos[i] + hard[i], i) for i in range(n)) / n
        backward = sum(_cross_entropy_by_hand([cos[j][i] for j in range(n)], i) for i in range(n)) / n
        anchor = _squared_error(_pooled(model.encoder, batch, slice(0, n)), _pooled(model.teacher, batch, slice(0, n)))
        loss = float(model.loss(batch, n, layout=BatchLayout(n, k=k)))
    assert loss == pytest.approx((forward + backward) / 2 + weight * anchor, rel=1e-9)
    assert TrainConfig(objective="infonce-distill", hard_negative_weight=1.0).hard_negative_weight == 1.0


def test_infonce_distill_trains_exports_one_encoder_and_keeps_its_settings(tmp_path, tiny_model):
    from safetensors import safe_open

    config = TrainConfig(objective="infonce-distill", steps=3, batch_size=8, encoder_lr=1e-2,
                         options={"distill_weight": 5.0})  # fmt: skip
    assert config.head_warmup_steps == 0 and config.temperature == 0.05
    out = tmp_path / "model"
    train_model(_translations(True), str(tiny_model), config, out, card={"snapshot": "s"})
    with safe_open(str(out / "model.safetensors"), "pt") as exported:
        assert not any("teacher" in name for name in exported.keys())  # noqa: SIM118 (safetensors has no __iter__)
    readme = (out / "README.md").read_text()
    assert "(objective `infonce-distill`)" in readme and "## Citation" in readme
    with pytest.raises(ValueError, match="distill_weight is a setting of objective infonce-distill, not of infonce"):
        TrainConfig(objective="infonce", distill_weight=5.0)  # the flat spelling of before options
    with pytest.raises(ValueError, match="'distill_weight': not an option of objective infonce \\(it has none\\)"):
        TrainConfig(objective="infonce", options={"distill_weight": 5.0})
    with pytest.raises(ValueError, match="grad_accumulation"):
        TrainConfig(objective="infonce-distill", grad_accumulation=2)
