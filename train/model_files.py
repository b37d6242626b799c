"""A local model folder checked before any of it loads: not a system folder, tokenizer and
configuration files of a bounded size, and safetensors headers that agree with their files and
with the folder's config. Each refusal names the folder or file and the fix (the commands exit
2), where loading would otherwise read a huge file into memory, follow a link into the
system, or fail deep inside safetensors or transformers after a run has written."""

from __future__ import annotations

import json
import math
import os
import struct
from functools import lru_cache
from pathlib import Path


class ModelFilesError(ValueError):
    """A model folder's files cannot be loaded safely; the message names the file and the fix."""


MAX_TEXT_ENV = "VIEWMILL_MAX_TOKENIZER_MB"
# The largest common tokenizer.json files are 20-35 MB (Gemma's about 33 MB): twice that covers them.
DEFAULT_MAX_TEXT_MB = 64
# Files a tokenizer or config loader reads whole into memory.
TEXT_SUFFIXES = frozenset({".json", ".txt", ".model", ".spm", ".tiktoken"})
# No model lives in these; reading from them can hang (/dev/zero) or reach secrets (/etc/shadow).
SYSTEM_TREES = ("/etc", "/proc", "/sys", "/dev", "/boot", "/run")
# System folders that are never a model folder themselves (a model may live further down some).
SYSTEM_FOLDERS = frozenset({"/", "/usr", "/usr/lib", "/usr/lib64", "/usr/bin", "/usr/sbin", "/usr/share", "/bin",
                            "/sbin", "/lib", "/lib64", "/var", "/var/lib", "/opt", "/home", "/root"})  # fmt: skip
