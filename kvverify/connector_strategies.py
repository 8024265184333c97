"""Hypothesis strategies for workloads that go through a KV connector.

Composites in the style of :mod:`kvverify.strategies` (boundaries in the first branch of each
``one_of``, so the shrinker lands on them):

* :func:`connector_cases` — a started deployment (:func:`kvverify.strategies.startup_cases`:
  block counts at the startup boundary, every spec mix incl. Mamba + attention hybrids, FCFS
  and priority, ``max_num_seqs``, watermark) with the connector switched on (off sometimes),
  one or two batches in flight, and a speculative config (``num_speculative_tokens`` 0-3,
  ``num_lookahead_tokens`` equal to it, as MTP / EAGLE drafters reserve, or 0);
* :func:`request_scripts` — one request's external cache: hit length at block multiples
  +-1, the whole prompt or one token short of it first; load latency 1-3 steps (or a
  synchronous load); ``None`` deferrals; a failed load; a delayed free;
* :func:`connector_workloads` — arrival lists (prompts at block multiples +-1 first, shared
  prefixes, a burst at step 0 or overlapping arrivals, priorities) with a
  :class:`ConnectorScript` for them: the connector's role and its load-failure policy.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import strategies as st

from kvverify.reference.connector import (
    KV_LOAD_FAILURE_POLICIES,
    KV_ROLES,
    ConnectorScript,
    RequestScript,
)
from kvverify.reference.driver import WorkloadSpec
from kvverify.strategies import StartupCase, lengths, startup_cases

_LOAD_STEPS = st.sampled_from((1, 2, 0, 3))        # async in 1 step first; 0 = a synchronous load
_DEFERRALS = st.sampled_from((0, 1, 2))
_FREE_DELAY = st.sampled_from((0, 1, 2))
_SPEC_TOKENS = st.sampled_from((0, 1, 2, 3))        # MTP / EAGLE draft tokens (0: no drafter)


@st.composite
def connector_cases(draw, *, max_len: int = 256, batches: tuple[int, ...] = (1, 2),
                    speculative: bool = True, connector_off: bool = True,
                    drafter_slots: bool = False) -> StartupCase:
    """A deployment with the scripted KV connector, ``vllm_config.kv_connector`` saying whether it
    is on (knobs: ``max_len``, ``batches`` in flight to draw from, ``speculative`` (draw a
    speculative config), ``connector_off`` (sometimes no connector: the same paths without it),
    ``drafter_slots`` (always a drafter with its own KV, MTP-style: 1-3 draft tokens, as many
    lookahead slots))."""
    case = draw(startup_cases(allow_auto=False, max_len=max_len, workers=False), label="startup")
    on = draw(st.integers(0, 3)) > 0 if connector_off else True
    spec = draw(_SPEC_TOKENS) if speculative else 0
    if drafter_slots:
        spec = draw(st.integers(1, 3))
    lookahead = draw(st.sampled_from((spec, 0))) if spec and not drafter_slots else spec
    cfg = case.vllm_config
    cfg = replace(cfg, kv_connector=on, max_concurrent_batches=draw(st.sampled_from(batches)),
                  num_speculative_tokens=spec,
                  # a drafter with its own KV reserves its draft slots (MTP / EAGLE); below the
                  # budget, as upstream requires with a drafter
                  num_lookahead_tokens=min(lookahead, cfg.max_num_batched_tokens - 1))
    return replace(case, vllm_config=cfg)


@st.composite
def request_scripts(draw, prompt_len: int, block_size: int) -> RequestScript:
    """One request's external cache, hit lengths at the boundaries first (see the module)."""
    near = st.sampled_from(sorted({prompt_len, max(prompt_len - 1, 0)}))
    blocks = st.builds(lambda k, d: max(0, min(prompt_len, k * block_size + d)),
                       st.integers(0, max(1, prompt_len // block_size)), st.sampled_from((0, 1, -1)))
    hit = draw(st.one_of(near, blocks, st.integers(0, prompt_len)), label="hit_tokens")
    load_steps = draw(_LOAD_STEPS)
    fail = load_steps > 0 and hit > 0 and draw(st.integers(0, 5)) == 0
    return RequestScript(hit_tokens=hit, load_steps=load_steps, deferrals=draw(_DEFERRALS),
                         fail_load=fail, free_delay_steps=draw(_FREE_DELAY))


@st.composite
def _connector_requests(draw, max_model_len: int, block_size: int, max_requests: int,
                        max_outputs: int, pool_tokens: int | None, min_requests: int = 1) -> list[WorkloadSpec]:
    """Requests whose prompts sit at block multiples +-1 first (a loaded prefix then ends at, or
    one token short of, a block boundary) or, after the first request, fill what is left of the
    pool (``pool_tokens``: the usable blocks in tokens) to within a block — the pool's boundary;
    sharing a prefix half the time; all arriving at step 0 half the time (loads in flight
    together) else within a few steps."""
    n = draw(st.integers(min_requests, max(min_requests, max_requests)))
    prefix_len = draw(st.integers(0, max_model_len - 1)) if draw(st.booleans()) else 0
    burst = draw(st.booleans())
    out: list[WorkloadSpec] = []
    left = pool_tokens
    for i in range(n):
        prompt_len = draw(lengths(block_size, low=1, high=max_model_len - 1))
        if i and left is not None and left > 0 and draw(st.booleans()):
            fill = left + draw(st.sampled_from((0, -block_size, block_size)))
            prompt_len = min(max(fill, 1), max_model_len - 1)
        if left is not None:
            left -= -(-prompt_len // block_size) * block_size
        outputs = draw(st.integers(1, max(1, min(max_outputs, max_model_len - prompt_len))))
        common = min(prefix_len, prompt_len)
        prompt = tuple(range(common)) + tuple(10_000 * (i + 1) + j for j in range(prompt_len - common))
        arrival = 0 if burst else draw(st.integers(0, 8))
        # priorities tie often (the FCFS order within a level is the boundary), else 0-2
        priority = draw(st.sampled_from((0, 0, 1, 2)))
        out.append(WorkloadSpec(f"r{i}", prompt, outputs, arrival, priority=priority))
    return out


@st.composite
def connector_workloads(draw, max_model_len: int, block_size: int, *, max_requests: int = 4,
                        max_outputs: int = 32, pool_tokens: int | None = None, min_requests: int = 1
                        ) -> tuple[list[WorkloadSpec], ConnectorScript]:
    """``(workload, script)``: :func:`_connector_requests` with a script per request (every
    request half the time, else most; some have no external hit), a role and a failure policy."""
    work = draw(_connector_requests(max_model_len, block_size, max_requests, max_outputs, pool_tokens,
                                    min_requests), label="workload")
    scripts = {}
    every = draw(st.booleans())  # half the time every request has its script (loads in flight together)
    for w in work:
        if every or draw(st.integers(0, 3)):
            scripts[w.request_id] = draw(request_scripts(len(w.prompt_token_ids), block_size))
    role = draw(st.sampled_from(KV_ROLES))
    policy = draw(st.sampled_from(KV_LOAD_FAILURE_POLICIES))
    return work, ConnectorScript.of(scripts, kv_role=role, kv_load_failure_policy=policy)


__all__ = ["connector_cases", "connector_workloads", "request_scripts"]
