"""The whole pipeline at several corpus sizes (issue 32.1): one recipe run end to end, then the
views report, a full `lake verify` and an export, each timed, with `viewmill plan`'s estimate
beside what was measured (issue 32.3).

The corpus is benchmarks/ingest.py's generated English (`write_corpus`: natural word
frequencies, BookCorpus-like lengths, duplicates, too short and long sentences), by default as
a book. The recipes are `scale_recipes.py`'s: `full` (Apertium en>es and en>es>en, the meaning
filter, mined negatives, training and evaluation) and `cheap` (identity and a plugin engine:
the pipeline's own machinery). Every command is its own process in a fresh state folder:
`viewmill plan RECIPE --format json`, `viewmill run RECIPE --no-prefect`, `viewmill views
report`, `viewmill lake verify`, `viewmill lake export --layout sentence-transformers`. Per
stage of the run, the seconds are the run's own (`runs.timings`); a stage's peak RSS is the
largest resident memory of the run's process tree (its Apertium pipes included) sampled every
0.1 s inside the stage's window, and a process's peak is its VmHWM (wait4's ru_maxrss: the
process or, if larger, a child it waited for). With `full`, the engine alone (Apertium en>es
and es>en over the run's sentences, as the pipeline's chunks) and the meaning encoder alone
(each distinct text embedded once) are timed in another process, so that the pipeline's
overhead on top of them is printed. Growth is the median seconds over the previous size's.

    .venv/bin/python benchmarks/pipeline_scale.py [--sizes 10000 100000 1000000]
        [--profile full|cheap] [--format book|text] [--steps 20] [--repeats 3] [--json OUT] [--before REF]

With --before REF (e.g. HEAD), each repeat also runs the same commands with that commit's
viewmill (its tree unpacked, as `cli_startup.py --before` runs it) in a fresh state folder right
after this one's, and prints the paired ratios before/now of augment and the whole run.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psutil
from cli_startup import old_cli
from ingest import write_corpus  # benchmarks/ingest.py's generated English
from scale_recipes import PROFILES, install_plugin, recipe

from viewmill.cpu import cpu_cores, flags_label

# The installed command, or the module where viewmill runs from a checkout (the lent GPU box).
_INSTALLED = Path(sys.executable).with_name("viewmill")
VIEWMILL = [str(_INSTALLED)] if _INSTALLED.exists() else [sys.executable, "-m", "viewmill.pipelines.cli.app"]
RUN_STAGES = ("preflight", "ingest", "augment", "pair", "train", "evaluate")  # the order a run takes them
CHUNK = 512  # Apertium alone takes batches of 512 (the pipeline's first commit)
SAMPLE_S = 0.1


def tree_rss(process: psutil.Process) -> int:
    """Resident bytes of a process and its children now (0 once it is gone)."""
    total = 0
    try:
        for each in [process, *process.children(recursive=True)]:
            total += each.memory_info().rss
    except psutil.Error:
        pass
    return total


def timed_process(args: list[str], env: dict[str, str]) -> dict:
    """Run `args`, sampling its tree's RSS; its seconds, VmHWM, samples and output."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        child = subprocess.Popen(args, stdout=out, stderr=err, env=env)
        watched, samples = psutil.Process(child.pid), []
        while True:
            pid, status, usage = os.wait4(child.pid, os.WNOHANG)
            if pid:
                break
            samples.append((time.time(), tree_rss(watched)))
            time.sleep(SAMPLE_S)
        seconds = time.perf_counter() - start
        child.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0), err.seek(0)
        stdout, stderr = out.read().decode(), err.read().decode()
    if child.returncode:
        raise SystemExit(f"{' '.join(args)} failed ({child.returncode}):\n{stderr[-4000:]}")
    peak = max([usage.ru_maxrss * 1024, *(rss for _, rss in samples)])
    return {"seconds": seconds, "peak_rss": peak, "samples": samples, "stdout": stdout}


