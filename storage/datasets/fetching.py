"""Fetching the public data sets into a data directory, and finding them by name.

A recipe names a file inside a data set as `data:<folder>/<file>` (e.g.
`data:stsbenchmark/sts-test.csv`). It resolves to `$VIEWMILL_DATA/<folder>/<file>`
(default `~/.cache/viewmill/data`), falling back to the developer checkout's
`../shared/data/<folder>/<file>` only where that file exists.

A download goes to `<name>.part`, resumes with an HTTP Range request when interrupted,
and is renamed into place only after its sha256 matched: the registry's, or the one
recorded in `viewmill-data.lock.json` by the first download (trust on first use). A data
set's folder is built in a staging folder and renamed whole (storage/files.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tarfile
import zipfile
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import filelock
import httpx
from viewmill.storage.datasets.sources import BY_NAME, DATASETS, Dataset, Source, lookup
from viewmill.storage.files import build_dir_atomically, file_sha256, user_cache_dir

DATA_ENV = "VIEWMILL_DATA"
PREFIX = "data:"
LOCK_FILE = "viewmill-data.lock.json"
ATTEMPTS = 3  # downloads per file in one fetch, each resuming the last
CHUNK = 1 << 16


class DataFetchError(RuntimeError):
    """A data set cannot be fetched or found; the message names it and the fix."""


def data_dir() -> Path:
    """$VIEWMILL_DATA, else $XDG_CACHE_HOME/viewmill/data, else ~/.cache/viewmill/data."""
    if os.environ.get(DATA_ENV):
        return Path(os.environ[DATA_ENV]).expanduser()
    return user_cache_dir() / "data"


def shared_data_dir() -> Path:
    """The developer checkout's ../shared/data (beside the repository), present or not."""
    return Path(__file__).resolve().parents[2].parent / "shared" / "data"  # storage/datasets/ -> the checkout


def dataset_for(relative: str) -> Dataset | None:
    """The data set whose folder holds `relative` (a path under the data directory)."""
    matches = [d for d in DATASETS if relative == d.folder or relative.startswith(d.folder + "/")]
    return max(matches, key=lambda d: len(d.folder), default=None)


def resolve(reference: str | Path) -> Path:
    """`data:<folder>/<file>` -> the data directory's copy, else ../shared/data's where it
    exists, else the data directory's path (whose absence the reader reports with `missing_hint`)."""
    relative = str(reference).removeprefix(PREFIX).strip("/")
    if ".." in Path(relative).parts or not relative:
        raise DataFetchError(f"'{reference}' is not a data set path: write data:<folder>/<file>, e.g. "
                             "data:stsbenchmark/sts-test.csv (viewmill data list)")  # fmt: skip
    own = data_dir() / relative
    shared = shared_data_dir() / relative
    return shared if not own.exists() and shared.exists() else own


def is_reference(path: str | Path) -> bool:
    return str(path).startswith(PREFIX)


def missing_hint(path: Path) -> str:
    """'run viewmill data fetch NAME' for a path inside the data directory, else ''."""
    try:
        relative = path.resolve().relative_to(data_dir().resolve()).as_posix()
    except ValueError:
        return ""
    dataset = dataset_for(relative)
    return f"; fetch it with: viewmill data fetch {dataset.name}" if dataset else ""


def is_fetched(dataset: Dataset, root: Path | None = None) -> bool:
    return ((root or data_dir()) / dataset.folder).is_dir()


def fetch(name: str, *, root: Path | None = None, force: bool = False, log: Callable[[str], None] = print) -> Path:
    """Download, verify and unpack one data set into the data directory; returns its folder."""
    dataset = lookup(name)
    if dataset is None:
        raise DataFetchError(f"unknown data set '{name}': choose one of {', '.join(BY_NAME)} or all")
    name = dataset.name
    root = root or data_dir()
    target = root / dataset.folder
    if target.is_dir() and not force:
        log(f"{name}: already in {target}")
        return target
    downloads = root / ".downloads"
    downloads.mkdir(parents=True, exist_ok=True)
    with filelock.FileLock(root / ".fetch.lock"):
        files = [(source, _download(source, downloads, root, log)) for source in dataset.sources]
        target.parent.mkdir(parents=True, exist_ok=True)
        build_dir_atomically(target, lambda staging: _unpack(dataset, files, staging), replace=force)
        for _, path in files:
            path.unlink(missing_ok=True)  # the verified archives are not needed once unpacked
    log(f"{name}: {target} ({dataset.licence})")
    return target


