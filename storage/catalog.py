"""Where the lake lives: its catalog (SQLite, DuckDB or PostgreSQL) and data path, their
settings, the refusal to orphan data, and what DuckDB loads to reach them (extensions, an S3
secret). Passwords never appear in a message or repr (`redact`)."""

from __future__ import annotations

import importlib
import os
import re
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from pathlib import Path

from pydantic import SecretStr

CATALOG_ENV = "VIEWMILL_CATALOG"
DATA_PATH_ENV = "VIEWMILL_DATA_PATH"


class LakeError(RuntimeError):
    """The lake cannot be opened or written; the message says why and what to do."""


def unknown_snapshot(snapshot: str, known: list[str]) -> LakeError:
    """The refusal of a pairs snapshot name the lake does not hold, naming those it does."""
    return LakeError(f"no pairs snapshot named '{snapshot}' (known: {', '.join(known) or 'none'})")


def s3_secret_sql() -> str:
    """A DuckDB secret for s3:// data paths, from the usual AWS variables plus viewmill's own
    for S3-compatible stores (MinIO, Ceph): VIEWMILL_S3_ENDPOINT, VIEWMILL_S3_URL_STYLE
    (path or vhost), VIEWMILL_S3_USE_SSL (true or false)."""
    env = os.environ
    settings = {
        "KEY_ID": env.get("AWS_ACCESS_KEY_ID"),
        "SECRET": env.get("AWS_SECRET_ACCESS_KEY"),
        "SESSION_TOKEN": env.get("AWS_SESSION_TOKEN"),
        "REGION": env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION"),
        "ENDPOINT": env.get("VIEWMILL_S3_ENDPOINT"),
        "URL_STYLE": env.get("VIEWMILL_S3_URL_STYLE"),
    }
    parts = ["TYPE s3"] + [f"{key} {sql_literal(value)}" for key, value in settings.items() if value]
    if env.get("VIEWMILL_S3_USE_SSL"):
        parts.append(f"USE_SSL {env['VIEWMILL_S3_USE_SSL'].lower() in ('1', 'true', 'yes')}")
    return f"CREATE OR REPLACE SECRET viewmill_s3 ({', '.join(parts)})"


def extension_path(name: str) -> Path:
    """A DuckDB extension shipped by its `duckdb-extension-<name>` wheel (no download at run time)."""
    import duckdb  # here, not at the top: the CLI names a missing lake without loading DuckDB

    package = f"duckdb-extension-{name}=={duckdb.__version__}"
    try:
        module = importlib.import_module(f"duckdb_extension_{name}")
    except ImportError as exc:
        raise LakeError(f"the DuckDB extension '{name}' is not installed: pip install {package}") from exc
    path = Path(module.__file__).parent / "extensions" / f"v{duckdb.__version__}" / f"{name}.duckdb_extension"
    if not path.exists():
        raise LakeError(
            f"no '{name}' extension for duckdb {duckdb.__version__} at {path}: "
            f"pip install {package} (versions must match exactly)"
        )
    return path


def sql_literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def recorded_data_path(message: str) -> str | None:
    """The data path a catalog records, from DuckLake's "does not match" refusal."""
    found = re.search(r'does not match existing data path in the catalog "([^"]*)"', message)
    return found.group(1) if found else None


def data_files(data_path: str) -> list[Path]:
    """The Parquet files under a local data folder (none for s3:// or a missing folder)."""
    if data_path.startswith("s3://") or not Path(data_path).is_dir():
        return []
    return sorted(Path(data_path).rglob("*.parquet"))


def check_not_orphaned(root: Path | str, *, catalog: str | None = None, data_path: str | None = None) -> None:
    """Refuse (LakeError) when `root` has lake data but no catalog; checked before a run starts."""
    spec = Catalog.parse(catalog, Path(root))
    if not spec.exists():
        refuse_orphaned_data(spec, data_path or os.environ.get(DATA_PATH_ENV) or str(Path(root) / "data"))


def require_catalog(catalog: Catalog, data_path: str, root: Path, *, read_only: bool) -> None:
    """Refuse a lake whose catalog is missing: orphaned data always, and a reader finding no lake."""
    if catalog.exists():
        return
    refuse_orphaned_data(catalog, data_path)
    if read_only:
        raise LakeError(
            f"no lake at {root}: run a recipe first (viewmill run recipes/demo.yaml) "
            "or point --state-dir at an existing state directory"
        )