def run_record(state: Path) -> dict:
    """The run's timings, counts and start, its snapshot, and the bytes of its lake's Parquet files."""
    from viewmill.storage.lake import open_lake

    from viewmill.settings import Settings

    with open_lake(Settings(), state / "lake", read_only=True) as lake:
        row = lake.arrow(
            "SELECT timings::VARCHAR AS timings, counts::VARCHAR AS counts, epoch(started_at) AS started "
            "FROM runs WHERE status = 'succeeded' ORDER BY started_at DESC LIMIT 1"
        ).to_pylist()[0]
        snapshot = lake.arrow("SELECT snapshot, n_pairs FROM snapshots ORDER BY created_at DESC LIMIT 1").to_pylist()[0]
    files = list((state / "lake").rglob("*.parquet"))  # what a full verify hashes
    return {"timings": json.loads(row["timings"]), "counts": json.loads(row["counts"]), "started": row["started"],
            "snapshot": snapshot["snapshot"], "pairs": snapshot["n_pairs"],
            "lake_bytes": sum(f.stat().st_size for f in files)}  # fmt: skip


def stage_rows(record: dict, spec: dict) -> dict[str, int]:
    """What each stage of the run handled: sentences, views made, pairs, training pairs."""
    counts = record["counts"]
    views = sum(v.get("new_views", 0) for k, v in counts.items() if k.startswith("views."))
    train = spec.get("train") or {}
    return {"ingest": counts.get("sentences", 0), "augment": views, "pair": record["pairs"],
            "train": train.get("steps", 0) * train.get("batch_size", 0)}  # fmt: skip


def stage_peaks(record: dict, samples: list[tuple[float, int]]) -> dict[str, int]:
    """Each stage's largest sampled RSS, its window laid from the run's start by its seconds
    (`before`: the process's start and preflight, until the run's row is begun)."""
    start = record["started"]
    peaks = {"before": max((rss for t, rss in samples if t < start), default=0)}
    for stage in RUN_STAGES:
        if stage not in record["timings"]:
            continue
        end = start + record["timings"][stage]
        peaks[stage] = max((rss for t, rss in samples if start <= t <= end), default=0)
        start = end
    return peaks


def one_run(workdir: Path, corpus: Path, args: argparse.Namespace, env: dict[str, str],
            viewmill: list[str] = VIEWMILL, alone: bool = True) -> dict:  # fmt: skip
    """Plan, run, report, verify and export in a fresh state folder with the `viewmill` command;
    every figure of one repeat. `alone`: time the engines alone too (full profile)."""
    models = {"mt": str(args.mt_model), "encoder": str(args.encoder), "device": args.device} if args.mt_model else None
    state, spec = workdir / "state", recipe(args.profile, corpus, args.format, args.steps, models=models)
    if args.no_embedding_store and spec["pair"].get("negatives", {}).get("source") == "mined":
        spec["pair"]["negatives"]["store"] = False  # mining embeds every text itself, as before the store
    workdir.mkdir()
    recipe_path = workdir / "recipe.yaml"
    recipe_path.write_text(json.dumps(spec), encoding="utf-8")  # JSON is YAML
    on_state = ["--state-dir", str(state)]
    plan_run = timed_process([*viewmill, "plan", str(recipe_path), "--format", "json", *on_state], env)
    plan = json.loads(plan_run["stdout"])
    run = timed_process([*viewmill, "run", str(recipe_path), "--no-prefect", *on_state], env)
    record = run_record(state)
    rows, peaks = stage_rows(record, spec), stage_peaks(record, run["samples"])
    stages = {s: {"seconds": record["timings"][s], "rows": rows.get(s), "peak_rss": peaks[s]}
              for s in RUN_STAGES if s in record["timings"]}  # fmt: skip
    # Before the run's stages: the process's start, the recipe's parse and preflight's checks.
    before = {"seconds": run["seconds"] - record["timings"]["total"], "rows": None, "peak_rss": peaks.pop("before")}
    stages["start + preflight"] = before
    stages["run (process)"] = {"seconds": run["seconds"], "rows": rows["ingest"], "peak_rss": run["peak_rss"]}
    for key, name in (("train_first_step", "train: start to first step"), ("train_step", "train: a step")):
        if key in record["timings"]:  # within train's window: its start-up on the snapshot, and a step
            stages[name] = {"seconds": record["timings"][key], "rows": None, "peak_rss": peaks["train"]}
    commands = {
        "views report": (["views", "report", "--out", str(workdir / "report")], rows["augment"]),
        "lake verify": (["lake", "verify"], record["lake_bytes"]),
        "lake export": (["lake", "export", record["snapshot"], str(workdir / "st.parquet"),
                         "--layout", "sentence-transformers"], record["pairs"]),
    }  # fmt: skip
    if importlib.util.find_spec("polars") is None:  # the lent GPU box: polars's wheel does not travel there
        print("views report: skipped (polars is not installed)", flush=True)
        del commands["views report"]
    for name, (command, handled) in commands.items():
        done = timed_process([*viewmill, *command, *on_state], env)
        stages[name] = {"seconds": done["seconds"], "rows": handled, "peak_rss": done["peak_rss"]}
    stages["plan (process)"] = {"seconds": plan_run["seconds"], "rows": None, "peak_rss": plan_run["peak_rss"]}
    if args.profile == "full" and alone:
        alone = timed_process([sys.executable, __file__, "--alone", str(state)], env)
        stages.update(json.loads(alone["stdout"].strip().splitlines()[-1]))
    return {"stages": stages, "plan": plan, "counts": record["counts"], "timings": record["timings"]}


