"""The suite's Hypothesis example databases, built from Hypothesis' own public classes.

* :func:`open_database` — ``KVVERIFY_DB``: a directory (``DirectoryBasedExampleDatabase``) or
  a ``redis://`` / ``rediss://`` / ``unix://`` URL (``hypothesis.extra.redis.RedisExampleDatabase``,
  the ``redis`` extra), so any number of fuzzers on any number of machines share examples live.
* :class:`ScopedDatabase` — one database, one key space per *scope* (the target, and any
  bug-zoo flaws or proposed fixes switched on): the same property run on the reference and
  on vLLM 0.33.0 saves under different keys, so a vLLM-only known failure is never replayed
  on the reference. Keys stay opaque: Hypothesis derives them (its internals), the scope
  prefixes them, nothing here computes one. It also remembers every key it was asked
  about, which is how a nightly shard says which keys it owns (:func:`write_owned_keys`,
  :mod:`kvverify.nightly.merge`).
* :func:`artifact_database` — the developers' read-through: ``ReadOnlyDatabase(
  GitHubArtifactDatabase(owner, repo, NIGHTLY_ARTIFACT))`` when ``GITHUB_TOKEN`` is set and
  ``CI`` is not (``docs/nightly.md``).

HypoFuzz is not used (its licence rules it out as a dependency); everything here is
``hypothesis.database`` API.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import json
import os
import re
import subprocess
from collections.abc import Iterable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

from hypothesis.database import (
    DirectoryBasedExampleDatabase,
    ExampleDatabase,
    GitHubArtifactDatabase,
    ReadOnlyDatabase,
)

from kvverify.errors import ConfigError

#: the environment variable naming the shared database (a directory or a Redis URL)
ENV_DB = "KVVERIFY_DB"
#: where the nightly database lives locally when ``KVVERIFY_DB`` is unset (scripts/nightly.sh)
DEFAULT_NIGHTLY_DB = ".hypothesis/nightly-db"
#: the developers' own database (the ``dev`` profile), under Hypothesis' storage directory
LOCAL_DB = "examples"
#: the artifact ``.github/workflows/nightly.yml`` uploads with the merged database
#: (``tests/test_nightly_workflow.py`` checks the workflow really uploads this name)
NIGHTLY_ARTIFACT = "nightly-example-db"
#: ``owner/name`` of the GitHub repository whose nightly artifact the ``dev`` profile reads
ENV_REPO = "KVVERIFY_GITHUB_REPO"
#: every scoped key starts with this; the merge's own index lives outside it
SCOPE_PREFIX = b"kvverify-scope:"

_REDIS_SCHEMES = ("redis://", "rediss://", "unix://")
_SCOPE_PART = re.compile(r"^[A-Za-z0-9_.=+,-]+$")


def scope_for(target: str = "reference", flaws: Sequence[str] = (), fixes: Sequence[str] = ()) -> str:
    """The key scope of a run: the target (vLLM with its installed version), plus the
    flaws and fixes switched on (a zoo run never pollutes the plain target's examples)."""
    name = target
    if target == "vllm":
        try:
            name = f"vllm=={importlib.metadata.version('vllm')}"
        except importlib.metadata.PackageNotFoundError:
            name = "vllm"
    parts = [name]
    if flaws:
        parts.append("flaw=" + ",".join(sorted(set(flaws))))
    if fixes:
        parts.append("fix=" + ",".join(sorted(set(fixes))))
    scope = "+".join(parts)
    if not _SCOPE_PART.match(scope):
        raise ConfigError("scope", scope, "target, flaw and fix names may use letters, digits and _.=,-")
    return scope


class ScopedDatabase(ExampleDatabase):
    """``inner`` with every key prefixed by ``kvverify-scope:<scope>:``.

    The prefix is all it adds, so any Hypothesis database works underneath (a directory,
    Redis, a read-only GitHub artifact). ``touched`` holds every inner key this process
    fetched, saved, deleted or moved: the keys its tests own; ``deleted`` the SHA-256 of
    every value it deleted (or moved away) per inner key, and ``saved`` of every value it
    saved, so a merge can tell "this run dropped it" from "this run never had it"."""

    def __init__(self, inner: ExampleDatabase, scope: str) -> None:
        super().__init__()
        self.inner = inner
        self.scope = scope
        self._prefix = SCOPE_PREFIX + scope.encode() + b":"
        self.touched: set[bytes] = set()
        self.deleted: dict[bytes, set[str]] = {}
        self.saved: dict[bytes, set[str]] = {}

    def __repr__(self) -> str:
        return f"ScopedDatabase({self.inner!r}, scope={self.scope!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ScopedDatabase) and (self.inner, self.scope) == (other.inner, other.scope)

    def __hash__(self) -> int:
        return hash((type(self), self.scope))

    def _key(self, key: bytes) -> bytes:
        scoped = self._prefix + key
        self.touched.add(scoped)
        return scoped

    def fetch(self, key: bytes) -> Iterable[bytes]:
        return self.inner.fetch(self._key(key))

    def save(self, key: bytes, value: bytes) -> None:
        scoped = self._key(key)
        self.inner.save(scoped, value)
        self._note(self.saved, self.deleted, scoped, value)

    def delete(self, key: bytes, value: bytes) -> None:
        scoped = self._key(key)
        self.inner.delete(scoped, value)
        self._note(self.deleted, self.saved, scoped, value)

    def move(self, src: bytes, dest: bytes, value: bytes) -> None:
        s, d = self._key(src), self._key(dest)
        self.inner.move(s, d, value)
        if s != d:
            self._note(self.deleted, self.saved, s, value)
        self._note(self.saved, self.deleted, d, value)

    @staticmethod
    def _note(into: dict[bytes, set[str]], undo: dict[bytes, set[str]], key: bytes, value: bytes) -> None:
        digest = value_digest(value)
        into.setdefault(key, set()).add(digest)
        undo.get(key, set()).discard(digest)  # the last operation on a value wins


def value_digest(value: bytes) -> str:
    """How manifests name a value (its SHA-256, hex)."""
    return hashlib.sha256(value).hexdigest()


def open_database(spec: str | os.PathLike[str]) -> ExampleDatabase:
    """The database ``spec`` names: a Redis URL, else a directory."""
    text = os.fspath(spec)
    if not text.strip():
        raise ConfigError(ENV_DB, text, "must be a directory or a redis://host:port/db URL")
    if text.startswith(_REDIS_SCHEMES):
        return redis_database(text)
    if "://" in text:
        raise ConfigError(ENV_DB, text, "URL schemes allowed: " + ", ".join(_REDIS_SCHEMES)
                          + " (anything else is a directory path)")
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise ConfigError(ENV_DB, text, "must be a directory (it exists and is not one)")
    return DirectoryBasedExampleDatabase(path)


class UnusableDatabase(ExampleDatabase):
    """Stands in for a database ``KVVERIFY_DB`` names but that cannot be opened: registering
    the profiles never fails (the ``ci`` gate does not use it); using it raises the error."""

    def __init__(self, error: ConfigError) -> None:
        super().__init__()
        self.error = error

    def __repr__(self) -> str:
        return f"UnusableDatabase({self.error})"

    def fetch(self, key: bytes) -> Iterable[bytes]:
        raise self.error

    def save(self, key: bytes, value: bytes) -> None:
        raise self.error

    def delete(self, key: bytes, value: bytes) -> None:
        raise self.error


def redis_database(url: str, *, expire_after: timedelta = timedelta(days=30)) -> ExampleDatabase:
    """``RedisExampleDatabase`` over ``url`` (connects lazily, on the first fetch or save).

    Examples of a property not run for ``expire_after`` expire (Hypothesis' default is
    8 days; 30 keeps the weekly release runs' examples alive between runs)."""
    try:
        redis = importlib.import_module("redis")
        from hypothesis.extra.redis import RedisExampleDatabase
    except ImportError:
        raise ConfigError(ENV_DB, url, "a Redis database needs the redis client: "
                          "pip install -e '.[redis]' (hypothesis[redis])") from None
    try:
        client = redis.Redis.from_url(url)
    except ValueError as e:
        raise ConfigError(ENV_DB, url, f"not a usable Redis URL ({e})") from None
    return RedisExampleDatabase(client, expire_after=expire_after)


def storage_dir() -> Path:
    """Hypothesis' storage directory: ``$HYPOTHESIS_STORAGE_DIRECTORY``, else ``.hypothesis``."""
    return Path(os.environ.get("HYPOTHESIS_STORAGE_DIRECTORY") or ".hypothesis")


def local_location() -> Path:
    """The ``dev`` profile's own database (Hypothesis' default place for it)."""
    return storage_dir() / LOCAL_DB


def nightly_location() -> str:
    """``KVVERIFY_DB``, or the local nightly directory."""
    return os.environ.get(ENV_DB) or DEFAULT_NIGHTLY_DB


def github_repository() -> tuple[str, str] | None:
    """``(owner, repo)`` of the project on GitHub: ``KVVERIFY_GITHUB_REPO`` (``owner/name``),
    else ``GITHUB_REPOSITORY``, else the ``origin`` remote of the checkout; ``None`` if none."""
    for var in (ENV_REPO, "GITHUB_REPOSITORY"):
        value = os.environ.get(var, "").strip()
        if value:
            m = re.fullmatch(r"([A-Za-z0-9_.-]+)/([A-Za-z0-9_.-]+)", value)
            if not m:
                raise ConfigError(var, value, "must be owner/name, e.g. my-org/kvverify")
            return m.group(1), m.group(2)
    try:
        url = subprocess.run(["git", "config", "--get", "remote.origin.url"], capture_output=True,
                             text=True, timeout=5, check=False).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"github\.com[:/]([A-Za-z0-9_.-]+)/([A-Za-z0-9_.-]+?)(?:\.git)?/?$", url)
    return (m.group(1), m.group(2)) if m else None


