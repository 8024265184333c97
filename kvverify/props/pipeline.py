"""Pipeline parallelism: every split of a model's layers into stages is planned clearly and serves.

Each pipeline stage is one worker with only its layers' KV cache specs; ``get_kv_cache_configs``
projects the model's groups onto each (``_project_kv_cache_groups_to_worker``), checks each and
gives every worker the smallest block count. Upstream splits the layers with ``get_pp_indices``
(``vllm/distributed/utils.py``), which accepts any ``VLLM_PP_LAYER_PARTITION`` summing to the
layer count, ``0`` entries included, and leaves the last stage empty when there are fewer layers
than stages; layers without KV cache (MLP-only) take a share of the split too. Guarantee: planning
either starts or refuses clearly (the check's :class:`~kvverify.errors.StartupCheckError`, a
:class:`~kvverify.errors.ConfigError` naming a field, a model whose layers cannot be grouped), never
a raw exception nor an unrelated error, and a started plan serves a full-length request (the check
agrees with the runtime pool, :func:`~kvverify.invariants.startup.check_startup_vs_runtime`).

Finding F15 (vLLM 0.33.0): a stage that holds no KV cache layer, next to one that does, gets every
group with an empty layer list, so the planner's ``if not groups`` guards never fire and its 0 bytes
per block is divided by (``ZeroDivisionError``). Fix option ``kv_less_stage_planned``.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import currently_in_test_context, event, example
from hypothesis import strategies as st

from kvverify.errors import ConfigError, StartupCheckError
from kvverify.hypothesis_hooks import given
from kvverify.invariants.base import Violation
from kvverify.invariants.startup import check_startup_vs_runtime
from kvverify.props.known import check_or_known
from kvverify.reference.grouping import GroupingError
from kvverify.reference.config import VllmConfig
from kvverify.reference.specs import FullAttentionSpec, KVCacheSpec
from kvverify.strategies import StartupCase, startup_cases
from kvverify.targets.base import Target, TargetUnsupported


@dataclass(frozen=True)
class PipelineCase:
    """A drawn deployment split into pipeline stages as ``get_pp_indices`` splits its layers.

    ``partition``: the hidden layers per stage (a ``VLLM_PP_LAYER_PARTITION``); ``hidden``: the
    model's hidden layers in order, a KV cache layer's name or ``None`` for one without KV cache.
    """

    startup: StartupCase
    hidden: tuple[str | None, ...]
    partition: tuple[int, ...]
    available_memory: tuple[int, ...] | None = None

    @property
    def vllm_config(self) -> VllmConfig:
        return self.startup.vllm_config

    @property
    def stage_layers(self) -> tuple[tuple[str | None, ...], ...]:
        """Each stage's hidden layers (``get_pp_indices``' ``[start, end)`` of each rank)."""
        out, start = [], 0
        for size in self.partition:
            out.append(self.hidden[start:start + size])
            start += size
        return tuple(out)

    @property
    def stages(self) -> tuple[dict[str, KVCacheSpec], ...]:
        """Each stage's KV cache specs (its layers that have one): one worker per stage."""
        specs = self.startup.kv_cache_specs[0]
        return tuple({n: specs[n] for n in layers if n is not None} for layers in self.stage_layers)


@st.composite
def pipeline_cases(draw: st.DrawFn) -> PipelineCase:
    """A :func:`~kvverify.strategies.startup_cases` model (one worker), up to two hidden layers
    without KV cache put among its layers, and 2-3 stages cut anywhere in ``0..n`` (empty stages
    included, as ``get_pp_indices`` accepts them); with the ``memory`` source, sometimes a little
    more memory on some stages (workers differ, the smallest block count wins)."""
    case = draw(startup_cases(workers=False))
    names = list(case.kv_cache_specs[0])
    kv_less = draw(st.lists(st.integers(0, len(names)), max_size=2))
    hidden: list[str | None] = []
    for i in range(len(names) + 1):
        hidden += [None] * kv_less.count(i)
        if i < len(names):
            hidden.append(names[i])
    stages = draw(st.integers(2, 3))
    cuts = sorted(draw(st.lists(st.integers(0, len(hidden)), min_size=stages - 1, max_size=stages - 1)))
    bounds = [0, *cuts, len(hidden)]
    partition = tuple(b - a for a, b in zip(bounds, bounds[1:]))
    available = None
    if case.source == "memory" and draw(st.booleans()):
        base = case.vllm_config.available_kv_cache_memory()
        page = max(s.page_size_bytes for s in case.kv_cache_specs[0].values()) if names else 1
        available = tuple(base + draw(st.integers(0, 3 * page)) for _ in partition)
    return PipelineCase(case, tuple(hidden), partition, available)


#: F15's minimal case: one full-attention layer on two stages (``get_pp_indices(1, rank, 2)``:
#: ``[1, 0]``), B = 16, L = 16; 0.33.0's planner raises ZeroDivisionError
F15_CASE = PipelineCase(
    StartupCase(VllmConfig(block_size=16, max_model_len=16, kv_cache_memory_bytes=16 * 4096,
                           enable_prefix_caching=False),
                ({"l0": FullAttentionSpec(block_size=16, num_kv_heads=1, head_size=8)},), "memory"),
    ("l0",), (1, 0))


def pipeline_violations(target: Target, case: PipelineCase, outputs: int = 1) -> list[Violation]:
    """Plan the stages on ``target``: a raw exception is the violation; a clear refusal owes
    nothing; a started plan must serve a full-length request (``check_startup_vs_runtime``)."""
    try:
        plan = target.plan(case.vllm_config, case.stages, case.available_memory)
    except (TargetUnsupported, ImportError):
        raise  # the target cannot express it, or adapter drift (DriftError): never a defect
    except (StartupCheckError, ConfigError, GroupingError) as e:
        _event(f"refused clearly ({type(e).__name__})")
        return []
    except Exception as e:  # noqa: BLE001 - any other exception is the violation itself
        # on vLLM an upstream ValueError other than the check's arrives as a plain KVVerifyError
        # ("upstream planning failed"): 0.33.0's layout validation of a stage's empty groups says
        # "cannot express this model's mixed page sizes ([])", naming no stage
        _event(f"planning raised {type(e).__name__}")
        return [Violation("pipeline.crash", f"planning raised {type(e).__name__} instead of starting or "
                          "refusing clearly", {"partition": case.partition, "error": f"{type(e).__name__}: {e}"[:200],
                                               "stage_layers": [sorted(s) for s in case.stages]})]
    _event("starts" if plan.starts else "refused by the check")
    if not plan.starts:
        return []
    return check_startup_vs_runtime(target, plan, outputs, check_strictness=False)


def _event(outcome: str) -> None:
    if currently_in_test_context():  # also called outside Hypothesis (tests, replays)
        event(outcome)


@given(case=pipeline_cases(), outputs=st.one_of(st.just(1), st.integers(1, 48)))
@example(case=F15_CASE, outputs=1)
def test_pipeline_split_plans_clearly_and_serves(target: Target, case: PipelineCase, outputs: int) -> None:
    """Every split of the layers into pipeline stages starts or refuses clearly, and serves if it starts (F15)."""
    empty = sum(1 for s in case.stages if not s)
    event(f"{len(case.partition)} stages, {empty} without KV cache layers")
    event("layers without KV cache" if None in case.hidden else "every layer has KV cache")
    check_or_known(target, lambda t: pipeline_violations(t, case, outputs))
