"""A section of the release matrix (kvverify/releases/selected.py): its files exist, pass 1 runs
only them, and its page and data are rendered from stored results, never docs/releases.md."""

from __future__ import annotations

import json
from pathlib import Path

from kvverify.releases import selected
from kvverify.releases.defects import ReleaseResult
from kvverify.releases.suite import pytest_command

ROOT = Path(__file__).resolve().parents[1]


def test_every_section_names_existing_test_files() -> None:
    for name, files in selected.SECTIONS.items():
        assert files and all((ROOT / f).is_file() for f in files), name
        assert name in selected.TITLES


def test_pass_one_runs_only_the_section() -> None:
    cmd = pytest_command("python", junit=Path("j.xml"), reports_dir=Path("r"), workers=1, profile="ci",
                         only=selected.SECTIONS["connector"])
    assert "properties/" not in cmd and all(f in cmd for f in selected.SECTIONS["connector"])


def test_the_section_page_is_rendered_from_results(tmp_path: Path) -> None:
    result = ReleaseResult("0.27.1", "/venvs/vllm-0.27.1", returncode=1, passes=1,
                           outcomes=[{"nodeid": "properties/test_connector.py::test_connector_workload_completes",
                                      "status": "failed", "message": "x"}],
                           defects=[{"test": "properties/test_connector.py::test_connector_workload_completes",
                                     "violation": "[admission.stall.no_progress] ...", "counterexample": "B=16",
                                     "report": None, "flaws": ["deferred_requests_hold_slots"],
                                     "replay_on_release": None, "forward": {}}])
    doc = tmp_path / "docs" / "releases-connector.md"
    selected.publish_section("connector", [result], repo_root=tmp_path, doc=doc)
    page = doc.read_text()
    assert page.startswith("# The KV-transfer properties") and "properties/test_connector.py" in page
    assert "deferred_requests_hold_slots" in page and "kvverify/releases/selected.py" in page
    data = json.loads(doc.with_suffix(".json").read_text())
    assert data["section"] == "connector" and data["releases"][0]["failures"][0]["defect"] == \
        "deferred_requests_hold_slots"
    assert not (tmp_path / "docs" / "releases.md").exists()