def artifact_database(environ: dict[str, str] | os._Environ[str] | None = None) -> ExampleDatabase | None:
    """The nightly artifact, read-only, for a developer: only when ``GITHUB_TOKEN`` is set,
    ``CI`` is not, and the repository is known; otherwise ``None`` (nothing changes)."""
    env = os.environ if environ is None else environ
    if not env.get("GITHUB_TOKEN") or env.get("CI"):
        return None
    repo = github_repository()
    if repo is None:
        return None
    owner, name = repo
    # Hypothesis' own cache place, given explicitly: its storage directory must not be
    # touched while profiles are being registered (its side-effect warning)
    return ReadOnlyDatabase(GitHubArtifactDatabase(owner, name, artifact_name=NIGHTLY_ARTIFACT,
                                                   path=storage_dir() / "github-artifacts" / NIGHTLY_ARTIFACT))


# --------------------------------------------------------------------------- owned keys
OWNED_SCHEMA = "kvverify-owned-keys/1"


def write_owned_keys(path: str | os.PathLike[str], db: ScopedDatabase, *, owner: str) -> Path:
    """Write the keys ``db`` was asked about (the keys this run owns) as JSON, atomically."""
    from kvverify.reports.common import atomic_write_text

    out = Path(path)
    if out.is_symlink() or (out.exists() and not out.is_file()):
        raise ConfigError("owned-keys", str(out), "must be a regular file path (not a link or a directory)")
    doc = {"schema": OWNED_SCHEMA, "owner": owner, "scope": db.scope,
           "keys": sorted(k.hex() for k in db.touched),
           "deleted": {k.hex(): sorted(v) for k, v in sorted(db.deleted.items()) if v}}
    atomic_write_text(out, json.dumps(doc, indent=1) + "\n")
    return out


