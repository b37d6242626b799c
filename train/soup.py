"""Model soups: the weights of several fine-tunes of one start averaged, the mix chosen on dev.

Fine-tunes of one pretrained start stay in one basin of the loss, so their weights' average
often scores above each of them (Wortsman et al., 2022, "Model soups"). Each candidate mix is
scored on the dev tasks and the selection rule of training decides: a soup whose dev scores the
rule refuses is never exported, and the first ingredient alone is always a candidate, so a
soup is never chosen over it without a better dev score."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
from viewmill.train.dev_scores import DevResult, DevSelection


class SoupError(ValueError):
    """Models that cannot be averaged; the message names them and the fix."""


@dataclass(frozen=True)
class SoupChoice:
    weights: tuple[float, ...]  # each ingredient's weight in the chosen mix, in the ingredients' order
    dev: dict[tuple[float, ...], DevResult] = field(default_factory=dict)  # every candidate's dev scores
    accepted: dict[tuple[float, ...], bool] = field(default_factory=dict)  # whether the rule allowed it


def candidate_weights(shares: Sequence[float], ingredients: int) -> list[tuple[float, ...]]:
    """Each share of the first ingredient, the rest split evenly among the others; the first
    ingredient alone comes first, so it is the candidate a tie keeps."""
    if ingredients < 2:
        raise SoupError(f"a soup needs two models or more, got {ingredients}")
    others = ingredients - 1
    mixes = [(1.0,) + (0.0,) * others]
    for share in shares:
        mix = (float(share),) + ((1.0 - share) / others,) * others
        if mix not in mixes:
            mixes.append(mix)
    return mixes


def check_same_structure(folders: Sequence[Path], names: Sequence[str]) -> None:
    """Refuse models an average would silently give the first one's settings: other module
    classes (pooling, normalisation), another module's settings (CLS or mean pooling) or another
    truncation length (`sentence_bert_config.json`)."""
    first = _structure(folders[0])
    for folder, name in zip(folders[1:], names[1:], strict=True):
        for what, (mine, theirs) in _pairs(first, _structure(folder)):
            if mine != theirs:
                raise SoupError(
                    f"{name} and {names[0]} differ in {what} ({theirs} against {mine}): a soup averages weights, "
                    "so both must compute embeddings the same way; train them with the same objective and settings"
                )


def _structure(folder: Path) -> dict[str, object]:
    """The settings that decide what a sentence-transformers folder computes besides its weights."""
    modules = (
        json.loads((folder / "modules.json").read_text(encoding="utf-8")) if (folder / "modules.json").is_file() else []
    )
    found: dict[str, object] = {"modules.json": [m["type"].rsplit(".", 1)[-1] for m in modules]}
    for module in modules:
        config = folder / module.get("path", "") / "config.json"
        if module.get("path") and config.is_file():  # the transformer's own config.json is its architecture
            found[f"{module['path']}/config.json"] = json.loads(config.read_text(encoding="utf-8"))
    settings = folder / "sentence_bert_config.json"
    if settings.is_file():
        found["sentence_bert_config.json"] = json.loads(settings.read_text(encoding="utf-8"))
    return found


def _pairs(first: dict[str, object], other: dict[str, object]):
    return ((key, (first.get(key), other.get(key))) for key in dict.fromkeys([*first, *other]))


def average_weights(
    states: Sequence[Mapping[str, torch.Tensor]], weights: Sequence[float], names: Sequence[str]
) -> dict[str, torch.Tensor]:
    """The weighted average of same-shaped state dicts, in the first one's dtypes; tensors that
    are not floating point (position ids) must be equal in every model and are kept."""
    first = states[0]
    for state, name in zip(states[1:], names[1:], strict=True):
        if state.keys() != first.keys():
            odd = sorted(set(state) ^ set(first))[:3]
            raise SoupError(
                f"{name} and {names[0]} are not the same architecture (tensors {', '.join(odd)} differ): "
                "a soup averages fine-tunes of one start; remove one of them"
            )
    averaged = {}
    for key, tensor in first.items():
        parts = [state[key] for state in states]
        if any(part.shape != tensor.shape for part in parts):
            shapes = ", ".join(f"{n} {tuple(p.shape)}" for n, p in zip(names, parts, strict=True))
            raise SoupError(f"tensor {key} has different shapes ({shapes}): these are not fine-tunes of one start")
        if not tensor.is_floating_point():
            if any(not torch.equal(part, tensor) for part in parts):
                raise SoupError(f"tensor {key} differs between {', '.join(names)} and cannot be averaged")
            averaged[key] = tensor.clone()
            continue
        total = sum(weight * part.to(torch.float32) for weight, part in zip(weights, parts, strict=True))
        averaged[key] = total.to(tensor.dtype)
    return averaged


def choose_soup(
    model: torch.nn.Module,
    states: Sequence[Mapping[str, torch.Tensor]],
    names: Sequence[str],
    candidates: Sequence[tuple[float, ...]],
    dev: Callable[[torch.nn.Module], DevResult],
    start_scores: Mapping[str, float],
    rule: DevSelection,
    on_scored: Callable[[tuple[float, ...], DevResult], None] | None = None,
) -> SoupChoice:
    """Score each candidate mix on dev with its weights loaded into `model` (a state sharing its
    tensors, such as its own `state_dict()`, is copied first, or the first mix would overwrite it); the best selection
    score among the mixes the rule accepts wins (the first candidate: the first ingredient alone,
    already chosen by its own training's rule). `model` is left holding the winner's weights;
    `on_scored` is told each mix's scores as they come."""
    live = {tensor.data_ptr() for tensor in model.state_dict().values()}  # each mix is loaded into these
    states = [{key: t.clone() if t.data_ptr() in live else t for key, t in state.items()} for state in states]
    results: dict[tuple[float, ...], DevResult] = {}
    accepted: dict[tuple[float, ...], bool] = {}
    best: tuple[float, ...] | None = None
    for mix in candidates:
        model.load_state_dict(average_weights(states, mix, names))
        model.eval()
        with torch.no_grad():
            results[mix] = dev(model)
        accepted[mix] = mix == candidates[0] or rule.accepts(start_scores, results[mix].scores)
        if on_scored is not None:
            on_scored(mix, results[mix])
        if accepted[mix] and (best is None or results[mix].score > results[best].score):
            best = mix
    assert best is not None  # the first candidate is always accepted
    model.load_state_dict(average_weights(states, best, names))
    return SoupChoice(best, results, accepted)
