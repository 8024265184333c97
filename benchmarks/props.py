"""Examples per second of each property, ci-profile settings, one process; and the wall time of
``pytest properties/ -n 2 --hypothesis-profile=ci`` (a subprocess).

Each property runs as pytest would run it: the ``ci`` profile (derandomized, no database,
``max_examples=200``; ``--quick``: 25), on the reference target. The three known findings
(``FIXED_BY``) run under their proposed fixes, as their ``*_under_fix`` tests do, so the
number is the speed of a passing run, not of a shrink. ``invalid`` counts draws Hypothesis
threw away (``assume`` in the body, or a strategy's filter giving up): a strategy that
discards most draws would show here long before ``filter_too_much`` fires.
"""

from __future__ import annotations

import importlib
import os
import re
import resource
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Callable, Iterator

from hypothesis import Phase, settings

from benchmarks.probe import Probe, preload_modules

ROOT = Path(__file__).resolve().parent.parent

#: (suite, property, extra fixes it runs under); a known failure also runs under the fixes
#: ``kvverify.props.findings.FIXED_BY`` names for it (one table); the suite is the
#: ``properties/test_*.py`` file
PROPERTIES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("admission", "kvverify.props.admission:test_request_within_startup_bound_is_admitted", ()),
    ("admission", "kvverify.props.admission:test_admitted_workload_completes", ()),
    ("block_sizes", "kvverify.props.block_sizes:test_resolved_block_sizes_accepted_by_coordinator", ()),
    ("block_sizes", "kvverify.props.block_sizes:test_planned_block_sizes_are_consistent", ()),
    ("plan", "kvverify.props.plan:test_tensor_plan_matches_block_count", ()),
    ("plan", "kvverify.props.plan:test_reported_concurrency_matches_servability", ()),
    ("runtime", "kvverify.props.runtime:test_predictor_equals_allocator", ()),
    ("runtime", "kvverify.props.runtime:test_held_blocks_within_admission_caps", ()),
    ("runtime", "kvverify.props.pool_machine:PoolMachine", ()),
    ("startup", "kvverify.props.startup:test_startup_refusal_is_necessary", ()),
    ("startup", "kvverify.props.startup:test_startup_check_passes_implies_servable", ()),
    ("startup", "kvverify.props.startup:test_auto_fit_is_servable_and_maximal", ()),
    ("startup", "kvverify.props.startup:test_startup_check_passes_implies_servable_with_lookahead",
     ()),
    ("startup", "kvverify.props.startup:test_catalog_models_startup_agrees_with_runtime", ()),
    ("bad_input", "kvverify.props.validation:test_bad_input_is_a_clear_error", ()),
    ("lemma_models", "properties.test_lemma_models:test_step_models_match_the_managers", ()),
    ("arith_backends", "properties.test_arith_backends:*", ()),
    ("harness", "properties.test_harness:test_generated_plans_allocate_as_planned_on_cpu", ()),
)

PYTEST_CMD = [sys.executable, "-m", "pytest", "properties/", "-n", "2", "--hypothesis-profile=ci", "-q",
              "-p", "no:randomly"]


def _load(path: str) -> Any:
    module, _, name = path.partition(":")
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    mod = importlib.import_module(module)
    return mod if name == "*" else getattr(mod, name)


def ci_settings(max_examples: int) -> settings:
    """The ``ci`` profile, ``max_examples`` as given, and no shrink phase: a property that
    fails (a finding, or work in progress) is timed up to its failure, not through a shrink."""
    import kvverify.profiles  # noqa: F401  (registers the profiles)
    return settings(settings.get_profile("ci"), max_examples=max_examples, print_blob=False,
                    phases=(Phase.explicit, Phase.reuse, Phase.generate, Phase.target))


def _runs(suite: str, path: str, s: settings) -> Iterator[tuple[Callable | None, Callable[[], None]]]:
    """(the @given function to probe, a thunk that runs it once under ``s``)."""
    from kvverify.targets import get_target

    obj = _load(path)
    if suite == "arith_backends":
        for name in sorted(obj.FORMULAS):
            prop = obj._property(name)
            yield prop, lambda prop=prop: _under(prop, s, lambda test: test())
    elif path.endswith(":PoolMachine"):
        from hypothesis.stateful import run_state_machine_as_test
        yield None, lambda: run_state_machine_as_test(obj, settings=s)
    elif path.startswith("properties."):
        yield obj, lambda: _under(obj, s, lambda test: test())
    else:
        target = get_target("reference")
        yield obj, lambda: _under(obj, s, lambda test: test(target=target))


def _under(prop: Callable, s: settings, call: Callable[[Any], None]) -> None:
    """Run a fresh copy of ``prop`` under ``s`` (built now, so it sees the probe's body)."""
    from kvverify.hypothesis_hooks import rebuild
    call(rebuild(prop, settings=s))


