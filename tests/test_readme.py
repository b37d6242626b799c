"""Every shell and SQL block of README.md and docs/*.md runs, against a lake this module
builds, so the documentation cannot drift from what viewmill does.

A block that needs what a test cannot have here (a GPU, the network, a long run, a server)
carries an HTML comment on the line right before its fence, saying why:

    <!-- skip-test: needs a GPU -->

Any other shell block (bash, sh, shell, console) runs in bash with `set -euo pipefail`;
an SQL block runs through `viewmill sql`. A block fails the test when it exits non-zero
or when a query in it prints `0 row(s)`: every documented query returns rows. A fence
without a language fails too (label it, e.g. `text`, so its kind is known).

The lake is built once, with the tiny recipe of tests/conftest.py (real Apertium round
trips, a tiny random-weight encoder), and the documents' names are replaced before a block
runs: `recipes/demo.yaml` by that recipe, `.viewmill/` by the lake's state folder,
SNAPSHOT by its pairs snapshot and MODEL by its trained model. Blocks run document by
document (README.md first, then docs/ by name), each in its own order, in a scratch folder
that links the repository's top-level entries (`.venv`, `recipes`, ...), so files they
write stay out of the checkout. Relative links between the documents must name a file that
exists and, with `#anchor`, one of its headings, so moving a section cannot strand a link.

Every other command the documents show (RESULTS.md, BENCHMARKS.md, the recipes' comments and the
blocks marked skip-test) is parsed against the CLI's command tree (`documented_commands`).
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from viewmill.pipelines.orchestration import local_server
from viewmill.pipelines.recipe import load_recipe
from viewmill.pipelines.run import RunContext, run_recipe
from viewmill.pipelines.state import StatePaths

from tests.conftest import REPO, needs_apertium, write_tiny_recipe

README = REPO / "README.md"
DOCUMENTS = [README, *sorted((REPO / "docs").glob("*.md"))]
SHELLS = {"bash", "sh", "shell", "console"}
RUNNABLE = SHELLS | {"sql"}
SKIP = re.compile(r"^<!--\s*skip-test:\s*(?P<reason>\S.*?)\s*-->$")
FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>```+|~~~+)\s*(?P<lang>[\w+-]*)")


@dataclass(frozen=True)
class Block:
    line: int  # 1-based line of the opening fence
    lang: str
    text: str
    skip: str | None  # the reason, when the block is marked


def readme_blocks(text: str, name: str = "README.md") -> list[Block]:
    """Every fenced block of a Markdown text, with the skip-test reason written right before it."""
    lines = text.splitlines()
    blocks, i = [], 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        close = re.compile(rf"^\s*{re.escape(opening['fence'])}\s*$")
        end = next((j for j in range(i + 1, len(lines)) if close.match(lines[j])), None)
        if end is None:
            raise ValueError(f"{name} line {i + 1}: a fenced block that never closes")
        before = next((lines[j].strip() for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        marked = SKIP.match(before)
        body = "\n".join(line.removeprefix(opening["indent"]) for line in lines[i + 1 : end])
        blocks.append(Block(i + 1, opening["lang"].lower(), body, marked["reason"] if marked else None))
        i = end + 1
    return blocks


def _name(path) -> str:
    return path.relative_to(REPO).as_posix()


BLOCKS = {_name(doc): readme_blocks(doc.read_text(encoding="utf-8"), _name(doc)) for doc in DOCUMENTS}


def _runs(blocks: list[Block]) -> int:
    return sum(b.lang in RUNNABLE and b.skip is None for b in blocks)


@pytest.mark.parametrize("name", list(BLOCKS))
def test_every_fence_says_its_language(name):
    unlabeled = [b.line for b in BLOCKS[name] if not b.lang]
    assert not unlabeled, f"{name}: fenced blocks without a language at lines {unlabeled}"


def test_the_readme_and_the_docs_have_runnable_blocks():
    assert len(BLOCKS) > 1, "docs/*.md were not found"
    assert _runs(BLOCKS["README.md"]) >= 3, "the README's first steps run"
    assert sum(_runs(blocks) for blocks in BLOCKS.values()) >= 15


def test_the_readme_keeps_the_quick_start_contract():
    """`./quickstart.sh demo` runs the main job on the embedded default, `./quickstart.sh test` the
    tests (.ci/run calls it): both stay in the README, where a newcomer starts."""
    quick_start = next(b for b in BLOCKS["README.md"] if "./quickstart.sh" in b.text)
    assert "./quickstart.sh demo" in quick_start.text and "./quickstart.sh test" in quick_start.text
    assert "./quickstart.sh test" in (REPO / ".ci" / "run").read_text(encoding="utf-8")


LINK = re.compile(r"\[[^\]]*\]\((?P<target>[^)\s]+)\)")


def github_anchor(heading: str) -> str:
    """The id GitHub gives a heading: lower case, punctuation but `-` and `_` dropped, spaces as `-`."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(text: str) -> Iterator[str]:
    seen: dict[str, int] = {}
    for line in _prose(text).splitlines():
        heading = re.match(r"^#{1,6}\s+(.*?)\s*#*$", line)
        if heading:
            slug = github_anchor(heading[1])
            seen[slug] = seen.get(slug, -1) + 1
            yield slug if not seen[slug] else f"{slug}-{seen[slug]}"


