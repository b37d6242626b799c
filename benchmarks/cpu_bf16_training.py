"""bf16 autocast against float32 for the demo's training on CPU (issue 24.7): step time and
the trained model's STS-B dev Spearman.

The BSL demo's train block (recipes/demo-bsl.yaml, the demo until 2026-11-27: BSL,
all-MiniLM-L6-v2, 64 pairs a step, max length 64, 120 steps of which 40 warm the predictor
up) on that demo's own pairs snapshot, built by the library into a temporary state
directory (or reused from `--state-dir`), with the loop's own batch plan, tokenisation and training step
(`viewmill.train.optimisation.train_step`, BSL's EMA update after it). Both runs train side
by side in one process: blocks of `--block` steps alternate between them (which one goes
first alternates too), so machine noise hits both; each run keeps its own random generator
(dropout), so it is the run it would be alone. The exported models are the last step's
weights (no dev selection), scored on STS-B dev as training's dev selection scores them.

    .venv/bin/python benchmarks/cpu_bf16_training.py [--block 10] [--eval-every 0] [--state-dir DIR]
        [--set train.steps=4 --set train.head_warmup_steps=2]   # recipe overrides, for a quick look
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch
from viewmill.pipelines.context import RunContext
from viewmill.pipelines.recipe import load_recipe
from viewmill.pipelines.run import run_recipe
from viewmill.pipelines.state import StatePaths
from viewmill.storage.snapshots import read_pairs
from viewmill.train.assembly import prepare
from viewmill.train.batches import PairTexts, batches, tokenize, training_texts
from viewmill.train.config import TrainConfig
from viewmill.train.encoder import resolve_encoder
from viewmill.train.evaluation.sts import StsData, concatenated, load_task, model_scores
from viewmill.train.loop import seed_everything
from viewmill.train.objectives import OBJECTIVES
from viewmill.train.optimisation import make_optimizer, train_step

from viewmill.cpu import cpu_flags, cpu_has_bf16, flags_label

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Run:
    """One precision's training run, stepped a block at a time."""

    precision: str
    config: TrainConfig
    objective: torch.nn.Module
    exported: object
    tokenizer: object
    optimizer: torch.optim.Optimizer
    rng: torch.Tensor  # this run's torch generator state between its blocks
    step: int = 0
    times: list[float] = field(default_factory=list)  # seconds per train_step
    losses: list[float] = field(default_factory=list)
    dev: list[tuple[int, float]] = field(default_factory=list)  # (step, STS-B dev Spearman x100)

    @classmethod
    def start(cls, config: TrainConfig, base: str) -> Run:
        seed_everything(config.seed)  # as train_model does: same start for both runs
        objective, exported, tokenizer = prepare(config, base, "cpu")
        objective.train()
        return cls(config.precision, config, objective, exported, tokenizer, make_optimizer(config, objective),
                   torch.get_rng_state())  # fmt: skip

    def block(self, source: PairTexts, plan: list[list[int]]) -> float:
        """Train the next steps of `plan`; their summed train_step seconds."""
        torch.set_rng_state(self.rng)
        hook = OBJECTIVES.get(self.config.objective).after_step
        after = (lambda: hook(self.objective, self.config, self.step)) if hook else None
        spent = 0.0
        for index in plan:
            self.step += 1
            batch = tokenize(self.tokenizer, source.texts(index), self.config)
            start = time.perf_counter()
            loss = train_step(self.objective, self.optimizer, batch, len(index), precision=self.precision,
                              train_encoder=self.step > self.config.head_warmup_steps, after_step=after)  # fmt: skip
            self.times.append(time.perf_counter() - start)
            spent += self.times[-1]
            self.losses.append(loss)
        self.rng = torch.get_rng_state()
        return spent

    def score(self, dev: StsData) -> float:
        """STS-B dev Spearman x100 of the current weights (eval mode, float32: the weights as exported)."""
        self.objective.eval()
        with torch.no_grad():
            value = model_scores(self.exported, {"stsb-dev": dev})["stsb-dev"]
        self.objective.train()
        self.dev.append((self.step, value))
        return value


def header() -> str:
    names = [line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
             if line.startswith("model name")] or ["unknown CPU"]  # fmt: skip
    flags = cpu_flags()
    bf16 = ", ".join(flag for flag in ("avx512_bf16", "amx_bf16", "amx_tile", "avx512f") if flag in flags) or "none"
    return (f"CPU: {names[0]}, {len(names)} logical CPUs, torch {torch.__version__}, "
            f"{torch.get_num_threads()} threads, load average {os.getloadavg()[0]:.2f} at start\n"
            f"flags: {flags_label(flags)}\n"
            f"bf16 flags: {bf16}; cpu_has_bf16() = {cpu_has_bf16(flags)}")  # fmt: skip


