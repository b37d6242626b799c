"""Mining hard negatives: the chunked exact search and every control against a brute-force
reference, bounded memory, random sampling, and the faiss index against the exact search."""

import numpy as np
import pyarrow as pa
import pytest
import torch
from pydantic import ValidationError
from viewmill.train.mining import AUTO_FAISS_CANDIDATES, HNSW_LINKS_BYTES, MinedNegatives, MiningShape, _rows
from viewmill.train.negative_search import SEARCHES, Exclusion, Rows, exact_top_k, mine

N_ANCHORS, N_CANDIDATES, DIM = 40, 90, 12


def _unit(x: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.normalize(x, dim=-1)


@pytest.fixture(scope="module")
def case():
    """Random unit vectors: each anchor's sentence owns a few candidates (its views), some
    anchors' own and positive texts are candidates, and positives lie near their anchors."""
    g = torch.Generator().manual_seed(7)
    candidates = _unit(torch.randn(N_CANDIDATES, DIM, generator=g))
    candidate_group = torch.randint(0, 30, (N_CANDIDATES,), generator=g)
    anchor_group = torch.randint(0, 30, (N_ANCHORS,), generator=g)
    anchors = _unit(candidates[torch.randint(0, N_CANDIDATES, (N_ANCHORS,), generator=g)]
                    + 0.8 * torch.randn(N_ANCHORS, DIM, generator=g))  # fmt: skip
    positives = _unit(anchors + 0.6 * torch.randn(N_ANCHORS, DIM, generator=g))
    text = torch.randint(-1, N_CANDIDATES, (2, N_ANCHORS), generator=g)
    exclusion = Exclusion(anchor_group, candidate_group, anchor_text=text[0], positive_text=text[1])
    return anchors, positives, candidates, exclusion


def chosen(mined) -> list[list[tuple[int, float]]]:
    """Per anchor, its (candidate index, score) pairs, closest first."""
    out = [[] for _ in range(mined.n_anchors)]
    columns = (mined.anchor.tolist(), mined.candidate.tolist(), mined.score.tolist())
    for anchor, candidate, score in zip(*columns, strict=True):
        out[anchor].append((candidate, score))
    return out


def brute_force(anchors, positives, candidates, exclusion, spec: MinedNegatives) -> list[list[tuple[int, float]]]:
    """The definition, spelled out: the whole similarity matrix, each anchor's allowed
    candidates ranked, the rank window, the filters, the closest per_anchor."""
    a, p, c = (t.double().numpy() for t in (anchors, positives, candidates))
    scores = a @ c.T
    exclusions = (exclusion.candidate_group, exclusion.anchor_group, exclusion.anchor_text, exclusion.positive_text)
    groups, own, own_text, positive_text = (t.tolist() for t in exclusions)
    out = []
    for i in range(len(a)):
        allowed = [j for j in range(len(c)) if groups[j] != own[i] and j not in (own_text[i], positive_text[i])]
        ranked = sorted(allowed, key=lambda j: -scores[i, j])[spec.range_min : spec.window_end()]
        positive = float(a[i] @ p[i])
        kept = [
            j for j in ranked
            if (spec.max_score is None or scores[i, j] <= spec.max_score)
            and (spec.absolute_margin is None or scores[i, j] + spec.absolute_margin <= positive)
            and (spec.relative_margin is None or scores[i, j] <= positive - abs(positive) * spec.relative_margin)
        ]  # fmt: skip
        out.append([(j, float(scores[i, j])) for j in kept[: spec.per_anchor]])
    return out


CONTROLS = [
    {},
    {"per_anchor": 3},
    {"range_min": 2, "range_max": 12, "per_anchor": 4},
    {"max_score": 0.3, "per_anchor": 2},
    {"absolute_margin": 0.1, "per_anchor": 2},
    {"relative_margin": 0.2, "per_anchor": 2},
    {"range_min": 1, "range_max": 30, "max_score": 0.5, "absolute_margin": 0.0, "relative_margin": 0.05,
     "per_anchor": 5},
    {"per_anchor": 3, "range_max": 200},  # a window wider than the corpus
]  # fmt: skip


@pytest.mark.parametrize("chunk_size", [1000, 7])
@pytest.mark.parametrize("controls", CONTROLS, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()) or "default")
def test_mining_matches_the_brute_force_definition(case, controls, chunk_size):
    spec = MinedNegatives(source="mined", chunk_size=chunk_size, **controls)
    keys = [f"p{i}" for i in range(N_ANCHORS)]
    got = chosen(mine(*case, spec, keys))
    expected = brute_force(*case, spec)
    assert [[i for i, _ in row] for row in got] == [[i for i, _ in row] for row in expected]
    assert np.allclose([s for row in got for s in row], [s for row in expected for s in row], atol=1e-5)
    assert any(len(row) < spec.per_anchor for row in got) == any(len(r) < spec.per_anchor for r in expected)


