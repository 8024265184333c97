"""A section of the release matrix (kvverify/releases/selected.py): its files exist, pass 1 runs
only them, and its page and data are rendered from stored results, never docs/releases.md."""

from __future__ import annotations

import json
from pathlib import Path

from kvverify.releases import legacy, selected
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


def _one(version: str, status: str, flaw: str | None = None) -> ReleaseResult:
    test = "properties/test_connector.py::test_connector_workload_completes"
    defects: list[dict[str, object]] = [{"test": test, "violation": "[admission.stall.no_progress] ...",
                                         "counterexample": "B=16", "report": None, "flaws": [flaw],
                                         "replay_on_release": None, "forward": {}}] if flaw else []
    return ReleaseResult(version, f"/venvs/vllm-{version}", returncode=int(bool(flaw)), passes=1,
                         outcomes=[{"nodeid": test, "status": status, "message": "x" if flaw else ""}],
                         defects=defects)


def test_publishing_one_more_release_keeps_the_published_ones(tmp_path: Path) -> None:
    """Issue 29 item 5: the section publishes the releases already in its page and data that are
    not stored here (the per-release results are generated, and may be gone): an entry with its
    full result renders again, one published before results were stored is carried verbatim
    (row, cells, section, data entry), a newly stored result is added in version order and
    replaces its own published entry."""
    doc = tmp_path / "docs" / "releases-connector.md"
    data = doc.with_suffix(".json")
    selected.publish_section("connector", [_one("0.31.0", "failed", "deferred_requests_hold_slots"),
                                           _one("0.33.0", "passed")], repo_root=tmp_path, doc=doc)
    first = json.loads(data.read_text())
    del first["releases"][0]["result"]  # 0.31.0 as published before its result was stored
    data.write_text(json.dumps(first))
    page = doc.read_text()
    row_031 = next(ln for ln in page.splitlines() if ln.startswith("| 0.31.0 |"))
    shown = selected.publish_section("connector", [_one("0.32.0", "passed")], repo_root=tmp_path, doc=doc,
                                     not_run=["0.29.0", "0.31.0", "0.32.0", "0.33.0"])
    assert shown == ["0.31.0", "0.32.0", "0.33.0"]
    again = json.loads(data.read_text())
    assert again["section"] == "connector"
    assert [e["version"] for e in again["releases"]] == ["0.31.0", "0.32.0", "0.33.0"]
    assert again["releases"][0] == first["releases"][0]  # carried as published
    assert again["releases"][2]["result"]["version"] == "0.33.0"  # rendered again from its stored result
    text = doc.read_text()
    assert row_031 in text and "| property | 0.31.0 | 0.32.0 | 0.33.0 |" in text
    assert "| `test_connector.py::test_connector_workload_completes` | **FAILS** | pass | pass |" in text
    assert "Installed but not run yet: 0.29.0." in text
    assert "python -m kvverify.releases.selected connector --release X" in text  # how to store 0.31.0
    assert legacy.page_sections(page)["0.31.0"] in text
    # a stored result replaces its published entry (0.33.0 rerun, now failing)
    selected.publish_section("connector", [_one("0.33.0", "failed", "async_load_unreserved")],
                             repo_root=tmp_path, doc=doc)
    last = json.loads(data.read_text())
    assert [e["version"] for e in last["releases"]] == ["0.31.0", "0.32.0", "0.33.0"]
    assert last["releases"][2]["failures"][0]["defect"] == "async_load_unreserved"
    row = "| `test_connector.py::test_connector_workload_completes` | **FAILS** | pass | **FAILS** |"
    assert row in doc.read_text()


def test_readme_table_counts_a_sections_failures() -> None:
    """A defect only a section found (the connector properties on 0.29.0) is in README's
    real-release table, on its release, with its replays; the section is named among the runs."""
    from kvverify.releases.readme import zoo_real_release_section
    matrix = {"releases": [{"version": "0.33.0", "failures": []}]}
    failure = {"test": "properties/test_connector.py::t", "defect": "deferred_free_preemption_cascade",
               "report": "r.json", "replay_on_release": 1, "forward": {"0.31.0": 0}}
    section = {"releases": [{"version": "0.29.0", "failures": [failure]}]}
    table = zoo_real_release_section(matrix, {"connector": section})
    row = next(line for line in table.splitlines() if line.startswith("| `deferred_free_preemption_cascade`"))
    assert "0.29.0 (1 failure; replays: 1/1 exit 1 on their release, fixed between 0.29.0 and 0.31.0)" in row
    assert "the `connector` section ([docs/releases-connector.md](docs/releases-connector.md)): 0.29.0" in table
    assert "not found in the releases run" in zoo_real_release_section(matrix).split("deferred_free_preemption_cascade")[1]


def test_reattribute_replays_the_stored_runs_without_running_the_suite(tmp_path: Path, monkeypatch) -> None:
    """``--reattribute``: each chosen release's stored run is attributed and replayed again on the
    venvs discovered now (a release run while later ones were being installed gets its forward
    replays on them); the suite is not run, and the page is published from the stored results."""
    from kvverify.releases import runs
    from kvverify.releases.venvs import ReleaseVenv

    found = [ReleaseVenv("0.25.0", tmp_path / "vllm-0.25.0"), ReleaseVenv("0.29.0", tmp_path / "vllm-0.29.0")]
    monkeypatch.setattr(selected.venvs_mod, "discover", lambda sources: found)
    calls: list[tuple[str, str, list[str]]] = []
    monkeypatch.setattr(runs, "reattribute", lambda rv, root, store, *, replay_check, venvs:
                        calls.append(("reattribute", rv.version, [v.version for v in venvs])))
    monkeypatch.setattr(runs, "run_release", lambda rv, *a, **k: calls.append(("run", rv.version, [])))
    monkeypatch.setattr(selected, "load_results", lambda store: [_one("0.25.0", "failed", "async_load_unreserved")])
    doc = tmp_path / "page.md"
    rc = selected.main(["connector", "--release", "0.25.0", "--reattribute", "--output", str(doc)])
    assert calls == [("reattribute", "0.25.0", ["0.25.0", "0.29.0"])]
    assert rc == 1 and "async_load_unreserved" in doc.read_text()
