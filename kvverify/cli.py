"""``kvverify``: the command line.

    kvverify                      the default run: check a catalog model, prove, fuzz 20 s, bug zoo
    kvverify check ...            will this model + memory + max_model_len start, and really serve?
    kvverify fuzz --seconds N     run the property suites for a time budget
    kvverify prove                the Z3 boundary lemmas
    kvverify zoo                  every historical vLLM defect re-introduced, and caught
    kvverify replay REPORT        re-run a counterexample report exactly
    kvverify report               index of all reports (Markdown + one self-contained HTML page)
    kvverify harness ...          allocate a plan with torch and check it
    kvverify models               the model catalog

Exit status: 0 all as expected, 1 a check/property/lemma failed (or a flaw escaped),
2 bad input (the message names the field).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import re
import sys
import time
import zlib
from pathlib import Path
from typing import Any, Iterator, Sequence

from kvverify.errors import ConfigError, KVVerifyError

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2

# --- shared helpers ----------------------------------------------------------------------

_BINARY = {"kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
_DECIMAL = {"kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}
# vLLM's human_readable_int: lower-case k/m/g/t are decimal, upper-case K/M/G/T binary
_VLLM_LETTERS = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12,
                 "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
_SIZE_RE = re.compile(r"^\s*(?P<num>[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)\s*(?P<unit>[A-Za-z]*)\s*$")


def parse_bytes(text: str, field: str = "bytes") -> int:
    """``20GiB``, ``512MiB``, ``1.5GiB``, ``20GB``, ``20G`` (vLLM style) or plain bytes -> int > 0."""
    m = _SIZE_RE.match(str(text))
    if not m:
        raise ConfigError(field, text, "must be a byte count, optionally with a unit: B, KiB, MiB, GiB, "
                          "TiB (binary), KB, MB, GB, TB (decimal), e.g. 20GiB or 512MiB")
    unit = m.group("unit")
    if unit in ("", "B", "b"):
        scale = 1
    elif unit.lower() in _BINARY:
        scale = _BINARY[unit.lower()]
    elif unit.lower() in _DECIMAL:
        scale = _DECIMAL[unit.lower()]
    elif unit in _VLLM_LETTERS:
        scale = _VLLM_LETTERS[unit]
    else:
        raise ConfigError(field, text, f"unknown unit {unit!r}; use B, KiB, MiB, GiB, TiB, KB, MB, GB or TB "
                          "(e.g. 20GiB)")
    value = float(m.group("num")) * scale
    if not math.isfinite(value) or value <= 0:
        raise ConfigError(field, text, "must be a positive number of bytes")
    if value != int(value) and scale == 1:
        raise ConfigError(field, text, "must be a whole number of bytes")
    return int(round(value))


def human_bytes(n: int | None) -> str:
    if n is None:
        return "—"
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n} B"


def _arg_type(fn, field: str):
    def parse(text: str):
        try:
            return fn(text)
        except (KVVerifyError, ValueError) as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    parse.__name__ = field  # argparse names the type in its messages
    return parse


def _bytes_arg(field: str):
    return _arg_type(lambda t: parse_bytes(t, field), field)


def _int_arg(field: str, minimum: int = 1):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise ConfigError(field, text, "must be an integer") from None
        if value < minimum:
            raise ConfigError(field, value, f"must be >= {minimum}")
        return value
    return _arg_type(parse, field)


def _length_arg(text: str) -> int | str:
    if str(text).strip().lower() in ("auto", "-1"):
        return "auto"
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"max_model_len={text!r} is invalid: must be an integer or 'auto'") \
            from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"max_model_len={value} is invalid: must be >= 1 (or 'auto')")
    return value


def _fraction_arg(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"gpu_memory_utilization={text!r} is invalid: must be a number") from None
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"gpu_memory_utilization={value} is invalid: must be in (0, 1]")
    return value


def _esc(text: Any) -> str:
    from rich.markup import escape
    return escape(str(text))


def _console(stderr: bool = False):
    """A rich console; 120 columns when the output is not a terminal (CI logs, pipes)."""
    import os

    from rich.console import Console
    console = Console(stderr=stderr, highlight=False)
    if not console.is_terminal and not os.environ.get("COLUMNS"):
        console = Console(stderr=stderr, highlight=False, width=120)
    return console


def _flaw_names() -> list[str]:
    from kvverify import flaws
    return list(flaws.CATALOG)


@contextlib.contextmanager
def _flaws_on(names: Sequence[str] | None) -> Iterator[None]:
    from kvverify import flaws
    with flaws.enabled(*(names or ())):
        yield


# --- check -------------------------------------------------------------------------------

#: above this many blocks, a servability run uses a pool of this many (a request alone never
#: touches more than its own blocks; building millions of free-list entries only costs time)
MAX_RUN_BLOCKS = 2_000_000
#: a decode-heavy split decodes every token up to this length (~20 us per simulated step:
#: 262,144 tokens take ~5 s), and only this many output tokens beyond it
FULL_DECODE_LIMIT = 262_144
DECODE_CAP = 4_096
SECONDS_PER_STEP = 20e-6


def load_layout(model: str | None = None, config_json: str | None = None):
    """A catalog model by name, or a Hugging Face ``config.json`` (file or directory)."""
    from kvverify import catalog

    if (model is None) == (config_json is None):
        raise ConfigError("model", None, "give exactly one of --model NAME or --config-json PATH")
    if model is not None:
        return catalog.load_model(model)
    path = Path(config_json)  # type: ignore[arg-type]
    if not path.exists():
        raise catalog.CatalogError(str(path), "no such file (expected a Hugging Face config.json, or a "
                                   "directory holding one)")
    return catalog.read_hf_config(path)


def run_check(layout: Any, *, max_model_len: int | str | None = None, block_size: int = 16,
              kv_cache_memory_bytes: int | None = None, num_gpu_blocks_override: int | None = None,
              max_num_batched_tokens: int = 2048, max_num_seqs: int = 256,
              gpu_memory_bytes: int | None = None, gpu_memory_utilization: float = 0.9,
              non_kv_cache_memory_bytes: int = 0, enable_prefix_caching: bool = True,
              mamba_cache_mode: str | None = None, kv_cache_dtype: str = "auto",
              flaw_names: Sequence[str] = (), target: str = "reference") -> dict[str, Any]:
    """Plan ``layout`` like vLLM's startup does, then run a max_model_len request on the pool.

    ``starts`` is the startup check's verdict; ``servable`` is judged by running one
    request of ``prompt + outputs = max_model_len`` alone on the runtime pool (N - 1
    usable blocks) with the reference scheduler — never by the check's own formula.
    """
    from kvverify import catalog
    from kvverify.config import VllmConfig
    from kvverify.planner import get_max_concurrency_for_kv_cache_config
    from kvverify.targets import get_target

    notes: list[str] = []
    requested = max_model_len
    max_pos = layout.max_position_embeddings
    if max_model_len is None:
        if max_pos is None:
            raise ConfigError("max_model_len", None, f"the model {layout.name!r} does not state "
                              "max_position_embeddings: pass --max-model-len N (or auto)")
        max_model_len, requested = max_pos, max_pos
    length_kw: dict[str, Any]
    if max_model_len == "auto":
        if max_pos is None:
            raise ConfigError("max_model_len", "auto", f"auto needs the model's max_position_embeddings, "
                              f"which {layout.name!r} does not state: pass --max-model-len N")
        length_kw = {"max_model_len": -1, "max_position_embeddings": max_pos}
    else:
        length_kw = {"max_model_len": int(max_model_len)}
        if max_pos is not None and int(max_model_len) > max_pos:
            notes.append(f"max_model_len {max_model_len} exceeds the model's max_position_embeddings "
                         f"({max_pos}); vLLM refuses that unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1")
    if kv_cache_memory_bytes is None and num_gpu_blocks_override is None and gpu_memory_bytes is None:
        raise ConfigError("kv_cache_memory_bytes", None, "give a block source: --kv-cache-memory-bytes "
                          "(e.g. 20GiB), --num-gpu-blocks-override N, or --gpu-memory-bytes "
                          "(with --gpu-memory-utilization)")
    if mamba_cache_mode is None:
        # MambaModelConfig.verify_and_update_config: prefix caching <=> align mode
        mamba_cache_mode = "align" if (layout.has_mamba and enable_prefix_caching) else "none"
    source = ("num_gpu_blocks_override" if num_gpu_blocks_override is not None else
              "kv_cache_memory_bytes" if kv_cache_memory_bytes is not None else "profiled memory")
    tgt = get_target(target)
    with _flaws_on(flaw_names):
        config = VllmConfig(block_size=block_size, max_num_batched_tokens=max_num_batched_tokens,
                            max_num_seqs=max_num_seqs, num_gpu_blocks_override=num_gpu_blocks_override,
                            kv_cache_memory_bytes=kv_cache_memory_bytes, gpu_memory_bytes=gpu_memory_bytes,
                            gpu_memory_utilization=gpu_memory_utilization,
                            non_kv_cache_memory_bytes=non_kv_cache_memory_bytes,
                            enable_prefix_caching=enable_prefix_caching, mamba_cache_mode=mamba_cache_mode,
                            **length_kw)
        built = catalog.build_model(layout, config, kv_cache_dtype=kv_cache_dtype)
        plan = tgt.plan(built.vllm_config, [built.layer_specs])
        if built.vllm_config.block_size != block_size:
            notes.append(f"block_size raised from {block_size} to {built.vllm_config.block_size}: the "
                         "attention page must hold the Mamba state (upstream _align_hybrid_block_size)")
        servable, runs, run_note = _servability(tgt, plan)
        if run_note:
            notes.append(run_note)
        concurrency = get_max_concurrency_for_kv_cache_config(plan.vllm_config, plan.kv_cache_config)
    suggested = None
    if not (plan.starts and servable) and max_pos is not None:
        # what the faithful reference's auto-fit picks (never computed with a flaw on)
        suggested = _suggest_length(tgt, built.vllm_config, built.layer_specs, max_pos,
                                    requested if isinstance(requested, int) else max_pos)
    groups = []
    for g, blocks in zip(plan.groups, plan.blocks_per_group):
        spec = g.kv_cache_spec
        kinds = sorted({s.kind for s in _member_specs(spec)})
        groups.append({"kind": "+".join(kinds), "layers": len(g.layer_names), "block_size": spec.block_size,
                       "blocks_per_request": blocks})
    result: dict[str, Any] = {
        "model": layout.name,
        "source": layout.source or None,
        "layers": layout.kind_counts(),
        "flaws": list(flaw_names),
        "starts": plan.starts,
        "servable": servable,
        "num_blocks": plan.num_blocks,
        "usable_blocks": plan.usable_blocks,
        "blocks_needed_per_request": plan.blocks_needed_per_request,
        "blocks_per_group": list(plan.blocks_per_group),
        "groups": groups,
        "max_model_len": plan.vllm_config.max_model_len,
        "max_model_len_requested": requested,
        "auto_fit_max_model_len": plan.auto_fit_max_model_len,
        "max_position_embeddings": max_pos,
        "block_size": plan.vllm_config.block_size,
        "block_source": source,
        "available_kv_cache_memory_bytes": plan.available_memory[0],
        "bytes_per_block": plan.bytes_per_block,
        "max_concurrency": round(concurrency, 4) if math.isfinite(concurrency) else None,
        "concurrent_full_requests": (plan.usable_blocks // plan.blocks_needed_per_request
                                     if plan.blocks_needed_per_request else None),
        "error": plan.error,
        "servable_runs": runs,
        "suggested_max_model_len": suggested,
        "notes": notes,
    }
    result["verdict"] = _verdict(result)
    return result


def _member_specs(spec: Any) -> list[Any]:
    members = getattr(spec, "kv_cache_specs", None)
    if members:
        return [s for _, s in members]
    return [spec]


def _servability(tgt: Any, plan: Any) -> tuple[bool, list[dict[str, Any]], str | None]:
    """Run a max_model_len request alone on the plan's pool: prompt-heavy, then decode-heavy."""
    from kvverify.planner import get_kv_cache_config_from_groups
    from kvverify.workloads import full_length_request

    length = plan.vllm_config.max_model_len
    if length < 2:
        return False, [], "max_model_len < 2: no request (prompt >= 1 token, >= 1 output) fits"
    notes = []
    run_plan = plan
    if plan.num_blocks > MAX_RUN_BLOCKS and plan.blocks_needed_per_request + 1 < MAX_RUN_BLOCKS:
        smaller = get_kv_cache_config_from_groups(plan.kv_cache_config.kv_cache_groups, MAX_RUN_BLOCKS)
        run_plan = dataclasses.replace(plan, kv_cache_configs=(smaller,) * len(plan.kv_cache_configs))
        notes.append(f"the runs used a pool of {MAX_RUN_BLOCKS:,} blocks instead of {plan.num_blocks:,} "
                     f"(a request alone holds at most {plan.blocks_needed_per_request:,})")
    decode = length - 1 if length <= FULL_DECODE_LIMIT else DECODE_CAP
    if decode != length - 1:
        notes.append(f"decode-heavy split capped at {DECODE_CAP:,} output tokens (a {length - 1:,}-token "
                     f"decode would take ~{(length - 1) * SECONDS_PER_STEP:.0f} s to simulate); the "
                     f"prompt-heavy split runs all {length:,} tokens through chunked prefill and the "
                     "admission gate")
    splits = [("prompt-heavy", 1)] + ([("decode-heavy", decode)] if decode != 1 else [])
    runs = []
    for label, outputs in splits:
        t0 = time.perf_counter()
        result = tgt.run_workload(run_plan, [full_length_request(length, outputs)], keep_trace=False)
        runs.append({"split": label, "prompt_tokens": length - outputs, "output_tokens": outputs,
                     "completed": result.completed, "steps": result.steps, "stall": result.stall_reason,
                     "error": result.error, "running": result.running, "waiting": result.waiting,
                     "seconds": round(time.perf_counter() - t0, 3)})
        if not result.completed:
            break  # one failing split settles it
    return all(r["completed"] for r in runs), runs, "; ".join(notes) or None


