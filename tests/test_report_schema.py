"""Replay never crashes: older reports migrate (module moves included), newer ones and corrupt
ones are clear errors (exit 2), and reports carry relative paths only."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from kvverify.cli import main
from kvverify.reports.schema import MODULE_MOVES, SCHEMA_VERSION

from test_timeline import write_seed_report


def _rewrite(path: Path, change) -> Path:
    data = json.loads(path.read_text())
    change(data)
    out = path.with_name("edited.json")
    out.write_text(json.dumps(data))
    return out


def _old_module(text: str) -> str:
    """Name every moved module of the report at its pre-move place (what a schema-1 report held)."""
    for old, new in sorted(MODULE_MOVES.items(), key=lambda kv: -len(kv[1])):
        text = text.replace(f'"{new}:', f'"{old}:')
    return text


def test_an_old_report_migrates_and_replays(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_seed_report(tmp_path)
    data = json.loads(path.read_text())
    assert data["schema"] == f"kvverify.report/{SCHEMA_VERSION}"
    old = json.loads(_old_module(path.read_text()))
    assert "kvverify.config:VllmConfig" in json.dumps(old)  # as reports written before the move name it
    old["schema"] = "kvverify.report/1"
    old["property_ref"]["abs_file"] = "/home/someone/elsewhere/kvverify/props/startup.py"
    old_path = tmp_path / "old.json"
    old_path.write_text(json.dumps(old))
    assert main(["replay", str(old_path), "--json"]) == 1  # still reproduces under its flaw
    out = json.loads(capsys.readouterr().out)
    assert out["reproduced"] and out["status"] == "reproduced"


def test_a_newer_report_names_both_versions(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _rewrite(write_seed_report(tmp_path), lambda d: d.update(schema=f"kvverify.report/{SCHEMA_VERSION + 1}"))
    assert main(["replay", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"schema {SCHEMA_VERSION + 1}" in err and f"to {SCHEMA_VERSION}" in err and "Traceback" not in err


@pytest.mark.parametrize("change,message", [
    (lambda d: d.update(example=[1, 2]), "'example' must be an object"),
    (lambda d: d.update(example={"case": {"__tuple__": 5}, "outputs": 1}), "cannot be decoded"),
    (lambda d: d.update(kind="poem"), "'kind' must be one of"),
    (lambda d: d.update(flaws="null_block_not_reserved"), "'flaws' must be a list"),
    (lambda d: d["property_ref"].update(module=7), "'property_ref.module' must be a string"),
    (lambda d: d.pop("schema"), "not a kvverify report"),
])
def test_a_corrupt_report_is_exit_2_with_a_message(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                   change, message: str) -> None:
    path = _rewrite(write_seed_report(tmp_path), change)
    assert main(["replay", str(path)]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


@pytest.mark.parametrize("text", ["{not json", "[]", "null", '"a string"', ""])
def test_garbage_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str) -> None:
    path = tmp_path / "r.json"
    path.write_text(text)
    assert main(["replay", str(path)]) == 2
    assert "Traceback" not in capsys.readouterr().err


def test_reports_carry_relative_paths_only(tmp_path: Path) -> None:
    path = write_seed_report(tmp_path)
    strings: list[str] = []

    def walk(value) -> None:
        if isinstance(value, str):
            strings.append(value)
        elif isinstance(value, dict):
            for k, v in value.items():
                walk(k)
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)

    walk(json.loads(path.read_text()))
    for root in {os.getcwd(), str(tmp_path), str(Path.home()), str(Path(__file__).resolve().parent.parent)}:
        leaked = [s for s in strings if root in s]
        assert not leaked, f"the report names {root}: {leaked[:3]}"
    assert not any(os.path.isabs(s) and os.sep in s and len(s) > 1 for s in strings)