def _prose(text: str) -> str:
    """The text without its fenced blocks and HTML comments, which hold no links or headings."""
    kept, fence = [], None
    for line in re.sub(r"<!--.*?-->", "", text, flags=re.S).splitlines():
        opening = FENCE.match(line)
        if fence is None and opening:
            fence = re.compile(rf"^\s*{re.escape(opening['fence'])}\s*$")
        elif fence is not None and fence.match(line):
            fence = None
        elif fence is None:
            kept.append(line)
    return "\n".join(kept)


def test_github_anchors_are_computed_as_github_does():
    assert github_anchor("Which views help: `viewmill views report`") == "which-views-help-viewmill-views-report"
    assert github_anchor("Overriding settings: `--set`") == "overriding-settings---set"
    assert list(_anchors("# A\n```bash\n# not a heading\n```\n## A\n")) == ["a", "a-1"]


@pytest.mark.parametrize("doc", DOCUMENTS, ids=_name)
def test_relative_links_reach_a_file_and_a_heading(doc):
    broken = []
    for link in LINK.finditer(_prose(doc.read_text(encoding="utf-8"))):
        target = link["target"]
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        file = (doc.parent / path).resolve() if path else doc
        if not file.exists():
            broken.append(f"{target}: no such file")
        elif anchor and file.suffix == ".md" and anchor not in set(_anchors(file.read_text(encoding="utf-8"))):
            broken.append(f"{target}: no heading with that anchor in {_name(file)}")
    assert not broken, f"{_name(doc)}: " + "; ".join(broken)


def test_the_readme_links_every_page_of_docs():
    readme = README.read_text(encoding="utf-8")
    unlinked = [_name(doc) for doc in DOCUMENTS[1:] if f"({_name(doc)}" not in readme]
    assert not unlinked, f"README.md does not link {unlinked}"


def test_block_discovery_reads_marks_languages_and_indented_fences():
    text = (
        "x\n<!-- skip-test: needs a GPU -->\n\n```bash\nnvidia-smi\n```\n"
        "  ```sql\n  SELECT 1\n  ```\n~~~\nplain\n~~~\n"
    )
    assert readme_blocks(text) == [
        Block(4, "bash", "nvidia-smi", "needs a GPU"),
        Block(7, "sql", "SELECT 1", None),
        Block(10, "", "plain", None),
    ]
    with pytest.raises(ValueError, match="line 1: a fenced block that never closes"):
        readme_blocks("```bash\nls\n")


@dataclass(frozen=True)
class ReadmeLake:
    state: StatePaths
    names: dict[str, str]  # the documents' names and what they stand for here
    scratch: Path
    ran: dict[tuple[str, ...], subprocess.CompletedProcess]  # by command: a block shown twice runs once


@pytest.fixture(scope="module")
def readme_lake(tmp_path_factory, tiny_model) -> Iterator[ReadmeLake]:
    """The lake the README's blocks query, the names they stand for, and a scratch folder.

    The Prefect blocks find the state's temporary Prefect server up, as a user's second run
    does: it starts once, while the lake is built, and this process's lease keeps it up until
    the module ends (its own idle stop stays the tests' short one, should pytest be killed)."""
    root = tmp_path_factory.mktemp("readme")
    recipe = write_tiny_recipe(root, tiny_model)
    state = StatePaths(root / "state")
    local_server.take_lease(state.prefect_home)  # before the server starts, so it cannot idle out meanwhile
    with ThreadPoolExecutor(max_workers=1) as pool:
        server = pool.submit(local_server.ensure, state.prefect_home)
        summary = run_recipe(RunContext(load_recipe(recipe), state))
        server.result()
    scratch = root / "work"
    scratch.mkdir()
    for entry in REPO.iterdir():
        if entry.name not in {".git", ".viewmill"}:
            (scratch / entry.name).symlink_to(entry)
    names = {
        "recipes/demo.yaml": str(recipe),
        ".viewmill/": f"{state.root}/",
        "SNAPSHOT": summary["snapshot"]["name"],
        "MODEL": summary["train"]["path"],
    }
    yield ReadmeLake(state, names, scratch, {})
    local_server.stop(state.prefect_home, force=True)