def _suggest_length(tgt: Any, config: Any, specs: Any, max_pos: int, upper: int) -> int | None:
    """The auto-fit length (what ``--max-model-len auto`` would choose) at this budget."""
    cfg = dataclasses.replace(config, max_model_len=-1, max_position_embeddings=max(2, min(max_pos, upper)))
    try:
        plan = tgt.plan(cfg, [specs])
    except KVVerifyError:
        return None
    return plan.auto_fit_max_model_len if plan.starts else None


def _verdict(r: dict[str, Any]) -> str:
    L = r["max_model_len"]
    if r["starts"] and r["servable"]:
        conc = r["max_concurrency"]
        return (f"OK: starts, and a {L:,}-token request completes on the {r['usable_blocks']:,} usable "
                f"blocks ({r['blocks_needed_per_request']:,} needed; vLLM would log "
                f"{conc:.2f}x concurrency)." if conc is not None else f"OK: starts and serves {L:,} tokens.")
    stall = next((run for run in r["servable_runs"] if not run["completed"]), None)
    why = ""
    if stall is not None:
        why = (f" ({stall['split']}: {stall['stall'] or stall['error']}, running={stall['running']}, "
               f"waiting={stall['waiting']})")
    hint = f" Largest length that fits: --max-model-len {r['suggested_max_model_len']}." \
        if r.get("suggested_max_model_len") else ""
    if r["starts"]:
        return (f"HANG: the startup check passes, but a {L:,}-token request never completes{why} — "
                f"{r['blocks_needed_per_request']:,} blocks needed, {r['usable_blocks']:,} usable "
                f"(block 0 is the null block). Users would see 0 tok/s.{hint}")
    if r["servable"]:
        return (f"REFUSED, needlessly: vLLM would not start ({_first_sentence(r['error'])}), yet a {L:,}-token "
                f"request completes on this pool.{hint}")
    return (f"REFUSED: vLLM would not start: {r['blocks_needed_per_request']:,} blocks needed per "
            f"{L:,}-token request, {r['usable_blocks']:,} usable.{hint}")


