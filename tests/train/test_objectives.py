"""Each loss against a direct, loop-by-loop computation of its formula on small tensors."""

import math

import pytest
import torch
from viewmill.train.isbert import ISBERT, jsd_mi_loss
from viewmill.train.objectives import INFONCE, Contrastive, info_nce, nt_xent, paper_citation
from viewmill.train.sgopt import SGOPT, opt3

from tests.train.test_bsl import TinyEncoder, _batch


def _cos(u, v):
    return float(u @ v / (u.norm() * v.norm()))


def test_nt_xent_matches_the_simclr_formula():
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(4, 6, generator=g, dtype=torch.float64), torch.randn(4, 6, generator=g, dtype=torch.float64)
    views, n, t = torch.cat([a, b]), 4, 0.3
    total = 0.0
    for i in range(2 * n):
        partner = (i + n) % (2 * n)
        denominator = sum(math.exp(_cos(views[i], views[k]) / t) for k in range(2 * n) if k != i)
        total += -math.log(math.exp(_cos(views[i], views[partner]) / t) / denominator)
    assert float(nt_xent(a, b, t)) == pytest.approx(total / (2 * n), rel=1e-9)


def test_info_nce_is_one_directional():
    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(5, 3, generator=g, dtype=torch.float64), torch.randn(5, 3, generator=g, dtype=torch.float64)
    t = 0.05
    expected = (
        sum(
            -math.log(math.exp(_cos(a[i], b[i]) / t) / sum(math.exp(_cos(a[i], b[j]) / t) for j in range(5)))
            for i in range(5)
        )
        / 5
    )
    assert float(info_nce(a, b, t)) == pytest.approx(expected, rel=1e-9)
    assert float(info_nce(a, b, t)) != pytest.approx(float(info_nce(b, a, t)), rel=1e-6)


def test_opt3_matches_the_paper_formula():
    g = torch.Generator().manual_seed(2)
    n, layers, t = 3, 4, 0.1
    c = torch.randn(n, 5, generator=g, dtype=torch.float64)
    h = torch.randn(n, layers, 5, generator=g, dtype=torch.float64)
    total = 0.0
    for i in range(n):
        negatives = sum(math.exp(_cos(c[i], h[m, k]) / t) for m in range(n) if m != i for k in range(layers))
        for k in range(layers):
            own = math.exp(_cos(c[i], h[i, k]) / t)
            total += -math.log(own / (own + negatives))
    assert float(opt3(c, h, t)) == pytest.approx(total / (n * layers), rel=1e-9)


def test_jsd_estimator_matches_its_definition():
    g = torch.Generator().manual_seed(3)
    n, length, d = 3, 4, 5
    glob = torch.randn(n, d, generator=g, dtype=torch.float64)
    local = torch.randn(n, length, d, generator=g, dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 0]])

    def sp(x):
        return math.log1p(math.exp(x))

    pos, neg = [], []
    for i in range(n):
        for j in range(n):
            for t in range(length):
                if mask[j, t]:
                    s = float(glob[i] @ local[j, t])
                    (pos if i == j else neg).append(s)
    e_pos = sum(math.log(2) - sp(-s) for s in pos) / len(pos)
    e_neg = sum(sp(-s) + s - math.log(2) for s in neg) / len(neg)
    assert float(jsd_mi_loss(glob, local, mask)) == pytest.approx(e_neg - e_pos, rel=1e-9)


@pytest.mark.parametrize("kind", ["ntxent", "infonce"])
def test_contrastive_trains_the_encoder(kind):
    model = Contrastive(TinyEncoder(), loss=kind, temperature=0.1)
    model.loss(_batch(), 4).backward()
    assert all(p.grad is not None for p in model.encoder.parameters())


class TinyBert(torch.nn.Module):
    """TinyEncoder with BERT's shape: an embeddings block and hidden states per layer."""

    def __init__(self):
        super().__init__()
        self.embeddings = torch.nn.Embedding(50, 8)
        self.layers = torch.nn.ModuleList(torch.nn.Linear(8, 8) for _ in range(2))

    def get_input_embeddings(self):
        return self.embeddings

    def forward(self, input_ids, attention_mask, output_hidden_states=False):
        states = [self.embeddings(input_ids)]
        for layer in self.layers:
            states.append(torch.tanh(layer(states[-1])))
        return type("Out", (), {"last_hidden_state": states[-1], "hidden_states": tuple(states)})()


