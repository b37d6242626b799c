"""Hard negatives on only some pairs (a snapshot whose `pair.negatives.pairings` chose some
pairings): the losses against their formulas, the layout, PairTexts, GradCache, two ranks
and a short training run."""

import math

import pytest
import torch
from viewmill.train.batches import PairTexts
from viewmill.train.config import TrainConfig
from viewmill.train.distill import symmetric_info_nce
from viewmill.train.layout import BatchLayout
from viewmill.train.loop import train_model
from viewmill.train.objectives import Contrastive, info_nce, nt_xent
from viewmill.train.optimisation import train_step

from tests.conftest import SENTENCES
from tests.train.test_bsl import TinyEncoder
from tests.train.test_negatives import _cos, _table, _term, _vectors
from tests.train.two_ranks import leave_group

N, K = 3, 2
HOLDERS = (0, 2)  # pair 1 carries no negatives
PRESENT = torch.tensor([True, True, False, False, True, True])


def _mixed_reference(anchors, partners, negatives, t, weight, views=None):
    """Mean -log softmax of each anchor's partner among the views and the present negatives
    (`views`: the candidate views, NT-Xent's 2n without the anchor itself)."""
    total = 0.0
    for i in range(len(anchors)):
        pool = views if views is not None else partners
        candidates = [(_cos(anchors[i], v), 0.0) for j, v in enumerate(pool) if views is None or j != i]
        candidates += [
            (_cos(anchors[i], negatives[m]), weight if m // K == i % N else 0.0)
            for m in range(N * K) if PRESENT[m]
        ]  # fmt: skip
        total += _term(_cos(anchors[i], partners[i]), candidates, t)
    return total / len(anchors)


@pytest.mark.parametrize("weight", [0.0, 0.7])
def test_info_nce_meets_only_the_negatives_present(weight):
    a, b, negatives = _vectors(N, K, seed=4)
    negatives = negatives * PRESENT.unsqueeze(1)  # absent slots are zero rows, as batch_negatives fills them
    expected = _mixed_reference(a, b, negatives, 0.1, weight)
    assert float(info_nce(a, b, 0.1, negatives, weight, PRESENT)) == pytest.approx(expected, rel=1e-9)
    assert float(info_nce(a, b, 0.1, negatives, weight)) != pytest.approx(expected), "the mask matters"


@pytest.mark.parametrize("weight", [0.0, -0.5])
def test_nt_xent_meets_only_the_negatives_present(weight):
    a, b, negatives = _vectors(N, K, seed=5)
    views = torch.cat([a, b])
    partners = torch.cat([b, a])
    expected = _mixed_reference(views, partners, negatives, 0.2, weight, views=views)
    assert float(nt_xent(a, b, 0.2, negatives, weight, PRESENT)) == pytest.approx(expected, rel=1e-9)


def test_every_slot_present_is_todays_loss_and_none_present_the_plain_loss():
    a, b, negatives = _vectors(N, K, seed=6)
    everyone, no_one = torch.ones(N * K, dtype=torch.bool), torch.zeros(N * K, dtype=torch.bool)
    for fn in (info_nce, nt_xent, symmetric_info_nce):
        assert float(fn(a, b, 0.1, negatives, 0.5, everyone)) == float(fn(a, b, 0.1, negatives, 0.5))
        assert float(fn(a, b, 0.1, negatives, 0.5, no_one)) == pytest.approx(float(fn(a, b, 0.1)), rel=1e-12)


def _mixed_batch(n, holders, k=K, length=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, 50, ((2 + k) * n if holders is None else 2 * n + k * len(holders), length), generator=g)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


@pytest.mark.parametrize("kind", ["ntxent", "infonce"])
def test_contrastive_scores_a_mixed_batch_as_the_formula(kind):
    torch.manual_seed(0)
    model = Contrastive(TinyEncoder(), loss=kind, temperature=0.1, hard_negative_weight=0.3).double().eval()
    batch, layout = _mixed_batch(N, HOLDERS), BatchLayout(N, K, holders=HOLDERS)
    with torch.no_grad():
        z = model.embed(batch)
        dense = torch.zeros(N * K, z.shape[1], dtype=z.dtype)
        dense[PRESENT] = z[2 * N :]
        a, b = z[:N], z[N : 2 * N]
        if kind == "infonce":
            expected = _mixed_reference(a, b, dense, 0.1, 0.3)
        else:
            expected = _mixed_reference(torch.cat([a, b]), torch.cat([b, a]), dense, 0.1, 0.3, views=torch.cat([a, b]))
        assert float(model.loss(batch, N, layout=layout)) == pytest.approx(expected, rel=1e-9)
        empty = BatchLayout(N, K, holders=())
        plain = info_nce(a, b, 0.1) if kind == "infonce" else nt_xent(a, b, 0.1)
        assert float(model.loss(_mixed_batch(N, ()), N, layout=empty)) == pytest.approx(float(plain), rel=1e-9)


@pytest.mark.parametrize("kind", ["ntxent", "infonce"])
def test_cached_gradient_accumulation_of_a_mixed_batch_equals_the_whole_batch(kind):
    n, holders = 6, (1, 2, 5)
    grads = []
    for pieces in (1, 4):
        torch.manual_seed(0)
        model = Contrastive(TinyEncoder(), loss=kind, temperature=0.1, hard_negative_weight=0.5).double().eval()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
        layout = BatchLayout(n, K, holders=holders)
        loss = train_step(model, optimizer, _mixed_batch(n, holders, length=6), n, train_encoder=True,
                          accumulation=pieces, layout=layout, cached_gradients=True)  # fmt: skip
        grads.append((loss, [p.grad.clone() for p in model.parameters()]))
    assert grads[0][0] == pytest.approx(grads[1][0], rel=1e-9)
    for whole, cached in zip(grads[0][1], grads[1][1], strict=True):
        torch.testing.assert_close(cached, whole, rtol=1e-9, atol=1e-12)


def test_a_mixed_layouts_rows_and_a_subset_of_its_pairs():
    layout = BatchLayout(3, 2, sources=True, holders=HOLDERS)
    assert (layout.negatives, layout.source, layout.rows, layout.negative_slots()) == (
        slice(6, 10), slice(10, 13), 13, [0, 1, 4, 5],
    )  # fmt: skip
    rows, piece = layout.take([2, 1, 0])
    assert rows == [2, 1, 0, 5, 4, 3, 8, 9, 6, 7, 12, 11, 10] and piece == BatchLayout(3, 2, True, (0, 2))
    rows, piece = layout.take([1])
    assert rows == [1, 4, 11] and piece == BatchLayout(1, 2, True, ()) and piece.negative_rows == 0


def test_pair_texts_take_k_negatives_or_none_per_pair():
    texts = PairTexts(_table([["n0x", "n0yyy"], [], ["n2x", "n2y"]]))
    assert texts.k == 2
    assert texts.texts([2, 1, 0]) == ["a2", "a1", "a0", "b2", "b1", "b0", "n2x", "n2y", "n0x", "n0yyy"]
    assert texts.lengths().tolist() == [2 + 2 + 3 + 5, 2 + 2, 2 + 2 + 3 + 3]
    assert texts.layout([2, 1, 0]) == BatchLayout(3, 2, holders=(0, 2))
    assert texts.layout([1]) == BatchLayout(1, 2, holders=()), "a batch where no pair has negatives"
    full = PairTexts(_table([["x"], ["y"]]))
    assert full.layout([1, 0]) == BatchLayout(2, 1), "every pair with negatives: today's layout"
    with pytest.raises(ValueError, match="1 to 2 hard negatives: every pair needs the same number k >= 1, or none"):
        PairTexts(_table([["x"], [], ["y", "z"]]))


def _two_rank_gradients(rank, world, init_file, out):
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    model = _mixed_model()
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    share = 4
    rows, local = _WHOLE.take(list(range(rank * share, (rank + 1) * share)))
    batch = {key: value[rows] for key, value in _mixed_batch(8, _WHOLE.holders, length=6).items()}
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    loss = train_step(ddp, optimizer, batch, share, train_encoder=True, layout=local, cached_gradients=True)
    if rank == 0:
        torch.save({"loss": loss, "grads": [p.grad for p in model.parameters()]}, out)
    leave_group()


_WHOLE = BatchLayout(8, K, holders=(1, 2))  # rank 1's pairs (4..7) carry none


def _mixed_model():
    torch.manual_seed(0)
    return Contrastive(TinyEncoder(), loss="infonce", temperature=0.1, hard_negative_weight=0.5).eval()


def test_two_ranks_gather_a_mixed_batch_and_give_the_single_process_gradient(tmp_path):
    import torch.multiprocessing as mp

    out = tmp_path / "rank0.pt"
    mp.spawn(_two_rank_gradients, args=(2, str(tmp_path / "init"), str(out)), nprocs=2, join=True)
    distributed = torch.load(out, weights_only=False)
    model = _mixed_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    batch = _mixed_batch(8, _WHOLE.holders, length=6)
    loss = train_step(model, optimizer, batch, 8, train_encoder=True, layout=_WHOLE, cached_gradients=True)
    assert distributed["loss"] == pytest.approx(loss, rel=1e-5), "every rank computes the global batch's loss"
    for got, want in zip(distributed["grads"], [p.grad for p in model.parameters()], strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize(("objective", "accumulation"), [("infonce", 1), ("infonce", 2), ("ntxent", 1)])
def test_training_on_pairs_with_negatives_on_some_runs(tmp_path, tiny_model, objective, accumulation):
    rotated = SENTENCES[7:] + SENTENCES[:7]
    negatives = [[rotated[i]] if i % 4 == 0 else [] for i in range(len(SENTENCES))]
    pairs = _table(negatives, SENTENCES, [s.lower() for s in SENTENCES])
    config = TrainConfig(objective=objective, steps=3, batch_size=4, encoder_lr=1e-2, hard_negative_weight=0.5,
                         grad_accumulation=accumulation)  # fmt: skip
    report = train_model(pairs, str(tiny_model), config, tmp_path / "model", card={})
    assert report.steps == 3 and all(math.isfinite(loss) for loss in (report.first_loss, report.last_loss))
