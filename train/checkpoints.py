"""Training checkpoints that load without running code.

Model weights go to safetensors (a flat tensor format, no pickle); the rest of the state
(optimiser, loss scaler, random generators, progress) to a torch file holding only
tensors and plain Python values, loaded with `weights_only=True`. A crafted checkpoint
therefore fails to load, with a message, instead of executing.
"""

from __future__ import annotations

import pickle
import random
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_model, save_model
from torch import nn
from viewmill.train.dev_scores import DevResult
from viewmill.train.manifest import ExportError, is_disk_full


class CheckpointError(RuntimeError):
    """A checkpoint cannot be loaded safely; the message names it and the fix."""


class CheckpointWriteError(ExportError):
    """A checkpoint that could not be written (a full disk); the message names the folder and the fix."""


def _numpy_state() -> dict[str, Any]:
    name, keys, pos, has_gauss, cached = np.random.get_state()
    return {"name": name, "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
            "has_gauss": int(has_gauss), "cached_gaussian": float(cached)}  # fmt: skip


def _set_numpy_state(state: dict[str, Any]) -> None:
    keys = state["keys"].numpy().astype(np.uint32)
    np.random.set_state((state["name"], keys, state["pos"], state["has_gauss"], state["cached_gaussian"]))


def load_state_file(path: Path) -> Any:
    """A torch file of tensors and plain values; anything else (pickled objects, code) is refused."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, AttributeError, TypeError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CheckpointError(
            f"checkpoint {path} is not a plain weights-and-values file and was not loaded ({first[:160]}): "
            f"delete {path.parent} to start this training from scratch"
        ) from None


@dataclass
class RunState:
    step: int = 0
    losses: list[float] = field(default_factory=list)
    evals: list[tuple[int, float]] = field(default_factory=list)  # (step, selection score; one task: its score)
    best_step: int | None = None
    task_evals: dict[str, list[tuple[int, float]]] = field(default_factory=dict)  # each dev task's (step, score)

    def record(self, step: int, result: DevResult, exported, checkpoints: Checkpoints, *, accepted: bool) -> None:
        """One dev evaluation; the state becomes the best when the rule `accepted` it and its
        selection score beats the best so far (the first of equals stays)."""
        self.evals.append((step, result.score))
        for task, score in result.scores.items():
            self.task_evals.setdefault(task, []).append((step, score))
        if accepted and (self.best_step is None or result.score > dict(self.evals)[self.best_step]):
            self.best_step = step
            checkpoints.save_best(exported)

    def task_scores_at(self, step: int) -> dict[str, float]:
        return {task: dict(evals)[step] for task, evals in self.task_evals.items() if step in dict(evals)}

    def evals_since_best(self) -> int:
        return sum(1 for step, _ in self.evals if self.best_step is not None and step > self.best_step)


class Checkpoints:
    """Resumable training state and the best dev-scored weights, in one folder per model.

    `state.pt` names the weights file of its step; a new step's weights are written before
    it and older ones removed after, so a kill at any moment leaves a consistent pair.
    """

    def __init__(self, folder: Path, key: str) -> None:
        self.folder, self.key = folder, key

    def _write(self, name: str, payload: dict) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        partial = self.folder / f".{name}.partial"
        with self._whole(partial):
            torch.save(payload, partial)
            partial.replace(self.folder / name)  # a checkpoint is whole or absent, even if killed while saving

    def save(self, state: RunState, objective: nn.Module, optimizer, scaler) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        weights = f"objective-{state.step}.safetensors"
        partial = self.folder / f".{weights}.partial"
        with self._whole(partial, self.folder / weights):
            save_model(objective, str(partial))  # handles tied (shared) tensors
            partial.replace(self.folder / weights)
            self._write("state.pt", {
                "key": self.key, "run": asdict(state), "weights": weights,
                "optimizer": optimizer.state_dict(), "scaler": scaler.state_dict() if scaler else None,
                "rng": {"torch": torch.get_rng_state(), "numpy": _numpy_state(), "python": random.getstate()},
            })  # fmt: skip
        for old in self.folder.glob("objective-*.safetensors"):
            if old.name != weights:
                old.unlink()

    @contextmanager
    def _whole(self, *new: Path) -> Iterator[None]:
        """Remove the `new` files when writing them fails, so only whole checkpoints stay; a full
        disk becomes one CheckpointWriteError naming the folder, the step kept and the fix."""
        try:
            yield
        except BaseException as exc:
            for path in new:
                path.unlink(missing_ok=True)
            if isinstance(exc, CheckpointWriteError) or not is_disk_full(exc):
                raise
            raise CheckpointWriteError(
                f"no space left on device while writing a training checkpoint to {self.folder}: the partial "
                f"checkpoint was removed and {self._kept()}; free space there (df -h {self.folder.parent}) or move "
                "the state directory to a larger disk, then run again"
            ) from exc

    def _kept(self) -> str:
        path = self.folder / "state.pt"
        if not path.is_file():
            return "no earlier checkpoint was written, so training starts over"
        step = load_state_file(path)["run"]["step"]
        return f"the last whole checkpoint (step {step}) is kept: training resumes there"

    def restore(self, objective: nn.Module, optimizer, scaler) -> RunState | None:
        """The saved run state, after loading weights, optimiser, scaler and random
        generators into place; None when there is no checkpoint of this configuration."""
        path = self.folder / "state.pt"
        if not path.is_file():
            return None
        saved = load_state_file(path)
        if not isinstance(saved, dict) or saved.get("key") != self.key:  # another configuration's leftovers
            self.clear()
            return None
        weights = self.folder / str(saved.get("weights", ""))
        if not weights.is_file() or weights.parent != self.folder:
            raise CheckpointError(f"checkpoint {path} names weights {weights} that are missing: delete {self.folder}")
        missing, unexpected = load_model(objective, str(weights), strict=False)
        if missing or unexpected:
            raise CheckpointError(
                f"checkpoint {weights} does not fit this model ({len(missing)} missing, {len(unexpected)} "
                f"unexpected tensors): delete {self.folder} to start this training from scratch"
            )
        optimizer.load_state_dict(saved["optimizer"])
        if scaler is not None and saved["scaler"] is not None:
            scaler.load_state_dict(saved["scaler"])
        torch.set_rng_state(saved["rng"]["torch"])
        _set_numpy_state(saved["rng"]["numpy"])
        random.setstate(_as_tuples(saved["rng"]["python"]))
        return _run_state(saved["run"], path)

    def save_best(self, exported) -> None:
        self._write("best.pt", {k: v.detach().cpu().clone() for k, v in exported.state_dict().items()})

    def best_weights(self) -> dict:
        return load_state_file(self.folder / "best.pt")

    def clear(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


def _run_state(run: dict[str, Any], path: Path) -> RunState:
    if run["evals"] and "task_evals" not in run:
        raise CheckpointError(
            f"checkpoint {path} holds dev scores without their tasks (written before per-task dev records): "
            f"delete {path.parent} to start this training from scratch"
        )
    tasks = {task: [tuple(e) for e in evals] for task, evals in run.get("task_evals", {}).items()}
    return RunState(run["step"], run["losses"], [tuple(e) for e in run["evals"]], run["best_step"], tasks)


def _as_tuples(value: Any) -> Any:
    # random.setstate needs tuples all the way down
    return tuple(_as_tuples(v) for v in value) if isinstance(value, list | tuple) else value
