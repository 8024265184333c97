"""Run the bug zoo: switch each flaw on, run the property that must catch it, from cold.

``run_zoo()`` returns one :class:`ZooResult` per flaw: caught or escaped, the property,
examples and seconds to the first failure, and the shrunk counterexample. Each run is
deterministic (derandomized, no example database), so the numbers are reproducible. A run
uses a fresh copy of the property (:func:`kvverify.hypothesis_hooks.rebuild`): the shared
property object is never changed. Hypothesis seeds a derandomized run from the property's
source text, so editing a property's own lines (even an annotation) moves its counts.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any, Callable

from hypothesis import HealthCheck, Phase, settings

from kvverify import engines
from kvverify.hypothesis_hooks import rebuild
from kvverify.props.recorder import RECORDER
from kvverify.reference.driver import WorkloadSpec

#: flaw -> the property that must catch it, read off each engine's :class:`kvverify.flaws.Flaw` s
CATCHERS: dict[str, Callable[..., Any]] = {n: f.catching_property() for n, f in engines.flaw_catalog().items()}


def all_flaws() -> list[str]:
    """Every catalogued flaw of every engine (:data:`kvverify.engines.ENGINES`), vLLM's first."""
    return list(engines.flaw_catalog())


@dataclass(frozen=True)
class ZooResult:
    flaw: str
    engine: str
    upstream: str
    caught: bool
    property: str
    examples: int
    seconds: float
    total_seconds: float
    counterexample: str
    violation: str
    error: str | None = None

    def to_json(self) -> dict:
        return asdict(self)


def run_flaw(flaw: str, *, max_examples: int = 1000, seed: int | None = None, target: Any = None,
             shrink: bool = True) -> ZooResult:
    """Run the flaw's catching property with the flaw on, from a cold start, on ``target``
    (default: the reference of the flaw's engine)."""
    from kvverify.targets import get_engine_target, reference_of

    engine = engines.engine_of_flaw(flaw)
    entry = engine.flaw_catalog[flaw]
    prop = entry.catching_property()
    target = target if target is not None else get_engine_target(reference_of(engine.name))
    phases = [Phase.explicit, Phase.generate, Phase.target] + ([Phase.shrink] if shrink else [])
    run = rebuild(prop, settings=settings(max_examples=max_examples, deadline=None, database=None, phases=phases,
                                          suppress_health_check=list(HealthCheck), print_blob=False,
                                          report_multiple_bugs=False, derandomize=seed is None), seed=seed)
    RECORDER.reset()
    start = time.perf_counter()
    caught, error, violation = False, None, ""
    with engine.flaws.enabled(flaw):
        try:
            run(target=target)
        except AssertionError as e:
            caught, violation = True, str(e).splitlines()[0][:300]
        except Exception as e:  # noqa: BLE001 - an escaped crash still counts as caught, but is reported
            caught, error = True, f"{type(e).__name__}: {e}"[:300]
            violation = error
    total = time.perf_counter() - start
    example = RECORDER.last_failure if caught else None
    return ZooResult(
        flaw=flaw, engine=engine.name, upstream=entry.upstream, caught=caught, property=prop.__name__,
        examples=RECORDER.first_failure_at or RECORDER.examples,
        seconds=round(RECORDER.first_failure_seconds if RECORDER.first_failure_seconds is not None else total, 3),
        total_seconds=round(total, 3), counterexample=describe_example(example) if example else "",
        violation=violation, error=error)


def run_zoo(names: list[str] | None = None, **kw: Any) -> list[ZooResult]:
    """Every catalogued flaw of every engine (or ``names``), each from a cold start."""
    return [run_flaw(n, **kw) for n in (names or all_flaws())]


def describe_example(example: dict) -> str:
    """A one-line summary of a shrunk example: the fields that matter at the boundary."""
    parts = []
    for key, value in example.items():
        case = value
        if hasattr(case, "describe") and callable(case.describe):  # an SGLang config or case
            parts.append(case.describe())
        elif hasattr(case, "vllm_config"):
            c = case.vllm_config
            parts.append(f"B={c.block_size} L={c.max_model_len} M={c.max_num_batched_tokens}")
            if getattr(case, "source", None):
                parts.append(f"source={case.source} N={case.target_blocks} need={case.needed_blocks}")
            if hasattr(case, "kv_cache_specs"):
                kinds = [s.kind for w in case.kv_cache_specs[:1] for s in w.values()]
                parts.append(f"layers={kinds}")
            if hasattr(case, "kv_cache_config"):
                parts.append(f"groups={[g.kv_cache_spec.block_size for g in case.kv_cache_config.kv_cache_groups]}")
        elif key == "data":
            continue
        elif isinstance(value, (list, tuple)) and value and all(isinstance(w, WorkloadSpec) for w in value):
            parts.append(f"{key}: " + ", ".join(_request(w) for w in value)[:160])
        else:
            parts.append(f"{key}={value!r}"[:80])
    return "; ".join(parts)


def _request(w: WorkloadSpec) -> str:
    """``r0 17+1`` (prompt + output tokens), ``@3`` when it arrives after step 0."""
    return f"{w.request_id} {len(w.prompt_token_ids)}+{w.max_tokens}" + (f"@{w.arrival_step}" if w.arrival_step else "")


def zoo_table(results: list[ZooResult]):
    """A rich table: flaw, upstream issue, property, examples, seconds, counterexample."""
    from rich.table import Table

    table = Table(title="kvverify bug zoo", show_lines=False)
    for col in ("flaw", "upstream", "caught", "property", "examples", "seconds", "shrunk counterexample"):
        table.add_column(col, overflow="fold")
    for r in results:
        table.add_row(r.flaw, r.upstream, "yes" if r.caught else "[red]ESCAPED[/red]", r.property,
                      str(r.examples), f"{r.seconds:.2f}", r.counterexample)
    return table
