"""A section of the release matrix: only some properties, on every release, with its own page.

The full matrix (``kvverify releases``) runs all of ``properties/`` on every release: about two
hours for the installed releases here. A section (:data:`SECTIONS`) runs only its test files
through the same steps — :func:`~.runs.run_release` with the files as pass 1, attribution by
replaying each report on the reference with every zoo flaw (then pairs) switched on, the
attribution passes, each report replayed on its release (exit 1) and forward until a later
release passes it (exit 0: the first release with the fix), the per-release results stored under
``reports/releases-<name>/X.Y.Z/`` — and publishes its page and data from those results:
``docs/releases-<name>.md`` and ``.json`` (:func:`.page.render`, :func:`.page.summary`), never
the matrix's own ``docs/releases.md``. The releases already published there and not stored here
stay (:func:`.legacy.with_published`): run one more release and the others are kept::

    python -m kvverify.releases.selected connector [--release X.Y.Z ...] [--venvs DIR ...]
    python -m kvverify.releases.selected connector --render-only
    python -m kvverify.releases.selected connector --release X.Y.Z --reattribute

``--reattribute``: the stored runs attributed and replayed again without re-running the suite
(:func:`~.runs.reattribute`), on the venvs installed now — a release run while later releases
were still being installed gets its forward replays on them.

``connector``: the KV-transfer properties of issue 29 (async loads, the skipped-waiting queues,
request slots, fenced frees, speculative blocks after a load) and findings F10-F13. A release
whose Scheduler lacks a path the property needs skips it with the reason (capability detection,
:class:`kvverify.targets.vllm.compat.Compat`), never a pass. ``validation``: the bad-input
properties (a non-positive field handed to the release's own ``CacheConfig`` /
``SchedulerConfig`` and planner; finding F16). Exit 1 when a run found a defect.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kvverify.releases import legacy
from kvverify.releases import venvs as venvs_mod
from kvverify.releases.defects import ReleaseResult
from kvverify.releases.page import render, summary
from kvverify.releases.store import load_results, write_atomic

#: section name -> the test files its releases run
SECTIONS: dict[str, tuple[str, ...]] = {
    "connector": ("properties/test_connector.py", "properties/test_connector_findings.py"),
    "validation": ("properties/test_bad_input.py",),
}
TITLES = {"connector": "The KV-transfer properties against real vLLM releases (issue 29)",
          "validation": "Bad input against real vLLM releases: the engine's own validation (issue 27)"}


def out_root(repo_root: Path, name: str) -> Path:
    """Where the section's per-release results live (generated, not committed)."""
    return repo_root / "reports" / f"releases-{name}"


def page_path(repo_root: Path, name: str) -> Path:
    return repo_root / "docs" / f"releases-{name}.md"


def published_sections(repo_root: Path) -> dict[str, dict[str, Any]]:
    """Each section's published data (``docs/releases-<name>.json``), for the README's
    real-release table (:func:`.readme.zoo_real_release_section`); a section never published is left out."""
    import json

    out = {}
    for name in SECTIONS:
        path = page_path(repo_root, name).with_suffix(".json")
        if path.is_file():
            out[name] = json.loads(path.read_text())
    return out


def update_readme_table(repo_root: Path) -> bool:
    """Regenerate README's real-release zoo table from ``docs/releases.json`` and every section's
    data (``False``: no matrix data, or README has no markers)."""
    import json

    from kvverify.releases.readme import update_readme, zoo_real_release_section

    data = repo_root / "docs" / "releases.json"
    if not data.is_file():
        return False
    return update_readme(repo_root / "README.md",
                         zoo_real_release_section(json.loads(data.read_text()), published_sections(repo_root)))


