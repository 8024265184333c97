"""``kvverify releases``: the command line of the release matrix (:mod:`kvverify.releases`).

Argument parsing, then calls: discover the venvs, run (or re-attribute) the releases asked,
publish the page from the stored results.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import kvverify.releases
from kvverify.cli.common import Formatter
from kvverify.errors import ConfigError
from kvverify.releases import venvs

if TYPE_CHECKING:
    from kvverify.releases.defects import ReleaseResult


def add_releases_parser(sub: Any) -> None:
    """Register ``releases`` on the ``kvverify`` subparsers."""
    r = sub.add_parser("releases", formatter_class=Formatter,
                       help="run the suite against every installed vLLM release -> docs/releases.md",
                       description=kvverify.releases.__doc__)
    r.add_argument("--venvs", action="append", default=[], metavar="DIR",
                   help=f"a release venv, or a directory of vllm-X.Y.Z venvs (repeatable; default "
                        f"${venvs.ENV_VENVS}, os.pathsep-separated, else .venv-vllm* in the checkout and ../venvs/vllm-*)")
    r.add_argument("--release", action="append", default=[], metavar="X.Y.Z",
                   help="only these releases (repeatable); others keep their stored results")
    r.add_argument("--output", default=None, metavar="PATH",
                   help="the Markdown page (default <reports root>/releases.md, or docs/releases.md with --publish); "
                        "its data goes next to it as .json")
    r.add_argument("--publish", action="store_true",
                   help="write the project's files: docs/releases.md, docs/releases.json and the README's "
                        "real-release zoo table (what a maintainer commits after a run over every release; "
                        "without it nothing outside the reports root is written)")
    r.add_argument("--reports-root", default=None, metavar="DIR",
                   help="per-release reports, JUnit and results (default reports/releases)")
    r.add_argument("--workers", type=int, default=2, help="pytest-xdist workers per run (0: no xdist)")
    r.add_argument("--profile", default="ci", help="Hypothesis profile (default ci)")
    r.add_argument("--timeout", type=float, default=1800.0, help="seconds per pytest pass")
    r.add_argument("--max-passes", type=int, default=3,
                   help="attribution passes per release (1: no re-run with identified defects absorbed)")
    r.add_argument("--no-replay-check", action="store_true",
                   help="do not replay the failures' reports (by default each is replayed on its release's venv, "
                        "expected exit 1, then on the later installed releases until one passes: the first "
                        "release that fixed it; one process per venv)")
    r.add_argument("--render-only", action="store_true", help="only re-render from stored results")
    r.add_argument("--reattribute", action="store_true",
                   help="attribute the stored runs again (JUnit + reports) and replay their reports, "
                        "without re-running the suite")
    r.add_argument("--list", action="store_true", help="list the discovered release venvs and exit")
    r.add_argument("--json", action="store_true", help="print the results as JSON")
    r.add_argument("--engine", choices=("vllm", "sglang"), default="vllm",
                   help="sglang: the SGLang properties on every /work/venvs/sglang-X.Y.Z (or "
                        "$KVVERIFY_SGLANG_VENVS) -> docs/sglang-releases.md (kvverify/sglang/releases.py)")
    r.set_defaults(func=cmd_releases)


def repo_root() -> Path:
    return Path(__file__).resolve().parents[2]


def cmd_releases(args: argparse.Namespace) -> int:
    if args.engine == "sglang":
        from kvverify.sglang import releases as sglang_releases
        sg_runs = sglang_releases.render_stored() if args.render_only else sglang_releases.main(args.release or None)
        if args.json:
            import dataclasses
            print(json.dumps([dataclasses.asdict(r) for r in sg_runs], indent=2))
        else:
            print(sglang_releases.render_md(sg_runs))
        return 0
    from kvverify.releases import legacy, runs, store  # here, not at parser build: they import the suite's machinery
    from kvverify.releases.publish import publish

    root = repo_root()
    for v in args.release:
        if not venvs.is_version(v):
            raise ConfigError("release", v, "a vLLM version X.Y.Z")
    if args.max_passes < 1:
        raise ConfigError("max_passes", args.max_passes, "an integer >= 1")
    out_root = Path(args.reports_root) if args.reports_root else root / "reports" / "releases"
    doc = Path(args.output) if args.output else (root / "docs" / "releases.md" if args.publish
                                                 else out_root / "releases.md")
    sources = [Path(p) for p in args.venvs] or venvs.default_sources(root)
    found = venvs.discover(sources)
    if args.list:
        for rv in found:
            print(f"{rv.version}\t{rv.path}\t{rv.provenance}")
        return 0
    if not args.render_only:
        chosen = [rv for rv in found if not args.release or rv.version in args.release]
        missing = sorted(set(args.release) - {rv.version for rv in found}, key=venvs.version_key)
        if missing:
            raise ConfigError("release", ", ".join(missing),
                              f"no venv found (found: {', '.join(rv.version for rv in found) or 'none'}; "
                              f"install with scripts/install-vllm-target.sh --version X.Y.Z)")
        if not chosen:
            raise ConfigError("venvs", ", ".join(str(s) for s in sources),
                              "no vLLM release venv found there (scripts/install-vllm-target.sh --version X.Y.Z DIR)")
        for rv in chosen:
            if args.reattribute:
                runs.reattribute(rv, root, out_root, replay_check=not args.no_replay_check, venvs=found)
                continue
            runs.run_release(rv, root, out_root, workers=args.workers, profile=args.profile, timeout=args.timeout,
                             max_passes=args.max_passes, replay_check=not args.no_replay_check, venvs=found)
    results = store.load_results(out_root)
    project_page = args.publish and args.output is None  # the project's page: its README table too
    shown, carried = list(results), None
    if args.publish:  # every release published before stays: stored in the data, or carried (releases/legacy.py)
        shown, carried = legacy.with_published(results, root / "docs" / "releases.json", root / "docs" / "releases.md")
    ran = {r.version for r in shown} | set(carried.versions if carried else ())
    publish(shown, repo_root=root, doc=doc, not_run=[rv.version for rv in found if rv.version not in ran],
            readme=root / "README.md" if project_page else None, carried=carried)
    if args.json:
        print(json.dumps(store.results_json(results), indent=1))
    else:
        print(f"wrote {doc} ({len(results)} release(s))", file=sys.stderr)
    return exit_status(results, args.release)


def exit_status(results: Sequence[ReleaseResult], asked: Sequence[str]) -> int:
    """1 when a release asked about (``--release``; none: every stored one) has a failure, else 0:
    ``--release 0.33.0`` is green when 0.33.0 is, whatever older releases shipped."""
    wanted = set(asked) or {r.version for r in results}
    return 1 if any(r.defects for r in results if r.version in wanted) else 0
