import copy

import numpy as np
import pyarrow as pa
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from viewmill.train.batches import batches
from viewmill.train.bsl import BSL, Predictor
from viewmill.train.optimisation import train_step
from viewmill.train.pooling import mean_pool


class TinyEncoder(nn.Module):
    """Embedding + linear + dropout + layer norm: enough to test BSL's mechanics."""

    def __init__(self, vocab=50, dim=8):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.proj = nn.Linear(dim, dim)
        self.drop = nn.Dropout(0.5)
        self.norm = nn.LayerNorm(dim)

    def forward(self, input_ids, attention_mask):
        hidden = self.norm(self.drop(self.proj(self.embed(input_ids))))
        return type("Out", (), {"last_hidden_state": hidden})()


def _batch(n=4, length=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, 50, (2 * n, length), generator=g)
    mask = torch.ones_like(ids)
    mask[0, 3:] = 0
    return {"input_ids": ids, "attention_mask": mask}


def test_mean_pool_ignores_padding():
    hidden = torch.tensor([[[1.0, 1.0], [3.0, 3.0], [100.0, 100.0]]])
    assert torch.allclose(mean_pool(hidden, torch.tensor([[1, 1, 0]])), torch.tensor([[2.0, 2.0]]))


def test_predictor_shape_and_hidden_width():
    predictor = Predictor(8, k=8)
    assert predictor.net[0].out_features == 64 and isinstance(predictor.net[1], nn.BatchNorm1d)
    assert predictor(torch.randn(4, 8)).shape == (4, 8)


def test_loss_matches_a_direct_computation():
    torch.manual_seed(0)
    model = BSL(TinyEncoder(), dim=8, k=2)
    model.eval()  # no dropout, batch norm in inference mode: a deterministic reference
    batch = _batch()
    n = 4
    z = mean_pool(model.online(**batch).last_hidden_state, batch["attention_mask"])
    t = mean_pool(model.target(**batch).last_hidden_state, batch["attention_mask"])
    p = model.predictor(z)

    def d(x, y):
        x, y = F.normalize(x, dim=-1), F.normalize(y, dim=-1)
        return ((x - y) ** 2).sum(-1).mean()  # = 2 - 2cos for unit vectors

    expected = 0.5 * d(p[:n], t[n:]) + 0.5 * d(p[n:], t[:n])
    # BSL runs the predictor separately per view; in eval mode batch norm makes that identical.
    assert torch.allclose(model.loss(batch, n), expected, atol=1e-6)


def test_target_gets_no_gradients_and_stays_in_eval_mode():
    model = BSL(TinyEncoder(), dim=8, k=2)
    model.train()
    assert model.online.training and not model.target.training
    model.loss(_batch(), 4).backward()
    assert all(p.grad is None for p in model.target.parameters())
    assert any(p.grad is not None for p in model.online.parameters())


def test_warmup_trains_only_the_predictor():
    model = BSL(TinyEncoder(), dim=8, k=2)
    model.train()
    model.loss(_batch(), 4, train_encoder=False).backward()
    assert all(p.grad is None for p in model.online.parameters())
    assert all(p.grad is not None for p in model.predictor.parameters())


@pytest.mark.parametrize("momentum", [0.0, 0.5, 0.999, 1.0])
def test_ema_update_is_exact(momentum):
    model = BSL(TinyEncoder(), dim=8, k=2)
    with torch.no_grad():
        for p in model.online.parameters():
            p.add_(torch.randn_like(p))
    before = copy.deepcopy(model.target.state_dict())
    model.update_target(momentum)
    for (name, target), online in zip(model.target.named_parameters(), model.online.parameters(), strict=True):
        expected = momentum * before[name] + (1 - momentum) * online
        assert torch.allclose(target, expected, atol=1e-6), name
    if momentum == 1.0:
        assert all(torch.equal(model.target.state_dict()[k], v) for k, v in before.items())
    if momentum == 0.0:
        assert all(torch.equal(a, b) for a, b in zip(model.target.parameters(), model.online.parameters(), strict=True))


def test_batches_have_no_repeats_cover_each_epoch_and_group_lengths():
    lengths = [((i * 37) % 101) + 1 for i in range(256)]
    out = batches(lengths, batch_size=16, steps=32, seed=3)
    assert len(out) == 32 and all(len(b) == 16 and len(set(b)) == 16 for b in out)
    first_epoch = [i for b in out[:16] for i in b]
    assert sorted(first_epoch) == list(range(256))
    spread = sum(max(lengths[i] for i in b) - min(lengths[i] for i in b) for b in out[:16]) / 16
    assert spread < 25  # random batches of this data spread about 90
    assert out == batches(lengths, batch_size=16, steps=32, seed=3)
    assert out != batches(lengths, batch_size=16, steps=32, seed=4)


