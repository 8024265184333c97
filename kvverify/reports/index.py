"""The index of all reports: ``index.md`` and one self-contained ``index.html``.

The HTML page has inline CSS, no scripts and no external assets: every report is a
collapsible section with its replay command, evidence, configuration tables and trace.
"""

from __future__ import annotations

import html
import json
import os
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from kvverify.reports.common import (
    INDEX_HTML,
    INDEX_MD,
    OVERVIEW_SVG,
    atomic_write_text,
    display_path,
    reports_dir,
)
from kvverify.reports.render import md_table, ref_text, spec_columns
from kvverify.reports.store import list_reports, write_timeline


_CSS = """
body{font:15px/1.5 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;background:#f6f7f9;color:#1d2330}
header{background:#1d2330;color:#fff;padding:18px 28px}header h1{margin:0;font-size:20px}
header p{margin:4px 0 0;color:#c3c9d6}main{max-width:1100px;margin:0 auto;padding:18px 28px}
table{border-collapse:collapse;margin:8px 0 14px;font-size:13px;background:#fff}
th,td{border:1px solid #dde1e8;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#eef1f5;font-weight:600}td.num{text-align:right;font-variant-numeric:tabular-nums}
details{background:#fff;border:1px solid #dde1e8;border-radius:8px;margin:12px 0;padding:0 16px}
summary{cursor:pointer;padding:12px 0;font-weight:600;list-style:none}
summary::-webkit-details-marker{display:none}summary:before{content:"▸ ";color:#8a93a6}
details[open] summary:before{content:"▾ "}
.timeline{overflow-x:auto;margin:8px 0 14px}.timeline svg{display:block;max-width:100%;height:auto}
.tag{display:inline-block;border-radius:10px;padding:0 8px;font-size:12px;font-weight:600;margin-left:6px}
.flaw{background:#fde8e8;color:#a4161a}.finding{background:#fff4d6;color:#8a5a00}
.ref{background:#e6f4ea;color:#1e6b34}.reason{color:#3c4454;font-weight:400}
code,pre{font:12.5px/1.45 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
pre{background:#1d2330;color:#e8ebf2;padding:10px 12px;border-radius:6px;overflow-x:auto}
.changed{font-weight:700}.muted{color:#8a93a6}h3{margin:16px 0 4px;font-size:15px}
.summary td{font-size:14px}table.facts th{background:none;width:11em;color:#5a6375}
"""


def _h(value: Any) -> str:
    if isinstance(value, (dict, list)):
        value = json.dumps(value, separators=(", ", ": "))
    return html.escape("" if value is None else str(value))


