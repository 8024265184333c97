"""The check's table: every line read from the result (``run_check``'s dict), never recomputed."""

from __future__ import annotations

from typing import Any, Mapping

from kvverify.check.verdict import first_sentence, headline, plural, run_facts

TRAP_LABELS = {"mamba_state_slots": "Mamba state slots", "token_budget": "token budget",
               "encoder_cache": "encoder cache"}


def _runs(items: Any) -> list[tuple[Any, int]]:
    """Run-length encoding: [(item, count), ...] of consecutive equal items."""
    out: list[tuple[Any, int]] = []
    for item in items:
        if out and out[-1][0] == item:
            out[-1] = (item, out[-1][1] + 1)
        else:
            out.append((item, 1))
    return out


def _length_line(r: Mapping[str, Any]) -> str:
    req = r["max_model_len_requested"]
    length = f"{r['max_model_len']:,}"
    d = r["derived_max_model_len"]
    if req == "auto":
        length += f"  (auto-fit, up to {d['default']:,})"
    derived = f"derived {d['value']:,}" + (f" from {d['key']}" if d["key"] else " (assumed: the config states none)")
    if d["rope_scaling_factor"] != 1:
        derived += f", RoPE scaling x{d['rope_scaling_factor']:g}"
    return f"{length}  ({derived})"


def print_check(r: Mapping[str, Any], console: Any) -> None:
    from rich.table import Table

    from kvverify.cli.common import esc, human_bytes

    title = f"kvverify check — {esc(r['model'])}"
    if r["flaws"]:
        title += f"  [red](flaw {esc(', '.join(r['flaws']))} on)[/red]"
    t = Table(title=title, show_header=False, title_justify="left")
    t.add_column("", style="bold")
    t.add_column("")
    t.add_row("layers", ", ".join(f"{n} {k}" for k, n in r["layers"].items()))
    t.add_row("max_model_len", _length_line(r))
    t.add_row("block_size", str(r["block_size"]))
    t.add_row("block source", f"{r['block_source']}: {human_bytes(r['available_kv_cache_memory_bytes'])}"
              if r["block_source"] != "num_gpu_blocks_override" else r["block_source"])
    if r.get("kv_cache_dtype_resolved") is not None:
        dtype = r["kv_cache_dtype"]
        t.add_row("kv_cache_dtype", dtype if dtype != "auto" else f"auto ({r['kv_cache_dtype_resolved']})")
    t.add_row("bytes per block", f"{r['bytes_per_block']:,} ({human_bytes(r['bytes_per_block'])})")
    t.add_row("num_blocks", f"{r['num_blocks']:,}  (block 0 is the null block)" if r["num_blocks"] >= 1 else
              f"none: {human_bytes(r['available_kv_cache_memory_bytes'])} left for the KV cache")
    t.add_row("usable blocks", f"{r['usable_blocks']:,}")
    per_group = " + ".join(f"{n} x {blocks:,} {kind}" if n > 1 else f"{blocks:,} {kind}"
                           for (kind, blocks), n in _runs((g["kind"], g["blocks_per_request"]) for g in r["groups"]))
    t.add_row("blocks per request", f"{r['blocks_needed_per_request']:,}" +
              (f"  = {per_group}" if len(r["groups"]) > 1 else f"  ({r['groups'][0]['kind']})"
               if r["groups"] else ""))
    for c in r["startup_checks"]:
        if c["check"] == "kv_cache_memory":
            t.add_row("startup check", "[green]passes[/green]" if c["passes"] else
                      f"[red]refuses[/red]: {esc(first_sentence(c['message']))}")
        elif c["check"] == "max_model_len" and not c["passes"]:
            t.add_row("max_model_len check", f"[red]refuses[/red]: {esc(c['message'])}")
    for trap in r["traps"]:
        if trap["applies"]:
            mark = "[green]ok[/green]" if trap["passes"] else "[red]trap[/red]"
            t.add_row(TRAP_LABELS.get(trap["name"], trap["name"]), f"{mark}: {esc(trap['summary'])}")
    for run in r["servable_runs"]:
        facts = esc(run_facts(run))
        colour = "green" if run["completed"] is True else "red"
        outcome = facts.split(":", 1)
        t.add_row(f"{run['split']} run", f"[{colour}]{outcome[0]}[/{colour}]:{outcome[1]}")
    if r["max_concurrency"] is not None and r["num_blocks"] >= 1:
        fits = r["concurrent_full_requests"]
        t.add_row("max concurrency", f"{r['max_concurrency']:.2f}x as vLLM logs it (N / needed); "
                  f"{plural(fits, 'full-length request')} fit{'s' if fits == 1 else ''} at once")
    if r["auto_fit_max_model_len"] is not None:
        t.add_row("auto-fit", f"{r['auto_fit_max_model_len']:,}")
    if r.get("suggested_max_model_len"):
        t.add_row("largest length that fits", f"{r['suggested_max_model_len']:,}")
    console.print(t)
    for note in r["notes"]:
        console.print(f"[dim]note: {esc(note)}[/dim]")
    ok = headline(r) == "OK"
    style = "bold green" if ok else "bold red"
    console.print(f"[{style}]{esc(r['verdict'])}[/{style}]")
