"""Apertium: rule-based MT through one long-lived pipeline per direction (the embedded default)."""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import subprocess
import threading
import time
import warnings
from functools import cache
from pathlib import Path

from viewmill.augment.engines import DecodingSpec, Engine, EngineError, EngineOptions, debian_version

from viewmill.allocator import program_env

# ISO 639-1 -> Apertium's ISO 639-3 codes for the language pairs viewmill knows.
APERTIUM_CODES = {
    "en": "eng", "es": "spa", "ca": "cat", "fr": "fra", "de": "deu", "pt": "por", "it": "ita", "gl": "glg",
}  # fmt: skip
# Debian's Apertium packages by language pair (each serves both directions). Their mode files
# are named by ISO 639-3 codes (eng-spa, spa-ita) or by ISO 639-1 codes (es-fr, es-pt, en-gl),
# as each pair's upstream chose: `mode_for` looks for both.
DEBIAN_PAIRS = {
    frozenset(pair.split("-")): package
    for pair, package in {
        "en-es": "apertium-eng-spa", "en-ca": "apertium-eng-cat", "en-gl": "apertium-en-gl",
        "es-fr": "apertium-fr-es", "es-it": "apertium-spa-ita", "es-pt": "apertium-es-pt",
        "es-ca": "apertium-spa-cat", "es-gl": "apertium-es-gl", "ca-it": "apertium-cat-ita",
        "ca-fr": "apertium-fra-cat", "ca-pt": "apertium-por-cat", "gl-pt": "apertium-pt-gl",
    }.items()
}  # fmt: skip


def apertium_modes_dir() -> Path:
    """Where the installed directions' mode files are (honours APERTIUM_DATADIR)."""
    return Path(os.environ.get("APERTIUM_DATADIR", "/usr/share/apertium")) / "modes"


@cache
def apertium_modes(folder: Path) -> frozenset[str]:
    """The installed directions: the mode files in `folder` (what `apertium -l` lists)."""
    if shutil.which("apertium") is None:
        raise EngineError(
            "Apertium is not installed: apt-get install apertium apertium-eng-spa apertium-eng-cat "
            "(the quick start does this for you)"
        )
    return frozenset(path.stem for path in folder.glob("*.mode"))


def apertium_package(src: str, tgt: str) -> str | None:
    """The Debian package that translates src>tgt (and tgt>src); None when Debian ships none."""
    return DEBIAN_PAIRS.get(frozenset((src, tgt)))


def apertium_mode_file(mode: str) -> Path:
    """Where the `apertium` wrapper finds a direction's pipeline (honours APERTIUM_DATADIR)."""
    return apertium_modes_dir() / f"{mode}.mode"


def _missing_direction(src: str, tgt: str, installed: frozenset[str]) -> str:
    package = apertium_package(src, tgt)
    if package is None:
        pairs = ", ".join(sorted("-".join(sorted(pair)) for pair in DEBIAN_PAIRS))
        return (
            f"Debian ships no Apertium package for {src}>{tgt}: chain through a language both reach, e.g. "
            f"pivots: [es] on a forward augmenter or path: [{src}, es, {tgt}, ...] (Debian's pairs: {pairs})"
        )
    return (
        f"apertium has no {src}>{tgt} direction installed: sudo apt-get install {package} "
        f"(installed directions: {', '.join(sorted(installed)) or 'none'})"
    )


