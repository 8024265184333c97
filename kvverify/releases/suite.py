"""The suite every release runs: its pytest command line and environment.

:data:`IGNORED` is the one list of the reference-only suites. ``.ci/run``'s vllm step reads
it too (``python -m kvverify.releases.suite`` prints one ``--ignore=PATH`` per line), so the
matrix and CI run the same properties on a release.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

#: the reference-only suites (z3 backends, lemmas, harness, the recorded differential): they do
#: not talk to a target, and the README's test command has run them already
IGNORED = ("properties/test_arith_backends.py", "properties/test_lemmas.py",
           "properties/test_lemma_models.py", "properties/test_harness.py",
           "properties/test_recorded_differential.py")


def ignore_args() -> list[str]:
    """pytest's ``--ignore=PATH`` for each of :data:`IGNORED`."""
    return [f"--ignore={p}" for p in IGNORED]


def pytest_command(python: Path | str, *, junit: Path, reports_dir: Path, workers: int, profile: str,
                   only: Sequence[str] = (), absorb: Sequence[str] = ()) -> list[str]:
    """The per-release pytest command line (``only``: node ids to re-run instead of properties/)."""
    cmd = [str(python), "-m", "pytest", *(only or ["properties/"]), "--target", "vllm",
           "--hypothesis-profile", profile, "-q", "-p", "no:cacheprovider", "-rsx",
           "-o", "junit_family=xunit1", f"--junitxml={junit}", "--kvverify-reports-dir", str(reports_dir)]
    cmd += ["-n", str(workers)] if workers > 0 else ["-p", "no:xdist"]
    cmd += ignore_args()
    cmd += ["--attribute-flaws"]
    if absorb:
        cmd += ["--absorb-flaws", ",".join(absorb)]
    return cmd


def release_env(reports_dir: Path) -> dict[str, str]:
    """The environment of a process in a release's venv: CPU platform, no hub access, no usage
    reporting, counterexample reports into ``reports_dir``."""
    env = dict(os.environ)
    env.update(VLLM_TARGET_DEVICE="cpu", HF_HUB_OFFLINE="1", VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1",
               KVVERIFY_REPORTS_DIR=str(reports_dir))
    return env


def main(argv: Sequence[str]) -> int:
    """``python -m kvverify.releases.suite``: the ``--ignore`` arguments, one a line (.ci/run)."""
    if argv:
        print("usage: python -m kvverify.releases.suite   (prints the --ignore arguments, one a line)",
              file=sys.stderr)
        return 2
    print("\n".join(ignore_args()))
    return 0


if __name__ == "__main__":  # pragma: no cover - .ci/run's vllm step
    sys.exit(main(sys.argv[1:]))
