"""The numbers and outputs README.md and docs/ quote come from a run, and stay so.

Every block marked ``<!-- regen: NAME -->`` is what ``scripts/regen_docs.py`` produces today (a
``kvverify`` command's output, or a table rendered from a committed measurement such as
``docs/check-benchmark.json``); every ``regen-excerpt`` line still occurs in its command's output.
Run times quoted in several places agree with each other. Stale? Run the script.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import regen_docs  # noqa: E402


def test_every_regenerated_block_is_fresh() -> None:
    stale = regen_docs.regenerate(check=True)
    assert not stale, "stale docs (run scripts/regen_docs.py):\n" + "\n".join(stale)


def test_blocks_are_marked_where_the_docs_quote_outputs() -> None:
    names = {m.group("name") for doc in regen_docs.DOCS for m in regen_docs.blocks(doc)}
    assert {"check-catalog", "check-benchmark", "trap-mamba", "trap-budget", "trap-encoder", "length-yarn"} <= names
    assert names <= set(regen_docs.EXAMPLES) | set(regen_docs.TABLES)


def test_the_default_run_time_is_stated_once_and_the_same_everywhere() -> None:
    pattern = re.compile(r"the default run: .*?about (\d+) s on 2 cores")
    stated = {doc: pattern.findall((ROOT / doc).read_text()) for doc in ("README.md", "docs/cli.md")}
    values = {v for found in stated.values() for v in found}
    assert all(stated.values()) and len(values) == 1, stated


def test_the_fuzz_replay_and_report_examples_show_one_report() -> None:
    """docs/cli.md's fuzz run writes a report, which its replay and report examples then use: one id
    (regenerate all three together: the fuzz command, then `kvverify replay` / `kvverify report`)."""
    text = (ROOT / "docs" / "cli.md").read_text()
    ids = set(re.findall(r"test_startup_check_passes_implies_servable-([0-9a-f]{10})", text.replace("\n", "")))
    ids |= set(re.findall(r"able-([0-9a-f]{10})\.json", text))
    assert len(ids) == 1, ids
