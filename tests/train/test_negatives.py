"""Hard negatives: the contrastive losses against their formulas computed term by term, the
batch layout, PairTexts' checks, GradCache with the extra rows, and a short training run."""

import math

import pyarrow as pa
import pytest
import torch
from pydantic import ValidationError
from viewmill.train.batches import PairTexts, training_texts
from viewmill.train.config import TrainConfig
from viewmill.train.layout import BatchLayout
from viewmill.train.loop import train_model
from viewmill.train.objectives import Contrastive, info_nce, nt_xent
from viewmill.train.optimisation import train_step

from tests.conftest import SENTENCES
from tests.train.test_bsl import TinyEncoder
from tests.train.two_ranks import leave_group


def _cos(u, v):
    return float(u @ v / (u.norm() * v.norm()))


def _vectors(n, k, d=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(rows, d, generator=g, dtype=torch.float64) for rows in (n, n, n * k))


def _term(positive, candidates, t):
    """-log softmax of the positive among (logit, candidate) pairs: candidates hold the positive."""
    return -(positive / t) + math.log(sum(math.exp(logit / t + shift) for logit, shift in candidates))


@pytest.mark.parametrize("weight", [0.0, 0.7])
def test_info_nce_with_hard_negatives_matches_the_formula(weight):
    n, k, t = 3, 2, 0.1
    a, b, negatives = _vectors(n, k)
    total = 0.0
    for i in range(n):
        candidates = [(_cos(a[i], b[j]), 0.0) for j in range(n)]
        # every negative of the batch; SimCSE's weight (after the temperature) on a_i's own
        candidates += [(_cos(a[i], negatives[m]), weight if m // k == i else 0.0) for m in range(n * k)]
        total += _term(_cos(a[i], b[i]), candidates, t)
    assert float(info_nce(a, b, t, negatives, weight)) == pytest.approx(total / n, rel=1e-9)


@pytest.mark.parametrize("weight", [0.0, -0.5])
def test_nt_xent_with_hard_negatives_matches_the_formula(weight):
    n, k, t = 3, 2, 0.2
    a, b, negatives = _vectors(n, k, seed=1)
    views = torch.cat([a, b])
    total = 0.0
    for i in range(2 * n):
        candidates = [(_cos(views[i], views[j]), 0.0) for j in range(2 * n) if j != i]
        candidates += [(_cos(views[i], negatives[m]), weight if m // k == i % n else 0.0) for m in range(n * k)]
        total += _term(_cos(views[i], views[(i + n) % (2 * n)]), candidates, t)
    assert float(nt_xent(a, b, t, negatives, weight)) == pytest.approx(total / (2 * n), rel=1e-9)


def test_hard_negative_weight_raises_the_loss_and_lands_on_each_anchors_own_negative():
    n, k, t = 4, 1, 0.05
    a, b, negatives = _vectors(n, k, seed=2)
    losses = [float(info_nce(a, b, t, negatives, weight)) for weight in (-1.0, 0.0, 0.5, 2.0)]
    assert losses == sorted(losses) and len(set(losses)) == 4, "the loss rises with the weight"
    # A huge weight leaves each anchor's own negative alone in the denominator.
    huge = 200.0
    own_only = sum((_cos(a[i], negatives[i]) - _cos(a[i], b[i])) / t for i in range(n)) / n + huge
    assert float(info_nce(a, b, t, negatives, huge)) == pytest.approx(own_only, rel=1e-9)


def test_no_negatives_is_the_plain_loss():
    a, b, _ = _vectors(4, 1, seed=3)
    assert float(info_nce(a, b, 0.1, None, 1.0)) == float(info_nce(a, b, 0.1))


def _triplet_batch(n, k, length=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, 50, ((2 + k) * n, length), generator=g)
    mask = torch.ones_like(ids)
    mask[-1, 2:] = 0  # a padded negative
    return {"input_ids": ids, "attention_mask": mask}


@pytest.mark.parametrize("kind", ["ntxent", "infonce"])
def test_contrastive_reads_the_negative_rows_of_its_layout(kind):
    torch.manual_seed(0)
    n, k = 3, 2
    model = Contrastive(TinyEncoder(), loss=kind, temperature=0.1, hard_negative_weight=0.3).double().eval()
    batch, layout = _triplet_batch(n, k), BatchLayout(n, k)
    z = model.embed(batch)
    fn = nt_xent if kind == "ntxent" else info_nce
    expected = fn(z[:n], z[n : 2 * n], 0.1, z[2 * n :], 0.3)
    with torch.no_grad():
        assert float(model.loss(batch, n, layout=layout)) == pytest.approx(float(expected), rel=1e-12)
        assert float(model.loss(batch, n, layout=layout)) != pytest.approx(float(fn(z[:n], z[n : 2 * n], 0.1)))


@pytest.mark.parametrize("kind", ["ntxent", "infonce"])
def test_cached_gradient_accumulation_with_negatives_equals_the_whole_batch(kind):
    n, k = 6, 2
    grads = []
    for pieces in (1, 4):
        torch.manual_seed(0)
        # float64: the sums run in different orders (see test_objectives' GradCache test)
        model = Contrastive(TinyEncoder(), loss=kind, temperature=0.1, hard_negative_weight=0.5).double().eval()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
        loss = train_step(model, optimizer, _triplet_batch(n, k, length=6), n, train_encoder=True,
                          accumulation=pieces, layout=BatchLayout(n, k), cached_gradients=True)  # fmt: skip
        grads.append((loss, [p.grad.clone() for p in model.parameters()]))
    assert grads[0][0] == pytest.approx(grads[1][0], rel=1e-9)
    for whole, cached in zip(grads[0][1], grads[1][1], strict=True):
        torch.testing.assert_close(cached, whole, rtol=1e-9, atol=1e-12)


def _negatives_model(kind):
    torch.manual_seed(0)
    return Contrastive(TinyEncoder(), loss=kind, temperature=0.1, hard_negative_weight=0.5).eval()


def _rank_gradients(rank, world, init_file, kind, out, pieces):
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    model = _negatives_model(kind)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    n, k = 8, 2
    share = n // world
    rows, local = BatchLayout(n, k).take(list(range(rank * share, (rank + 1) * share)))  # this rank's pairs
    batch = {key: value[rows] for key, value in _triplet_batch(n, k, length=6).items()}
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    loss = train_step(
        ddp, optimizer, batch, share, train_encoder=True, accumulation=pieces, layout=local, cached_gradients=True
    )
    if rank == 0:
        torch.save({"loss": loss, "grads": [p.grad for p in model.parameters()]}, out)
    leave_group()


@pytest.mark.parametrize(("kind", "pieces"), [("infonce", 1), ("ntxent", 2)])
def test_two_ranks_gather_negatives_like_b_and_give_the_single_process_gradient(tmp_path, kind, pieces):
    import torch.multiprocessing as mp

    out = tmp_path / "rank0.pt"
    mp.spawn(_rank_gradients, args=(2, str(tmp_path / "init"), kind, str(out), pieces), nprocs=2, join=True)
    distributed = torch.load(out, weights_only=False)
    model = _negatives_model(kind)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    loss = train_step(
        model,
        optimizer,
        _triplet_batch(8, 2, length=6),
        8,
        train_encoder=True,
        layout=BatchLayout(8, 2),
        cached_gradients=True,
    )
    assert distributed["loss"] == pytest.approx(loss, rel=1e-5), "every rank computes the global batch's loss"
    for got, want in zip(distributed["grads"], [p.grad for p in model.parameters()], strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)


def test_layout_rows_and_a_subset_of_pairs():
    layout = BatchLayout(3, 2, sources=True)
    assert (layout.a, layout.b, layout.negatives, layout.source, layout.rows) == (
        slice(0, 3), slice(3, 6), slice(6, 12), slice(12, 15), 15,
    )  # fmt: skip
    rows, piece = layout.take([2, 0])
    assert rows == [2, 0, 5, 3, 10, 11, 6, 7, 14, 12] and piece == BatchLayout(2, 2, True)
    assert BatchLayout(3).source == slice(0, 3), "no source rows: view a is the source"


def _table(negatives, text_a=None, text_b=None, **extra):
    a = text_a or [f"a{i}" for i in range(len(negatives))]
    b = text_b or [f"b{i}" for i in range(len(negatives))]
    return pa.table({"text_a": a, "text_b": b, "negatives": pa.array(negatives, pa.list_(pa.string())), **extra})


def test_pair_texts_put_negatives_row_major_and_count_them_in_lengths():
    texts = PairTexts(_table([["n0x", "n0yyyyyy"], ["n1x", "n1y"], ["n2x", "n2y"]], text_source=["s0", "s1", "s2"]))
    assert texts.k == 2 and texts.source is None, "sources are read only for an objective that needs them"
    assert texts.texts([2, 0]) == ["a2", "a0", "b2", "b0", "n2x", "n2y", "n0x", "n0yyyyyy"]
    assert texts.lengths().tolist() == [2 + 2 + 3 + 8, 2 + 2 + 3 + 3, 2 + 2 + 3 + 3]
    assert texts.layout([0, 1]) == BatchLayout(2, 2)
    sourced = PairTexts(_table([["x"], ["y"]], text_source=["s0", "s1"]), sources=True)
    assert sourced.texts([1]) == ["a1", "b1", "y", "s1"] and sourced.lengths().tolist() == [2 + 2 + 1 + 2] * 2
    assert PairTexts([("a", "b")]).layout([0]) is None, "the list form is the plain batch"


@pytest.mark.parametrize(
    ("negatives", "message"),
    [
        ([["x"], ["y", "z"]], "1 to 2 hard negatives: every pair needs the same number"),
        ([[], []], "negatives list is empty"),
        ([["x"], None], "negatives are null"),
        ([["x"], [None]], "negatives are null"),
    ],
)
def test_pair_texts_refuse_uneven_empty_or_missing_negatives(negatives, message):
    with pytest.raises(ValueError, match=message):
        PairTexts(_table(negatives))


def test_a_negatives_column_of_the_wrong_type_is_refused():
    table = pa.table({"text_a": ["a"], "text_b": ["b"], "negatives": ["just a string"]})
    with pytest.raises(ValueError, match="negatives column is string: it must be list<string>"):
        PairTexts(table)


@pytest.mark.parametrize("objective", ["bsl", "sgopt", "isbert", "distill"])
def test_objectives_without_negatives_refuse_them_naming_the_objective_and_the_fix(objective):
    users = "ntxent, infonce, infonce-distill"
    with pytest.raises(ValueError, match=f"objective '{objective}' does not train on hard negatives.*{users}"):
        training_texts(_table([["x"], ["y"]]), objective)


def test_hard_negative_weight_is_refused_where_no_negatives_are_trained():
    with pytest.raises(ValidationError, match="hard_negative_weight weights hard negatives, which bsl does not"):
        TrainConfig(objective="bsl", hard_negative_weight=1.0)
    assert TrainConfig(objective="infonce", hard_negative_weight=1.0).hard_negative_weight == 1.0


def _triplets():
    rotated = SENTENCES[7:] + SENTENCES[:7]
    negatives = [[rotated[i], rotated[(i + 5) % len(rotated)]] for i in range(len(SENTENCES))]
    return _table(negatives, SENTENCES, [s.lower() for s in SENTENCES])


@pytest.mark.parametrize("accumulation", [1, 2])
def test_training_with_hard_negatives_runs_and_exports(tmp_path, tiny_model, accumulation):
    from sentence_transformers import SentenceTransformer

    config = TrainConfig(objective="infonce", steps=3, batch_size=4, encoder_lr=1e-2, hard_negative_weight=0.5,
                         grad_accumulation=accumulation)  # fmt: skip
    out = tmp_path / "model"
    report = train_model(_triplets(), str(tiny_model), config, out, card={})
    assert report.steps == 3 and all(math.isfinite(loss) for loss in (report.first_loss, report.last_loss))
    before = SentenceTransformer(str(tiny_model)).encode(SENTENCES[:3])
    after = SentenceTransformer(str(out)).encode(SENTENCES[:3])
    assert not torch.allclose(torch.tensor(after), torch.tensor(before))
