"""Hypothesis profiles registered by the suite: ``dev``, ``ci``, ``mutation``, ``nightly``, ``replay``.

* ``dev`` — fast local runs (random, small) over the local database ``.hypothesis/examples``
  (under ``$HYPOTHESIS_STORAGE_DIRECTORY`` when set);
  when ``GITHUB_TOKEN`` is set and ``CI`` is not, it also reads through to the nightly
  artifact: ``MultiplexedDatabase(local, ReadOnlyDatabase(GitHubArtifactDatabase(...)))``
  (``docs/nightly.md``), so last night's counterexamples replay on a laptop.
* ``ci`` — the deterministic CI gate: derandomized, a few hundred examples, no deadline,
  no database. Hypothesis auto-loads *its own* ``ci`` profile when ``CI`` is set; this
  one replaces it under the same name, and the suite selects it explicitly.
* ``mutation`` — the ``ci`` gate with 20 examples (``KVVERIFY_MUTATION_EXAMPLES``), for
  one pytest run per mutant (``scripts/mutation.sh``).
* ``nightly`` — random, thousands of examples, longer stateful runs, keeps the shared
  database ``KVVERIFY_DB`` (a directory, default ``.hypothesis/nightly-db``, or a
  ``redis://`` URL) so failures found at night replay by day.
* ``replay`` — what a pull request runs over the nightly database: not derandomized
  (``derandomize=True`` forces ``database=None``), phases ``explicit`` and ``reuse`` only
  (no generation: deterministic given the database), the database read-only. A night's
  counterexample fails every PR that still has the defect. A property with nothing saved
  and no ``@example`` runs no test case (Hypothesis skips it, saying so).

Every database is scoped to the run's target, flaws and fixes
(:class:`kvverify.exampledb.ScopedDatabase`); ``register_profiles(scope=...)`` re-registers
the profiles for another scope (the pytest plugin and ``kvverify fuzz`` do, from
``--target`` / ``--flaw`` / ``--fix``). Select with ``pytest --hypothesis-profile=NAME`` or
``KVVERIFY_PROFILE=NAME``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from hypothesis import HealthCheck, Phase, settings
from hypothesis.database import ExampleDatabase, MultiplexedDatabase, ReadOnlyDatabase

from kvverify import exampledb
from kvverify.errors import ConfigError

_SUPPRESS = [HealthCheck.too_slow, HealthCheck.data_too_large]
#: the profiles whose database is the nightly one (``KVVERIFY_DB``)
NIGHTLY_DB_PROFILES = ("nightly", "replay")
#: the phases of the ``replay`` profile
REPLAY_PHASES = (Phase.explicit, Phase.reuse)


def dev_database(scope: str) -> ExampleDatabase:
    """The local database, plus the nightly artifact read-only when a token is set outside CI."""
    local = exampledb.open_database(exampledb.local_location())
    shared = exampledb.artifact_database()
    return exampledb.ScopedDatabase(local if shared is None else MultiplexedDatabase(local, shared), scope)


_scope = "reference"


def current_scope() -> str:
    """The scope the profiles' databases were last registered for."""
    return _scope


@contextlib.contextmanager
def scoped(scope: str) -> Iterator[None]:
    """The profiles registered for ``scope`` while the block runs, then as they were."""
    before = _scope
    register_profiles(scope)
    try:
        yield
    finally:
        register_profiles(before)


def register_profiles(scope: str = "reference") -> None:
    """(Re-)register every profile, the databases scoped to ``scope``."""
    global _scope
    _scope = scope
    settings.register_profile("dev", max_examples=60, deadline=None, suppress_health_check=_SUPPRESS,
                              stateful_step_count=30, database=dev_database(scope))
    settings.register_profile("ci", max_examples=200, deadline=None, derandomize=True, database=None,
                              print_blob=True, suppress_health_check=_SUPPRESS, stateful_step_count=40)
    # mutation testing (docs/mutation.md): the ci gate, fewer examples, one run per mutant
    settings.register_profile("mutation", max_examples=int(os.environ.get("KVVERIFY_MUTATION_EXAMPLES", "20")),
                              deadline=None, derandomize=True, database=None,
                              suppress_health_check=_SUPPRESS, stateful_step_count=30)
    try:
        nightly_db: ExampleDatabase = exampledb.open_database(exampledb.nightly_location())
    except ConfigError as e:  # a bad KVVERIFY_DB fails the runs that use it (check_database), no other
        nightly_db = exampledb.UnusableDatabase(e)
    settings.register_profile(
        "nightly", max_examples=int(os.environ.get("KVVERIFY_NIGHTLY_EXAMPLES", "3000")), deadline=None,
        derandomize=False, print_blob=True, suppress_health_check=_SUPPRESS, stateful_step_count=120,
        database=exampledb.ScopedDatabase(nightly_db, scope), phases=list(Phase))
    settings.register_profile(
        "replay", deadline=None, derandomize=False, print_blob=True, suppress_health_check=_SUPPRESS,
        stateful_step_count=120, phases=list(REPLAY_PHASES),
        database=ReadOnlyDatabase(exampledb.ScopedDatabase(nightly_db, scope)))


def check_database(profile: str) -> None:
    """Raise the :class:`~kvverify.errors.ConfigError` of a bad ``KVVERIFY_DB`` if ``profile`` uses it."""
    if profile in NIGHTLY_DB_PROFILES:
        exampledb.open_database(exampledb.nightly_location())


def default_profile() -> str:
    """``KVVERIFY_PROFILE`` if set, else ``ci`` under CI, else ``dev``."""
    if os.environ.get("KVVERIFY_PROFILE"):
        return os.environ["KVVERIFY_PROFILE"]
    return "ci" if os.environ.get("CI") else "dev"


def describe_database(profile: str) -> str:
    """One line naming the database a profile uses (for headers and summaries)."""
    try:
        db = settings.get_profile(profile).database
    except Exception:  # noqa: BLE001 - an unknown profile is pytest's / Hypothesis' error to report
        return "?"
    return "none" if db is None else repr(db)


register_profiles()
