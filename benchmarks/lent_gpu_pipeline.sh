#!/usr/bin/env bash
# The pipeline end to end on a lent GPU box (issue 32.4; BENCHMARKS.md, "The pipeline on a GPU").
#
#   benchmarks/lent_gpu_pipeline.sh prepare     # here: wheels into .whl, demo text and MiniLM's
#                                               # config and tokenizer (no weights) into .gpu
#   then, through the device tool, with carry [".whl", ".gpu"] (about 56 MB with the tree):
#   bash benchmarks/lent_gpu_pipeline.sh run    # there: install, build random-weight models, run
#
# The box has torch, transformers, sentence-transformers, pyarrow and many more, but not duckdb,
# pydantic or viewmill's smaller needs, and no network; 64 MiB travel a call, so polars (54 MB)
# stays behind and the views report is skipped. `run` checks the rest is there before it starts.
# SIZES (default "10000 100000") and BENCH_TIMEOUT (seconds for the whole command, default 540) tune it.
set -uo pipefail
cd "$(dirname "$0")/.."
WHEELS=(duckdb==1.5.5 duckdb_extension_ducklake==1.5.5 duckdb_extension_sqlite_scanner==1.5.5 pydantic==2.14.3
        pydantic_core==2.50.4 pydantic-settings==2.16.3 orjson==3.13.0 pysbd==0.3.4 confusable-homoglyphs==3.3.1
        fastchrf==0.2.1 sacremoses==0.2.0 typing-inspection==0.4.5 annotated-types==0.8.0 python-dotenv==1.2.4
        typer==0.29.2 typing_extensions==4.16.0 pytz==2026.6)

prepare() {
    local exclude
    exclude=$(git rev-parse --git-path info/exclude) && mkdir -p "$(dirname "$exclude")" || exit 1
    grep -qsxF '/.whl/' "$exclude" || echo '/.whl/' >>"$exclude"
    grep -qsxF '/.gpu/' "$exclude" || echo '/.gpu/' >>"$exclude"
    rm -rf .whl && mkdir -p .whl .gpu  # one version of each wheel: two stop the whole install there
    for wheel in "${WHEELS[@]}"; do
        .venv/bin/python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
            --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
            --platform any -d .whl "$wheel" || exit 1
    done
    .venv/bin/python benchmarks/demo_data.py 3000 .gpu/demo.txt || exit 1
    .venv/bin/python - <<'PY' || exit 1
import shutil

from viewmill.train.encoder import resolve_encoder

weights = shutil.ignore_patterns("*.safetensors", "*.bin", "*.onnx", "onnx", "openvino")
shutil.copytree(resolve_encoder("embedded:all-MiniLM-L6-v2"), ".gpu/minilm", ignore=weights, dirs_exist_ok=True)
PY
    du -sh .whl .gpu
}

run() {
    [ -n "${OUT:-}" ] || { echo "run is for the lent box (the device tool sets OUT)" >&2; exit 2; }
    local t0
    t0=$(date +%s)
    python3 -c "import psutil, sentencepiece, pyarrow, rich, shellingham, annotated_doc, xxhash, yaml, regex, sacrebleu" \
        || exit 1  # what the image is expected to hold: fail in seconds, not minutes in
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        || exit 1
    # viewmill from the checkout: its layers linked under the namespace, a dist-info for its version
    for d in storage augment train pipelines; do ln -sfn "$PWD/$d" "viewmill/$d"; done
    mkdir -p /tmp/site/viewmill-0+checkout.dist-info
    printf 'Metadata-Version: 2.1\nName: viewmill\nVersion: 0+checkout\n' >/tmp/site/viewmill-0+checkout.dist-info/METADATA
    export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    python3 - <<'PY' || exit 1
import shutil, sys
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModel

sys.path.insert(0, "benchmarks")
from mt_engines import DIMS, build_marian

models = Path("/tmp/models")
(models / "marian").mkdir(parents=True, exist_ok=True)
build_marian(models / "marian", Path(".gpu/demo.txt").read_text().splitlines(), DIMS["opus-mt"])
torch.manual_seed(0)
shutil.copytree(".gpu/minilm", models / "minilm", dirs_exist_ok=True)
(models / "minilm" / "2_Normalize").mkdir(exist_ok=True)
AutoModel.from_config(AutoConfig.from_pretrained(models / "minilm")).save_pretrained(models / "minilm")
print("random-weight models built:", torch.__version__, torch.cuda.get_device_name(0))
PY
    local setup=$(($(date +%s) - t0))
    echo "set-up took $setup s"
    # The benchmark's limit counts the set-up's seconds too (BENCH_TIMEOUT is the whole command's).
    # shellcheck disable=SC2086  # SIZES is a list of sizes
    timeout $((${BENCH_TIMEOUT:-540} - setup)) python3 benchmarks/pipeline_scale.py --profile gpu --device cuda \
        --mt-model /tmp/models/marian --encoder /tmp/models/minilm --sizes ${SIZES:-10000 100000} --steps 20 \
        --json "$OUT/scale_gpu.json" 2>&1 | grep --line-buffered -v -i "Loading weights\|Writing model\|friendly reminder" \
        | tee "$OUT/scale_gpu.log"
}

case "${1:-}" in
    prepare) prepare ;;
    run) run ;;
    *) echo "usage: $0 prepare|run" >&2; exit 2 ;;
esac
