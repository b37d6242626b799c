"""Exported models: the sentence-transformers directory with its model card and manifest,
the lock that keeps two runs off one model, and the one model id evaluations record (a
manifest's id only where the folder's files are those it recorded at export)."""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from filelock import FileLock, Timeout
from viewmill.storage.crash_points import CRASH_ENV, crash_point
from viewmill.storage.files import build_dir_atomically
from viewmill.train.card import EVALUATION, base_license, card_name, model_card
from viewmill.train.encoder import encoder_fingerprint, module_types
from viewmill.train.manifest import (
    CARD,
    HASHES,
    MANIFEST,
    WEIGHT_SUFFIXES,
    ExportError,
    ModelIdentityError,
    check_files,
    file_hashes,
    is_disk_full,
    read_manifest,
)
from viewmill.train.objectives import OBJECTIVES

__all__ = [
    "CRASH_ENV", "MANIFEST", "ExportError", "ModelIdentityError", "base_license", "export", "model_id_of",
    "read_manifest", "reusable_export", "same_weights", "write_card",
]  # fmt: skip
log = logging.getLogger(__name__)


class ModelBusyError(RuntimeError):
    """Another run holds the lock on a model being trained."""


@contextmanager
def model_lock(target: Path, what: str = "model") -> Iterator[None]:
    """Hold `<target>.lock` or refuse at once: two runs training one model would share its
    checkpoints and overwrite each other. The OS drops the lock when its process dies."""
    target.parent.mkdir(parents=True, exist_ok=True)
    path = target.with_name(target.name + ".lock")
    lock = FileLock(str(path), timeout=0)
    try:
        lock.acquire()
    except Timeout:
        raise ModelBusyError(
            f"another run is training the {what} {target} (it holds {path}): wait for it to finish and run "
            "again; the finished model is then reused"
        ) from None
    try:
        yield
    finally:
        # Removed while still held: filelock (4.x) sees that a contender's lock is on an unlinked
        # file and retries, so no two runs can hold "the" lock; no `.lock` is left in models/.
        with contextlib.suppress(OSError):
            path.unlink()
        lock.release()


def is_complete_model(path: Path) -> bool:
    return (path / MANIFEST).is_file()


def model_id_of(resolved: str) -> str:
    """The id evaluations and the `models` table share: a viewmill model's own id (from its
    manifest) when the folder's files are those the manifest recorded at export, otherwise
    the content hash of the directory (a hub id is its own).

    A folder whose files differ (weights changed in place, a manifest copied beside other
    weights) is refused rather than scored under another id: its name and manifest say it is
    that model, so any number reported for it would be read as that model's. A manifest
    older than the recorded hashes cannot vouch for anything: the folder is then a plain
    model under its directory hash, and a warning says so.
    """
    folder = Path(resolved)
    if not (folder / MANIFEST).is_file():
        return encoder_fingerprint(resolved)
    manifest = read_manifest(folder)
    model_id = manifest.get("model_id")
    fix = f"remove {folder / MANIFEST} to evaluate the folder as a plain model, or export the model again"
    if check_files(folder, manifest, fix):
        return model_id or encoder_fingerprint(resolved)
    if model_id:
        log.warning(
            "%s was written before viewmill recorded its model's file hashes, so it cannot vouch for the weights "
            "beside it: %s is evaluated as a plain model under its directory hash, not as the model %s (export "
            "the model again to evaluate it under its own id)", folder / MANIFEST, folder, model_id,
        )  # fmt: skip
    return encoder_fingerprint(resolved)


def reusable_export(folder: Path, model_id: str) -> dict:
    """The manifest of the export a run reuses (or publishes) as the model `model_id`, after
    checking that it names that model and that its files are those it recorded at export.

    An export older than the recorded hashes is reused with a warning: its id comes from the
    run's own inputs (the folder is named after it), but its weights cannot be checked.
    """
    manifest = read_manifest(folder)
    fix = f"move {folder} aside (or delete it) and run again to train the model again"
    if manifest.get("model_id") != model_id:
        raise ModelIdentityError(
            f"{folder / MANIFEST} names the model {manifest.get('model_id')}, but {folder} is where the model "
            f"{model_id} is exported: {fix}"
        )
    if not check_files(folder, manifest, fix):
        log.warning(
            "%s was exported before viewmill recorded its model's file hashes: its weights cannot be checked "
            "against %s; reusing it as the model %s (%s)", folder, MANIFEST, model_id, fix,
        )  # fmt: skip
    return manifest