def engines_alone(state: Path) -> dict[str, dict]:
    """Apertium en>es then es>en over the run's sentences in the pipeline's chunks, and the
    meaning encoder over every distinct text the filter judged (sentences and views), once each,
    in calls of the filter's chunk."""
    from viewmill.augment.apertium import ApertiumEngine
    from viewmill.augment.commit_sizes import MEANING_FIXED_SENTENCES
    from viewmill.augment.engines import DecodingSpec
    from viewmill.augment.meaning import MeaningSpec
    from viewmill.pipelines.stages.augment import meaning_judge
    from viewmill.storage.lake import open_lake

    from viewmill.settings import Settings

    with open_lake(Settings(), state / "lake", read_only=True) as lake:
        sentences = lake.arrow("SELECT text FROM sentences ORDER BY sentence_id")["text"].to_pylist()
        texts = lake.arrow("SELECT DISTINCT text FROM (SELECT text FROM sentences UNION SELECT text FROM views)")
    decoding, start = DecodingSpec(), time.perf_counter()
    text = sentences
    for src, tgt in (("en", "es"), ("es", "en")):
        engine = ApertiumEngine(src, tgt)
        text = [
            h[0] for i in range(0, len(text), CHUNK) for h in engine.translate(text[i : i + CHUNK], src, tgt, decoding)
        ]
        engine.close()
    translated = time.perf_counter() - start
    embed = meaning_judge(MeaningSpec()).embed
    distinct = texts["text"].to_pylist()
    start = time.perf_counter()
    for i in range(0, len(distinct), MEANING_FIXED_SENTENCES):
        embed(distinct[i : i + MEANING_FIXED_SENTENCES])
    embedded = time.perf_counter() - start
    peak = psutil.Process().memory_info().rss  # VmRSS now; VmHWM below
    peak = max(peak, int(Path("/proc/self/status").read_text().split("VmHWM:")[1].split()[0]) * 1024)
    return {"apertium alone": {"seconds": translated, "rows": 2 * len(sentences), "peak_rss": peak},
            "encoder alone": {"seconds": embedded, "rows": len(distinct), "peak_rss": peak}}  # fmt: skip


def gathered(runs: list[dict]) -> dict[str, dict]:
    """Per stage over the repeats: each repeat's seconds, the rows, the largest peak RSS."""
    out: dict[str, dict] = {}
    for run in runs:
        for stage, figures in run["stages"].items():
            entry = out.setdefault(stage, {"seconds": [], "rows": figures["rows"], "peak_rss": 0})
            entry["seconds"].append(figures["seconds"])
            entry["peak_rss"] = max(entry["peak_rss"], figures["peak_rss"])
    return out


def planned(plan: dict, gpu: bool = False) -> dict[str, float]:
    """The plan's seconds per stage; its whole-run total beside the run's process. `gpu`: its
    GPU column where it measured one (the `gpu` profile trains on the GPU)."""

    def seconds(row: dict) -> float:
        on_gpu = row["gpu_seconds"]
        return on_gpu if gpu and isinstance(on_gpu, int | float) else row["seconds"]

    stages = {"start + preflight" if s["stage"] == "preflight" else s["stage"]: seconds(s) for s in plan["stages"]}
    return stages | {"run (process)": seconds(plan["total"])}