def _runs(items: Any) -> list[tuple[Any, int]]:
    """Run-length encoding: [(item, count), ...] of consecutive equal items."""
    out: list[tuple[Any, int]] = []
    for item in items:
        if out and out[-1][0] == item:
            out[-1] = (item, out[-1][1] + 1)
        else:
            out.append((item, 1))
    return out


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}" + ("" if n == 1 else "s")


def _first_sentence(text: str | None) -> str:
    if not text:
        return "startup check failed"
    return text.split(". ")[0].rstrip(".")


def _print_check(r: dict[str, Any], console: Any) -> None:
    from rich.table import Table

    title = f"kvverify check — {r['model']}"
    if r["flaws"]:
        title += f"  [red](flaw {', '.join(r['flaws'])} on)[/red]"
    t = Table(title=title, show_header=False, title_justify="left")
    t.add_column("", style="bold")
    t.add_column("")
    layers = ", ".join(f"{n} {k}" for k, n in r["layers"].items())
    t.add_row("layers", layers)
    req = r["max_model_len_requested"]
    length = f"{r['max_model_len']:,}"
    if req == "auto":
        length += f"  (auto-fit, up to {r['max_position_embeddings']:,})"
    t.add_row("max_model_len", length)
    t.add_row("block_size", str(r["block_size"]))
    t.add_row("block source", f"{r['block_source']}: {human_bytes(r['available_kv_cache_memory_bytes'])}"
              if r["block_source"] != "num_gpu_blocks_override" else r["block_source"])
    t.add_row("bytes per block", f"{r['bytes_per_block']:,} ({human_bytes(r['bytes_per_block'])})")
    t.add_row("num_blocks", f"{r['num_blocks']:,}  (block 0 is the null block)")
    t.add_row("usable blocks", f"{r['usable_blocks']:,}")
    per_group = " + ".join(f"{n} x {blocks:,} {kind}" if n > 1 else f"{blocks:,} {kind}"
                           for (kind, blocks), n in _runs((g["kind"], g["blocks_per_request"]) for g in r["groups"]))
    t.add_row("blocks per request", f"{r['blocks_needed_per_request']:,}" +
              (f"  = {per_group}" if len(r["groups"]) > 1 else f"  ({r['groups'][0]['kind']})"
               if r["groups"] else ""))
    t.add_row("startup check", "[green]passes[/green]" if r["starts"] else
              f"[red]refuses[/red]: {_esc(_first_sentence(r['error']))}")
    for run in r["servable_runs"]:
        status = "[green]completes[/green]" if run["completed"] else \
            f"[red]never completes[/red] ({run['stall'] or run['error']})"
        t.add_row(f"{run['split']} run", f"{status}: {run['prompt_tokens']:,} prompt + "
                  f"{run['output_tokens']:,} output tokens, {_plural(run['steps'], 'step')}")
    if r["max_concurrency"] is not None:
        t.add_row("max concurrency", f"{r['max_concurrency']:.2f}x as vLLM logs it (N / needed); "
                  f"{_plural(r['concurrent_full_requests'], 'full-length request')} "
                  f"fit{'s' if r['concurrent_full_requests'] == 1 else ''} at once")
    if r["auto_fit_max_model_len"] is not None:
        t.add_row("auto-fit", f"{r['auto_fit_max_model_len']:,}")
    if r.get("suggested_max_model_len"):
        t.add_row("largest length that fits", f"{r['suggested_max_model_len']:,}")
    console.print(t)
    for note in r["notes"]:
        console.print(f"[dim]note: {_esc(note)}[/dim]")
    ok = r["starts"] and r["servable"]
    console.print(("[bold green]" if ok else "[bold red]") + _esc(r["verdict"])
                  + ("[/bold green]" if ok else "[/bold red]"))


def cmd_check(args: argparse.Namespace) -> int:
    layout = load_layout(args.model, args.config_json)
    result = run_check(
        layout, max_model_len=args.max_model_len, block_size=args.block_size,
        kv_cache_memory_bytes=args.kv_cache_memory_bytes, num_gpu_blocks_override=args.num_gpu_blocks_override,
        max_num_batched_tokens=args.max_num_batched_tokens, max_num_seqs=args.max_num_seqs,
        gpu_memory_bytes=args.gpu_memory_bytes, gpu_memory_utilization=args.gpu_memory_utilization,
        non_kv_cache_memory_bytes=args.non_kv_cache_memory_bytes or 0,
        enable_prefix_caching=args.enable_prefix_caching, mamba_cache_mode=args.mamba_cache_mode,
        kv_cache_dtype=args.kv_cache_dtype, flaw_names=args.flaw or ())
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        _print_check(result, _console())
    return EXIT_OK if result["starts"] and result["servable"] else EXIT_FAIL


# --- fuzz --------------------------------------------------------------------------------


@dataclasses.dataclass
class FuzzProperty:
    """One fuzzable property: a ``@given`` body over ``target``, or a state machine."""

    name: str
    obj: Any
    kind: str  # "given" | "stateful"
    module: str
    file: str | None = None
    xfail: Any = None
    examples: int = 0
    batches: int = 0
    seconds: float = 0.0
    status: str = "ok"  # ok | FAILED | known finding | error
    detail: str = ""
    reports: list[str] = dataclasses.field(default_factory=list)

    @property
    def done(self) -> bool:
        return self.status != "ok"