def publish_section(name: str, results: Sequence[ReleaseResult], *, repo_root: Path, doc: Path,
                    not_run: Sequence[str] = ()) -> list[str]:
    """Write the section's page ``doc`` and its data (``doc`` with ``.json``) from ``results``
    (the stored ones) and every release already published there that is not among them — its
    full result from the data, or carried verbatim (:func:`.legacy.with_published`, as
    ``kvverify releases --publish`` does for ``docs/releases.md``): running one more release
    drops none of the published ones. Returns the versions published, in order."""
    import json

    data = doc.with_suffix(".json")
    shown, carried = legacy.with_published(results, data, doc)
    published = {r.version for r in shown} | set(carried.versions)
    doc.parent.mkdir(parents=True, exist_ok=True)
    text = render(shown, repo_root=repo_root, doc_path=doc, not_run=[v for v in not_run if v not in published],
                  carried=carried, title=TITLES.get(name, name), command=f"python -m kvverify.releases.selected {name}",
                  suite=" ".join(SECTIONS[name]), source="kvverify/releases/selected.py",
                  reports=f"reports/releases-{name}",
                  rerun=f"python -m kvverify.releases.selected {name} --release X")
    write_atomic(doc, text + "\n")
    write_atomic(data, json.dumps({"section": name, "tests": list(SECTIONS[name]), **summary(shown, carried)},
                                  indent=1) + "\n")
    return sorted(published, key=venvs_mod.version_key)


def main(argv: Sequence[str] | None = None) -> int:
    from kvverify.releases import runs

    ap = argparse.ArgumentParser(prog="python -m kvverify.releases.selected", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("section", choices=sorted(SECTIONS))
    ap.add_argument("--venvs", action="append", default=[], metavar="DIR",
                    help="a release venv, or a directory of vllm-X.Y.Z venvs (repeatable; default as kvverify releases)")
    ap.add_argument("--release", action="append", default=[], metavar="X.Y.Z", help="only these releases")
    ap.add_argument("--output", default=None, metavar="PATH", help="the page (default docs/releases-<section>.md)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--profile", default="ci")
    ap.add_argument("--timeout", type=float, default=1800.0)
    ap.add_argument("--max-passes", type=int, default=2)
    ap.add_argument("--no-replay-check", action="store_true")
    ap.add_argument("--render-only", action="store_true")
    ap.add_argument("--reattribute", action="store_true",
                    help="attribute the stored runs again and replay their reports on the venvs installed now, "
                         "without re-running the suite")
    args = ap.parse_args(argv)
    root = Path(__file__).resolve().parents[2]
    for v in args.release:
        if not venvs_mod.is_version(v):
            ap.error(f"--release {v!r}: a vLLM version X.Y.Z")
    found = venvs_mod.discover([Path(p) for p in args.venvs] or venvs_mod.default_sources(root))
    store = out_root(root, args.section)
    if not args.render_only:
        chosen = [rv for rv in found if not args.release or rv.version in args.release]
        missing = sorted(set(args.release) - {rv.version for rv in found}, key=venvs_mod.version_key)
        if missing or not chosen:
            print(f"no venv for {', '.join(missing) or 'any release'} (found: "
                  f"{', '.join(rv.version for rv in found) or 'none'})", file=sys.stderr)
            return 2
        for rv in chosen:
            if args.reattribute:
                runs.reattribute(rv, root, store, replay_check=not args.no_replay_check, venvs=found)
                continue
            runs.run_release(rv, root, store, workers=args.workers, profile=args.profile, timeout=args.timeout,
                             max_passes=args.max_passes, replay_check=not args.no_replay_check, venvs=found,
                             select=SECTIONS[args.section])
    results = load_results(store)
    doc = Path(args.output) if args.output else page_path(root, args.section)
    shown = publish_section(args.section, results, repo_root=root, doc=doc, not_run=[rv.version for rv in found])
    print(f"wrote {doc} ({len(shown)} release(s): {len(results)} from {store}, the rest as published)")
    if doc == page_path(root, args.section) and update_readme_table(root):
        print("regenerated README.md's real-release zoo table (docs/releases.json and the sections' data)")
    return 1 if any(r.defects for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