def substitute(text: str, names: dict[str, str]) -> str:
    for name, value in names.items():
        pattern = rf"\b{re.escape(name)}\b" if name.isupper() else re.escape(name)
        text = re.sub(pattern, value.replace("\\", "\\\\"), text)
    return text


def _environment(state: StatePaths) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in {"PREFECT_API_URL", "VIEWMILL_CATALOG", "VIRTUAL_ENV"}}
    env["VIEWMILL_HOME"] = str(state.root)
    env["PATH"] = f"{REPO / '.venv' / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return env


@needs_apertium
@pytest.mark.parametrize(
    ("name", "block"),
    [
        pytest.param(name, b, id=f"{name}:line-{b.line}", marks=pytest.mark.skip(reason=b.skip) if b.skip else ())
        for name, blocks in BLOCKS.items()
        for b in blocks
        if b.lang in RUNNABLE
    ],
)
def test_readme_block_runs(name, block, readme_lake):
    body = substitute(block.text, readme_lake.names)
    shell = ["bash", "-c", "set -euo pipefail\n" + body]
    command = ("viewmill", "sql", body) if block.lang == "sql" else tuple(shell)
    if command not in readme_lake.ran:  # README.md and docs/training.md show the same `viewmill train`
        readme_lake.ran[command] = subprocess.run(
            command, cwd=readme_lake.scratch, env=_environment(readme_lake.state), capture_output=True, text=True,
            timeout=900,
        )  # fmt: skip
    result = readme_lake.ran[command]
    where = f"{name} line {block.line} ({block.lang})"
    hint = "fix it, or mark it with <!-- skip-test: why --> if it needs a GPU, the network, a long run or a server"
    assert result.returncode == 0, f"{where} exited {result.returncode}: {hint}\n{body}\n---\n{result.stderr[-3000:]}"
    empty = re.search(r"^0 row\(s\)$", result.stderr, re.M)  # the table's row count goes to stderr
    assert not empty, f"{where}: a documented query returned no rows against the test lake\n{body}\n{result.stdout}"


# Every command the other documents show (RESULTS.md, BENCHMARKS.md, the recipes' comments, and the
# README's and docs' blocks that are too long to run) is parsed against the CLI's own command tree:
# the command exists, its options and arguments parse, the files it names exist, `data fetch` names
# data sets, and a recipe with its --set overrides validates (the cheap part of running it).
# A benchmark script exists and takes each option the command gives it.
COMMAND_DOCS = [REPO / "RESULTS.md", REPO / "BENCHMARKS.md"]
INLINE = re.compile(r"`(viewmill [^`]+)`|\bviewmill ((?:data|run|sweep|train|eval|sql|views|lake)\b[^),;`#]*)")


@dataclass(frozen=True)
class DocCommand:
    where: str  # file:line
    words: list[str]


def _command_lines(text: str) -> list[tuple[int, str]]:
    """Shell lines with their backslash continuations joined, each with the line it starts on."""
    lines, start, pending = [], 0, ""
    for number, line in enumerate(text.splitlines(), start=1):
        if not pending:
            start = number
        pending += line.rstrip()
        if pending.endswith("\\"):
            pending = pending[:-1] + " "
            continue
        lines.append((start, pending))
        pending = ""
    return lines


def _split(where: str, line: str) -> list[DocCommand]:
    """The commands of one shell line: `;`, `&&`, `||` and `|` separate them; redirections and leading
    VAR=value assignments are dropped."""
    import shlex

    lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|<>")
    lexer.whitespace_split, lexer.commenters = True, "#"
    commands, words, skip = [], [], False
    try:
        tokens = list(lexer)
    except ValueError as exc:  # unbalanced quotes: a command no shell would run as meant
        return [DocCommand(where, ["viewmill", f"<{exc}: {line}>"])]
    for token in tokens:
        if token in {";", "&&", "||", "|", "&"}:
            commands.append(words)
            words = []
        elif token in {">", ">>", "<", "2>"}:
            skip = True
        elif skip:
            skip = False
        elif words or not re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", token):
            words.append(token)
    return [DocCommand(where, w) for w in [*commands, words] if w]