def discover_properties(suite: str | Path | None = "properties") -> list[FuzzProperty]:
    """The property bodies of :mod:`kvverify.props`, plus the suite files' (for their xfail marks).

    Fuzzable: module-level ``@given`` functions whose only non-generated argument is
    ``target``, and ``RuleBasedStateMachine`` subclasses defined in :mod:`kvverify.props`.
    """
    import importlib
    import inspect
    import pkgutil

    from hypothesis.stateful import RuleBasedStateMachine

    import kvverify.props as props
    from kvverify import reports

    found: list[FuzzProperty] = []
    by_id: dict[int, FuzzProperty] = {}

    def consider(name: str, value: Any, module: Any, file: str | None) -> None:
        if reports.is_property(value):
            given_kwargs = getattr(value.hypothesis, "_given_kwargs", None)
            if given_kwargs is None:
                return
            params = set(inspect.signature(value.hypothesis.inner_test).parameters)
            if params - set(given_kwargs) != {"target"}:
                return
            if any(m.name == "parametrize" for m in getattr(value, "pytestmark", [])):
                return
            prop = by_id.get(id(value))
            if prop is None:
                prop = FuzzProperty(name, value, "given", value.__module__, file)
                by_id[id(value)] = prop
                found.append(prop)
            elif file and not prop.file:
                prop.file = file
        elif inspect.isclass(value) and issubclass(value, RuleBasedStateMachine) \
                and value is not RuleBasedStateMachine and value.__module__ == module.__name__:
            if id(value) not in by_id:
                prop = FuzzProperty(value.__name__, value, "stateful", value.__module__, file)
                by_id[id(value)] = prop
                found.append(prop)

    for info in pkgutil.iter_modules(props.__path__):
        module = importlib.import_module(f"kvverify.props.{info.name}")
        for name, value in sorted(vars(module).items()):
            consider(name, value, module, None)
    if suite is not None and Path(suite).is_dir():
        for path in sorted(Path(suite).glob("test_*.py")):
            try:
                module = reports.load_module_from_file(path)
            except KVVerifyError:
                continue  # e.g. an optional dependency missing: pytest reports it
            for name, value in sorted(vars(module).items()):
                if name.startswith("test") or isinstance(value, type):
                    consider(name, value, module, str(path))
    for prop in found:
        marks = [m for m in getattr(prop.obj, "pytestmark", []) if m.name == "xfail"]
        prop.xfail = marks[0] if marks else None
    return found


def _select(props: list[FuzzProperty], patterns: Sequence[str] | None, shard: str | None) -> list[FuzzProperty]:
    if patterns:
        props = [p for p in props if any(pat in p.name or pat in p.module for pat in patterns)]
    if shard:
        i, n = (int(x) for x in _shard(shard).split("/"))
        props = [p for k, p in enumerate(sorted(props, key=lambda p: p.name)) if k % n == i - 1]
    return props


def _shard(text: str) -> str:
    m = re.fullmatch(r"(\d+)/(\d+)", str(text).strip())
    if not m or not 1 <= int(m.group(1)) <= int(m.group(2)):
        raise ConfigError("shard", text, "must be I/N with 1 <= I <= N, e.g. 2/3")
    return f"{int(m.group(1))}/{int(m.group(2))}"


def _expected_failure(prop: FuzzProperty, exc: BaseException) -> bool:
    if prop.xfail is None:
        return False
    raises = prop.xfail.kwargs.get("raises")
    return raises is None or isinstance(exc, raises)


@dataclasses.dataclass
class FuzzSummary:
    properties: list[FuzzProperty]
    seconds: float
    profile: str
    seed: int | None
    flaws: list[str]
    reports: list[str]

    @property
    def failures(self) -> int:
        return sum(1 for p in self.properties if p.status in ("FAILED", "error"))

    @property
    def examples(self) -> int:
        return sum(p.examples for p in self.properties)

    def to_json(self) -> dict[str, Any]:
        return {"seconds": round(self.seconds, 2), "profile": self.profile, "seed": self.seed,
                "flaws": self.flaws, "examples": self.examples, "failures": self.failures,
                "reports": self.reports,
                "properties": [{"name": p.name, "kind": p.kind, "module": p.module, "examples": p.examples,
                                "batches": p.batches, "seconds": round(p.seconds, 2), "status": p.status,
                                "detail": p.detail, "reports": p.reports} for p in self.properties]}


def run_fuzz(seconds: float = 60.0, *, profile: str = "dev", flaw_names: Sequence[str] = (),
             seed: int | None = None, patterns: Sequence[str] | None = None, shard: str | None = None,
             batch: int = 50, suite: str | Path | None = "properties", report_xfail: bool = False,
             reports_dir: str | Path | None = None, target: str = "reference", console: Any = None,
             live: bool = True) -> FuzzSummary:
    """Run the property suites round-robin, in batches, until ``seconds`` are spent.

    Each batch runs one property under the profile's settings with ``max_examples``
    sized to the time left (a derandomized profile such as ``ci`` runs each property once,
    in full). A failing property is written up as a report and retired; an ``xfail``
    property failing as expected is a known finding (reported with ``report_xfail``).
    """
    from hypothesis import settings as Settings

    from kvverify import profiles  # noqa: F401 - registers the profiles
    from kvverify.targets import get_target

    base = Settings.get_profile(profile)
    flaw_names = list(flaw_names)
    props = _select(discover_properties(suite), patterns, shard)
    tgt = get_target(target)
    console = console or _console()
    written: list[str] = []
    start = time.monotonic()
    deadline = start + seconds
    rounds = 0
    progress = None
    if live:
        from rich.progress import (
            BarColumn,
            Progress,
            SpinnerColumn,
            TextColumn,
            TimeElapsedColumn,
        )
        progress = Progress(SpinnerColumn(), TextColumn("[bold]fuzz[/bold] {task.description}"), BarColumn(),
                            TextColumn("{task.fields[examples]:,} examples · {task.fields[failures]} failing"),
                            TimeElapsedColumn(), console=console, transient=True)
        task = progress.add_task("", total=seconds, examples=0, failures=0)
        progress.start()
    try:
        with _flaws_on(flaw_names):
            while time.monotonic() < deadline:
                pending = [p for p in props if not p.done]
                if not pending:
                    break
                for prop in pending:
                    now = time.monotonic()
                    if now >= deadline:
                        break
                    if base.derandomize and prop.batches:
                        continue
                    if progress is not None:
                        progress.update(task, description=prop.name, completed=min(seconds, now - start))
                    _fuzz_batch(prop, base, deadline - now, len(pending), batch, seed, rounds, tgt,
                                report_xfail, reports_dir, written, console)
                    if progress is not None:
                        progress.update(task, examples=sum(p.examples for p in props),
                                        failures=sum(1 for p in props if p.status in ("FAILED", "error")),
                                        completed=min(seconds, time.monotonic() - start))
                rounds += 1
                if base.derandomize and all(p.batches or p.done for p in props):
                    break
    finally:
        if progress is not None:
            progress.stop()
    return FuzzSummary(props, time.monotonic() - start, profile, seed, flaw_names, written)