def refuse_orphaned_data(catalog: Catalog, data_path: str) -> None:
    """A data folder without its catalog is a lake whose history would be orphaned by a new
    catalog made beside it: refuse, naming both paths and the ways out."""
    found = data_files(data_path)
    if catalog.kind == "postgres" or not found:
        return
    raise LakeError(
        f"the lake's catalog {catalog.target} is missing but its data folder {data_path} holds {len(found)} "
        f"Parquet file(s): restore the catalog from a backup to {catalog.target} (see docs/operations.md, "
        "'Backing up, moving and checking a lake'), or start a new, empty lake with `viewmill lake init`, which "
        "moves the old data aside to a dated folder"
    )


@dataclass(frozen=True)
class Catalog:
    """Where the lake's metadata lives: `sqlite` (default: local, several processes),
    `duckdb` (one process at a time) or `postgres:<libpq conninfo>` (several machines)."""

    kind: str
    target: str  # a file path, or a PostgreSQL connection string without its password
    # Kept apart so that no message, repr or connection string the catalog makes holds it.
    password: SecretStr | None = dataclass_field(default=None, compare=False)

    @classmethod
    def parse(cls, spec: str | None, root: Path) -> Catalog:
        spec = spec or os.environ.get(CATALOG_ENV)
        if not spec:
            legacy = root / "catalog.ducklake"  # lakes made before SQLite became the default
            return cls("duckdb", str(legacy)) if legacy.exists() else cls("sqlite", str(root / "catalog.sqlite"))
        kind, _, target = spec.partition(":")
        if kind == "postgres" and target.strip():
            target, password = _split_password(target.strip())
            return cls("postgres", target, password)
        if kind in ("sqlite", "duckdb"):
            default = root / ("catalog.sqlite" if kind == "sqlite" else "catalog.ducklake")
            return cls(kind, target or str(default))
        raise LakeError(
            f"catalog '{redact(spec)}' is not understood: use sqlite[:PATH], duckdb[:PATH] or "
            f"postgres:dbname=... host=... (set with --catalog or {CATALOG_ENV})"
        )

    @property
    def uri(self) -> str:
        return "ducklake:" + (self.target if self.kind == "duckdb" else f"{self.kind}:{self.target}")

    @property
    def extension(self) -> str | None:
        return {"sqlite": "sqlite_scanner", "postgres": "postgres_scanner"}.get(self.kind)

    def exists(self) -> bool:
        return self.kind == "postgres" or Path(self.target).exists()


# What libpq, psycopg and DuckDB's postgres extension say when the server went away mid-session.
_CONNECTION_LOST = ("server closed the connection", "connection refused", "could not connect", "consuming input failed",
                    "terminating connection", "no connection to the server", "connection is closed",
                    "connection to server", "ssl syscall error")  # fmt: skip


def lost_connection(catalog: Catalog, exc: BaseException) -> LakeError | None:
    """A LakeError naming a PostgreSQL catalog (without its password) whose server went away
    during a run, or that refused a write to a role that may only read; None when `exc` is
    something else."""
    text = str(exc).strip()
    if isinstance(exc, LakeError) or catalog.kind != "postgres":  # a LakeError already says what happened
        return None
    denied = re.search(r"permission denied for [^\n:\"]*", text)
    if denied:
        role = re.search(r"\buser=(\S+)", catalog.target)
        return LakeError(
            f"the lake's PostgreSQL catalog {catalog.uri} refused a write ({denied.group(0).strip()}): the role "
            f"{role.group(1) if role else '(default)'} may only read, so nothing was written; run writing commands "
            "with a role that owns the catalog's tables (a role with SELECT only can run `viewmill sql`)"
        )
    if not any(sign in text.lower() for sign in _CONNECTION_LOST):
        return None
    return LakeError(
        f"lost the connection to the lake's PostgreSQL catalog {catalog.uri} ({redact(text.splitlines()[0])[:300]}): "
        "what was not committed was rolled back and the lake keeps its last commit; check that the server is up "
        "(pg_isready) and run again: the rerun makes only what is missing"
    )


_PASSWORD = re.compile(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)|(://[^:/@\s]*:)[^@\s]*@", re.IGNORECASE)


def redact(text: str) -> str:
    """`text` with any libpq password (password=..., or user:password@ in a URI) masked."""
    return _PASSWORD.sub(lambda m: f"{m[1]}***" if m[1] else f"{m[3]}***@", text)


def _split_password(conninfo: str) -> tuple[str, SecretStr | None]:
    """A libpq connection string without its password, and the password (libpq's own parser)."""
    from psycopg import conninfo as pq

    try:
        params = pq.conninfo_to_dict(conninfo)
    except Exception:  # libpq quotes the string, password included: say nothing of it
        raise LakeError(
            f"the PostgreSQL catalog connection string '{redact(conninfo)}' cannot be parsed: write it as "
            "libpq key=value pairs, e.g. postgres:'dbname=viewmill host=db user=viewmill'"
        ) from None
    password = params.pop("password", None)
    return pq.make_conninfo(**params), SecretStr(str(password)) if password else None
