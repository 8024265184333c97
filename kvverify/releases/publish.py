"""The one writer of the project's files: ``docs/releases.md``, its data ``docs/releases.json``
and the README's real-release zoo table, all from the stored results.

``kvverify releases`` calls :func:`publish` after every run (and for ``--render-only``);
everything else in the package writes only under the reports root.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path

from kvverify.releases.defects import ReleaseResult
from kvverify.releases.legacy import Carried
from kvverify.releases.page import render, summary
from kvverify.releases.readme import README_BEGIN, update_readme, zoo_real_release_section
from kvverify.releases.store import write_atomic


def publish(results: Sequence[ReleaseResult], *, repo_root: Path, doc: Path, not_run: Sequence[str] = (),
            readme: Path | None = None, carried: Carried | None = None) -> None:
    """Write the page ``doc`` and its data (``doc`` with ``.json``); with ``readme``, regenerate
    that README's real-release zoo table from the same data (a README without the markers is
    said on stderr and left as it is). ``carried``: releases published before their results were
    stored, kept as they were (:mod:`.legacy`)."""
    doc.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(doc, render(results, repo_root=repo_root, doc_path=doc, not_run=not_run, carried=carried) + "\n")
    data = summary(results, carried)
    write_atomic(doc.with_suffix(".json"), json.dumps(data, indent=1) + "\n")
    from kvverify.releases.selected import published_sections

    if readme is not None and not update_readme(readme, zoo_real_release_section(data, published_sections(repo_root))):
        print(f"{readme.name} has no {README_BEGIN!r} marker: its real-release table was not updated",
              file=sys.stderr)
