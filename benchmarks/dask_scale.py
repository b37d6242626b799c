"""The same recipe run with and without a Dask cluster (issue 32.2): the augment stage's own
seconds, the whole run, its peak RSS, and whether both runs made identical rows.

Each run is `viewmill run RECIPE --state-dir FRESH [--dask local:N]` in its own process, on
`pipeline_scale.py`'s corpus and `scale_recipes.py`'s recipes (training and evaluation left
out unless `--steps`). `--dask` runs shards as Prefect tasks, so every run, with Dask or
without, is a Prefect flow: one temporary Prefect server is started here before the first run
(its start is printed, not counted) and every run reaches it through PREFECT_API_URL, warm.
Without Dask the shards run one after another in the flow's process; with `local:N` on N
single-threaded worker processes. The augment seconds are the run's own (`runs.timings`); the
whole run is the process's wall time; peak RSS is the largest sampled resident memory of the
run's process tree (its Dask workers and Apertium pipes included, the Prefect server not).

Two configurations:
  local   the default SQLite catalog and data files in the state folder
  shared  what several machines share: a PostgreSQL catalog (Debian's server, started as
          tests/postgres.py does: initdb in a temporary folder, loopback, no password; a fresh
          database per run) and an s3:// data path (moto's S3 server on loopback, in this
          process; a fresh prefix per run), set through VIEWMILL_CATALOG and VIEWMILL_DATA_PATH

Identical: after each run, sentences (corpus, id, text), views (id, sentence, augmenter,
text, status), the newest snapshot's pairs (ids and texts) and its id and content hash are
read back and hashed; every run is compared with the first run of the same size and profile
(local, no Dask), and the first difference is printed.

    .venv/bin/python benchmarks/dask_scale.py [--sizes 100000] [--profiles cheap full]
        [--workers 2] [--configs local shared] [--repeats 3] [--steps 0] [--json OUT]
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import logging
import socket
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.postgres
sys.path.insert(0, str(Path(__file__).resolve().parent))

import pyarrow.parquet as pq
from ingest import write_corpus
from pipeline_scale import VIEWMILL, child_env, run_benchmark, run_record, spread, timed_process
from scale_recipes import PROFILES, install_plugin, recipe

CONFIGS = ("local", "shared")
# What is compared between runs: ids and texts, never when or in which run a row was written.
TABLES = {
    "sentences": "SELECT corpus, sentence_id, text FROM sentences ORDER BY ALL",
    "views": "SELECT view_id, sentence_id, augmenter, text, status FROM views ORDER BY view_id",
    "pairs": "SELECT pair_id, sentence_id, view_a_id, view_b_id, text_a, text_b FROM pairs "
    "WHERE snapshot = ? ORDER BY pair_id",
}
EnvMaker = Callable[[str], dict[str, str]]


@contextlib.contextmanager
def prefect_server(home: Path) -> Iterator[str]:
    """One temporary Prefect server for every run (started here, so no run pays its start)."""
    from viewmill.pipelines.orchestration import local_server

    start = time.perf_counter()
    server = local_server.ensure(home, idle_s=24 * 3600)
    print(f"Prefect server started in {time.perf_counter() - start:.1f} s (not counted: every run uses it warm)")
    try:
        yield server.url
    finally:
        local_server.stop(home, force=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def shared_storage() -> Iterator[EnvMaker]:
    """A PostgreSQL server and an S3 server on loopback; yields what makes a fresh lake's
    settings (a new database, a new prefix) for a run's name."""
    import boto3
    from moto.server import ThreadedMotoServer

    from tests.postgres import postgres_cluster

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's server logs every request
    port = _free_port()
    s3 = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    s3.start()
    boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}", region_name="us-east-1",
                 aws_access_key_id="test", aws_secret_access_key="test").create_bucket(Bucket="viewmill")  # fmt: skip
    try:
        with postgres_cluster() as cluster:
            pg_port = cluster.dsn.split("port=")[1].split()[0]

            def fresh(name: str) -> dict[str, str]:
                database = "lake_" + name.replace("-", "_")
                cluster.run(str(cluster.bindir / "createdb"), "-h", str(cluster.workdir), "-p", pg_port,
                            "-U", "viewmill", database)  # fmt: skip
                return {
                    "VIEWMILL_CATALOG": f"postgres:dbname={database} host=127.0.0.1 port={pg_port} user=viewmill",
                    "VIEWMILL_DATA_PATH": f"s3://viewmill/{name}/",
                    "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_REGION": "us-east-1",
                    "VIEWMILL_S3_ENDPOINT": f"127.0.0.1:{port}", "VIEWMILL_S3_URL_STYLE": "path",
                    "VIEWMILL_S3_USE_SSL": "false",
                }  # fmt: skip

            yield fresh
    finally:
        s3.stop()