MAX_HEADER = 100_000_000  # safetensors' own limit on a header
DTYPE_BYTES = {"F64": 8, "I64": 8, "U64": 8, "C64": 8, "F32": 4, "I32": 4, "U32": 4, "F16": 2, "BF16": 2, "I16": 2,
               "U16": 2, "I8": 1, "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1}  # fmt: skip


def is_system_path(path: Path) -> bool:
    text = str(path)
    return text in SYSTEM_FOLDERS or any(text == tree or text.startswith(tree + "/") for tree in SYSTEM_TREES)


def check_model_folder(folder: Path) -> None:
    """Refuse a folder given as a model that is (or links to) a system folder."""
    real = folder.resolve()
    if is_system_path(real):
        how = f"is a symbolic link to the system folder {real}" if real != folder.absolute() else "is a system folder"
        raise ModelFilesError(
            f"model folder {folder} {how}, not a model: a model folder holds a model's own files (config.json, "
            "weights, tokenizer); point the setting at one, or use an embedded:NAME encoder"
        )


def check_model_files(folder: Path) -> None:
    """The tokenizer and configuration files' sizes, then every safetensors header (its offsets
    within the file, its shapes against config.json): read without loading any weights. A
    folder whose files are unchanged (names, sizes, times) is checked once per process."""
    folders = [folder, *_module_folders(folder)]
    _check_files(folder, tuple(_listing(where) for where in folders), max_text_bytes())


def _listing(folder: Path) -> tuple[tuple[str, int, int], ...]:
    entries = (entry for entry in os.scandir(folder) if entry.is_file())
    return tuple(sorted((entry.name, entry.stat().st_size, entry.stat().st_mtime_ns) for entry in entries))


@lru_cache(maxsize=64)
def _check_files(folder: Path, listings: tuple, limit: int) -> None:
    """`check_model_files` for one state of the folder's files (a refusal is not cached)."""
    folders = [folder, *_module_folders(folder)]
    for where in folders:
        for path in sorted(where.iterdir()):
            if path.suffix in TEXT_SUFFIXES or path.suffix == ".safetensors":
                _check_file(path, limit if path.suffix in TEXT_SUFFIXES else None)
    for where in folders:
        shapes = {}
        for path in sorted(where.glob("*.safetensors")):
            shapes.update({name: (path, shape) for name, shape in safetensors_shapes(path).items()})
        if shapes and (where / "config.json").is_file():
            _check_against_config(where, shapes)


def max_text_bytes() -> int:
    raw = os.environ.get(MAX_TEXT_ENV, str(DEFAULT_MAX_TEXT_MB))
    try:
        megabytes = float(raw)
    except ValueError:
        megabytes = math.nan
    if not math.isfinite(megabytes) or megabytes <= 0:
        raise ModelFilesError(f"{MAX_TEXT_ENV}={raw!r} is not a size: give megabytes above 0, e.g. {MAX_TEXT_ENV}=128")
    return int(megabytes * 1_000_000)


def _module_folders(folder: Path) -> list[Path]:
    """The module folders a sentence-transformers modules.json names (its first is usually the folder itself)."""
    listing = folder / "modules.json"
    if not listing.is_file() or listing.stat().st_size > 1_000_000:
        return []
    try:
        modules = json.loads(listing.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return []
    paths = [str(m.get("path", "")) for m in modules if isinstance(m, dict)] if isinstance(modules, list) else []
    found = [folder / p for p in paths if p and ".." not in Path(p).parts and not Path(p).is_absolute()]
    return [p for p in found if p.is_dir()]


def _check_file(path: Path, limit: int | None) -> None:
    """A regular file outside the system trees; a text file at most `limit` bytes."""
    real = path.resolve()
    if is_system_path(real) or not real.is_file():
        what = f"a link to {real}" if path.is_symlink() else "not a regular file"
        raise ModelFilesError(
            f"model file {path} is {what}, which a model never holds: replace it with the model's own file "
            "(download the model again)"
        )
    size = real.stat().st_size
    if limit is not None and size > limit:
        raise ModelFilesError(
            f"model file {path} is {size / 1e6:,.0f} MB, more than the {limit / 1e6:,.0f} MB a tokenizer or "
            "configuration file may have (the largest common tokenizer.json files are 20-35 MB, and it would be read "
            f"whole into memory): check that it is the model's own file, or raise the limit with {MAX_TEXT_ENV}"
        )


def safetensors_shapes(path: Path) -> dict[str, list[int]]:
    """Each tensor's shape from a safetensors header, after checking that the header fits the
    file and every tensor's bytes lie inside it (the header alone is read)."""
    size = path.stat().st_size
    fix = "the file is cut short or not the model's own: download the model again, or export it again"
    with path.open("rb") as handle:
        head = handle.read(8)
        length = struct.unpack("<Q", head)[0] if len(head) == 8 else None
        if length is None or length > min(MAX_HEADER, size - 8):
            raise ModelFilesError(f"{path} is not a readable safetensors file (its header does not fit the file's "
                               f"{size:,} bytes): {fix}")  # fmt: skip
        try:
            header = json.loads(handle.read(length))
        except (UnicodeDecodeError, json.JSONDecodeError):
            header = None
    if not isinstance(header, dict):
        raise ModelFilesError(f"{path} is not a readable safetensors file (its header is not a JSON object): {fix}")
    data = size - 8 - length
    shapes = {}
    for name, entry in header.items():
        if name != "__metadata__":
            shapes[name] = _tensor_shape(path, name, entry, data, fix)
    return shapes


def _tensor_shape(path: Path, name: str, entry: object, data: int, fix: str) -> list[int]:
    try:
        shape, (start, end), dtype = list(entry["shape"]), entry["data_offsets"], entry["dtype"]
    except (TypeError, KeyError, ValueError):
        shape, start, end, dtype = [], 1, 0, None
    if not all(isinstance(d, int) and d >= 0 for d in [*shape, start, end]) or start > end:
        raise ModelFilesError(f"{path}'s header gives tensor {name} no valid shape and offsets: {fix}")
    if end > data:
        raise ModelFilesError(
            f"{path}'s header says tensor {name} ({dtype} {shape}) ends at byte {end:,} of the data, but the file "
            f"holds {data:,} bytes of data: {fix}"
        )
    width = DTYPE_BYTES.get(dtype)
    if width is not None and math.prod(shape) * width != end - start:
        raise ModelFilesError(
            f"{path}'s header says tensor {name} is {dtype} {shape} ({math.prod(shape) * width:,} bytes) but gives "
            f"it {end - start:,} bytes: {fix}"
        )
    return shape


def _check_against_config(folder: Path, shapes: dict[str, tuple[Path, list[int]]]) -> None:
    """Each tensor's shape against those the folder's config.json gives the model (built on the
    meta device: no memory); a config transformers cannot build is left to the loader."""
    expected = _config_shapes(folder)
    if expected is None:
        return
    prefix, wanted = expected
    for name, (path, shape) in sorted(shapes.items()):
        key = name.removeprefix(prefix) if prefix and name.startswith(prefix) else name
        if key in wanted and list(wanted[key]) != shape:
            raise ModelFilesError(
                f"{path} holds tensor {name} of shape {shape}, but {folder / 'config.json'} makes it "
                f"{list(wanted[key])}: the weights and the config are of different models; put the model's own "
                "config.json beside its weights (download or export the model again)"
            )


def _config_shapes(folder: Path) -> tuple[str, dict[str, tuple[int, ...]]] | None:
    import torch
    from transformers import AutoConfig, AutoModel

    try:
        config = AutoConfig.from_pretrained(str(folder), local_files_only=True)
        with torch.device("meta"):
            model = AutoModel.from_config(config)
    except Exception:  # a config transformers cannot build here (custom code, an odd architecture): the loader's turn
        return None
    prefix = f"{model.base_model_prefix}." if getattr(model, "base_model_prefix", "") else ""
    return prefix, {name: tuple(tensor.shape) for name, tensor in model.state_dict().items()}