class ApertiumEngine:
    """Rule-based MT through one long-lived Apertium pipeline per direction.

    The direction's pipeline (the mode file's programs, in null-flush mode) starts once and
    stays up; each batch is deformatted with `apertium-destxt`, and each sentence goes through
    the pipeline as its own NUL-ended block (all of them in one write), read back up to as many
    NULs and reformatted with `apertium-retxt`: the steps of `apertium -u <mode>`, sentence by
    sentence, without restarting a dozen programs per batch.
    Text mode keeps final punctuation (line mode drops it); the output is checked to have
    exactly one line per input. The decoding spec does not change anything.

    One stream for the whole batch let the tagger and the structural transfer run from line to
    line (a line without final punctuation lent words to the next), so a view depended on its
    batch, hence on time-sized commits (2-6% of the demo's round trips). A NUL flush ends the
    transfer's sentence, so the batch no longer matters; the tagger still carries a sentence's
    state into the next sentence (the HMM tagger does not reset on a flush: 17 of 300 of the
    demo's ca>en round trips differ from `apertium -u` on the sentence alone, 0 of 300 en>es;
    a fixed sentence sent before each one does not remove it), so a translation can depend on
    the texts the pipeline translated before it: the shard's order,
    the translation cache's hits, a restart. The cache keeps the first translation made, so
    reruns and resumed runs never change a stored view.
    """

    name = "apertium"
    # A batch gets a time limit from its size: no single sentence can stall a run (the batch
    # is then halved until the slow sentence is alone, and that one is rejected as empty).
    BATCH_SECONDS, SECONDS_PER_KB = 20.0, 2.0

    def __init__(self, src: str, tgt: str, *, timeout_s: float | None = None) -> None:
        self.src, self.tgt = src, tgt
        self.timeout_s = timeout_s  # None: from the batch size
        self.mode = self.mode_for(src, tgt)
        # The package names the engine in cache keys; a mode installed from elsewhere, its own name.
        self.package = apertium_package(src, tgt) or f"apertium-{self.mode}"
        self.model = self.package
        self.revision = debian_version(self.package)
        self._pipeline: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()

    @staticmethod
    def mode_for(src: str, tgt: str) -> str:
        """The installed mode translating src>tgt: named by ISO 639-3 codes or by ISO 639-1 codes."""
        codes = [APERTIUM_CODES.get(lang) for lang in (src, tgt)]
        if None in codes:
            raise EngineError(f"apertium: no language code known for {src}>{tgt}; use one of {sorted(APERTIUM_CODES)}")
        installed = apertium_modes(apertium_modes_dir())
        for mode in (f"{codes[0]}-{codes[1]}", f"{src}-{tgt}"):
            if mode in installed:
                return mode
        raise EngineError(_missing_direction(src, tgt, installed))

    def _start(self) -> subprocess.Popen[bytes]:
        if self._pipeline is not None and self._pipeline.poll() is None:
            return self._pipeline
        script = subprocess.run(
            ["apertium-wblank-mode", "-z", str(apertium_mode_file(self.mode))],
            capture_output=True,
            text=True,
            check=True,
            env=program_env(),
        ).stdout
        # $1 = generator option (-n: no '*' marks on unknown words), $2 = tagger option.
        self._pipeline = subprocess.Popen(
            ["bash", "-c", script, "apertium", "-n", ""],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            env=program_env(),
        )
        return self._pipeline

    def _limit(self, payload: bytes) -> float:
        if self.timeout_s is not None:
            return self.timeout_s
        return self.BATCH_SECONDS + self.SECONDS_PER_KB * len(payload) / 1024

    def _format(self, program: str, data: bytes) -> bytes:
        try:
            proc = subprocess.run([program], input=data, capture_output=True, check=False, timeout=self._limit(data),
                                  env=program_env())  # fmt: skip
        except subprocess.TimeoutExpired:
            raise EngineError(f"{program} took longer than {self._limit(data):.0f} s on one batch") from None
        if proc.returncode != 0:
            raise EngineError(
                f"{program} failed (exit {proc.returncode}): {proc.stderr.decode(errors='replace')[:300]}"
            )
        return proc.stdout

    def _round(self, blocks: list[bytes]) -> list[bytes]:
        """Each block through the pipeline on its own (a NUL after each flushes it and ends its sentence)."""
        pipeline = self._start()
        assert pipeline.stdin is not None and pipeline.stdout is not None
        payload = b"".join(block + b"\0" for block in blocks)
        # Write from a thread: a large batch would otherwise fill the pipes and deadlock.
        writer = threading.Thread(target=_write_all, args=(pipeline.stdin, payload), daemon=True)
        writer.start()
        out = bytearray()
        limit = self._limit(payload)
        deadline = time.monotonic() + limit
        ended = 0  # NULs read so far: counted per chunk, not over the whole output again
        while ended < len(blocks):
            ready, _, _ = select.select([pipeline.stdout], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                self.close()  # the pipeline may still be chewing: a fresh one serves the next batch
                raise EngineError(f"the apertium {self.mode} pipeline took longer than {limit:.0f} s on one batch")
            chunk = os.read(pipeline.stdout.fileno(), 1 << 16)
            if not chunk:
                self.close()
                raise EngineError(f"the apertium {self.mode} pipeline exited mid-batch; the batch was not written")
            seen = len(out)
            out += chunk
            ended += chunk.count(b"\0")
            if out.startswith(b"\0") or b"\0\0" in out[max(0, seen - 1) :]:
                # An empty block: a program died on it, and the blocks after it will never come.
                self.close()
                raise EngineError(f"apertium {self.mode} returned nothing for a sentence; the batch was not written")
        writer.join()
        return bytes(out).split(b"\0")[: len(blocks)]

    def translate(self, texts: list[str], src: str, tgt: str, decoding: DecodingSpec) -> list[list[str]]:
        if (src, tgt) != (self.src, self.tgt):
            raise EngineError(f"this apertium engine translates {self.src}>{self.tgt}, not {src}>{tgt}")
        if not texts:
            return []
        if any("\n" in t or "\r" in t or "\0" in t for t in texts):
            raise EngineError("apertium needs single-line texts without NUL bytes: normalise whitespace first")
        with self._lock:
            return [[line] for line in self._isolating_failures(texts)]

    def _isolating_failures(self, texts: list[str]) -> list[str]:
        """A sentence that crashes one of Apertium's programs (it happens: eng-cat on "a ball
        that is quickly approaching the goal box.") loses its batch; halve the batch until
        that sentence is alone, and give it an empty translation, so its view is rejected
        as empty and the others go on. A batch in which every sentence fails is a broken
        installation, not a bad sentence: that stops the run."""
        try:
            return self._translate_batch(texts)
        except EngineError as exc:
            self.close()  # the pipeline lost a program: start a fresh one
            if len(texts) == 1:
                warnings.warn(f"apertium {self.mode} cannot translate {texts[0]!r}: {exc}", stacklevel=2)
                return [""]
            middle = len(texts) // 2
            out = self._isolating_failures(texts[:middle]) + self._isolating_failures(texts[middle:])
            if len(texts) > 2 and not any(out):  # not one or two bad sentences: every one fails
                raise
            return out

    def _translate_batch(self, texts: list[str]) -> list[str]:
        # Stripped, and blank ones never sent: destxt would fold edge blanks into the newline's
        # superblank, and the batch could no longer be cut into its sentences.
        texts = [text.strip() for text in texts]
        sent = [text for text in texts if text]
        if not sent:
            return texts
        deformatted = self._format("apertium-destxt", ("\n".join(sent) + "\n").encode("utf-8"))
        blocks = _sentences(deformatted, len(sent))
        translated = self._format("apertium-retxt", b"".join(self._round(blocks))).decode("utf-8")
        lines = translated.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        if len(lines) != len(sent):
            raise EngineError(
                f"apertium {self.mode} returned {len(lines)} lines for {len(sent)} inputs; the batch was not written"
            )
        out = iter(line.strip() for line in lines)
        return [next(out) if text else "" for text in texts]

    def close(self) -> None:
        pipeline, self._pipeline = self._pipeline, None
        if pipeline is not None and pipeline.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pipeline.pid, signal.SIGTERM)
            pipeline.wait(timeout=10)

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()