def digest(state: Path, out: Path) -> dict:
    """A child under the run's settings: the run's record, and each compared table written to
    `out` and hashed."""
    from viewmill.storage.lake import open_lake

    from viewmill.settings import Settings

    record = run_record(state)
    with open_lake(Settings(), state / "lake", read_only=True) as lake:
        snapshot = lake.arrow(
            "SELECT snapshot, content_hash FROM snapshots ORDER BY created_at DESC LIMIT 1"
        ).to_pylist()[0]
        hashes = {"snapshot": f"{snapshot['snapshot']} {snapshot['content_hash']}"}
        for table, sql in TABLES.items():
            rows = lake.arrow(sql, [snapshot["snapshot"]] if "?" in sql else None)
            pq.write_table(rows, out / f"{table}.parquet")
            text = "\x1e".join("\x1f".join(map(str, row.values())) for row in rows.to_pylist())
            hashes[table] = hashlib.sha256(text.encode()).hexdigest()
    # The shared configuration's data files are in the bucket: no Parquet under the state folder.
    return {"timings": record["timings"], "hashes": hashes, "local_parquet_bytes": record["lake_bytes"]}


def first_difference(run: dict, reference: dict) -> str:
    """'yes', or 'no' with the first table and row where `run` and `reference` differ."""
    for table, digest_ in reference["hashes"].items():
        if run["hashes"][table] == digest_:
            continue
        if table == "snapshot":
            return f"no: snapshot {run['hashes'][table]} against {digest_}"
        ours, theirs = (pq.read_table(Path(r["rows"]) / f"{table}.parquet").to_pylist() for r in (run, reference))
        for index, (a, b) in enumerate(zip(ours, theirs, strict=False)):
            if a != b:
                return f"no: {table} row {index}: {a} against {b}"
        return f"no: {table} has {len(ours)} rows against {len(theirs)}"
    return "yes"


def one_run(workdir: Path, recipe_path: Path, dask: str | None, env: dict[str, str]) -> dict:
    """`viewmill run` in a fresh state folder, timed; then its record and rows read back."""
    state, rows = workdir / "state", workdir / "rows"
    rows.mkdir(parents=True)
    command = [*VIEWMILL, "run", str(recipe_path), "--state-dir", str(state), *(["--dask", dask] if dask else [])]
    run = timed_process(command, env)
    read = timed_process([sys.executable, __file__, "--digest", str(state), str(rows)], env)
    figures = json.loads(read["stdout"].strip().splitlines()[-1])
    return {"augment": figures["timings"]["augment"], "wall": run["seconds"], "peak_rss": run["peak_rss"],
            "hashes": figures["hashes"], "rows": str(rows),
            "local_parquet_bytes": figures["local_parquet_bytes"]}  # fmt: skip