def test_filters_bite_in_this_case(case):
    """The reference case is one where each filter drops something (else the test above proves little)."""
    base = brute_force(*case, MinedNegatives(source="mined", per_anchor=2, range_max=20))
    for control in ({"max_score": 0.3}, {"absolute_margin": 0.1}, {"relative_margin": 0.2}):
        filtered = brute_force(*case, MinedNegatives(source="mined", per_anchor=2, range_max=20, **control))
        assert filtered != base, control


def test_random_sampling_draws_from_the_allowed_window_stably(case):
    keys = [f"p{i}" for i in range(N_ANCHORS)]
    controls = {"source": "mined", "per_anchor": 3, "range_max": 15, "sampling": "random", "max_score": 0.6}
    drawn = chosen(mine(*case, MinedNegatives(**controls), keys))
    allowed = brute_force(*case, MinedNegatives(**{**controls, "sampling": "top", "per_anchor": 15}))
    for row, pool in zip(drawn, allowed, strict=True):
        assert len(row) == min(3, len(pool)) and {i for i, _ in row} <= {i for i, _ in pool}
        assert [s for _, s in row] == sorted((s for _, s in row), reverse=True), "closest first"
    chunked = chosen(mine(*case, MinedNegatives(**controls, chunk_size=5), keys))
    # The same negatives; their scores may differ in the last float bits (BLAS blocks each chunk's matmul its own way).
    picked = [[i for i, _ in row] for row in chunked]
    assert picked == [[i for i, _ in row] for row in drawn], "chunking never changes a draw"
    assert [[s for _, s in row] for row in chunked] == [pytest.approx([s for _, s in row], abs=1e-6) for row in drawn]
    assert chosen(mine(*case, MinedNegatives(**controls, seed=1), keys)) != drawn
    flipped = [t.flip(0) if t.shape[0] == N_ANCHORS else t for t in case[:3]]
    reordered = chosen(mine(*flipped, _flipped(case[3]), MinedNegatives(**controls), keys[::-1]))
    assert reordered[::-1] == drawn, "a pair's draw depends on its key, not its position"


def _flipped(exclusion: Exclusion) -> Exclusion:
    return Exclusion(exclusion.anchor_group.flip(0), exclusion.candidate_group, exclusion.anchor_text.flip(0),
                     exclusion.positive_text.flip(0))  # fmt: skip


class LargestTensor(torch.overrides.TorchFunctionMode):
    """The most elements any tensor a torch call returns inside the block has."""

    def __init__(self) -> None:
        super().__init__()
        self.largest = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for value in out if isinstance(out, tuple) else (out,):
            if isinstance(value, torch.Tensor):
                self.largest = max(self.largest, value.numel())
        return out


def test_chunked_search_never_holds_the_whole_similarity_matrix():
    g = torch.Generator().manual_seed(3)
    anchors, candidates = _unit(torch.randn(300, 8, generator=g)), _unit(torch.randn(500, 8, generator=g))
    exclusion = Exclusion(torch.arange(300), torch.arange(500) + 300, torch.full((300,), -1), torch.full((300,), -1))
    k, chunk = 4, 16
    with LargestTensor() as watch:
        scores, index = exact_top_k(anchors, candidates, k, exclusion, chunk)
    assert watch.largest <= max(chunk * (chunk + k), 300 * k) < 300 * 500 // 50
    whole = anchors @ candidates.T
    expected_scores, expected_index = torch.topk(whole, k, dim=1)
    assert torch.equal(index, expected_index) and torch.allclose(scores, expected_scores, atol=1e-6)