def read_owned_keys(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A manifest written by :func:`write_owned_keys`; a clear error otherwise."""
    p = Path(path)
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ConfigError("owned-keys", str(p), f"cannot read the manifest ({e})") from None
    if not isinstance(doc, dict) or doc.get("schema") != OWNED_SCHEMA or not isinstance(doc.get("keys"), list):
        raise ConfigError("owned-keys", str(p), f"not a {OWNED_SCHEMA} manifest")
    deleted = doc.get("deleted", {})
    try:
        doc["keys"] = [bytes.fromhex(k) for k in doc["keys"]]
        doc["deleted"] = {bytes.fromhex(k): {str(v) for v in vs} for k, vs in dict(deleted).items()}
    except (TypeError, ValueError, AttributeError):
        raise ConfigError("owned-keys", str(p), "keys must be hex strings, deleted a {key: [sha256]} map") from None
    return doc


__all__ = ["DEFAULT_NIGHTLY_DB", "ENV_DB", "ENV_REPO", "LOCAL_DB", "NIGHTLY_ARTIFACT", "SCOPE_PREFIX",
           "ScopedDatabase", "UnusableDatabase", "artifact_database", "github_repository", "local_location", "nightly_location",
           "open_database", "read_owned_keys", "redis_database", "scope_for", "storage_dir", "value_digest",
           "write_owned_keys"]
