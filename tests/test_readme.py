"""README's two commands stay true: .ci/run runs the README test command verbatim."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def readme_commands() -> list[str]:
    lines = (ROOT / "README.md").read_text().splitlines()
    return [line.strip() for line in lines[:12] if line.startswith("    ") and line.strip()]


def test_readme_opens_with_two_commands() -> None:
    main, tests = readme_commands()[:2]
    assert main.endswith("kvverify") and "pip install" in main
    assert "pytest" in tests and "--hypothesis-profile=ci" in tests


def test_ci_runs_the_readme_test_command_verbatim() -> None:
    tests = readme_commands()[1]
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert tests in [line.strip() for line in ci], ".ci/run must call README's test command"
    assert "torch==2.13.0" in (ROOT / "pyproject.toml").read_text(), "CI pins the CPU torch build"