def test_sgopt_freezes_bert_f_and_layer_0_and_regularises_towards_bert_f():
    model = SGOPT(TinyBert(), dim=8, head_width=16, temperature=0.01, reg_lambda=0.1)
    model.train()
    assert not model.fixed.training
    assert model.regulariser().item() == 0.0, "the copies start equal"
    loss = model.loss(_batch(), 4)
    loss.backward()
    assert all(p.grad is None for p in model.fixed.parameters())
    assert model.tuned.embeddings.weight.grad is None, "layer 0 is frozen"
    assert all(p.grad is not None for p in model.tuned.layers.parameters())
    assert model.layer_views(_batch()).shape == (8, 3, 8), "one view per layer, embeddings included"
    with torch.no_grad():
        model.tuned.layers[0].weight.add_(0.5)
    assert model.regulariser().item() == pytest.approx(0.25 * 64, rel=1e-5)


def test_sgopt_with_back_translation_feeds_the_partner_to_bert_f():
    torch.manual_seed(0)
    plain = SGOPT(TinyBert(), dim=8, head_width=16)
    partner = SGOPT(TinyBert(), dim=8, head_width=16, fixed_reads_partner=True)
    partner.load_state_dict(plain.state_dict())
    plain.eval(), partner.eval()
    with torch.no_grad():
        assert float(plain.loss(_batch(), 4)) != pytest.approx(float(partner.loss(_batch(), 4)))


def test_isbert_trains_encoder_and_cnn_on_view_a_only():
    model = ISBERT(TinyEncoder(), dim=8, filters=4)
    batch = _batch()
    loss = model.loss(batch, 4)
    loss.backward()
    assert all(p.grad is not None for p in model.cnn.parameters())
    assert model.encoder.embed.weight.grad is not None
    changed = {k: v.clone() for k, v in batch.items()}
    changed["input_ids"][4:] = 1  # view b is not read
    model.eval()
    with torch.no_grad():
        assert float(model.loss(changed, 4)) == pytest.approx(float(model.loss(batch, 4)))


@pytest.mark.parametrize("kind", ["ntxent", "infonce"])
def test_cached_gradient_accumulation_equals_the_whole_batch(kind):
    from viewmill.train.optimisation import train_step

    grads = []
    for pieces in (1, 4):
        torch.manual_seed(0)
        # float64: the two sums run in different orders, and float32's rounding of them
        # differs by CPU (AVX-512 reductions gave 1.4e-5 relative), not by the method
        model = Contrastive(TinyEncoder(), loss=kind, temperature=0.1).double()
        model.eval()  # same function in both runs (no dropout)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
        loss = train_step(model, optimizer, _batch(n=8, length=6), 8, train_encoder=True, accumulation=pieces,
                          cached_gradients=True)
        grads.append((loss, [p.grad.clone() for p in model.parameters()]))
    assert grads[0][0] == pytest.approx(grads[1][0], rel=1e-6)
    for whole, cached in zip(grads[0][1], grads[1][1], strict=True):
        torch.testing.assert_close(cached, whole, rtol=1e-9, atol=1e-12)


def test_cached_backward_replays_dropout():
    torch.manual_seed(0)
    model = Contrastive(TinyEncoder(), loss="ntxent", temperature=0.1)
    model.train()  # dropout on: the re-embedding must draw the same masks as the first pass
    batch = _batch(n=4, length=5)
    seen = []
    original = model.embed

    def recording(piece):
        z = original(piece)
        seen.append(z.detach().clone())
        return z

    model.embed = recording
    model.cached_backward(batch, 4, chunks=2)
    first, replay = seen[:2], seen[2:]
    for a, b in zip(first, replay, strict=True):
        torch.testing.assert_close(a, b)


def test_bsl_accumulation_weights_pieces_by_their_pairs():
    import copy

    from viewmill.train.bsl import BSL
    from viewmill.train.optimisation import train_step

    torch.manual_seed(0)
    base = BSL(TinyEncoder(), dim=8, k=2)
    grads = []
    for pieces in (1, 2):
        model = copy.deepcopy(base)
        model.eval()  # batch norm on running statistics: the same function for any piece size
        optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
        train_step(model, optimizer, _batch(n=8, length=6), 8, train_encoder=True, accumulation=pieces)
        grads.append([p.grad.clone() for p in model.online.parameters()])
    for whole, pieces in zip(*grads, strict=True):
        torch.testing.assert_close(pieces, whole, rtol=1e-5, atol=1e-7)


def test_paper_citation_reads_whole_bibtex_entries():
    assert INFONCE.citation == paper_citation("henderson2017efficient", "oord2018representation")
    assert INFONCE.citation.startswith("@misc{henderson2017efficient,\n") and INFONCE.citation.endswith("}")
    assert "}\n@misc{oord2018representation,\n" in INFONCE.citation  # each entry whole, one a line apart
    with pytest.raises(KeyError):
        paper_citation("nobody2099")