@pytest.mark.parametrize("index", ["exact", "faiss"])
def test_anchors_picked_from_one_matrix_mine_as_their_copies_do_without_copying_them(index):
    """The pair stage's layout: one matrix of every text's embedding, anchors and positives
    picked from it by row (an anchor text repeats across pairs). Gathered a chunk at a time,
    the negatives and their scores are exactly those of the copied rows, and no tensor as
    large as the anchors' rows is ever made."""
    g = torch.Generator().manual_seed(11)
    n_candidates, n_pairs, chunk = 120, 200, 16
    matrix = _unit(torch.randn(n_candidates + 60, DIM, generator=g))
    anchor_rows = torch.randint(n_candidates, n_candidates + 60, (n_pairs,), generator=g)
    positive_rows = torch.randint(0, n_candidates, (n_pairs,), generator=g)
    exclusion = Exclusion(anchor_rows, torch.arange(n_candidates), torch.full((n_pairs,), -1), positive_rows)
    spec = MinedNegatives(source="mined", per_anchor=2, range_max=6, max_score=0.9, chunk_size=chunk)
    keys = [str(i) for i in range(n_pairs)]
    candidates = matrix[:n_candidates]
    copied = chosen(mine(matrix[anchor_rows], matrix[positive_rows], candidates, exclusion, spec, keys, index=index))
    with LargestTensor() as watch:
        mined = mine(Rows(matrix, anchor_rows), Rows(matrix, positive_rows), candidates, exclusion, spec, keys,
                     index=index)  # fmt: skip
    picked = chosen(mined)
    assert picked == copied and any(picked)
    assert watch.largest < n_pairs * DIM, "a whole copy of the anchors' (or positives') rows was made"


def test_faiss_finds_what_the_exact_search_finds_on_well_separated_data():
    g = torch.Generator().manual_seed(5)
    candidates = _unit(torch.randn(600, 32, generator=g))
    anchors = _unit(candidates[:200] + 0.05 * torch.randn(200, 32, generator=g))
    group = torch.arange(600)
    exclusion = Exclusion(group[:200], group, torch.full((200,), -1), torch.arange(200))  # its own text is out
    spec = MinedNegatives(source="mined", per_anchor=5, chunk_size=64)
    keys = [str(i) for i in range(200)]
    exact = chosen(mine(anchors, anchors, candidates, exclusion, spec, keys, index="exact"))
    approximate = chosen(mine(anchors, anchors, candidates, exclusion, spec, keys, index="faiss"))
    assert [[i for i, _ in row] for row in approximate] == [[i for i, _ in row] for row in exact]
    assert all(i != own for own, row in enumerate(exact) for i, _ in row)


def test_the_index_is_chosen_by_corpus_size_and_the_window_must_hold_the_negatives():
    spec = MinedNegatives(source="mined")
    assert spec.index_for(AUTO_FAISS_CANDIDATES - 1) == "exact" and spec.index_for(AUTO_FAISS_CANDIDATES) == "faiss"
    assert MinedNegatives(source="mined", index="exact").index_for(10**9) == "exact"
    assert MinedNegatives(source="mined", per_anchor=2, max_score=0.9).window_end() == 20
    with pytest.raises(ValidationError, match="per_anchor 5 does not fit ranks 3..6: raise range_max"):
        MinedNegatives(source="mined", per_anchor=5, range_min=3, range_max=6)
    with pytest.raises(ValidationError, match=r"range_max \(2\) must be larger than range_min \(4\)"):
        MinedNegatives(source="mined", range_min=4, range_max=2)


