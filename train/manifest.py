"""An exported model's manifest (`viewmill.json`) and what it vouches for: the sha256 of every
file the export wrote, so a folder whose files differ is never taken for that model; and the
one error a full disk during export ends in."""

from __future__ import annotations

import errno
import json
from pathlib import Path, PurePosixPath

from viewmill.storage.files import file_sha256
from viewmill.train.encoder import EncoderError

MANIFEST = "viewmill.json"
CARD = "README.md"
# Manifest key: {path relative to the model folder: sha256} of every file the export wrote but
# the manifest itself and the card (documentation, which a user may edit).
HASHES = "files_sha256"
# Files sentence-transformers/transformers load weights from: one that the export did not write
# may change what the model computes, so it breaks the folder's identity too.
WEIGHT_SUFFIXES = frozenset({".safetensors", ".bin", ".pt", ".pth"})


class ModelIdentityError(EncoderError):
    """A model folder's files are not those its manifest recorded at export (or the manifest is
    unreadable); the message names the file and the fix."""


class ExportError(OSError):
    """An export that could not be written (a full disk); the message names the folder and the fix."""


def read_manifest(folder: Path) -> dict:
    path = folder / MANIFEST
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelIdentityError(
            f"{path} is not readable JSON ({exc}): restore it from the export, or remove it to use {folder} as a "
            "plain model"
        ) from None
    if not isinstance(manifest, dict):
        raise ModelIdentityError(f"{path} is not a viewmill manifest (not a JSON object): remove it, or export again")
    return manifest


def _relative(folder: Path, path: Path) -> str:
    return path.relative_to(folder).as_posix()


def file_hashes(folder: Path) -> dict[str, str]:
    """The sha256 of every file under `folder` except the manifest and the card: every module's
    weights, configs, tokenizer files and carried code (each changes what the model computes)."""
    files = sorted(p for p in folder.rglob("*") if p.is_file() and _relative(folder, p) not in (MANIFEST, CARD))
    return {_relative(folder, p): file_sha256(p) for p in files}


def check_files(folder: Path, manifest: dict, fix: str) -> bool:
    """Whether `folder` holds the files its manifest recorded at export, unchanged.

    True when every recorded file is there with its sha256 and no weights file was added;
    False when the manifest records no hashes (an export older than them: nothing to check
    against, the caller must not trust it); otherwise a ModelIdentityError naming the file and
    `fix`. Every recorded file is read in full (streamed; about 1 s per GB).
    """
    recorded = manifest.get(HASHES)
    if not isinstance(recorded, dict) or not recorded:
        return False
    claim = f"this is not the model {manifest.get('model_id')}"
    for name, digest in sorted(recorded.items()):
        path = folder / name
        if PurePosixPath(name).is_absolute() or ".." in PurePosixPath(name).parts:
            raise ModelIdentityError(f"{folder / MANIFEST} records a file outside the folder ({name}): {fix}")
        if not path.is_file():
            raise ModelIdentityError(f"{path} is missing, but {MANIFEST} recorded it at export: {claim}; {fix}")
        if file_sha256(path) != digest:
            raise ModelIdentityError(
                f"{path} does not match the sha256 its {MANIFEST} recorded at export: {claim}; {fix}"
            )
    added = sorted(
        p for p in folder.rglob("*")
        if p.is_file() and p.suffix in WEIGHT_SUFFIXES and _relative(folder, p) not in recorded
    )  # fmt: skip
    if added:
        raise ModelIdentityError(
            f"{added[0]} is a weights file that {MANIFEST} did not record at export: {claim}; {fix}"
        )
    return True


def is_disk_full(exc: BaseException) -> bool:
    """Whether `exc` (or what it wraps) is a full disk or a spent quota: an OSError's errno, or
    the text of errors that carry none (safetensors' `SafetensorError ... os error 28`)."""
    seen: BaseException | None = exc
    for _ in range(16):  # a chain, bounded: chains can loop
        if seen is None:
            break
        if isinstance(seen, OSError) and seen.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        text = str(seen).lower()
        if any(sign in text for sign in ("no space left on device", "os error 28", "storagefull", "quota exceeded")):
            return True
        seen = seen.__cause__ or seen.__context__
    return False