def demo_pairs(recipe_path: str, overrides: list[str], state_dir: Path):
    """The recipe's pairs snapshot, made (or found) by the library in `state_dir`."""
    ctx = RunContext(load_recipe(recipe_path, overrides), StatePaths(state_dir))
    snapshot = run_recipe(ctx, train=False)["snapshot"]["name"]
    with ctx.lake(read_only=True) as lake:
        return ctx.recipe, read_pairs(lake, snapshot)


def spread(values: list[float], scale: float = 1.0) -> str:
    return " / ".join(f"{scale * v:.1f}" for v in (min(values), statistics.median(values), max(values)))


def ratio_spread(ratios: list[float]) -> str:
    return " / ".join(f"{r:.2f}x" for r in (min(ratios), statistics.median(ratios), max(ratios)))


def report(runs: list[Run], ratios: list[float], warmup: int, start_dev: float) -> None:
    fp32, other = runs
    print(f"\nstep time (train_step only), ms, min / median / max over {len(fp32.times)} steps each:")
    for run in runs:
        head, both = run.times[:warmup], run.times[warmup:]
        phases = f"head warm-up steps: {spread(head, 1000)}; encoder steps: " if head else ""
        print(f"  {run.precision}: {spread(run.times, 1000)}  ({phases}{spread(both, 1000)}); "
              f"{sum(run.times):.1f} s in all")  # fmt: skip
    ratio = statistics.median(fp32.times) / statistics.median(other.times)
    steps = [a / b for a, b in zip(fp32.times, other.times, strict=True)]  # step i: one batch shape for both
    print(f"  fp32 / {other.precision}: median step time {ratio:.2f}x; min / median / max of the paired blocks "
          f"{ratio_spread(ratios)}, of the paired steps {ratio_spread(steps)}")  # fmt: skip
    print(f"\nSTS-B dev Spearman x100 (start: {start_dev:.2f}):")
    for run in runs:
        trail = ", ".join(f"step {step}: {value:.2f}" for step, value in run.dev)
        print(f"  {run.precision}: {trail}; loss first {run.losses[0]:.4f}, last {run.losses[-1]:.4f}")
    print(f"  {other.precision} - fp32 at the last step: {other.dev[-1][1] - fp32.dev[-1][1]:+.3f}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--recipe", default=str(ROOT / "recipes" / "demo-bsl.yaml"))
    parser.add_argument("--state-dir", help="reuse (or keep) the demo's lake here; default: a temporary one")
    parser.add_argument("--block", type=int, default=10, help="steps per interleaved block")
    parser.add_argument(
        "--eval-every", type=int, default=0, help="score STS-B dev every N steps too (N: a multiple of --block)"
    )
    parser.add_argument("--set", action="append", default=[], help="recipe override, e.g. train.steps=4")
    args = parser.parse_args()
    print(header(), flush=True)
    with tempfile.TemporaryDirectory(prefix="viewmill-bf16-") as tmp:
        recipe, table = demo_pairs(args.recipe, args.set, Path(args.state_dir or tmp))
    spec = recipe.train
    dev = concatenated(load_task(next(task for task in spec.dev_tasks if task.name == "stsb-dev")))
    # The demo's train block, exporting the last step (no dev selection): training's own outcome.
    settings = spec.model_dump(exclude_unset=True, exclude={"encoder", "dev", "eval_every", "keep_best", "selection"})
    configs = [TrainConfig(**{**settings, "precision": p}) for p in ("fp32", "bf16")]
    config = configs[0]
    keys = table["sentence_id"].to_pylist()
    source = training_texts(table, config.objective)
    plan = batches(source.lengths(), config.batch_size, config.steps, config.seed, keys=keys)
    print(f"{config.objective}, {spec.encoder}, {len(source)} pairs, {config.steps} steps of {config.batch_size} "
          f"pairs, max length {config.max_length}, head warm-up {config.head_warmup_steps} steps; blocks of "
          f"{args.block} steps alternating fp32 / bf16", flush=True)  # fmt: skip
    base = resolve_encoder(spec.encoder)
    runs = [Run.start(c, base) for c in configs]
    start_dev = runs[0].score(dev)
    runs[0].dev.clear()
    ratios = []
    for i, first in enumerate(range(0, config.steps, args.block)):
        seconds = {}
        for run in runs if i % 2 == 0 else runs[::-1]:
            seconds[run.precision] = run.block(source, plan[first : first + args.block])
            if args.eval_every and run.step % args.eval_every == 0 and run.step < config.steps:
                run.score(dev)
        ratios.append(seconds["fp32"] / seconds["bf16"])
        print(f"  steps {first + 1}-{runs[0].step}: " + ", ".join(f"{p} {s:.1f} s" for p, s in seconds.items()),
              flush=True)  # fmt: skip
    for run in runs:
        run.score(dev)
    report(runs, ratios, config.head_warmup_steps, start_dev)
    print(f"\nload average at the end: {os.getloadavg()[0]:.2f} (the CPU is shared: see the header)")


if __name__ == "__main__":
    main()