# apertium-destxt ends its output so (a dummy full stop ends the last sentence) and turns each
# newline into this superblank; a literal "[" in a text comes out escaped ("\\[").
_DESTXT_END, _DESTXT_NEWLINE = b".[][\n]", b"[\n]"


def _sentences(deformatted: bytes, count: int) -> list[bytes]:
    """`apertium-destxt`'s output of `count` lines cut into what it makes of each line alone."""
    lines = deformatted.removesuffix(_DESTXT_END).split(_DESTXT_NEWLINE)
    if not deformatted.endswith(_DESTXT_END) or len(lines) != count:
        raise EngineError(f"apertium-destxt's output of {count} lines cannot be cut into {count} sentences")
    return [line + _DESTXT_END for line in lines]


def _write_all(stream, data: bytes) -> None:
    with contextlib.suppress(BrokenPipeError):
        stream.write(data)
        stream.flush()


def _build(src: str, tgt: str, options: EngineOptions) -> ApertiumEngine:
    if options.model:
        raise EngineError("apertium takes no model: remove model/models or choose engine hf or ctranslate2")
    return ApertiumEngine(src, tgt)


ENGINE = Engine(
    _build, needs_model=False, description="rule-based MT (Debian's apertium packages), deterministic",
    batch_invariant=True,
)
