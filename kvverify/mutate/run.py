"""Running the suites against a mutant: one subprocess per suite, limited, and nothing left behind.

Each run is ``python -m pytest ...`` in the checkout's root (so this checkout's kvverify is
imported), with the mutant's overlay first on ``PYTHONPATH``, under:

* ``RLIMIT_CPU``: a CPU-time limit per process (a mutant can loop forever: ``while`` bounds,
  ``range`` steps); the kernel sends SIGXCPU, then SIGKILL at the hard limit;
* a wall-clock limit, then the whole process group is killed;
* its own session (process group): after the run, whatever is left in the group is killed.

Several mutants run in parallel threads (``workers``); each has its own overlay (keyed by the
mutated text, built atomically) and its own temporary directory for JUnit and reports.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kvverify.errors import KVVerifyError
from kvverify.mutate.outcomes import Outcome, parse_junit, parse_junit_nodeids

#: the reference-only suites (no target) and the other engine's, left out of both vLLM suites
_NOT_VLLM = ("properties/test_arith_backends.py", "properties/test_lemmas.py", "properties/test_lemma_models.py",
             "properties/test_harness.py", "properties/test_recorded_differential.py",
             "properties/test_recorded_lengths.py", "properties/test_sglang.py",
             "properties/test_sglang_conformance.py", "properties/test_sglang_differential.py")
#: the live reference-vs-engine differentials (kill kind (b)); the connector differential belongs
#: here too: counted in the guarantee suite, its disagreements were read as guarantee verdicts
#: (kind (a); found 2026-12-04 on KVCacheCoordinator.__init__:55 and _mamba_block_aligned_split:121)
DIFFERENTIAL = ("properties/test_differential.py", "properties/test_differential_lengths.py",
                "properties/test_connector_differential.py")

#: set to stop every run in progress (SIGTERM, Ctrl-C): each kills its process group and raises
STOP = threading.Event()


@dataclass(frozen=True)
class Suite:
    """A pytest selection: ``name`` and its arguments (paths and ``--ignore``s)."""

    name: str
    args: tuple[str, ...]
    target: bool = True  # run with --target vllm and the mutation Hypothesis profile


def guarantee_suite() -> Suite:
    """``properties/`` against the target, without the differential and the reference-only suites."""
    return Suite("guarantee", ("properties/", *(f"--ignore={p}" for p in (*_NOT_VLLM, *DIFFERENTIAL))))


def differential_suite() -> Suite:
    """The live reference-vs-engine differential."""
    return Suite("differential", DIFFERENTIAL)


def vllm_tests_suite(paths: list[str]) -> Suite:
    """vLLM's own unit tests (files or directories of a vLLM source tree's ``tests/``)."""
    missing = [p for p in paths if not Path(p).exists()]
    if missing:
        raise KVVerifyError(f"--vllm-tests: no such file or directory: {', '.join(missing)}")
    return Suite("vllm-tests", tuple(str(Path(p).resolve()) for p in paths), target=False)


@dataclass(frozen=True)
class RunResult:
    """One suite run: outcomes per test, whether a limit stopped it, its CPU seconds, output tail."""

    outcomes: dict[str, Outcome]
    timed_out: bool
    returncode: int
    cpu_seconds: float
    tail: str
    nodeids: dict[str, str] = field(default_factory=dict)  # test id -> pytest node id


def vllm_env(overlay: Path | None, reports: Path) -> dict[str, str]:
    """The environment of a run: CPU platform, offline, no usage stats, reports in ``reports``,
    the overlay first on ``PYTHONPATH``."""
    env = dict(os.environ)
    env.update(VLLM_TARGET_DEVICE="cpu", HF_HUB_OFFLINE="1", VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1",
               KVVERIFY_REPORTS_DIR=str(reports), PYTHONDONTWRITEBYTECODE="1")
    env.pop("KVVERIFY_VLLM_OVERLAY", None)
    if overlay is not None:
        old = env.get("PYTHONPATH")
        env["PYTHONPATH"] = str(overlay) + (os.pathsep + old if old else "")
    return env


def _limit(pid: int, cpu_seconds: int) -> None:
    """RLIMIT_CPU of process ``pid`` (inherited by the processes it starts afterwards)."""
    try:
        resource.prlimit(pid, resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 5))
    except (ProcessLookupError, PermissionError):  # it already ended
        pass


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_suite(python: str, suite: Suite, *, root: Path, overlay: Path | None, cpu_limit: int,
              wall_limit: float, first_failure: bool = False, profile: str = "engine-mutation",
              deselect: Sequence[str] = ()) -> RunResult:
    """Run ``suite`` once (see the module docstring); never leaves a process behind.
    ``first_failure``: stop at the first failing test (``-x``, a mutant's runs); ``deselect``:
    pytest node ids left out (the tests failing unmutated, in a mutant's runs)."""
    with tempfile.TemporaryDirectory(prefix="kvverify-mutate-") as tmp:
        junit = Path(tmp) / "junit.xml"
        cmd = [python, "-m", "pytest", *suite.args, "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
               "-o", "junit_family=xunit1", f"--junitxml={junit}"]
        if first_failure:
            cmd.append("-x")
        cmd += [f"--deselect={n}" for n in deselect]
        if suite.target:
            cmd += ["--target", "vllm", "--hypothesis-profile", profile]
        with open(Path(tmp) / "out.txt", "w+b") as out:
            proc = subprocess.Popen(cmd, cwd=root, env=vllm_env(overlay, Path(tmp) / "reports"),
                                    stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)
            _limit(proc.pid, cpu_limit)  # not preexec_fn: runs are started from worker threads
            deadline = time.monotonic() + wall_limit
            status, usage, timed_out = 0, None, False
            try:
                while True:
                    pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
                    if pid:
                        break
                    if STOP.is_set():
                        _kill_group(proc.pid)
                        os.wait4(proc.pid, 0)
                        usage = None
                        raise KVVerifyError("interrupted: the runs in progress were stopped")
                    if time.monotonic() > deadline:
                        timed_out = True
                        _kill_group(proc.pid)
                        _, status, usage = os.wait4(proc.pid, 0)
                        break
                    time.sleep(0.2)
            finally:
                _kill_group(proc.pid)  # leftovers (workers, servers) of the run's session
                proc.returncode = os.waitstatus_to_exitcode(status) if usage is not None else -9
            out.seek(0)
            tail = out.read()[-4000:].decode(errors="replace")
        rc = proc.returncode
        if rc in (-signal.SIGXCPU, -signal.SIGKILL) or "SIGXCPU" in tail:
            timed_out = True
        cpu = (usage.ru_utime + usage.ru_stime) if usage is not None else 0.0
        return RunResult(parse_junit(junit), timed_out, rc, cpu, tail, parse_junit_nodeids(junit))


def default_python() -> str:
    """The interpreter the suites run with: this one."""
    return sys.executable


def vllm_source(python: str) -> Path:
    """The ``vllm`` package directory ``python`` imports, found without importing vLLM; a clear
    error when it has none."""
    code = ("import importlib.util as u; s = u.find_spec('vllm'); "
            "print(s.origin if s and s.submodule_search_locations else '')")
    try:
        done = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=120, check=False,
                              env=vllm_env(None, Path(tempfile.gettempdir())))
    except (OSError, subprocess.TimeoutExpired) as e:
        raise KVVerifyError(f"--python {python}: cannot run it ({e})") from e
    origin = done.stdout.strip().splitlines()[-1] if done.returncode == 0 and done.stdout.strip() else ""
    if not origin:
        raise KVVerifyError(f"`kvverify mutate --target vllm` needs vLLM installed for {python} "
                            "(scripts/install-vllm-target.sh, or --python PATH of a venv that has it)")
    return Path(origin).resolve().parent


__all__ = ["DIFFERENTIAL", "RunResult", "Suite", "default_python", "differential_suite", "guarantee_suite",
           "STOP", "run_suite", "vllm_env", "vllm_source", "vllm_tests_suite"]