def _fuzz_batch(prop: FuzzProperty, base: Any, remaining: float, pending: int, batch: int, seed: int | None,
                rnd: int, tgt: Any, report_xfail: bool, reports_dir: Any, written: list[str],
                console: Any) -> None:
    from hypothesis import HealthCheck, Phase, given
    from hypothesis import seed as seed_decorator
    from hypothesis import settings as Settings
    from hypothesis.errors import Unsatisfiable

    from kvverify import reports

    per_example = prop.seconds / prop.examples if prop.examples else 0.02
    slice_s = max(0.5, min(remaining, remaining / max(1, pending), 10.0))
    if base.derandomize:
        n = base.max_examples
    else:
        n = max(1, min(batch, int(slice_s / max(per_example, 1e-4))))
    # no explain phase: its coverage tracing costs seconds per failure, the report has the rest
    s = Settings(base, max_examples=n, deadline=None, print_blob=True,
                 suppress_health_check=list(HealthCheck),
                 phases=[ph for ph in base.phases if ph is not Phase.explain])
    batch_seed = None if seed is None else (seed * 1_000_003 + rnd * 7919 + zlib.crc32(prop.name.encode())) % 2**32
    t0 = time.perf_counter()
    prop.batches += 1
    if prop.kind == "stateful":
        _fuzz_machine(prop, s, batch_seed, report_xfail, reports_dir, written, console)
        prop.seconds += time.perf_counter() - t0
        return
    fn = prop.obj
    test = given(**fn.hypothesis._given_kwargs)(fn.hypothesis.inner_test)
    test.hypothesis_explicit_examples = list(getattr(fn, "hypothesis_explicit_examples", ())) \
        if prop.batches == 1 else []
    test = s(test)
    if batch_seed is not None:
        test = seed_decorator(batch_seed)(test)
    with reports.instrument([test]) as sink:
        try:
            test(target=tgt)
        except Unsatisfiable:
            pass  # no valid example in this small batch: try again next round
        except BaseException as exc:  # noqa: BLE001 - a failing property is the point
            if isinstance(exc, KeyboardInterrupt):
                raise
            captures = sink.captures_for(exc)
            if not captures:
                prop.status, prop.detail = "error", f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
                console.print(f"[red]fuzz: {prop.name}: {_esc(prop.detail)}[/red]")
            for cap in captures:
                expected = _expected_failure(prop, cap.exc)
                prop.status = "known finding" if expected else "FAILED"
                v = reports.violations_from_exception(cap.exc)[0]
                prop.detail = f"[{v['name']}] {v['reason']}"
                if expected and not report_xfail:
                    continue
                try:
                    path = reports.report_failure(
                        cap, found_by="fuzz", directory=reports_dir, name=prop.name, file=prop.file,
                        known_finding=prop.xfail.kwargs.get("reason") if expected else None)
                except Exception as e:  # noqa: BLE001 - a report must never stop the run
                    console.print(f"[red]fuzz: {prop.name}: could not write the report: {_esc(e)}[/red]")
                    continue
                shown = reports.display_path(path)
                prop.reports.append(shown)
                written.append(shown)
                console.print(f"[red]fuzz: {prop.name} failed[/red]: {_esc(prop.detail)}\n  report: {shown}")
        finally:
            prop.examples += sink.examples
            prop.seconds += time.perf_counter() - t0


def _fuzz_machine(prop: FuzzProperty, s: Any, batch_seed: int | None, report_xfail: bool, reports_dir: Any,
                  written: list[str], console: Any) -> None:
    from hypothesis.errors import Unsatisfiable
    from hypothesis.stateful import run_state_machine_as_test

    from kvverify import flaws, reports
    from kvverify.reports import active_fixes

    machine = prop.obj
    counter = {"runs": 0}

    def counting_init(self: Any, *a: Any, **k: Any) -> None:
        counter["runs"] += 1
        machine.__init__(self, *a, **k)

    runner = type(machine.__name__, (machine,), {"__init__": counting_init, "__module__": machine.__module__,
                                                  "__qualname__": machine.__qualname__})
    if batch_seed is not None:
        runner._hypothesis_internal_use_seed = batch_seed
    try:
        run_state_machine_as_test(runner, settings=s)
    except Unsatisfiable:
        pass
    except BaseException as exc:  # noqa: BLE001
        if isinstance(exc, KeyboardInterrupt):
            raise
        expected = _expected_failure(prop, exc)
        prop.status = "known finding" if expected else "FAILED"
        v = reports.violations_from_exception(exc)[0]
        prop.detail = f"[{v['name']}] {v['reason']}"
        if not expected or report_xfail:
            try:
                paths = reports.report_stateful(machine, exc, directory=reports_dir, found_by="fuzz",
                                                flaw_names=sorted(flaws.active()),
                                                fix_names=sorted(active_fixes()))
            except Exception as e:  # noqa: BLE001 - a report must never stop the run
                paths = []
                console.print(f"[red]fuzz: {prop.name}: could not write the report: {_esc(e)}[/red]")
            for path in paths:
                shown = reports.display_path(path)
                prop.reports.append(shown)
                written.append(shown)
                console.print(f"[red]fuzz: {prop.name} failed[/red]: {_esc(prop.detail)}\n  report: {shown}")
    finally:
        prop.examples += counter["runs"]


def _print_fuzz(summary: FuzzSummary, console: Any) -> None:
    from rich.table import Table

    title = f"kvverify fuzz — profile {summary.profile}, {summary.seconds:.0f} s"
    if summary.seed is not None:
        title += f", seed {summary.seed}"
    if summary.flaws:
        title += f" [red](flaw {', '.join(summary.flaws)} on)[/red]"
    t = Table(title=title, title_justify="left")
    for col, kw in (("property", {"overflow": "fold", "ratio": 3}), ("examples", {"justify": "right"}),
                    ("time", {"justify": "right", "no_wrap": True}), ("result", {"ratio": 2}),
                    ("report", {"overflow": "fold", "ratio": 2})):
        t.add_column(col, **kw)
    colours = {"ok": "green", "FAILED": "bold red", "error": "bold red", "known finding": "yellow"}
    for p in summary.properties:
        result = f"[{colours[p.status]}]{p.status}[/{colours[p.status]}]"
        if p.status == "known finding" and p.xfail is not None:
            result += f"\n[dim]{_esc(str(p.xfail.kwargs.get('reason', '')).split(':')[0])}[/dim]"
        elif p.detail and p.status != "ok":
            result += f"\n[dim]{_esc(p.detail[:160])}[/dim]"
        t.add_row(p.name + (" (stateful)" if p.kind == "stateful" else ""), f"{p.examples:,}",
                  f"{p.seconds:.1f} s", result, "\n".join(p.reports))
    console.print(t)
    known = sum(1 for p in summary.properties if p.status == "known finding")
    console.print(f"{summary.examples:,} examples over {len(summary.properties)} properties; "
                  f"{summary.failures} failing, {known} known finding(s), {len(summary.reports)} report(s) written.")


def cmd_fuzz(args: argparse.Namespace) -> int:
    if args.list:
        for p in _select(discover_properties(args.suite), args.property, args.shard):
            mark = "  [xfail: known finding]" if p.xfail is not None else ""
            print(f"{p.name}  ({p.kind}, {p.module}){mark}")
        return EXIT_OK
    console = _console(stderr=args.json)
    summary = run_fuzz(args.seconds, profile=args.profile, flaw_names=args.flaw or (), seed=args.seed,
                       patterns=args.property, shard=args.shard, batch=args.batch, suite=args.suite,
                       report_xfail=args.report_xfail, reports_dir=args.reports_dir, target=args.target,
                       console=console, live=not args.json and not args.no_progress)
    if args.json:
        print(json.dumps(summary.to_json(), indent=2))
    else:
        _print_fuzz(summary, console)
    return EXIT_FAIL if summary.failures else EXIT_OK