def documented_commands() -> list[DocCommand]:
    found = []
    for doc in [*COMMAND_DOCS, *DOCUMENTS]:
        for block in readme_blocks(doc.read_text(encoding="utf-8"), _name(doc)):
            if block.lang in SHELLS and (doc in COMMAND_DOCS or block.skip):  # the others run above
                for number, line in _command_lines(block.text):
                    found += _split(f"{_name(doc)}:{block.line + number}", line)
    for recipe in sorted((REPO / "recipes").glob("*.yaml")):
        for number, line in enumerate(recipe.read_text(encoding="utf-8").splitlines(), start=1):
            comment = line.partition("#")[2].strip() if line.lstrip().startswith("#") else ""
            whole = [comment] if comment.startswith("viewmill ") else []  # a comment line that is a command
            for text in whole or [m[1] or f"viewmill {m[2]}" for m in INLINE.finditer(comment)]:
                found += _split(f"{_name(recipe)}:{number}", text)
    return found


DOC_COMMANDS = documented_commands()


def _check_viewmill(words: list[str]) -> None:
    """Parse `viewmill WORDS` as the CLI would (click's own parser: unknown commands and options,
    missing arguments, bad values), then check what it names."""
    import typer.main
    from viewmill.pipelines.cli.app import app
    from viewmill.pipelines.recipe import load_recipe
    from viewmill.pipelines.sweep import load_sweep
    from viewmill.storage.datasets.sources import lookup

    command, ctx, path = typer.main.get_command(app), None, ["viewmill"]
    args = list(words)
    while hasattr(command, "commands") and args and not args[0].startswith("-"):
        assert args[0] in command.commands, f"no command `{' '.join([*path, args[0]])}`"
        path.append(args.pop(0))
        command = command.commands[path[-1]]
    parsed = command.make_context(" ".join(path), args, parent=ctx)
    params = parsed.params
    if path[1:] == ["data", "fetch"]:
        unknown = [name for name in params["names"] if name != "all" and lookup(name) is None]
        assert not unknown, f"`data fetch` of unknown data sets {unknown}"
    recipe = params.get("recipe")
    if recipe is not None and str(recipe).startswith("recipes/"):
        assert (REPO / recipe).is_file(), f"{recipe} does not exist"
        if path[1] == "sweep":
            load_sweep(REPO / recipe, params.get("overrides") or [])
        else:
            load_recipe(REPO / recipe, params.get("overrides") or [])


def _check_script(words: list[str]) -> None:
    script = REPO / words[1]
    assert script.is_file(), f"{words[1]} does not exist"
    source = script.read_text(encoding="utf-8")
    options = [w.split("=")[0] for w in words[2:] if w.startswith("--")]
    missing = [option for option in options if f'"{option}"' not in source]
    assert not missing, f"{words[1]} takes no option {missing}"


def test_documented_commands_are_found():
    wheres = {c.where.split(":")[0] for c in DOC_COMMANDS if c.words[0] == "viewmill"}
    assert {"RESULTS.md", "BENCHMARKS.md", "recipes/multilingual.yaml", "recipes/snli-views-gain.yaml"} <= wheres
    inline = next(c for c in DOC_COMMANDS if c.where == "recipes/snli-views-gain.yaml:2")
    assert inline.words == ["viewmill", "data", "fetch", "snli"], "a command inside a comment's sentence"
    assert _split("x", "A=1 viewmill sql 'SELECT 1' > out.txt && viewmill lake verify  # why") == [
        DocCommand("x", ["viewmill", "sql", "SELECT 1"]), DocCommand("x", ["viewmill", "lake", "verify"])
    ]  # fmt: skip


def test_the_docs_command_check_can_fail():
    with pytest.raises(AssertionError, match="no command `viewmill data fecth`"):
        _check_viewmill(["data", "fecth", "snli"])
    with pytest.raises(Exception, match="No such option: --keep-weeks"):  # click's, as typer vendors it
        _check_viewmill(["lake", "compact", "--keep-weeks", "1"])
    with pytest.raises(AssertionError, match=r"unknown data sets \['stsbenchmrk'\]"):
        _check_viewmill(["data", "fetch", "snli", "stsbenchmrk"])
    with pytest.raises(ValueError, match="train.stepz"):  # the recipe with its overrides is validated
        _check_viewmill(["run", "recipes/demo.yaml", "--set", "train.stepz=3"])
    with pytest.raises(AssertionError, match="takes no option"):
        _check_script(["python", "benchmarks/batching.py", "--stepz", "3"])


@pytest.mark.parametrize(
    "command", [pytest.param(c, id=f"{c.where}:{' '.join(c.words[:3])}") for c in DOC_COMMANDS
                if c.words[0] == "viewmill" or (c.words[0].endswith("python") and len(c.words) > 1
                                                and c.words[1].startswith("benchmarks/"))],
)  # fmt: skip
def test_documented_command_parses_against_the_cli(command):
    if command.words[0] == "viewmill":
        _check_viewmill(command.words[1:])
    else:
        _check_script(command.words)
