"""``scripts/mutation_report.py``: the seeded sample and its interval (docs/mutation.md)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location(
    "mutation_report", Path(__file__).resolve().parent.parent / "scripts" / "mutation_report.py")
assert _spec and _spec.loader
report = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(report)

VERDICTS = {f"kvverify.reference.{mod}.x_f__mutmut_{i}": "not checked"
            for mod in ("pool", "planner", "managers.mamba", "managers.base") for i in range(1, 31)}


def test_sample_is_seeded_and_per_module() -> None:
    a = report.sample("7", ("pool", "planner", "managers"), VERDICTS)
    assert a == report.sample("7:0", ("pool", "planner", "managers"), VERDICTS)
    assert a != report.sample("7:1", ("pool", "planner", "managers"), VERDICTS)
    by_module = {m: sum(1 for k in a if report.in_modules(k, (m,))) for m in ("pool", "planner", "managers")}
    assert by_module == {"pool": 7, "planner": 7, "managers": 7}  # a manager file counts as managers
    assert report.sample("100", ("pool",), VERDICTS) == {k for k in VERDICTS if ".pool." in k}


@pytest.mark.parametrize("spec", ["0", "-3", "x", "5:y"])
def test_bad_sample_spec_is_a_clear_error(spec: str) -> None:
    with pytest.raises(SystemExit, match="sample"):
        report.sample(spec, ("pool",), VERDICTS)


def test_wilson_interval() -> None:
    assert report.wilson(0, 0) == (0.0, 100.0)
    low, high = report.wilson(10, 10)
    assert high == 100.0 and 69.0 < low < 73.0  # 10/10: about 72.2 % at 95 %
    low, high = report.wilson(45, 50)
    assert low < 90.0 < high < 96.0