def export(sentence_model, out_dir: Path, manifest: dict) -> None:
    """Save a sentence-transformers directory with its card and manifest, whole or not at all.

    The manifest records the sha256 of every file written (`files_sha256`), so the model id
    it states holds only for these files, among them what the objective's `on_export` adds (an
    IS-BERT model carries its CNN's code, so it loads with `trust_remote_code=True` without
    viewmill). A full disk ends in one ExportError naming the folder and the fix; the partial
    folder is removed.
    """
    on_export = OBJECTIVES.get(manifest["train_config"]["objective"]).on_export

    def write(staging: Path) -> None:
        sentence_model.save(str(staging), create_model_card=False)
        if on_export is not None:
            on_export(staging)
        crash_point("export-partial")
        model_card(card_name(out_dir, manifest), manifest).save(staging / CARD)
        normal_file_modes(staging)
        recorded = {**manifest, HASHES: file_hashes(staging)}
        (staging / MANIFEST).write_text(json.dumps(recorded, indent=2, default=str), encoding="utf-8")

    try:
        build_dir_atomically(out_dir, write, replace=True)
    except Exception as exc:
        if not is_disk_full(exc):
            raise
        # safetensors says only "os error 28": name the folder, what is kept and the way out.
        raise ExportError(
            f"no space left on device while exporting the model to {out_dir}: the partial export was removed and "
            f"nothing written before was changed; free space there (df -h {out_dir.parent}) or move the state "
            "directory to a larger disk, then run again"
        ) from exc


def normal_file_modes(folder: Path) -> None:
    """Every file readable as the umask allows: transformers writes its weights through a
    private temporary file (mode 0600), which would hide them from other users of a shared model."""
    probe = folder / ".mode-probe"
    os.close(os.open(probe, os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o666))  # the umask, without changing it
    mode = probe.stat().st_mode & 0o777
    probe.unlink()
    for path in folder.rglob("*"):
        if path.is_file() and not path.is_symlink():
            path.chmod(mode)


def same_weights(folder: Path, start: str) -> bool:
    """Whether the model in `folder` holds the weights of `start` (a local model folder), tensor for
    tensor: the same modules, and every tensor of every weights file equal to the start's same-named
    tensor in the same file (the start may hold more buffers, e.g. position ids). Weights other than
    safetensors are not compared: False."""
    begin = Path(start)
    classes = lambda model: [kind.rsplit(".", 1)[-1] for kind in module_types(model)]  # noqa: E731  # moved between versions
    if not begin.is_dir() or classes(str(folder)) != classes(start):
        return False
    files = sorted(p.relative_to(folder) for p in folder.rglob("*") if p.suffix in WEIGHT_SUFFIXES)
    if not files or any(f.suffix != ".safetensors" or not (begin / f).is_file() for f in files):
        return False
    return all(_same_tensors(folder / f, begin / f) for f in files)


def _same_tensors(path: Path, start: Path) -> bool:
    import torch
    from safetensors import safe_open

    with safe_open(str(path), "pt") as mine, safe_open(str(start), "pt") as theirs:
        known = set(theirs.keys())
        names = mine.keys()  # a safe_open handle is not iterable
        return all(name in known and torch.equal(mine.get_tensor(name), theirs.get_tensor(name)) for name in names)


def write_card(model_dir: Path, tests: list[dict]) -> None:
    """Record the test results of the run that trained the model in its manifest (`EVALUATION`),
    then write its card again from it. Both are replaced whole and neither is among the files
    the manifest's hashes vouch for, which are checked first: scores go only beside the weights
    they were recorded for."""
    manifest = read_manifest(model_dir)
    check_files(model_dir, manifest, "export the model again, then evaluate it")
    _replace(model_dir / MANIFEST, lambda path: path.write_text(
        json.dumps({**manifest, EVALUATION: tests}, indent=2, default=str), encoding="utf-8"))  # fmt: skip
    _replace(model_dir / CARD, lambda path: model_card(model_dir.name, read_manifest(model_dir)).save(path))


def _replace(target: Path, write: Callable[[Path], None]) -> None:
    """`target` written whole: beside it first, then renamed over it."""
    partial = target.with_name(f".{target.name}.partial-{os.getpid()}")
    try:
        write(partial)
        partial.replace(target)
    finally:
        partial.unlink(missing_ok=True)