# --- prove / zoo / replay / report / models -----------------------------------------------


def cmd_prove(args: argparse.Namespace) -> int:
    from kvverify import reports
    from kvverify.lemmas.cli_support import exit_code, print_results, run_lemmas

    t0 = time.perf_counter()
    results = run_lemmas(args.flaw, args.names or None, fixes=args.fix)
    code = print_results(results, as_json=args.json)
    err = _console(stderr=True)
    if not args.no_reports:
        for r in results:
            if r.result == "counterexample" and (not r.ok or args.report_findings):
                path = reports.report_lemma(r, directory=args.reports_dir)
                err.print(f"report: {reports.display_path(path)}")
    if not args.json:
        err.print(f"[dim]{len(results)} lemmas in {time.perf_counter() - t0:.2f} s[/dim]")
    return exit_code(results) if code is None else code


def _zoo_module() -> Any:
    try:
        from kvverify import zoo
    except ImportError as e:
        raise KVVerifyError(f"the bug zoo is not available in this build ({e})") from None
    return zoo


def cmd_zoo(args: argparse.Namespace) -> int:
    from kvverify import flaws

    if args.list:
        if args.json:
            print(json.dumps([dataclasses.asdict(f) for f in flaws.CATALOG.values()], indent=2))
            return EXIT_OK
        from rich.table import Table
        t = Table(title="kvverify bug zoo: the catalogued flaws", title_justify="left")
        for col in ("flaw", "upstream", "symptom", "caught by"):
            t.add_column(col, overflow="fold")
        for f in flaws.CATALOG.values():
            t.add_row(f.name, f.upstream, f.symptom, f.caught_by)
        _console().print(t)
        return EXIT_OK
    zoo = _zoo_module()
    results = zoo.run_zoo(args.names or None)
    if args.json:
        print(json.dumps([_zoo_json(r) for r in results], indent=2))
    else:
        _console().print(zoo.zoo_table(results))
        escaped = [r.flaw for r in results if not r.caught]
        _console().print(f"{len(results) - len(escaped)}/{len(results)} flaws caught"
                         + (f"; [bold red]ESCAPED: {', '.join(escaped)}[/bold red]" if escaped else "."))
    return EXIT_OK if all(r.caught for r in results) else EXIT_FAIL


def _zoo_json(r: Any) -> dict[str, Any]:
    if hasattr(r, "to_json"):
        return r.to_json()
    return dataclasses.asdict(r)


def cmd_replay(args: argparse.Namespace) -> int:
    from kvverify import reports

    report = reports.load_report(args.report)
    flaw_names = [] if args.without_flaws else (args.flaw or None)
    outcome = reports.replay_report(report, target=args.target, flaw_names=flaw_names, fix_names=args.fix)
    used = report.get("flaws") if flaw_names is None else flaw_names
    used_fixes = report.get("fixes") if args.fix is None else args.fix
    if args.json:
        print(json.dumps({"report": str(args.report), "property": report.get("property"),
                          "flaws": used, "fixes": used_fixes, "reproduced": outcome.reproduced, "status": outcome.status,
                          "detail": outcome.detail, "violation": outcome.violation}, indent=2))
    else:
        console = _console()
        v = report.get("violation") or {}
        console.print(f"replaying [bold]{_esc(report.get('property'))}[/bold] ({report.get('kind')}) — recorded "
                      f"[bold]{_esc(v.get('name'))}[/bold]: {_esc(v.get('reason'))}")
        console.print(f"flaws on: {', '.join(used or []) or 'none'}; fixes on: "
                      f"{', '.join(used_fixes or []) or 'none'}")
        if outcome.reproduced:
            console.print(f"[bold red]{outcome.status}[/bold red]: {_esc(outcome.detail)}")
            trace = outcome.trace or {}
            if trace.get("outcome"):
                oc = trace["outcome"]
                console.print(f"[dim]last workload: stall={oc.get('stall_reason')} steps={oc.get('steps')} "
                              f"running={oc.get('running')} waiting={oc.get('waiting')} "
                              f"free_blocks={oc.get('free_blocks')}[/dim]")
        else:
            console.print(f"[bold green]not reproduced — {outcome.status}[/bold green]: {_esc(outcome.detail)}")
    return outcome.exit_code


def cmd_report(args: argparse.Namespace) -> int:
    from kvverify import reports

    where = Path(args.dir) if args.dir else reports.reports_dir()
    if not where.is_dir():
        where.mkdir(parents=True, exist_ok=True)
    md, html_path, n = reports.render_index(where)
    items = reports.list_reports(where)
    if args.json:
        print(json.dumps({"index_md": str(md), "index_html": str(html_path), "count": n,
                          "reports": [{"file": str(p), "property": r.get("property"), "flaws": r.get("flaws"),
                                       "violation": (r.get("violation") or {}).get("name"),
                                       "replay": f"kvverify replay {reports.display_path(p)}"} for p, r in items]},
                         indent=2))
        return EXIT_OK
    console = _console()
    if items:
        from rich.table import Table
        t = Table(title=f"{n} counterexample report(s) in {reports.display_path(where)}", title_justify="left")
        for col in ("invariant", "property", "flaws", "replay"):
            t.add_column(col, overflow="fold")
        for p, r in items:
            t.add_row((r.get("violation") or {}).get("name", ""), r.get("property", ""),
                      ", ".join(r.get("flaws") or []) or "—", f"kvverify replay {reports.display_path(p)}")
        console.print(t)
    else:
        console.print(f"no reports in {reports.display_path(where)}")
    console.print(f"index: {reports.display_path(md)} and {reports.display_path(html_path)}")
    return EXIT_OK


def cmd_models(args: argparse.Namespace) -> int:
    from kvverify import catalog

    layouts = [catalog.load_model(n) for n in catalog.list_models()]
    if args.json:
        print(json.dumps([{"name": m.name, "layers": m.kind_counts(), "dtype": m.dtype,
                           "max_position_embeddings": m.max_position_embeddings, "hf_id": m.hf_id}
                          for m in layouts], indent=2))
        return EXIT_OK
    from rich.table import Table
    t = Table(title="kvverify model catalog (kvverify check --model NAME)", title_justify="left")
    for col in ("model", "layers", "dtype", "max_position_embeddings"):
        t.add_column(col)
    for m in layouts:
        t.add_row(m.name, ", ".join(f"{n} {k}" for k, n in m.kind_counts().items()), m.dtype,
                  f"{m.max_position_embeddings:,}" if m.max_position_embeddings else "—")
    _console().print(t)
    return EXIT_OK


# --- the default run ---------------------------------------------------------------------

DEFAULT_MODEL = "llama-3.1-8b"
DEFAULT_MEMORY = 20 * 2**30
DEFAULT_FUZZ_SECONDS = 20.0