def _download(source: Source, downloads: Path, root: Path, log: Callable[[str], None]) -> Path:
    final = downloads / hashlib.sha256(source.url.encode()).hexdigest()[:16]
    part = final.with_name(final.name + ".part")
    expected = source.sha256 or _locked(root).get(source.url, {}).get("sha256")
    for attempt in range(1, ATTEMPTS + 1):
        try:
            _stream(source.url, part)
            break
        except httpx.HTTPStatusError as exc:
            part.unlink(missing_ok=True)
            raise DataFetchError(f"{source.url}: the server answered {exc.response.status_code}") from None
        except httpx.TransportError as exc:
            if attempt == ATTEMPTS:
                raise DataFetchError(
                    f"{source.url}: download interrupted {ATTEMPTS} times ({type(exc).__name__}); "
                    f"run the same command again to resume from {part.stat().st_size if part.exists() else 0} bytes"
                ) from None
            log(f"{source.url}: interrupted ({type(exc).__name__}), resuming")
    digest = file_sha256(part)
    if expected and digest != expected:
        part.unlink()
        origin = "the registry" if source.sha256 else f"{root / LOCK_FILE} (first download)"
        raise DataFetchError(
            f"{source.url}: sha256 {digest} does not match {expected} recorded in {origin}; the file was "
            "deleted. If the source really changed, delete its entry from the lock file and fetch again."
        )
    if not expected:
        _record(root, source.url, digest, part.stat().st_size)
        log(f"{source.url}: sha256 {digest} pinned in {root / LOCK_FILE} (first download)")
    part.replace(final)
    return final


def _stream(url: str, part: Path) -> None:
    """Append the rest of `url` to `part`: a Range request when part has bytes already."""
    have = part.stat().st_size if part.exists() else 0
    # identity: the bytes hashed and resumed are the file's own, never a compressed transfer of it
    headers = {"Accept-Encoding": "identity"} | ({"Range": f"bytes={have}-"} if have else {})
    with httpx.stream("GET", url, headers=headers, follow_redirects=True, timeout=60) as response:
        if response.status_code == 416:  # nothing left to send: part is already whole
            return
        response.raise_for_status()
        resumed = response.status_code == 206
        with part.open("ab" if resumed else "wb") as out:  # a 200 restarts from byte 0
            for chunk in response.iter_raw():  # unbuffered: bytes received before a cut are kept
                out.write(chunk)


def _locked(root: Path) -> dict:
    path = root / LOCK_FILE
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def _record(root: Path, url: str, sha256: str, size: int) -> None:
    entries = _locked(root)
    entries[url] = {"sha256": sha256, "size": size, "pinned_at": datetime.now(UTC).isoformat(timespec="seconds")}
    tmp = root / (LOCK_FILE + ".tmp")
    tmp.write_text(json.dumps(entries, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    tmp.replace(root / LOCK_FILE)


def _unpack(dataset: Dataset, files: list[tuple[Source, Path]], staging: Path) -> None:
    staging.mkdir(parents=True)
    for source, path in files:
        wrote = 0
        for member, opener in _members(source, path):
            name = _destination(source, member)
            if name is None:
                continue
            out = staging / name
            if staging.resolve() not in out.resolve().parents:
                raise DataFetchError(f"{source.url}: member {member} would land outside {staging}")
            out.parent.mkdir(parents=True, exist_ok=True)
            with opener() as src, out.open("wb") as dst:
                shutil.copyfileobj(src, dst, CHUNK)
            wrote += 1
        if not wrote:
            raise DataFetchError(f"{source.url}: none of {[p for p, _ in source.members]} is in the download; "
                                 "the source's layout changed (report it)")  # fmt: skip
    if dataset.transform:
        TRANSFORMS[dataset.transform](staging)


def _destination(source: Source, member: str) -> str | None:
    """Where a member goes: an exact member maps to its destination, a prefix ending in
    "/" or "." maps everything under it (the rest of the name kept); None: not wanted."""
    for prefix, dest in source.members:
        if member == prefix:
            name = dest
        elif prefix.endswith(("/", ".")) and member.startswith(prefix):
            name = dest + member[len(prefix) :]
        else:
            continue
        for old, new in source.rename:
            name = name.replace(old, new)
        return name
    return None


def _members(source: Source, path: Path):
    """(name, open) of every regular file in the download; a plain file is the member ""."""
    if source.kind == "zip":
        with zipfile.ZipFile(path) as archive:
            for info in archive.infolist():
                if not info.is_dir():
                    yield info.filename, lambda info=info: archive.open(info)
    elif source.kind == "tar":
        with tarfile.open(path) as archive:
            for info in archive.getmembers():
                if info.isfile():
                    yield info.name, lambda info=info: archive.extractfile(info)
    else:
        yield "", lambda: path.open("rb")


def _snli_senteval(staging: Path) -> None:
    """SNLI's tab-separated files -> SentEval's s1/s2/labels (pairs without gold label dropped)."""
    for raw in sorted((staging / "raw").glob("*.txt")):
        split = raw.stem  # dev, test, train
        rows = [line.split("\t") for line in raw.read_text(encoding="utf-8").splitlines()[1:]]
        rows = [r for r in rows if len(r) > 6 and r[0] != "-"]
        for name, column in (("labels", 0), ("s1", 5), ("s2", 6)):
            (staging / f"{name}.{split}").write_text("".join(r[column] + "\n" for r in rows), encoding="utf-8")
    shutil.rmtree(staging / "raw")


TRANSFORMS: dict[str, Callable[[Path], None]] = {"snli_senteval": _snli_senteval}