def measure_property(suite: str, path: str, fixes_on: tuple[str, ...], max_examples: int) -> dict:
    from kvverify import fixes
    from kvverify.props.findings import FIXED_BY

    # a known failure runs under the fixes its *_under_fix test uses (one table: FIXED_BY)
    fixes_on = tuple(dict.fromkeys(fixes_on + FIXED_BY.get(path.rsplit(":", 1)[-1], ())))
    s = ci_settings(max_examples)
    row: dict[str, Any] = {"suite": suite, "property": path.rsplit(":", 1)[-1] if not path.endswith("*")
                           else f"{len(_load(path).FORMULAS)} formulas x backends_agree",
                           "fixes": list(fixes_on), "max_examples": max_examples}
    totals = dict(calls=0, valid=0, invalid=0, overrun=0, rejected_by_assume=0, filter_retries=0, cpu_seconds=0.0)
    reasons: dict[str, int] = {}
    stopped: set[str] = set()
    error = None
    start = time.perf_counter()
    try:
        for prop, thunk in _runs(suite, path, s):
            with ExitStack() as stack:
                if fixes_on:
                    stack.enter_context(fixes.enabled(*fixes_on))
                probe = stack.enter_context(Probe(prop))
                try:
                    thunk()
                except Exception as e:  # noqa: BLE001 - a failing property is reported, not raised
                    error = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:200]
            summary = probe.summary()
            for k in totals:
                totals[k] += summary[k]
            for k, v in summary["invalid_reasons"].items():
                reasons[k] = reasons.get(k, 0) + v
            if summary["stopped_because"]:
                stopped.add(summary["stopped_because"])
    except ImportError as e:
        error = f"skipped: {e}"[:200]
    seconds = time.perf_counter() - start
    examples = totals["valid"] + totals["invalid"]
    totals["cpu_seconds"] = round(totals["cpu_seconds"], 3)
    row.update(totals, seconds=round(seconds, 3),
               examples_per_s=round(totals["valid"] / seconds, 1) if seconds else None,
               examples_per_cpu_s=round(totals["valid"] / totals["cpu_seconds"], 1) if totals["cpu_seconds"] else None,
               draws_per_s=round(examples / seconds, 1) if seconds else None,
               invalid_fraction=round(totals["invalid"] / examples, 3) if examples else None,
               invalid_reasons=dict(sorted(reasons.items(), key=lambda kv: -kv[1])[:4]),
               stopped_because=sorted(stopped), error=error)
    return row


def pytest_wall_time(timeout: int = 900) -> dict:
    """Wall time of the CI property run, in a subprocess (the machine's cores, ``-n 2``)."""
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    start = time.perf_counter()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        proc = subprocess.run(PYTEST_CMD, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
        rc, out = proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as e:
        rc, out = -1, f"timed out after {timeout}s\n{e.stdout or ''}"
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    summary = next((line.strip("= ") for line in reversed(out.splitlines())
                    if re.search(r"\d+ (passed|failed)", line)), out.strip().splitlines()[-1:] or [""])
    if isinstance(summary, list):
        summary = summary[0] if summary else ""
    return {"command": " ".join(["python"] + PYTEST_CMD[1:]), "wall_s": round(wall, 2),
            "cpu_s": round(cpu, 2), "rc": rc, "summary": summary}


def run(quick: bool = False, with_pytest: bool | None = None) -> dict:
    preload_modules()
    n = 25 if quick else 200
    rows = []
    for suite, path, fixes_on in PROPERTIES:
        if quick and suite in ("arith_backends", "harness"):
            continue  # the slowest to set up; the full run measures them
        rows.append(measure_property(suite, path, fixes_on, n))
    out: dict[str, Any] = {"max_examples": n, "rows": rows}
    if with_pytest if with_pytest is not None else not quick:
        out["pytest"] = pytest_wall_time()
    return out


def table(data: dict):
    from rich.table import Table

    t = Table(title=f"Property throughput (ci profile, max_examples={data['max_examples']}, one process)")
    for col in ("suite", "property", "valid", "invalid", "seconds", "examples/s", "per CPU s", "filter retries",
                "note"):
        t.add_column(col, justify="left" if col in ("suite", "property", "note") else "right", overflow="fold")
    for r in data["rows"]:
        note = r["error"] or (f"under fix {', '.join(r['fixes'])}" if r["fixes"] else "")
        t.add_row(r["suite"], r["property"], str(r["valid"]), f"{r['invalid']} ({(r['invalid_fraction'] or 0):.0%})",
                  f"{r['seconds']:.2f}", f"{r['examples_per_s'] or 0:,.0f}", f"{r.get('examples_per_cpu_s') or 0:,.0f}",
                  str(r["filter_retries"]), note)
    if "pytest" in data:
        p = data["pytest"]
        t.caption = (f"{p['command']}: {p['wall_s']:.1f} s wall, {p.get('cpu_s', 0):.1f} s CPU (all workers), "
                     f"rc={p['rc']} ({p['summary']})")
    return t