def _html_table(header: Sequence[str], rows: Iterable[Sequence[Any]], classes: str = "") -> str:
    head = "".join(f"<th>{_h(c)}</th>" for c in header)
    body = []
    for row in rows:
        cells = []
        for c in row:
            cls = ' class="num"' if isinstance(c, (int, float)) and not isinstance(c, bool) else ""
            cells.append(f"<td{cls}>{_h(c)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    cls = f' class="{classes}"' if classes else ""
    return f"<table{cls}><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _html_facts(rows: Iterable[tuple[str, Any]]) -> str:
    body = "".join(f"<tr><th>{_h(k)}</th><td>{_h(v)}</td></tr>" for k, v in rows)
    return f'<table class="facts"><tbody>{body}</tbody></table>'


def _html_report(path: Path, r: Mapping[str, Any], open_: bool = False) -> str:
    v = r.get("violation") or {}
    tags = "".join(f'<span class="tag flaw">flaw {_h(f)}</span>' for f in r.get("flaws") or [])
    if r.get("known_finding"):
        tags += '<span class="tag finding">known finding</span>'
    if not r.get("flaws"):
        tags += '<span class="tag ref">reference</span>'
    parts = [f'<details id="{_h(r.get("id"))}"{" open" if open_ else ""}><summary><code>{_h(v.get("name"))}</code> — '
             f'{_h(r.get("property"))}{tags}<br><span class="reason">{_h(v.get("reason"))}</span></summary>']
    facts = [("report", path.name), ("property", ref_text(r.get("property_ref") or {}).replace("`", "")),
             ("target", r.get("target")), ("found by", (r.get("run") or {}).get("found_by"))]
    for res in r.get("resembles") or []:
        facts.append(("resembles upstream", f"{res['upstream']} — {res['symptom']} ({res['defect']})"))
    if r.get("known_finding"):
        facts.append(("known finding", r["known_finding"]))
    parts.append(_html_facts(facts))
    if r.get("timeline"):
        from kvverify.reports.timeline import render_json
        try:
            svg = render_json(r["timeline"])
        except (KeyError, TypeError, ValueError, IndexError):  # a hand-edited or foreign report
            svg = '<p class="muted">(the timeline in this report cannot be drawn)</p>'
        parts.append('<h3>Timeline of the failing run</h3><div class="timeline">' + svg + "</div>")
    replay = r.get("replay") or {}
    # the command for where the file is now (reports move: CI artifacts, merged shards)
    cmds = [f"kvverify replay {display_path(path)}"] + [replay.get(k) for k in ("equivalent", "pytest")
                                                        if replay.get(k)]
    parts.append("<h3>Replay</h3><pre>" + _h("\n".join(c for c in cmds if c)) + "</pre>")
    if v.get("evidence"):
        parts.append("<h3>Evidence</h3>" + _html_table(["quantity", "value"], v["evidence"].items()))
    z3m = r.get("z3_model")
    if z3m:
        parts.append(f"<h3>Z3 model (case {_h(z3m.get('case'))})</h3>"
                     + _html_table(["variable", "value"], (z3m.get("values") or {}).items())
                     + f"<p>Replay on the reference: {_h(z3m.get('replay_on_reference'))}</p>")
    conf = r.get("configuration") or {}
    if conf.get("vllm_config"):
        rows = conf["vllm_config"]
        head = "".join(f"<th>{h}</th>" for h in ("field", "value", "default"))
        body = "".join(f'<tr class="{"changed" if x["changed"] else "muted"}"><td>{_h(x["field"])}</td>'
                       f'<td>{_h(x["value"])}</td><td>{_h(x["default"])}</td></tr>' for x in rows)
        parts.append("<h3>Configuration (VllmConfig; bold = not the default)</h3>"
                     f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
    for i, rows in enumerate(conf.get("workers") or []):
        cols = spec_columns(rows)
        parts.append(f"<h3>Layer specs{f' (worker {i})' if len(conf['workers']) > 1 else ''}</h3>"
                     + _html_table(cols, ([x.get(c, "") for c in cols] for x in rows)))
    if conf.get("groups"):
        cols = spec_columns(conf["groups"])
        parts.append("<h3>KV cache groups</h3>"
                     + _html_table(cols, ([x.get(c, "") for c in cols] for x in conf["groups"])))
    if conf.get("arguments"):
        parts.append("<h3>Other arguments</h3><pre>" + _h(json.dumps(conf["arguments"], indent=2)[:6000])
                     + "</pre>")
    trace = r.get("trace")
    if trace and trace.get("program"):
        parts.append("<h3>Operation trace (falsifying program)</h3><pre>"
                     + _h("\n".join(str(x) for x in trace["program"])) + "</pre>")
    elif trace:
        oc = trace.get("outcome") or {}
        parts.append("<h3>Operation trace</h3>" + _html_table(
            ["request", "prompt tokens", "max tokens", "arrival"],
            ((q.get("request_id"), q.get("prompt_tokens"), q.get("max_tokens"), q.get("arrival_step"))
             for q in trace["requests"] if isinstance(q, dict)))
            + "<p>" + _h(", ".join(f"{k}={oc[k]}" for k in oc if oc[k] not in (None, [], ()))) + "</p>"
            + _html_table(trace["columns"], (row if row is not None else ["…"] * len(trace["columns"])
                                             for row in trace["rows"][:120])))
    parts.append("</details>")
    return "".join(parts)


def render_index(directory: str | os.PathLike[str] | None = None) -> tuple[Path, Path, int]:
    """Write ``index.md`` and a self-contained ``index.html`` of every report in ``directory``."""
    from kvverify.reports.timeline import render_overview

    where = Path(directory) if directory is not None else reports_dir()
    reports = list_reports(where)
    findings = sorted((where / "findings").glob("*.md")) if (where / "findings").is_dir() else []
    md = ["# kvverify counterexample reports", "",
          f"{len(reports)} report(s) in `{display_path(where)}`. Each replays with "
          "`kvverify replay <report>.json` (exit 1: still failing, 0: passes now).", ""]
    overview = render_overview(r for _, r in reports)
    atomic_write_text(where / OVERVIEW_SVG, overview)
    md += [f"![failures per invariant and per property]({OVERVIEW_SVG})", ""]
    for _, r in reports:  # reports copied without their pictures (CI artifacts): draw them again
        if r.get("timeline") and not (where / f"{r['id']}.svg").exists():
            try:
                write_timeline(r, where)
            except (KeyError, TypeError, ValueError, IndexError):
                pass  # drawn as a note in index.html
    if reports:
        md += md_table(["invariant", "property", "flaws", "resembles", "reason", "report"],
                        ((f"`{r['violation']['name']}`", r.get("property"), ", ".join(r.get("flaws") or []) or "—",
                          ", ".join(x["upstream"] for x in r.get("resembles") or []) or "—",
                          r["violation"].get("reason"), f"[{p.stem}]({p.stem}.md)") for p, r in reports))
        md.append("")
    if findings:
        md += ["## Written-up findings", ""] + [f"- [{f.stem}](findings/{f.name})" for f in findings] + [""]
    md_path = where / INDEX_MD
    atomic_write_text(md_path, "\n".join(md))

    rows = []
    for p, r in reports:
        v = r.get("violation") or {}
        rows.append(f'<tr><td><a href="#{_h(r.get("id"))}"><code>{_h(v.get("name"))}</code></a></td>'
                    f'<td>{_h(r.get("property"))}</td><td>{_h(", ".join(r.get("flaws") or []) or "—")}</td>'
                    f'<td>{_h(", ".join(x["upstream"] for x in r.get("resembles") or []) or "—")}</td>'
                    f'<td>{_h(v.get("reason"))}</td></tr>')
    summary = (f'<div class="timeline">{overview}</div>' if reports else "") + (
               "<table class=\"summary\"><thead><tr><th>invariant</th><th>property</th><th>flaws</th>"
               "<th>resembles</th><th>reason</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table>"
               if rows else "<p>No counterexample reports: every property held. 🎉</p>")
    finding_html = ""
    if findings:
        finding_html = "<h2>Written-up findings</h2><ul>" + "".join(
            f'<li><a href="findings/{_h(f.name)}">{_h(f.stem)}</a></li>' for f in findings) + "</ul>"
    page = ("<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">"
            f"<title>kvverify reports ({len(reports)})</title><style>{_CSS}</style></head><body>"
            f"<header><h1>kvverify counterexample reports</h1><p>{len(reports)} report(s). "
            "Replay any of them with <code>kvverify replay reports/&lt;report&gt;.json</code> "
            "(exit 1: still failing, 0: passes now).</p></header><main>"
            f"{summary}{finding_html}<h2>Reports</h2>"
            + "".join(_html_report(p, r, open_=len(reports) <= 3) for p, r in reports)
            + "</main></body></html>\n")
    html_path = where / INDEX_HTML
    atomic_write_text(html_path, page)
    return md_path, html_path, len(reports)
