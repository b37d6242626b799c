"""Model soups: the weighted average, what cannot be averaged, and the dev choice of the mix."""

import pytest
import torch
from viewmill.train.dev_scores import DevResult, DevSelection
from viewmill.train.soup import SoupError, average_weights, candidate_weights, check_same_structure, choose_soup

NAMES = ["own", "other"]


def test_candidates_start_with_the_first_model_alone_and_share_the_rest_evenly():
    assert candidate_weights([0.5], 2) == [(1.0, 0.0), (0.5, 0.5)]
    assert candidate_weights([0.4, 1.0], 3) == [(1.0, 0.0, 0.0), (0.4, 0.3, 0.3)]
    with pytest.raises(SoupError, match="two models or more"):
        candidate_weights([0.5], 1)


def test_the_average_is_weighted_in_the_first_models_dtype_and_keeps_integer_buffers():
    first = {"w": torch.tensor([1.0, 3.0], dtype=torch.bfloat16), "ids": torch.tensor([0, 1])}
    second = {"w": torch.tensor([3.0, 7.0], dtype=torch.bfloat16), "ids": torch.tensor([0, 1])}
    out = average_weights([first, second], (0.25, 0.75), NAMES)
    assert out["w"].dtype == torch.bfloat16 and out["w"].tolist() == [2.5, 6.0]
    assert out["ids"].tolist() == [0, 1]


@pytest.mark.parametrize(
    ("other", "message"),
    [
        ({"w": torch.zeros(2), "extra": torch.zeros(1)}, "not the same architecture"),
        ({"w": torch.zeros(3), "ids": torch.tensor([0, 1])}, "different shapes"),
        ({"w": torch.zeros(2), "ids": torch.tensor([1, 0])}, "differs between"),
    ],
)
def test_models_that_are_not_fine_tunes_of_one_start_are_refused(other, message):
    first = {"w": torch.ones(2), "ids": torch.tensor([0, 1])}
    with pytest.raises(SoupError, match=message):
        average_weights([first, other], (0.5, 0.5), NAMES)


def _dev_by_weight(target: float, english_drop_below: float):
    """Dev scores of a one-weight model: 'mean' peaks where its weight is `target`; 'english'
    falls by 1 where the weight is under `english_drop_below`."""

    def score(model: torch.nn.Module) -> DevResult:
        value = float(model.weight.item())
        scores = {"mean": 10 - abs(value - target), "english": 5.0 - (value < english_drop_below)}
        return DevResult(scores, scores["mean"])

    return score


def _one_weight(value: float) -> dict[str, torch.Tensor]:
    return {"weight": torch.tensor([[value]]), "bias": torch.zeros(1)}


def test_the_best_mix_on_dev_is_chosen_and_loaded():
    model = torch.nn.Linear(1, 1)
    states = [_one_weight(1.0), _one_weight(0.0)]
    candidates = candidate_weights([0.7, 0.5, 0.3], 2)
    choice = choose_soup(model, states, NAMES, candidates, _dev_by_weight(0.5, -1), {"mean": 0, "english": 5},
                         DevSelection())  # fmt: skip
    assert choice.weights == (0.5, 0.5) and model.weight.item() == pytest.approx(0.5)
    assert set(choice.dev) == set(candidates) and all(choice.accepted.values())


def test_a_mix_the_rule_refuses_is_never_chosen_and_the_first_model_alone_always_may_be():
    model = torch.nn.Linear(1, 1)
    states = [_one_weight(1.0), _one_weight(0.0)]
    rule = DevSelection(rule="mean-no-regression", tolerance=0.3)
    start = {"mean": 0.0, "english": 5.0}
    # The mean prefers weight 0.3, but English falls below the start there and at 0.5.
    choice = choose_soup(model, states, NAMES, candidate_weights([0.5, 0.3], 2), _dev_by_weight(0.3, 0.6), start,
                         rule)  # fmt: skip
    assert choice.accepted == {(1.0, 0.0): True, (0.5, 0.5): False, (0.3, 0.7): False}
    assert choice.weights == (1.0, 0.0) and model.weight.item() == pytest.approx(1.0)


def _folder(root, name: str, pooling: dict, max_seq_length: int = 64):
    import json

    folder = root / name
    (folder / "1_Pooling").mkdir(parents=True)
    kinds = "sentence_transformers.models."
    modules = [{"idx": 0, "name": "0", "path": "", "type": kinds + "Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": kinds + "Pooling"}]  # fmt: skip
    (folder / "modules.json").write_text(json.dumps(modules))
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": max_seq_length}))
    return folder


def test_models_that_embed_differently_are_refused_before_any_average(tmp_path):
    mean, cls = {"pooling_mode_mean_tokens": True}, {"pooling_mode_cls_token": True}
    first = _folder(tmp_path, "a", mean)
    check_same_structure([first, _folder(tmp_path, "b", mean)], ["a", "b"])  # alike: no error
    with pytest.raises(SoupError, match="differ in 1_Pooling/config.json"):
        check_same_structure([first, _folder(tmp_path, "c", cls)], ["a", "c"])
    with pytest.raises(SoupError, match="differ in sentence_bert_config.json"):
        check_same_structure([first, _folder(tmp_path, "d", mean, max_seq_length=128)], ["a", "d"])


def test_the_models_own_state_is_copied_before_a_mix_is_loaded_into_it():
    model = torch.nn.Linear(1, 1)
    model.load_state_dict(_one_weight(1.0))
    states = [model.state_dict(), _one_weight(0.0)]  # the first shares the model's tensors
    candidates = candidate_weights([0.0, 0.5], 2)
    choice = choose_soup(model, states, NAMES, candidates, _dev_by_weight(0.5, -1), {"mean": 0, "english": 5},
                         DevSelection())  # fmt: skip
    assert choice.weights == (0.5, 0.5) and model.weight.item() == pytest.approx(0.5)
    assert states[0]["weight"].item() == pytest.approx(0.5), "the caller's state is the model's, now the mix"