def cmd_default(args: argparse.Namespace) -> int:
    """No arguments: check a catalog model, prove the lemmas, run the bug zoo, fuzz briefly.

    The zoo runs before the fuzz: it is derandomized, and Hypothesis mines constants from
    the modules loaded so far, which the fuzz's suite discovery would add to.
    """
    from rich.table import Table

    from kvverify import catalog
    from kvverify.lemmas.cli_support import results_table, run_lemmas

    console = _console()
    steps: list[tuple[str, bool, str, float]] = []
    console.rule(f"[bold]1/4 check[/bold]: {DEFAULT_MODEL}, its full length, {human_bytes(DEFAULT_MEMORY)} "
                 "of KV cache")
    t0 = time.perf_counter()
    r = run_check(catalog.load_model(DEFAULT_MODEL), kv_cache_memory_bytes=DEFAULT_MEMORY)
    _print_check(r, console)
    steps.append(("check", r["starts"] and r["servable"], r["verdict"].split(":")[0],
                  time.perf_counter() - t0))

    console.rule("[bold]2/4 prove[/bold]: the Z3 boundary lemmas")
    t0 = time.perf_counter()
    lemmas = run_lemmas()
    console.print(results_table(lemmas))
    bad = [x.name for x in lemmas if not x.ok]
    known = sum(1 for x in lemmas if x.known_finding)
    steps.append(("prove", not bad, f"{len(lemmas) - len(bad)}/{len(lemmas)} as expected ({known} known "
                  f"finding(s))" + (f"; unexpected: {', '.join(bad)}" if bad else ""), time.perf_counter() - t0))

    console.rule("[bold]3/4 bug zoo[/bold]: every catalogued vLLM defect, re-introduced")
    t0 = time.perf_counter()
    try:
        zoo = _zoo_module()
        results = zoo.run_zoo()
        console.print(zoo.zoo_table(results))
        escaped = [z.flaw for z in results if not z.caught]
        steps.append(("zoo", not escaped, f"{len(results) - len(escaped)}/{len(results)} flaws caught"
                      + (f"; ESCAPED: {', '.join(escaped)}" if escaped else ""), time.perf_counter() - t0))
    except KVVerifyError as e:
        steps.append(("zoo", False, str(e), time.perf_counter() - t0))

    console.rule(f"[bold]4/4 fuzz[/bold]: every property, {DEFAULT_FUZZ_SECONDS:.0f} s")
    summary = run_fuzz(args.fuzz_seconds, profile="dev", seed=0, console=console)
    _print_fuzz(summary, console)
    steps.append(("fuzz", summary.failures == 0, f"{summary.examples:,} examples, {summary.failures} failing, "
                  f"{len(summary.reports)} report(s)", summary.seconds))

    t = Table(title="kvverify — verdict", title_justify="left")
    for col in ("step", "result", "", "time"):
        t.add_column(col)
    for name, ok, text, secs in steps:
        t.add_row(name, "[green]ok[/green]" if ok else "[bold red]FAILED[/bold red]", _esc(text), f"{secs:.1f} s")
    console.print(t)
    ok = all(s[1] for s in steps)
    console.print("[bold green]All as expected.[/bold green]" if ok else
                  "[bold red]Something is not as expected: see above.[/bold red]")
    return EXIT_OK if ok else EXIT_FAIL


# --- the parser --------------------------------------------------------------------------

_EPILOG = """examples:
  kvverify check --model llama-3.1-8b --max-model-len 131072 --kv-cache-memory-bytes 20GiB
  kvverify check --config-json ./config.json --max-model-len auto --gpu-memory-bytes 80GiB \\
                 --gpu-memory-utilization 0.9 --non-kv-cache-memory-bytes 20GiB --json
  kvverify check --model llama-3.1-8b --max-model-len 512 --num-gpu-blocks-override 32 \\
                 --flaw null_block_not_reserved        # what vLLM before #47272 did
  kvverify fuzz --seconds 300 --profile nightly
  kvverify prove --json
  kvverify zoo
  kvverify replay reports/test_startup_check_passes_implies_servable-1a2b3c4d5e.json
  kvverify report                                     # reports/index.md and reports/index.html

exit status: 0 as expected, 1 a failure (a check, property, lemma, or an escaped flaw),
2 bad input (the message names the field and the allowed values).
"""


class _Formatter(argparse.RawDescriptionHelpFormatter):
    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=34, width=100)