def test_minings_memory_is_its_texts_embeddings_search_and_ranked_windows():
    # `viewmill plan` prices the pair stage with this bound: at 1M pairs faiss's index and the
    # embeddings are most of it. The literals are the bound spelled out for MiniLM's 384 dims.
    spec = MinedNegatives(source="mined", per_anchor=2)  # window: ranks 0..2
    small = MiningShape(texts=1_500, candidates=1_000, anchors=1_000, dims=384, text_chars=60.0)
    layout = 3_000 * (57 + 60) + 2_000 * 208 + 8 * 4_000  # strings, dict and row entries, exclusion tensors
    assert spec.memory_bytes(small) == layout + 1_500 * 1_536 + 1024 * 1026 * 20 + 1_000 * 2 * 12
    large = small.scaled(1_000)
    assert (large.texts, large.candidates, large.anchors, large.dims, large.text_chars) == (
        1_500_000, 1_000_000, 1_000_000, 384, 60.0)  # fmt: skip
    faiss_index = 1_000_000 * (1_536 + 272)
    assert spec.memory_bytes(large) == layout * 1_000 + 1_500_000 * 1_536 + faiss_index + 1_000_000 * 2 * 12
    exact = MinedNegatives(source="mined", per_anchor=2, index="exact", chunk_size=256)
    assert exact.memory_bytes(large) == layout * 1_000 + 1_500_000 * 1_536 + 256 * 258 * 20 + 1_000_000 * 2 * 12


def test_the_faiss_index_serialises_to_the_bytes_the_bound_gives_a_vector():
    import faiss
    from viewmill.train.negative_search import HNSW_NEIGHBOURS

    vectors = _unit(torch.randn(6_000, 32, generator=torch.Generator().manual_seed(3))).numpy()
    index = faiss.IndexHNSWFlat(32, HNSW_NEIGHBOURS, faiss.METRIC_INNER_PRODUCT)
    index.add(vectors)
    per_vector = faiss.serialize_index(index).nbytes / len(vectors)
    assert per_vector == pytest.approx(32 * 4 + HNSW_LINKS_BYTES, rel=0.01)


@pytest.mark.parametrize("words", [(2, 4), (5, 15), (25, 45)])
def test_the_texts_layout_costs_python_what_the_bound_says(words):
    # Texts and their exclusion hold every text as a Python string with dicts and row lists
    # beside them: ~0.8 GB at 1M pairs, which the bound once left out.
    import random
    import tracemalloc

    from viewmill.storage.ids import sentence_id
    from viewmill.train.mining import Texts

    rng, vocabulary = random.Random(5), "a man woman dog runs in the park street slowly red house".split()
    sentences = [" ".join(rng.choices(vocabulary, k=rng.randint(*words))) + f" {i}." for i in range(20_000)]
    ids, views = [sentence_id(t) for t in sentences], [t.upper() for t in sentences]
    candidates = pa.table({"text": views, "sentence_id": ids})
    pairs = pa.table({"text_a": sentences, "text_b": views, "sentence_id": ids})
    tracemalloc.start()
    try:
        texts = Texts(candidates["text"].to_pylist(), pairs["text_a"].to_pylist(), pairs["text_b"].to_pylist())
        texts.exclusion(candidates["sentence_id"].to_pylist(), pairs["sentence_id"].to_pylist())
        traced = tracemalloc.get_traced_memory()[1]  # the peak; torch's tensors are not traced
    finally:
        tracemalloc.stop()
    chars = sum(map(len, texts.all)) / len(texts.all)
    shape = MiningShape(len(texts.all), candidates.num_rows, pairs.num_rows, 384, chars)
    untraced = 8 * (candidates.num_rows + 3 * pairs.num_rows)
    bound = shape.layout_bytes() - untraced
    assert 0.85 * bound <= traced <= bound  # an upper bound, close (dicts' tables grow by doubling)


def test_a_bf16_miners_reuse_key_says_so_and_an_fp32_key_is_unchanged(monkeypatch):
    spec = MinedNegatives(source="mined")
    spec._fingerprint = "weights"
    monkeypatch.setenv("VIEWMILL_AUTO_PRECISION", "fp32")
    plain = spec.reuse_key()
    assert "precision" not in plain and spec.precision() == "fp32"
    monkeypatch.setenv("VIEWMILL_AUTO_PRECISION", "bf16")
    assert spec.reuse_key() == {**plain, "precision": "bf16"}  # a bf16 miner never reuses fp32 negatives


def test_a_bf16_miner_encodes_close_to_fp32(monkeypatch):
    texts = ["A man is playing a guitar.", "Someone plays the guitar.", "A dog runs in the park."]
    spec = MinedNegatives(source="mined", store=False)  # the encoder itself, each time
    monkeypatch.setenv("VIEWMILL_AUTO_PRECISION", "fp32")
    full = spec._encode(None, texts)
    monkeypatch.setenv("VIEWMILL_AUTO_PRECISION", "bf16")
    half = spec._encode(None, texts)
    assert half.dtype == torch.float32 and (full * half).sum(1).min() > 0.99 and not torch.equal(full, half)


