"""A soup's mixes on dev with languages that have no views added (RESULTS.md, "German on dev, a
probe"; issue 31.3): exported models of one start averaged at several weights and scored on dev
tasks plus stsb_multi_mt X-X and en-X (German by default) off the test split. No test figure is
computed.

    .venv/bin/python benchmarks/soup_de_dev_probe.py MODEL_DIR MODEL_DIR [MODEL_DIR ...]
        [--recipe recipes/combined-soup.yaml] [--recipe-dev] [--split dev|train] [--languages de nl]
        [--shares 1.0 0.8 0.7 0.6 0.5 0.4 0.3 0.0 | --mixes 0.2,0.4,0.4 0.5,0.5,0] [--json OUT]

`--shares` gives the first model's share, the rest split evenly among the others (what a
recipe's `soup.shares` means); `--mixes` gives every model's weight. The dev tasks are STS-B
dev and SICK trial, or with `--recipe-dev` the recipe's own dev tasks.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from viewmill.cpu import flags_label

ENGLISH = [
    '{name: stsb-dev, format: stsb, path: "data:stsbenchmark/sts-dev.csv"}',
    '{name: sick-trial, format: sick, path: "data:sick/SICK_trial.txt"}',
]


def unseen_tasks(split: str, languages: list[str]) -> list[str]:
    """stsb_multi_mt X-X and en-X for each language, on a split other than test (train: 5,749
    pairs, dev: 1,500)."""
    return [
        f'{{name: {a}-{b}-{split}, format: stsb-xling, path: "data:stsb_multi_mt", '
        f"lang_a: {a}, lang_b: {b}, split: {split}}}"
        for language in languages
        for a, b in ((language, language), ("en", language))
    ]


def parse_mixes(args: argparse.Namespace, models: int) -> list[tuple[float, ...]]:
    """Every model's weight in each mix to score; each mix sums to 1."""
    if args.mixes:
        mixes = [tuple(float(part) for part in text.split(",")) for text in args.mixes]
    else:
        mixes = [(share,) + ((1 - share) / (models - 1),) * (models - 1) for share in args.shares]
    for mix in mixes:
        if len(mix) != models or abs(sum(mix) - 1) > 1e-6:
            raise SystemExit(f"mix {mix}: give {models} weights that sum to 1, one per model")
    return mixes


def dev_overrides(recipe_path: Path, recipe_dev: bool, unseen: list[str]) -> list[str]:
    """The `train.dev` override: the recipe's own dev tasks (as flow-style YAML) or the English
    two, and the languages without views."""
    if not recipe_dev:
        return [f"train.dev=[{', '.join(ENGLISH + unseen)}]"]
    from viewmill.pipelines.recipe import load_recipe

    own = load_recipe(recipe_path).train.dev
    tasks = [json.dumps(task.model_dump(mode="json", exclude_defaults=True)) for task in own]
    return [f"train.dev=[{', '.join(tasks + unseen)}]"]


def main() -> None:
    from viewmill.pipelines.recipe import load_recipe
    from viewmill.pipelines.stages.train import dev_scorer
    from viewmill.train.encoder import load_sentence_model, resolve_encoder
    from viewmill.train.soup import average_weights

    parser = argparse.ArgumentParser()
    parser.add_argument("models", type=Path, nargs="+", help="exported models of one start, two or more")
    parser.add_argument("--recipe", type=Path, default=Path("recipes/combined-soup.yaml"))
    parser.add_argument("--recipe-dev", action="store_true", help="the recipe's own dev tasks, not STS-B and SICK")
    parser.add_argument("--shares", type=float, nargs="+", default=[1.0, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.0])
    parser.add_argument("--mixes", nargs="+", help="each a comma-separated weight per model, e.g. 0.2,0.4,0.4")
    parser.add_argument("--split", choices=["dev", "train"], default="dev", help="their split (never test)")
    parser.add_argument("--languages", nargs="+", default=["de"], help="languages without views, scored X-X and en-X")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if len(args.models) < 2:
        raise SystemExit("give two models or more")
    mixes = parse_mixes(args, len(args.models))
    print(f"CPU flags: {flags_label()}", flush=True)
    unseen = unseen_tasks(args.split, args.languages)
    recipe = load_recipe(args.recipe, dev_overrides(args.recipe, args.recipe_dev, unseen))
    score = dev_scorer(recipe.train.dev_tasks)
    models = [load_sentence_model(str(folder)) for folder in args.models]
    states = [{key: tensor.clone() for key, tensor in model.state_dict().items()} for model in models]
    names = [folder.name for folder in args.models]
    rows = {"start": score(load_sentence_model(resolve_encoder(recipe.train.encoder))).scores}
    print("start", rows["start"], flush=True)
    mixed = models[0]
    for mix in mixes:
        mixed.load_state_dict(average_weights(states, mix, names))
        mixed.eval()
        with torch.no_grad():
            rows[",".join(f"{weight:g}" for weight in mix)] = score(mixed).scores
        print(mix, rows[",".join(f"{weight:g}" for weight in mix)], flush=True)
    if args.json:
        setup = {"models": [str(folder) for folder in args.models], "recipe": str(args.recipe), "flags": flags_label()}
        args.json.write_text(json.dumps({"setup": setup, "dev": rows}, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
