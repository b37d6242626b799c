"""Files and folders viewmill writes at a path the user gives: never onto the lake, always whole.

Every command that writes at a user's path goes through `OutputGuard` (`viewmill sql --output`,
`lake export`, `lake export-table`, `views report --out`, `eval --out`, `data fetch --data-dir`;
tests/pipelines/cli/test_output_guard.py enumerates the CLI's options so a new one cannot skip it):
- refused (`OutputRefused`, exit 2) when the path, however reached (symlinks resolved), is inside
  the lake folder or its data folder, is the catalog file or its journal, or is a hard link to a
  file of the lake (same inode);
- written to a temporary file beside the target, then renamed over it (`atomic_file`): a failed
  write leaves no partial file and the old target as it was, and a name that is a link is
  replaced, never written through.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from viewmill.storage.catalog import DATA_PATH_ENV, Catalog, LakeError

if TYPE_CHECKING:
    from viewmill.storage.lake import Lake

__all__ = ["OutputGuard", "OutputRefused", "atomic_file"]


class OutputRefused(LakeError):
    """An output path that would land on the lake's own files."""


@dataclass(frozen=True)
class OutputGuard:
    """What no output may touch: the lake folder `root` (catalog and, by default, data), the
    data folder `data_path` (local; an s3:// one is out of a local path's reach), the catalog file."""

    root: Path
    catalog: Catalog
    data_path: str

    @classmethod
    def of(cls, lake: Lake) -> OutputGuard:
        return cls(Path(lake.root), lake.catalog, lake.data_path)

    @classmethod
    def at(cls, root: Path, catalog: str | None = None, data_path: str | None = None) -> OutputGuard:
        """The guard of the lake at `root` without opening it (for a check before any work; a
        PostgreSQL catalog's recorded data path is known only to `of` an open lake)."""
        data = data_path or os.environ.get(DATA_PATH_ENV) or str(Path(root) / "data")
        return cls(Path(root), Catalog.parse(catalog, Path(root)), data)

    def check(self, path: Path, *, replaces_folder: bool = False) -> Path:
        """`path` (expanded) when nothing of the lake can be reached through it; else OutputRefused.
        `replaces_folder`: the output takes the place of a whole folder, so one holding the lake is refused too."""
        target = Path(os.path.realpath(path.expanduser()))  # realpath: a symlink loop is no crash
        for folder in self._folders():
            if target == folder or folder in target.parents:
                raise OutputRefused(
                    f"refusing to write {path}: it is inside the lake ({folder}), where it could overwrite the "
                    "catalog or a data file; write it outside the state directory's lake"
                )
            if replaces_folder and target in folder.parents:
                raise OutputRefused(
                    f"refusing to write {path}: it holds the lake ({folder}), which replacing the folder would "
                    "delete; name a new folder"
                )
        catalog = self._catalog_file()
        if catalog is not None and target.parent == catalog.parent and target.name.startswith(catalog.name):
            raise OutputRefused(
                f"refusing to write {path}: it is the lake's catalog {self.catalog.target} (or its journal); "
                "write it somewhere else"
            )
        linked = self._hard_linked(target)
        if linked is not None:
            raise OutputRefused(
                f"refusing to write {path}: it is a hard link to the lake's file {linked} (one file, two names); "
                "remove the link or write somewhere else"
            )
        return path.expanduser()

    def folder(self, path: Path) -> Path:
        """A checked output folder, made (with its parents) when missing."""
        checked = self.check(path)
        checked.mkdir(parents=True, exist_ok=True)
        return checked

    @contextmanager
    def atomic(self, path: Path) -> Iterator[Path]:
        """A checked `path`'s temporary twin (see `atomic_file`)."""
        with atomic_file(self.check(path)) as partial:
            yield partial

    def write_bytes(self, path: Path, data: bytes) -> Path:
        with self.atomic(path) as partial:
            partial.write_bytes(data)
        return path

    def write_text(self, path: Path, text: str) -> Path:
        return self.write_bytes(path, text.encode("utf-8"))

    def _folders(self) -> list[Path]:
        local = [] if self.data_path.startswith("s3://") else [Path(self.data_path)]
        return [Path(os.path.realpath(folder)) for folder in (self.root, *local)]

    def _catalog_file(self) -> Path | None:
        return None if self.catalog.kind == "postgres" else Path(os.path.realpath(self.catalog.target))

    def _hard_linked(self, target: Path) -> Path | None:
        """The lake file that is `target` under another name, if any. Only a file with several
        names is looked for among the lake's files, so an ordinary output costs one stat."""
        try:
            found = target.stat()
        except OSError:
            return None
        if found.st_nlink < 2 or not target.is_file():
            return None
        identity = (found.st_dev, found.st_ino)
        for candidate in self._lake_files():
            try:
                seen = candidate.stat()
            except OSError:
                continue
            if (seen.st_dev, seen.st_ino) == identity:
                return candidate
        return None

    def _lake_files(self) -> Iterator[Path]:
        catalog = self._catalog_file()
        if catalog is not None and catalog.parent.is_dir():
            yield from (entry for entry in catalog.parent.iterdir() if entry.name.startswith(catalog.name))
        for folder in self._folders():
            for parent, _, names in os.walk(folder):
                yield from (Path(parent) / name for name in names)


@contextmanager
def atomic_file(path: Path) -> Iterator[Path]:
    """A new temporary file beside `path` (same folder, same suffix, so writers that read the
    format from the name still can) to write; renamed over `path` when the block ends without an
    error, removed when it does not. The folder must exist."""
    if not path.parent.is_dir():
        raise OutputRefused(f"cannot write {path}: the folder {path.parent} does not exist")
    if path.is_dir():
        raise OutputRefused(f"cannot write {path}: it is a folder; name a file")
    partial = path.with_name(f".{path.stem}.partial-{secrets.token_hex(4)}{path.suffix}")
    os.close(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))  # the umask decides its mode
    try:
        yield partial
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