def bench_size(n: int, profile: str, args: argparse.Namespace, tmp: Path, envs: dict[str, EnvMaker]) -> dict:
    """Every configuration with and without Dask at one size, alternating within each repeat."""
    corpus, workdir = tmp / f"corpus-{n}.txt", tmp / f"{profile}-{n}"
    write_corpus(corpus, args.format, n, args.paragraph)
    spec = recipe(profile, corpus, args.format, args.steps)
    if not args.steps:
        spec.pop("train"), spec.pop("evaluate", None)
    if args.shard_sentences:
        spec["execution"] = {"shard_sentences": args.shard_sentences}
    workdir.mkdir()
    recipe_path = workdir / "recipe.yaml"
    recipe_path.write_text(json.dumps(spec), encoding="utf-8")  # JSON is YAML
    modes = {"no Dask": None, f"Dask local:{args.workers}": f"local:{args.workers}"}
    runs: dict[tuple[str, str], list[dict]] = {}
    for repeat in range(args.repeats):
        for config in args.configs:
            for mode, dask in modes.items():
                name = f"{config}-{'dask' if dask else 'plain'}-{repeat}"
                env = envs[config](f"{profile}-{n}-{name}")
                done = one_run(workdir / name, recipe_path, dask, env)
                runs.setdefault((config, mode), []).append(done)
                print(f"  {profile} {n:,} {config}, {mode}, repeat {repeat + 1}: augment {done['augment']:.2f} s, "
                      f"run {done['wall']:.2f} s", flush=True)  # fmt: skip
    corpus.unlink()
    reference = runs[(args.configs[0], "no Dask")][0]
    for done in (r for repeats in runs.values() for r in repeats):
        done["identical"] = first_difference(done, reference)
    return {"sentences": n, "profile": profile, "runs": {f"{c}, {m}": r for (c, m), r in runs.items()}}


def print_table(result: dict) -> None:
    """One size and profile: configuration x (augment s, whole run s, peak RSS, identical), and
    each configuration's augment speed-up with Dask (median over median)."""
    print(f"\n{result['sentences']:,} sentences, profile {result['profile']} (seconds: min / median / max)")
    print("| configuration | augment s | whole run s | peak RSS GiB | identical |\n|---|---|---|---|---|")
    medians: dict[str, dict[str, float]] = {}
    for key, runs in result["runs"].items():
        augment, wall = [r["augment"] for r in runs], [r["wall"] for r in runs]
        same = "; ".join(sorted({r["identical"] for r in runs}))
        peak = max(r["peak_rss"] for r in runs) / 2**30
        print(f"| {key} | {spread(augment)} | {spread(wall)} | {peak:.2f} | {same} |")
        config, mode = key.split(", ")
        medians.setdefault(config, {})[mode] = statistics.median(augment)
    for config, by_mode in medians.items():
        plain, dask = by_mode.pop("no Dask"), next(iter(by_mode.values()))
        ratio = plain / max(dask, 1e-9)
        print(f"{config}: augment {ratio:.2f}x faster with Dask (medians {plain:.2f} s / {dask:.2f} s)")


def bench(args: argparse.Namespace, tmp: Path) -> list[dict]:
    env = child_env(install_plugin(tmp / "site")) | {"PREFECT_HOME": str(tmp / "prefect-user")}
    env = {k: v for k, v in env.items() if k != "PREFECT_PROFILE"}
    results = []
    with contextlib.ExitStack() as stack:
        env["PREFECT_API_URL"] = stack.enter_context(prefect_server(tmp / "prefect-server"))
        envs: dict[str, EnvMaker] = {"local": lambda name: env}
        if "shared" in args.configs:
            fresh = stack.enter_context(shared_storage())
            envs["shared"] = lambda name: env | fresh(name)
        for n in args.sizes:
            for profile in args.profiles:
                results.append(bench_size(n, profile, args, tmp, envs))
                print_table(results[-1])
    return results


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000])
    cpu_profiles = [p for p in PROFILES if p != "gpu"]  # gpu needs model folders this benchmark does not take
    parser.add_argument("--profiles", choices=cpu_profiles, nargs="+", default=["cheap", "full"])
    parser.add_argument("--configs", choices=CONFIGS, nargs="+", default=list(CONFIGS))
    parser.add_argument("--workers", type=int, default=2, help="Dask workers (local:N)")
    parser.add_argument("--format", choices=["book", "text"], default="book")
    parser.add_argument("--paragraph", type=int, default=20, help="book: sentences per paragraph")
    parser.add_argument("--steps", type=int, default=0, help="training steps (batch 32); 0: no training")
    parser.add_argument("--shard-sentences", type=int, help="the recipe's execution.shard_sentences (default 5000)")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--json", type=Path, help="write every run's figures here")
    parser.add_argument("--digest", type=Path, nargs=2, help=argparse.SUPPRESS)  # a child: STATE ROWS
    args = parser.parse_args()
    if args.digest:
        print(json.dumps(digest(*args.digest)))
        return
    run_benchmark(args, bench, prefix="viewmill-dask-", what=f"profiles {', '.join(args.profiles)}")


if __name__ == "__main__":
    main()
