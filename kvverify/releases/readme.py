"""The README's real-release zoo table, generated from the matrix data (``docs/releases.json``,
:func:`kvverify.releases.page.summary`) between :data:`README_BEGIN` and :data:`README_END`.

tests/test_releases.py asserts that README.md's table is this function of the committed data.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kvverify import flaws
from kvverify.props.attribution import parts
from kvverify.releases.defects import Defect
from kvverify.releases.page import md
from kvverify.releases.store import write_atomic
from kvverify.releases.venvs import version_key

README_BEGIN = "<!-- kvverify releases: real-release zoo table (generated from docs/releases.json; do not edit) -->"
README_END = "<!-- end of the generated real-release zoo table -->"


def _between(failure: Mapping[str, Any], version: str) -> tuple[str, str] | None:
    """A failure's ``fixed_between`` (A, B); for data written before that field, the same from its
    ``forward`` replays (:meth:`kvverify.releases.defects.Defect.fixed_between`)."""
    if failure.get("fixed_between"):
        a, b = failure["fixed_between"]
        return str(a), str(b)
    forward = dict(failure.get("forward") or {})
    return Defect("", "", "", None, [], forward=forward).fixed_between(version)


def _with_sections(data: Mapping[str, Any], sections: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The matrix's releases with each section's failures added to the same release's entry (a
    release a section ran and the matrix did not gets an entry of its own), newest last."""
    by_v: dict[str, dict[str, Any]] = {r["version"]: {**r, "failures": list(r.get("failures") or [])}
                                       for r in data.get("releases") or []}
    for sec in sections.values():
        for r in sec.get("releases") or []:
            entry = by_v.setdefault(r["version"], {"version": r["version"], "failures": []})
            entry["failures"].extend(r.get("failures") or [])
    return [by_v[v] for v in sorted(by_v, key=version_key)]


def zoo_real_release_section(data: Mapping[str, Any], sections: Mapping[str, Mapping[str, Any]] | None = None) -> str:
    """The README's real-release zoo table, from :func:`~kvverify.releases.page.summary`'s data: for each zoo flaw,
    "caught when re-introduced" (every catalogued flaw is: ``kvverify zoo``, tests/test_zoo.py)
    next to the real releases whose own code failed with it, the replays' verdicts, and the
    first release where its reports pass. ``sections``: the published data of the matrix's
    sections (``docs/releases-<name>.json``, :mod:`.selected`), whose failures count too."""
    sections = dict(sections or {})
    releases = _with_sections(data, sections)
    ran = [r["version"] for r in data.get("releases") or []]
    in_sections = "".join(f"; the `{name}` section ([docs/releases-{name}.md](docs/releases-{name}.md)): "
                   + (", ".join(r["version"] for r in sec.get("releases") or []) or "none")
                   for name, sec in sorted(sections.items()))
    L = ["**Caught in real releases** ([docs/releases.md](docs/releases.md), `kvverify releases`): the unmodified",
         "suite on each release's own code (CPU-only). A failure is named by replaying its report on the reference",
         "with each zoo flaw (then each pair) switched on; the report is replayed on the release (`kvverify replay`,",
         "exit 1 = reproduced) and on the later installed releases until it passes (exit 0): upstream fixed it",
         "between the last release it reproduces on and that one. Releases run: " + (", ".join(ran) or "none")
         + in_sections + ".",
         "",
         "| flaw | caught when re-introduced | caught in real release |", "|---|---|---|"]
    for name in flaws.CATALOG:
        alone: dict[str, list[dict[str, Any]]] = {}
        shared: dict[tuple[str, str], int] = {}  # (release, how) -> failures
        for r in releases:
            for f in r.get("failures") or []:
                lab = f.get("defect") or ""
                alternatives = [a.strip() for a in lab.split(" | ")]
                if lab == name:
                    alone.setdefault(r["version"], []).append(f)
                    continue
                if not any(name in parts(a) for a in alternatives):
                    # named after another flaw, but this one explains it too (issue 27): say so
                    also = [a for a in f.get("alternatives") or [] if name in parts(a)]
                    if also:
                        how = f"also consistent with a failure named `{lab}`" + (
                            "" if also == [name] else f" (as {' or '.join(f'`{a}`' for a in also)})")
                        shared[(r["version"], how)] = shared.get((r["version"], how), 0) + 1
                    continue
                if len(alternatives) > 1:  # several explanations, this flaw in some
                    how = "ambiguous: " + " or ".join(f"`{a}`" for a in alternatives)
                else:  # one explanation: this flaw together with another
                    how = "together with " + ", ".join(f"`{p}`" for p in parts(lab) if p != name)
                shared[(r["version"], how)] = shared.get((r["version"], how), 0) + 1
        cells = []
        if alone:
            fails = [f for fs in alone.values() for f in fs]
            with_report = [f for f in fails if f.get("report")]
            own = sum(f.get("replay_on_release") == 1 for f in with_report)
            fixed = sorted({ab for v, fs in alone.items() for f in fs if f.get("report") and (ab := _between(f, v))},
                           key=lambda ab: (version_key(ab[1]), version_key(ab[0])))
            forwarded = any(f.get("forward") for f in with_report)
            cell = ", ".join(alone) + f" ({len(fails)} failure{'s' * (len(fails) != 1)}"
            if with_report:
                cell += (f"; replays: {own}/{len(with_report)} exit 1 on their release, "
                         + ("fixed between " + " / ".join(f"{a} and {b}" for a, b in fixed) if fixed else
                            "no later installed release passes them" if forwarded else
                            "later releases not replayed yet"))
            cells.append(cell + ")")
        for (version, how), n in sorted(shared.items(), key=lambda kv: (version_key(kv[0][0]), kv[0][1])):
            cells.append(f"{version} {how} ({n} failure{'s' * (n != 1)})")
        shipped = flaws.CATALOG[name].not_shipped
        none = f"not shipped in the releases run: {shipped}" if shipped else "not found in the releases run"
        L.append(f"| `{name}` | yes | {md('; '.join(cells) or none)} |")
    return "\n".join(L)


def update_readme(readme: Path, section: str) -> bool:
    """Replace the text between :data:`README_BEGIN` and :data:`README_END` in ``readme``
    (re-read just before, written atomically); ``False`` when the markers are missing."""
    text = readme.read_text()
    i, j = text.find(README_BEGIN), text.find(README_END)
    if i < 0 or j < i:
        return False
    new = text[:i + len(README_BEGIN)] + "\n" + section + "\n" + text[j:]
    if new != text:
        write_atomic(readme, new)
    return True
