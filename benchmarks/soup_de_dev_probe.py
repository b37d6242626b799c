"""A soup's mixes on dev with German added (RESULTS.md, "German on dev, a probe"; issue 31.3):
two exported models averaged at several shares and scored on a recipe's dev tasks plus
stsb_multi_mt de-de and en-de dev. Dev only: no test figure is computed.

    .venv/bin/python benchmarks/soup_de_dev_probe.py OWN_MODEL_DIR OTHER_MODEL_DIR
        [--recipe recipes/combined-soup.yaml] [--shares 1.0 0.8 0.7 0.6 0.5 0.4 0.3 0.0] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from viewmill.cpu import flags_label

GERMAN = [
    '{name: de-de-dev, format: stsb-xling, path: "data:stsb_multi_mt", lang_a: de, lang_b: de, split: dev}',
    '{name: en-de-dev, format: stsb-xling, path: "data:stsb_multi_mt", lang_a: en, lang_b: de, split: dev}',
]
ENGLISH = [
    '{name: stsb-dev, format: stsb, path: "data:stsbenchmark/sts-dev.csv"}',
    '{name: sick-trial, format: sick, path: "data:sick/SICK_trial.txt"}',
]


def main() -> None:
    from viewmill.pipelines.recipe import load_recipe
    from viewmill.pipelines.stages.train import dev_scorer
    from viewmill.train.encoder import load_sentence_model, resolve_encoder
    from viewmill.train.soup import average_weights

    parser = argparse.ArgumentParser()
    parser.add_argument("own", type=Path, help="the recipe's own exported model")
    parser.add_argument("other", type=Path, help="the other model of the soup")
    parser.add_argument("--recipe", type=Path, default=Path("recipes/combined-soup.yaml"))
    parser.add_argument("--shares", type=float, nargs="+", default=[1.0, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.0])
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    print(f"CPU flags: {flags_label()}", flush=True)
    recipe = load_recipe(args.recipe, [f"train.dev=[{', '.join(ENGLISH + GERMAN)}]"])
    score = dev_scorer(recipe.train.dev_tasks)
    own, other = load_sentence_model(str(args.own)), load_sentence_model(str(args.other))
    states = [{key: tensor.clone() for key, tensor in own.state_dict().items()}, other.state_dict()]
    rows = {"start": score(load_sentence_model(resolve_encoder(recipe.train.encoder))).scores}
    print("start", rows["start"], flush=True)
    for share in args.shares:
        own.load_state_dict(average_weights(states, (share, 1 - share), ["own", "other"]))
        own.eval()
        with torch.no_grad():
            rows[str(share)] = score(own).scores
        print(share, rows[str(share)], flush=True)
    if args.json:
        setup = {"own": str(args.own), "other": str(args.other), "recipe": str(args.recipe), "flags": flags_label()}
        args.json.write_text(json.dumps({"setup": setup, "dev": rows}, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