def spread(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return " / ".join(f"{v:.2f}" for v in (min(values), statistics.median(values), max(values)))


def handled(stage: str, rows: int | None, seconds: float) -> tuple[str, str]:
    """Rows and rows/s as printed; verify's rows are the lake's bytes (MB and MB/s)."""
    if rows is None:
        return "", ""
    if stage == "lake verify":
        return f"{rows / 1e6:,.1f} MB", f"{rows / 1e6 / max(seconds, 1e-9):,.1f} MB/s"
    return f"{rows:,}", f"{rows / max(seconds, 1e-9):,.0f}"


def print_table(n: int, stages: dict[str, dict], plan: dict[str, float], before: dict[str, dict] | None,
                growth_of: float) -> None:  # fmt: skip
    """One size's table: stage, seconds (min / median / max), rows, rows/s, peak RSS, growth
    over the previous size, the plan's seconds and measured over planned."""
    print(f"\n{n:,} sentences generated; growth: median seconds over the previous size's (data x{growth_of:g})")
    head = ("stage", "seconds", "rows", "rows/s", "peak GiB", "growth", "plan s", "meas/plan")
    print("| " + " | ".join(head) + " |\n|" + "---|" * len(head))
    for stage, entry in stages.items():
        median = statistics.median(entry["seconds"])
        rows, rate = handled(stage, entry["rows"], median)
        growth = ""
        if before and stage in before:
            growth = f"{median / max(statistics.median(before[stage]['seconds']), 1e-9):.2f}x"
        estimate = plan.get(stage)
        vs = f"{median / estimate:.2f}" if estimate else ""
        cells = (stage, spread(entry["seconds"]), rows, rate, f"{entry['peak_rss'] / 2**30:.2f}", growth,
                 "" if estimate is None else f"{estimate:.1f}", vs)  # fmt: skip
        print("| " + " | ".join(cells) + " |")


def print_overhead(stages: dict[str, dict]) -> None:
    """The augment stage against the engine and the meaning encoder alone (full profile)."""
    if "apertium alone" not in stages:
        return
    augment, engine, encoder = (
        statistics.median(stages[s]["seconds"]) for s in ("augment", "apertium alone", "encoder alone")
    )
    rest = augment - engine - encoder
    print(f"augment {augment:.1f} s = Apertium alone {engine:.1f} s + meaning encoder alone {encoder:.1f} s + the "
          f"pipeline's own {rest:.1f} s ({rest / max(engine, 1e-9):.0%} of the engine's raw translation time; "
          f"{(augment - engine) / max(engine, 1e-9):.0%} with the encoder's)")  # fmt: skip


def print_before(n: int, ref: str, runs: list[dict], old_runs: list[dict]) -> None:
    """Per stage, the seconds of `ref`'s runs and this code's, and the paired ratios before/now."""
    print(f"\n{n:,} sentences, {ref} against this code, repeats paired in the order they ran")
    print("| stage | before s (min / median / max) | now s | before/now (min / median / max) |\n|---|---|---|---|")
    for stage in ("augment", "pair", "train", "run (process)"):
        then = [run["stages"][stage]["seconds"] for run in old_runs]
        now = [run["stages"][stage]["seconds"] for run in runs]
        ratios = [b / max(a, 1e-9) for a, b in zip(now, then, strict=True)]
        print(f"| {stage} | {spread(then)} | {spread(now)} | {spread(ratios)} |", flush=True)
    # The encoder dominates the full profile and this machine's speed drifts by ~10% between runs:
    # each run's own sample of it says how fast the CPU was while that run ran.
    rates = [", ".join(encoder_rate(run) for run in each) for each in (old_runs, runs)]
    print("meaning encoder on the plan's sample, texts/s, each run: before {} / now {}".format(*rates))


def encoder_rate(run: dict) -> str:
    """The first filtered augmenter's texts/s in the run's plan (its sample), or '-'."""
    for measure in (run.get("plan") or {}).get("augmenters", []):
        if measure.get("meaning_texts_per_s"):
            return f"{measure['meaning_texts_per_s']:.0f}"
    return "-"


def child_env(site: Path) -> dict[str, str]:
    """This environment without VIEWMILL_* settings (the state folder is the benchmark's), with
    the plugin engine on PYTHONPATH."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("VIEWMILL_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH")]))
    return env


def bench(args: argparse.Namespace, tmp: Path) -> list[dict]:
    env, results, before, last_n = child_env(install_plugin(tmp / "site")), [], None, None
    old = None
    if args.before:
        (tmp / "before").mkdir()
        old = old_cli(args.before, tmp / "before")
    for n in args.sizes:
        corpus = tmp / f"corpus-{n}.txt"
        write_corpus(corpus, args.format, n, args.paragraph)
        runs, old_runs = [], []
        for repeat in range(args.repeats):
            runs.append(one_run(tmp / f"{n}-{repeat}", corpus, args, env))
            if old is not None:
                old_runs.append(one_run(tmp / f"{n}-{repeat}-before", corpus, args, env, viewmill=old, alone=False))
        corpus.unlink()
        if old_runs:
            print_before(n, args.before, runs, old_runs)
        stages = gathered(runs)
        plan = planned(runs[0]["plan"], gpu=args.profile == "gpu")
        print_table(n, stages, plan, before, n / last_n if last_n else 1)
        print_overhead(stages)
        wall = stages["run (process)"]
        print(f"whole run: {spread(wall['seconds'])} s wall, peak RSS {wall['peak_rss'] / 2**30:.2f} GiB; "
              f"plan's total {plan['run (process)']:.1f} s", flush=True)  # fmt: skip
        results.append({"sentences": n, "stages": stages, "runs": runs, "before_runs": old_runs})
        write_json(args, results)  # after each size: a run stopped by a time limit keeps the sizes it finished
        before, last_n = stages, n
    return results


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--profile", choices=PROFILES, default="full")
    parser.add_argument("--format", choices=["book", "text"], default="book")
    parser.add_argument("--paragraph", type=int, default=20, help="book: sentences per paragraph")
    parser.add_argument("--steps", type=int, default=20, help="training steps (batch 32)")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--mt-model", type=Path, help="gpu: a MarianMT folder for every hop")
    parser.add_argument("--encoder", type=Path, help="gpu: a sentence-transformers folder (filter, miner, training)")
    parser.add_argument("--device", default="cuda", help="gpu: where every model runs")
    parser.add_argument("--json", type=Path, help="write every run's figures here")
    parser.add_argument("--no-embedding-store", action="store_true", help="mining embeds its texts itself")
    parser.add_argument("--before", metavar="REF", help="also run this commit's viewmill, paired (e.g. HEAD)")
    parser.add_argument("--alone", type=Path, help=argparse.SUPPRESS)  # a child: the engines alone on a state
    args = parser.parse_args()
    if args.profile == "gpu" and not (args.mt_model and args.encoder):
        parser.error("--profile gpu needs --mt-model and --encoder")
    if args.alone:
        print(json.dumps(engines_alone(args.alone)))
        return
    run_benchmark(args, bench, prefix="viewmill-scale-", what=f"profile {args.profile}")


def run_benchmark(args: argparse.Namespace, bench: Callable[[argparse.Namespace, Path], list[dict]], *,
                  prefix: str, what: str) -> None:  # fmt: skip
    """Print the machine, run `bench` in a temporary folder, and write its results to --json."""
    print(f"CPU flags: {flags_label()}; {cpu_cores()} cores; load average {os.getloadavg()[0]:.1f}; "
          f"{what}, format {args.format}, {args.steps} training steps, {args.repeats} repeat(s)",
          flush=True)  # fmt: skip
    with tempfile.TemporaryDirectory(prefix=prefix) as name:
        write_json(args, bench(args, Path(name)))


def write_json(args: argparse.Namespace, results: list[dict]) -> None:
    if args.json:
        args.json.write_text(json.dumps({"flags": flags_label(), "args": vars(args) | {"json": str(args.json)},
                                         "results": results}, indent=1, default=str), encoding="utf-8")  # fmt: skip


if __name__ == "__main__":
    main()
