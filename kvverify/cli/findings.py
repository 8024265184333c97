"""``kvverify findings``: each finding -> its fix option -> its vLLM patch -> its test -> verified.

Read from the write-ups (``reports/findings/F<n>-<slug>.md``: the title and the
"Verified on vLLM ..." section), the fix options (:mod:`kvverify.fixes`) and the patch
overlay's registry (:data:`kvverify.targets.overlay.PATCHES`), so the table is never
edited by hand. The numbers are measurements recorded in the write-ups;
``scripts/verify-finding-patches.sh`` re-checks fail-before / pass-after.
"""

from __future__ import annotations

import argparse
import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from kvverify.cli.common import EXIT_OK, Formatter

_VERIFIED = re.compile(r"^#+\s*Verified on ((?:vLLM|SGLang) [^\n]*)$", re.MULTILINE)


@dataclass(frozen=True)
class FindingRow:
    finding: str
    title: str
    fixes: tuple[str, ...]
    patch: str | None
    test: str | None
    verified: str | None
    withdrawn: bool


def findings_dir() -> Path:
    from kvverify.targets.overlay import patches_dir
    return patches_dir().parent


def finding_rows(directory: Path | None = None) -> list[FindingRow]:
    """One row per write-up ``F<n>-*.md``, in number order."""
    from kvverify import fixes
    from kvverify.targets.overlay import PATCHES

    directory = directory or findings_dir()
    by_patch = {Path(name).stem: fix for fix, name in PATCHES.items()}
    rows = []
    for md in sorted(directory.glob("F*.md"), key=lambda p: int(re.sub(r"\D.*", "", p.stem[1:]) or 0)):
        text = md.read_text()
        first = text.splitlines()[0] if text else md.stem
        title = re.sub(r"^#\s*F\d+\s*[—-]\s*", "", first).strip()
        patch = directory / "patches" / f"{md.stem}.diff"
        number, _, slug = md.stem.partition("-")
        test = directory / "patches" / f"test_{number}_{slug.replace('-', '_')}.py"
        verified = _VERIFIED.search(text)
        rows.append(FindingRow(
            finding=number, title=title,
            fixes=tuple(n for n, f in fixes.CATALOG.items() if f.finding == md.stem),
            patch=patch.name if patch.is_file() and md.stem in by_patch else None,
            test=test.name if test.is_file() else None,
            verified=verified.group(1).strip() if verified else None,
            withdrawn="withdrawn" in first.lower()))
    return rows + sglang_finding_rows(directory)


def sglang_finding_rows(directory: Path) -> list[FindingRow]:
    """One row per SGLang write-up ``SG<n>-*.md`` (patches and tests under ``patches/sglang/``)."""
    from kvverify.sglang import fixes as sglang_fixes

    rows = []
    for md in sorted(directory.glob("SG*.md")):
        text = md.read_text()
        first = text.splitlines()[0] if text else md.stem
        number = md.stem.partition("-")[0]
        own = [f for f in sglang_fixes.CATALOG.values() if f.finding == number]
        patch = next((directory / "patches" / f.patch for f in own if (directory / "patches" / f.patch).is_file()), None)
        tests = sorted((directory / "patches" / "sglang").glob(f"test_{number}_*.py"))
        verified = _VERIFIED.search(text)
        rows.append(FindingRow(
            finding=number, title=re.sub(r"^#\s*SG\d+\s*[—-]\s*", "", first).strip(),
            fixes=tuple(f.name for f in own), patch=patch.name if patch else None,
            test=tests[0].name if tests else None, verified=verified.group(1).strip() if verified else None,
            withdrawn="withdrawn" in first.lower()))
    return rows


def cmd_findings(args: argparse.Namespace) -> int:
    rows = finding_rows()
    if args.json:
        print(json.dumps([asdict(r) for r in rows], indent=2))
        return EXIT_OK
    from rich.table import Table

    from kvverify.cli.common import make_console
    console = make_console()
    t = Table(title="kvverify findings on vLLM 0.33.0 (reports/findings/)")
    for col in ("finding", "fix option (--fix)", "patch", "upstream-style test", "verified (patched)"):
        t.add_column(col, overflow="fold")
    for r in rows:
        t.add_row(f"{r.finding}{' (withdrawn)' if r.withdrawn else ''}",
                  "\n".join(r.fixes) or "-", r.patch or "-", r.test or "-", r.verified or "not yet")
    console.print(t)
    console.print("[dim]re-check: scripts/verify-finding-patches.sh (each test fails on 0.33.0, passes "
                  "patched); pytest properties/ --target vllm --fix NAME[/dim]")
    return EXIT_OK


def add_findings_parser(sub: Any) -> argparse.ArgumentParser:
    """Register ``findings`` on the ``kvverify`` subparsers."""
    f = sub.add_parser("findings", formatter_class=Formatter,
                       help="the findings: fix option, vLLM patch, upstream-style test, verification",
                       description="Lists every finding about vLLM 0.33.0 (reports/findings/F<n>-*.md) with "
                       "its proposed fix option (--fix NAME for pytest, kvverify fuzz and check), its patch "
                       "against the vLLM sources, its upstream-style regression test and what the patched "
                       "engine was verified on.")
    f.add_argument("--json", action="store_true", help="print the rows as JSON")
    f.set_defaults(func=cmd_findings)
    return f
