"""Hypothesis profiles registered by the suite: ``dev``, ``ci`` and ``nightly``.

* ``dev`` — fast local runs (random, small, keeps the local example database).
* ``ci`` — the deterministic CI gate: derandomized, a few hundred examples, no deadline,
  no database. Hypothesis auto-loads *its own* ``ci`` profile when ``CI`` is set; this
  one replaces it under the same name, and the suite selects it explicitly.
* ``mutation`` — the ``ci`` gate with 20 examples (``KVVERIFY_MUTATION_EXAMPLES``), for
  one pytest run per mutant (``scripts/mutation.sh``).
* ``nightly`` — random, thousands of examples, longer stateful runs, keeps a database
  (``KVVERIFY_DB`` or ``.hypothesis/examples``) so failures found at night replay by day.

Select with ``pytest --hypothesis-profile=NAME`` or ``KVVERIFY_PROFILE=NAME``.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, Phase, settings
from hypothesis.database import DirectoryBasedExampleDatabase

_SUPPRESS = [HealthCheck.too_slow, HealthCheck.data_too_large]


def register_profiles() -> None:
    settings.register_profile("dev", max_examples=60, deadline=None, suppress_health_check=_SUPPRESS,
                              stateful_step_count=30)
    settings.register_profile("ci", max_examples=200, deadline=None, derandomize=True, database=None,
                              print_blob=True, suppress_health_check=_SUPPRESS, stateful_step_count=40)
    # mutation testing (docs/mutation.md): the ci gate, fewer examples, one run per mutant
    settings.register_profile("mutation", max_examples=int(os.environ.get("KVVERIFY_MUTATION_EXAMPLES", "20")),
                              deadline=None, derandomize=True, database=None,
                              suppress_health_check=_SUPPRESS, stateful_step_count=30)
    settings.register_profile(
        "nightly", max_examples=int(os.environ.get("KVVERIFY_NIGHTLY_EXAMPLES", "3000")), deadline=None,
        derandomize=False, print_blob=True, suppress_health_check=_SUPPRESS, stateful_step_count=120,
        database=DirectoryBasedExampleDatabase(os.environ.get("KVVERIFY_DB", ".hypothesis/examples")),
        phases=list(Phase))


def default_profile() -> str:
    """``KVVERIFY_PROFILE`` if set, else ``ci`` under CI, else ``dev``."""
    if os.environ.get("KVVERIFY_PROFILE"):
        return os.environ["KVVERIFY_PROFILE"]
    return "ci" if os.environ.get("CI") else "dev"


register_profiles()