def test_too_few_pairs_for_a_batch_is_a_clear_error():
    with pytest.raises(ValueError, match="fewer than one batch of 64"):
        batches([1] * 10, batch_size=64, steps=1, seed=0)


def test_batches_never_hold_two_pairs_of_one_sentence():
    # Each sentence paired with five translations: 40 sentences, 200 pairs.
    keys = [f"s{i // 5}" for i in range(200)]
    lengths = [len(k) * 3 + i % 7 for i, k in enumerate(keys)]
    out = batches(lengths, batch_size=16, steps=30, seed=1, keys=keys)
    assert len(out) == 30
    assert all(len({keys[i] for i in b}) == len(b) == 16 for b in out)


def _step_fixture():
    model = BSL(TinyEncoder(), dim=8, k=2)
    model.train()
    optimizer = torch.optim.Adam([
        {"params": list(model.online.parameters()), "lr": 1e-2},
        {"params": list(model.predictor.parameters()), "lr": 1e-2},
    ])  # fmt: skip
    return model, optimizer


def _ema(model, momentum):
    return lambda: model.update_target(momentum)


def _params(module):
    return [p.detach().clone() for p in module.parameters()]


def test_a_step_skipped_for_overflow_leaves_the_target_alone():
    model, optimizer = _step_fixture()
    online, target = _params(model.online), _params(model.target)
    overflowing = torch.amp.GradScaler("cpu", init_scale=2.0**127)  # scaled gradients become inf
    train_step(model, optimizer, _batch(), 4, train_encoder=True, after_step=_ema(model, 0.5), scaler=overflowing)
    assert overflowing.get_scale() < 2.0**127, "the scaler saw the overflow"
    assert all(torch.equal(a, b) for a, b in zip(online, model.online.parameters(), strict=True))
    assert all(torch.equal(a, b) for a, b in zip(target, model.target.parameters(), strict=True))
    train_step(
        model,
        optimizer,
        _batch(),
        4,
        train_encoder=True,
        after_step=_ema(model, 0.5),
        scaler=torch.amp.GradScaler("cpu"),
    )
    assert not all(torch.equal(a, b) for a, b in zip(target, model.target.parameters(), strict=True))


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_step_trains_and_updates_the_target_in_each_precision(precision):
    model, optimizer = _step_fixture()
    target = _params(model.target)
    loss = train_step(
        model, optimizer, _batch(), 4, train_encoder=True, after_step=_ema(model, 0.5), precision=precision
    )
    assert 0 <= loss <= 4
    assert not all(torch.equal(a, b) for a, b in zip(target, model.target.parameters(), strict=True))
    assert all(p.dtype == torch.float32 for p in model.parameters()), "autocast never casts the weights"


def test_warmup_step_leaves_encoder_and_target_untouched():
    model, optimizer = _step_fixture()
    online, target = _params(model.online), _params(model.target)
    train_step(model, optimizer, _batch(), 4, train_encoder=False, after_step=_ema(model, 0.0))
    assert all(torch.equal(a, b) for a, b in zip(online, model.online.parameters(), strict=True))
    assert all(torch.equal(a, b) for a, b in zip(target, model.target.parameters(), strict=True))


def _reference_batches(lengths, batch_size, steps, seed, group=32, keys=None):
    """The per-index Python definition batches() keeps exactly (its output, not its speed)."""
    rng = np.random.default_rng(seed)
    out = []
    while len(out) < steps:
        order = rng.permutation(len(lengths)).tolist()
        epoch = []
        for start in range(0, len(lengths), batch_size * group):
            pending = sorted(order[start : start + batch_size * group], key=lambda i: lengths[i])
            while len(pending) >= batch_size:
                batch, seen, rest = [], set(), []
                for index in pending:
                    key = keys[index] if keys is not None else index
                    if len(batch) < batch_size and key not in seen:
                        batch.append(index)
                        seen.add(key)
                    else:
                        rest.append(index)
                if len(batch) < batch_size:
                    break
                epoch.append(batch)
                pending = rest
        out.extend(epoch[i] for i in rng.permutation(len(epoch)))
    return out[:steps]


@pytest.mark.parametrize("repeats", [1, 3])  # 3: windows where a sentence repeats take the greedy path
def test_batches_equal_the_per_index_definition(repeats):
    rng = np.random.default_rng(5)
    keys = [f"s{i // repeats}" for i in range(3000)]
    lengths = rng.integers(5, 90, size=3000).tolist()
    for seed in (0, 1):
        expected = _reference_batches(lengths, 16, 400, seed, group=8, keys=keys)
        assert batches(lengths, 16, 400, seed, group=8, keys=keys) == expected
        assert batches(np.array(lengths), 16, 400, seed, group=8, keys=pa.array(keys)) == expected
    assert batches(lengths, 16, 50, 2, group=8) == _reference_batches(lengths, 16, 50, 2, group=8)
