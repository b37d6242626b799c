"""Synonym replacement with WordNet 3.0, read by nltk from Debian's wordnet-base files."""

from __future__ import annotations

import os
import random
import re
import shutil
from functools import cache
from pathlib import Path

from viewmill.augment.engines import debian_version
from viewmill.storage.files import build_dir_atomically, user_cache_dir
from viewmill.storage.ids import fingerprint

WORDNET_FILES = Path(os.environ.get("VIEWMILL_WORDNET_DIR", "/usr/share/wordnet"))
LEXNAMES = Path(__file__).with_name("wordnet_lexnames.txt")

# Function words are never replaced (no tagger is available offline to tell content words).
STOPWORDS = frozenset(
    """a an the and or but if then else of at by for with about against between into through during before after
    above below to from up down in out on off over under again further once here there when where why how all any
    both each few more most other some such no nor not only own same so than too very can will just don should now
    is are was were be been being have has had having do does did doing i me my we our you your he him his she her
    it its they them their what which who whom this that these those am would could might must shall may also
    one two three four five six seven eight nine ten""".split()
)
_WORD = re.compile(r"[A-Za-z]+(?:-[A-Za-z]+)*")


class WordNetError(RuntimeError):
    """WordNet's files cannot be read; the message says how to install them."""


def _corpus_dir() -> Path:
    """A directory nltk accepts: Debian's files plus the `lexnames` file Debian leaves out.

    nltk refuses symlinks and hard links that could leave its root, so the files (about
    30 MB) are copied into a cache directory once.
    """
    if not (WORDNET_FILES / "data.noun").is_file():
        raise WordNetError(
            f"WordNet 3.0 is not at {WORDNET_FILES}: apt-get install wordnet-base "
            "(or set VIEWMILL_WORDNET_DIR to a folder with data.noun, index.noun, ...)"
        )
    version = debian_version("wordnet-base")
    target = user_cache_dir() / f"wordnet-{fingerprint(str(WORDNET_FILES), version)[:12]}"
    if (target / "lexnames").is_file():
        return target

    def copy(staging: Path) -> None:
        staging.mkdir(parents=True)
        for source in WORDNET_FILES.iterdir():
            if source.is_file():
                shutil.copy2(source, staging / source.name)
        shutil.copy2(LEXNAMES, staging / "lexnames")

    return build_dir_atomically(target, copy)


@cache
def wordnet():
    import warnings

    import nltk
    from nltk.corpus.reader.wordnet import WordNetCorpusReader

    class LocalWordNet(WordNetCorpusReader):
        def map_wn(self, version="wordnet"):
            # nltk maps to its downloadable 'wordnet' corpus for multilingual data; these
            # files are WordNet 3.0 itself and no multilingual data is used.
            return None

    root = _corpus_dir()
    if str(root) not in nltk.data.path:
        nltk.data.path.append(str(root))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "multilingual functions are not available": not used
        return LocalWordNet(str(root), None)


def wordnet_revision() -> str:
    return f"wordnet-3.0@{debian_version('wordnet-base')}"


def synonyms(word: str) -> list[str]:
    """Single-word synonyms from the word's most frequent sense, if `word` is a base form."""
    wn = wordnet()
    lower = word.lower()
    senses = wn.synsets(lower)
    if not senses:
        return []
    if any(wn.morphy(lower, pos) not in (None, lower) for pos in "nvar"):
        return []  # an inflected reading ("dogs", "running"): a base-form synonym would break the grammar
    names = [lemma.name() for lemma in senses[0].lemmas()]  # WordNet lists the most frequent sense first
    return [n for n in dict.fromkeys(names) if n.lower() != lower and "_" not in n and n.isascii()]


def replace_synonyms(text: str, ratio: float, seed: int) -> tuple[str, int]:
    """Replace about `ratio` of the replaceable content words; returns (text, replaced)."""
    rng = random.Random(seed)
    matches = [m for m in _WORD.finditer(text) if m.group().lower() not in STOPWORDS and len(m.group()) > 2]
    options = [(m, synonyms(m.group())) for m in matches]
    options = [(m, syn) for m, syn in options if syn]
    if not options:
        return text, 0
    count = max(1, round(ratio * len(matches))) if matches else 0
    chosen = sorted(rng.sample(options, min(count, len(options))), key=lambda item: item[0].start())
    out, last = [], 0
    for match, candidates in chosen:
        word = rng.choice(candidates)
        if match.group()[0].isupper():
            word = word[0].upper() + word[1:]
        out.append(_fix_article(text[last : match.start()], word) + word)
        last = match.end()
    out.append(text[last:])
    return "".join(out), len(chosen)


_ARTICLE_BEFORE = re.compile(r"\b([Aa])(n?)(\s+)$")


def _fix_article(before: str, word: str) -> str:
    """'a' or 'an' in front of a replaced word follows the new word's first letter."""
    match = _ARTICLE_BEFORE.search(before)
    if match is None:
        return before
    article = match.group(1) + ("n" if word[0].lower() in "aeiou" else "")
    return before[: match.start()] + article + match.group(3)
