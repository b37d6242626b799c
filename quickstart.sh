#!/usr/bin/env bash
# viewmill quick start. Installs what is missing, then:
#   ./quickstart.sh demo   runs recipes/demo.yaml end to end (embedded default: no hub, no GPU, no server)
#   ./quickstart.sh test   runs the linter and the test suite
#   ./quickstart.sh install  only installs (what docker/ images run, so both stay the same)
# System packages come from apt-get, Python packages go into ./.venv; both steps are
# skipped when already done, so a second call starts at once.
set -euo pipefail
cd "$(dirname "$0")"

usage() { echo "usage: ./quickstart.sh demo|test|install [extra arguments for viewmill run / pytest]" >&2; exit 2; }
[ $# -ge 1 ] || usage
command=$1; shift
extra_arguments=$#
case "$command" in demo|test|install) ;; *) usage ;; esac

# libjemalloc2: the allocator the `viewmill` command restarts itself on (viewmill/allocator.py):
# training's peak memory stays at its working set instead of growing with every longer batch.
SYSTEM_PACKAGES=(apertium apertium-eng-spa apertium-eng-cat wordnet-base libjemalloc2)
# Debian's Apertium pairs that chains reach French, Italian, Portuguese and Galician by
# (recipes/multilingual-chain.yaml, docs/engines.md); the tests translate through them. The demo
# needs none of them, so it does not wait for them.
CHAIN_PACKAGES=(apertium-fr-es apertium-spa-ita apertium-cat-ita apertium-es-pt apertium-en-gl)
[ "$command" != demo ] && SYSTEM_PACKAGES+=("${CHAIN_PACKAGES[@]}")
# The tests also start a real PostgreSQL server (the lake's multi-writer catalog).
[ "$command" = test ] && SYSTEM_PACKAGES+=(postgresql)

install_system_packages() {
  local missing=()
  for package in "${SYSTEM_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
  done
  [ ${#missing[@]} -eq 0 ] && return
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "==> apt-get install ${missing[*]}"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
}

install_python_packages() {
  local python=${PYTHON:-python3}
  if [ ! -x .venv/bin/python ]; then
    echo "==> creating .venv with $($python --version)"
    "$python" -m venv .venv
  fi
  # The demo needs the prefect extra alone (its temporary server); test and install (docker/) take
  # every extra. The stamp records the extras installed, so `test` or `install` after a demo adds
  # the rest, and a demo after either installs nothing.
  local extras=all,test no_compile=""
  # demo and test skip pip's bytecode compile of every installed module (95 CPU-seconds,
  # 2026-11-27): Python compiles the modules they import on first import (and keeps the bytecode
  # unless PYTHONDONTWRITEBYTECODE is set: `test` unsets it, below). `install` (the docker/
  # images) compiles all, so a container starts without compiling.
  [ "$command" = install ] || no_compile=1
  # A demo given options (--dask, --catalog postgres:...) may need any extra: it takes them all.
  if [ "$command" = demo ]; then extras=prefect; [ "$extra_arguments" -eq 0 ] || extras=all; fi
  local stamp=.venv/.viewmill-installed want have
  want=$(cat pyproject.toml constraints.txt | sha256sum | cut -d' ' -f1)
  have=$(cat "$stamp" 2>/dev/null || true)
  if [ "$have" != "$want $extras" ] && [ "$have" != "$want all,test" ]; then
    echo "==> pip install .[$extras] (pinned by constraints.txt)"
    # torch first and on its own, so no other package picks its build. VIEWMILL_TORCH_INDEX
    # chooses one (the GPU image: PyTorch's CUDA index); by default pip's own choice.
    .venv/bin/pip install -q --disable-pip-version-check ${no_compile:+--no-compile} \
      ${VIEWMILL_TORCH_INDEX:+--index-url "$VIEWMILL_TORCH_INDEX"} torch==2.13.0
    .venv/bin/pip install -q --disable-pip-version-check ${no_compile:+--no-compile} -c constraints.txt -e ".[$extras]"
    echo "$want $extras" > "$stamp"
  fi
}

install_system_packages
install_python_packages
export DO_NOT_TRACK=1 TOKENIZERS_PARALLELISM=false

case "$command" in
  install) echo "==> installed" ;;
  demo) exec .venv/bin/viewmill run recipes/demo.yaml "$@" ;;
  test)
    .venv/bin/ruff check .
    # One pytest-xdist worker per core and one more (at most 5), a test file per worker: the
    # suite waits on servers and subprocesses part of the time (on 2 cores its eight slowest
    # files kept the cores 81% busy with 2 workers and 90% with 3, 5% sooner; the whole suite
    # ran at 179% CPU with 3).
    # The environment's commands first on PATH, as in an activated venv (the DuckDB shell
    # from duckdb-cli that `viewmill lake attach --open` starts, among them).
    export PATH="$PWD/.venv/bin:$PATH"
    # The suite starts hundreds of Python processes (viewmill commands, Prefect servers and
    # workers, Dask workers). The install skips the bytecode compile, so with
    # PYTHONDONTWRITEBYTECODE set (as on CI machines) every one of them compiled every module it
    # imports from source again (a fresh clone's pytest: 21:16, and 18:25 with this line;
    # BENCHMARKS.md). The first import of each module writes its bytecode instead.
    unset PYTHONDONTWRITEBYTECODE
    workers=$(( $(nproc) + 1 )); [ "$workers" -gt 5 ] && workers=5
    exec .venv/bin/python -m pytest -q -n "$workers" --dist loadfile "$@" ;;
esac