def _reference_mine(anchors, positives, candidates, exclusion, controls: MinedNegatives, keys, index="exact"):
    """The choice as it was made before it moved to arrays: a Python list per anchor, a
    random draw per pair from `seed:key`, then sorted (so a pair's negatives stay in rank order)."""
    import random

    k = min(controls.window_end(), candidates.shape[0])
    scores, found = SEARCHES[index](Rows(anchors), candidates, k, exclusion, controls.chunk_size)
    positive = (anchors * positives).sum(dim=1)
    window, window_index = scores[:, controls.range_min :], found[:, controls.range_min :]

    def allowed_at(row: int, j: int) -> bool:  # one candidate at a time, in float32 as the search scored it
        score, p = window[row, j], positive[row]
        return bool(
            window_index[row, j] >= 0
            and (controls.max_score is None or score <= controls.max_score)
            and (controls.absolute_margin is None or score + controls.absolute_margin <= p)
            and (controls.relative_margin is None or score <= p - p.abs() * controls.relative_margin)
        )

    out = []
    for row, key in enumerate(keys):
        columns = [j for j in range(window.shape[1]) if allowed_at(row, j)]
        allowed = [(int(window_index[row, j]), float(window[row, j])) for j in columns]
        if controls.sampling == "top" or len(allowed) <= controls.per_anchor:
            out.append(allowed[: controls.per_anchor])
            continue
        drawn = random.Random(f"{controls.seed}:{key}").sample(range(len(allowed)), controls.per_anchor)
        out.append([allowed[i] for i in sorted(drawn)])
    return out


EDGES = [
    {"range_min": 95, "range_max": 100},  # the window starts past the corpus: nothing to take
    {"per_anchor": 8, "range_max": 9, "max_score": 0.0},  # fewer allowed than asked
    {"per_anchor": 4, "range_max": 40, "sampling": "random", "seed": 3},
    {"per_anchor": 2, "range_max": 6, "sampling": "random", "relative_margin": 0.1},
]


@pytest.mark.parametrize("index", ["exact", "faiss"])
@pytest.mark.parametrize("controls", CONTROLS + EDGES, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()) or "-")
def test_the_array_choice_is_the_list_choice_and_its_rows_are_ranked_by_pair(case, controls, index):
    anchors, positives, candidates, exclusion = case
    doubled = [torch.cat([t, t]) for t in (anchors, positives)]  # every anchor twice: repeated anchor texts
    twice = Exclusion(exclusion.anchor_group.repeat(2), exclusion.candidate_group, exclusion.anchor_text.repeat(2),
                      exclusion.positive_text.repeat(2))  # fmt: skip
    spec = MinedNegatives(source="mined", chunk_size=7, **controls)
    keys = [f"p{i}" for i in range(2 * N_ANCHORS)]
    mined = mine(*doubled, candidates, twice, spec, keys, index=index)
    expected = _reference_mine(*doubled, candidates, twice, spec, keys, index)
    assert chosen(mined) == expected
    ids = range(N_CANDIDATES)
    table = pa.table({"sentence_id": [f"s{i}" for i in ids], "text": [f"t{i}" for i in ids]})
    rows = _rows(pa.chunked_array([keys[:30], keys[30:]]), mined, table, "m").to_pylist()
    assert [(r["pair_id"], r["rank"], r["text"], r["score"]) for r in rows] == [
        (keys[a], rank, f"t{i}", score) for a, found in enumerate(expected) for rank, (i, score) in enumerate(found, 1)
    ]
    assert {r["source"] for r in rows} <= {"mined"} and {r["miner"] for r in rows} <= {"m"}


def test_random_sampling_needs_a_key_per_anchor(case):
    spec = MinedNegatives(source="mined", per_anchor=2, range_max=10, sampling="random")
    with pytest.raises(ValueError, match="3 keys for 40 anchors"):
        mine(*case, spec, ["a", "b", "c"])