def build_parser() -> argparse.ArgumentParser:
    from kvverify import profiles  # noqa: F401 - profiles exist before --profile is checked

    flaw_choices = _flaw_names()
    p = argparse.ArgumentParser(
        prog="kvverify", formatter_class=_Formatter, epilog=_EPILOG,
        description="Property-based and formal verification of vLLM v1's KV-cache capacity and "
                    "admission logic.\nWith no command: check a catalog model, prove the lemmas, fuzz "
                    "for 20 s and run the bug zoo.")
    p.add_argument("--version", action="version", version=f"kvverify {_version()}")
    p.add_argument("--fuzz-seconds", type=float, default=DEFAULT_FUZZ_SECONDS, help=argparse.SUPPRESS)
    sub = p.add_subparsers(dest="command", metavar="COMMAND", title="commands")

    c = sub.add_parser("check", formatter_class=_Formatter, help="will this model + memory + max_model_len "
                       "start, and can a full-length request really finish?",
                       description="The operator's linter. Plans the KV cache like vLLM's startup, runs the "
                       "startup check, then runs one max_model_len request alone on the runtime pool "
                       "(N - 1 usable blocks) with the reference scheduler.\nExit 0: starts and servable; "
                       "1: refused, or starts but would hang; 2: bad input.",
                       epilog="examples:\n  kvverify check --model llama-3.1-8b --kv-cache-memory-bytes 20GiB\n"
                              "  kvverify check --config-json config.json --max-model-len auto "
                              "--kv-cache-memory-bytes 8GiB --json")
    src = c.add_argument_group("model (one of)").add_mutually_exclusive_group(required=True)
    src.add_argument("--model", metavar="NAME", help="a catalog model (see `kvverify models`)")
    src.add_argument("--config-json", metavar="PATH", help="a Hugging Face config.json (or its directory)")
    eng = c.add_argument_group("engine flags (as vLLM's)")
    eng.add_argument("--max-model-len", type=_length_arg, metavar="L|auto",
                     help="an integer, or auto (fit the memory, up to the model's length); "
                          "default: the model's max_position_embeddings")
    eng.add_argument("--block-size", type=_int_arg("block_size"), default=16, metavar="B", help="(16)")
    eng.add_argument("--kv-cache-memory-bytes", type=_bytes_arg("kv_cache_memory_bytes"), metavar="BYTES",
                     help="KV cache budget: bytes or with a unit, e.g. 20GiB, 512MiB")
    eng.add_argument("--num-gpu-blocks-override", type=_int_arg("num_gpu_blocks_override"), metavar="N",
                     help="the block count (wins over memory)")
    eng.add_argument("--max-num-batched-tokens", type=_int_arg("max_num_batched_tokens"), default=2048,
                     metavar="T", help="token budget per step (2048)")
    eng.add_argument("--max-num-seqs", type=_int_arg("max_num_seqs"), default=256, metavar="S", help="(256)")
    eng.add_argument("--gpu-memory-bytes", type=_bytes_arg("gpu_memory_bytes"), metavar="BYTES",
                     help="profiled source: the GPU's memory, e.g. 80GiB")
    eng.add_argument("--gpu-memory-utilization", type=_fraction_arg, default=0.9, metavar="U",
                     help="profiled source: fraction of the GPU vLLM may use (0.9)")
    eng.add_argument("--non-kv-cache-memory-bytes", type=_bytes_arg("non_kv_cache_memory_bytes"),
                     metavar="BYTES", help="profiled source: weights + activations (0)")
    eng.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=True,
                     help="(on)")
    eng.add_argument("--mamba-cache-mode", choices=("none", "align"), default=None,
                     help="hybrid models: default align with prefix caching, else none")
    eng.add_argument("--kv-cache-dtype", default="auto", metavar="DTYPE", help="auto (model dtype), fp8, ...")
    c.add_argument("--flaw", action="append", choices=flaw_choices, metavar="NAME",
                   help="run on the reference with a bug-zoo flaw on: what the historical engine did "
                        "(see `kvverify zoo --list`)")
    c.add_argument("--json", action="store_true", help="print one JSON object")
    c.set_defaults(func=cmd_check)

    f = sub.add_parser("fuzz", formatter_class=_Formatter, help="run the property suites for a time budget",
                       description="Runs every property of the suites round-robin, in batches, until the "
                       "budget is spent, with a live progress display. A failing property writes a "
                       "counterexample report (reports/) and is retired; xfail-marked properties failing as "
                       "expected are known findings.\nExit 0: nothing failed; 1: a property failed (a report "
                       "was written).")
    f.add_argument("--seconds", type=float, default=60.0, metavar="N", help="time budget (60)")
    f.add_argument("--profile", choices=("dev", "ci", "nightly"), default="dev",
                   help="Hypothesis profile: dev (random), ci (derandomized, one full pass), nightly "
                        "(random, keeps the example database)")
    f.add_argument("--flaw", action="append", choices=flaw_choices, metavar="NAME",
                   help="switch a bug-zoo flaw on (repeatable)")
    f.add_argument("--seed", type=int, default=None, help="seed the batches (reproducible runs)")
    f.add_argument("-k", "--property", action="append", metavar="TEXT",
                   help="only properties whose name or module contains TEXT (repeatable)")
    f.add_argument("--shard", metavar="I/N", type=_arg_type(_shard, "shard"),
                   help="only the I-th of N shards of the properties (CI matrix)")
    f.add_argument("--batch", type=_int_arg("batch"), default=50, help="largest batch of examples (50)")
    f.add_argument("--suite", default="properties", metavar="DIR",
                   help="suite files whose xfail marks name known findings (properties)")
    f.add_argument("--target", default="reference", help="system under test (reference)")
    f.add_argument("--report-xfail", action="store_true", help="also report known findings")
    f.add_argument("--reports-dir", metavar="DIR", help="where reports go ($KVVERIFY_REPORTS_DIR or reports/)")
    f.add_argument("--list", action="store_true", help="list the properties and exit")
    f.add_argument("--no-progress", action="store_true", help="no live display")
    f.add_argument("--json", action="store_true", help="print the summary as JSON")
    f.set_defaults(func=cmd_fuzz)

    pr = sub.add_parser("prove", formatter_class=_Formatter, help="prove the Z3 boundary lemmas",
                        description="Proves every lemma (or the named ones) from the same arithmetic the "
                        "reference executes. Exit 1 on an unexpected counterexample or an unknown; a "
                        "counterexample is written up as a report.")
    pr.add_argument("names", nargs="*", metavar="LEMMA", help="lemmas to prove (default: all)")
    pr.add_argument("--flaw", choices=flaw_choices, metavar="NAME", help="prove with a bug-zoo flaw on")
    pr.add_argument("--fix", action="store_true", help="evaluate each finding's lemma under its proposed fix")
    pr.add_argument("--json", action="store_true", help="print a JSON list")
    pr.add_argument("--no-reports", action="store_true", help="write no counterexample reports")
    pr.add_argument("--report-findings", action="store_true", help="also report known findings")
    pr.add_argument("--reports-dir", metavar="DIR", help="where reports go")
    pr.set_defaults(func=cmd_prove)

    z = sub.add_parser("zoo", formatter_class=_Formatter, help="re-introduce every catalogued vLLM defect and "
                       "show the suite catches it",
                       description="For each bug-zoo flaw: switch it on, run the property that must catch "
                       "it from a cold start, report examples, seconds and the shrunk counterexample. "
                       "Exit 1 if any flaw escapes.")
    z.add_argument("names", nargs="*", metavar="FLAW", help="flaws to run (default: all)")
    z.add_argument("--list", action="store_true", help="list the flaws without running them")
    z.add_argument("--json", action="store_true", help="print a JSON list")
    z.set_defaults(func=cmd_zoo)

    r = sub.add_parser("replay", formatter_class=_Formatter, help="re-run a counterexample report exactly",
                       description="Rebuilds the example from a report's JSON and runs the property body "
                       "once on it, with the recorded flaws and fixes on (a lemma report re-proves the "
                       "lemma).\nExit 1: reproduced (still failing); 0: passes now; 2: unreadable report.")
    r.add_argument("report", metavar="REPORT", help="a reports/<property>-<hash>.json file")
    r.add_argument("--without-flaws", action="store_true",
                   help="replay on the plain reference (does the faithful reference fail too?)")
    r.add_argument("--flaw", action="append", choices=flaw_choices, metavar="NAME",
                   help="replay with these flaws instead of the recorded ones")
    r.add_argument("--fix", action="append", metavar="NAME",
                   help="replay with these proposed fixes on instead of the recorded ones (does the fix hold?)")
    r.add_argument("--target", default=None, help="system under test (default: the recorded one)")
    r.add_argument("--json", action="store_true", help="print the outcome as JSON")
    r.set_defaults(func=cmd_replay)

    rp = sub.add_parser("report", formatter_class=_Formatter, help="index all reports (Markdown + HTML)",
                        description="Writes reports/index.md and a single self-contained reports/index.html "
                        "(inline CSS, no external assets) of every counterexample report.")
    rp.add_argument("--dir", metavar="DIR", help="the reports directory ($KVVERIFY_REPORTS_DIR or reports/)")
    rp.add_argument("--json", action="store_true", help="print the list as JSON")
    rp.set_defaults(func=cmd_report)

    try:
        from kvverify.harness_cli import add_harness_parser
    except ImportError:  # pragma: no cover - the harness is part of the package
        pass
    else:
        add_harness_parser(sub)

    m = sub.add_parser("models", formatter_class=_Formatter, help="list the model catalog")
    m.add_argument("--json", action="store_true")
    m.set_defaults(func=cmd_models)
    return p


def _version() -> str:
    try:
        from importlib.metadata import version
        return version("kvverify")
    except Exception:  # noqa: BLE001
        return "0+unknown"


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``kvverify`` console script; returns the exit status."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # --help / --version (0) or a usage error (2)
        return int(e.code) if isinstance(e.code, int) else (0 if e.code is None else EXIT_USAGE)
    func = getattr(args, "func", None)
    try:
        if func is None:
            return cmd_default(args)
        return int(func(args))
    except KVVerifyError as e:
        name = f"kvverify {args.command}" if getattr(args, "command", None) else "kvverify"
        print(f"{name}: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
