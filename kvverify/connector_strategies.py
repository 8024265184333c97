"""Hypothesis strategies for workloads that go through a KV connector.

Composites in the style of :mod:`kvverify.strategies` (boundaries in the first branch of each
``one_of``, so the shrinker lands on them):

* :func:`connector_cases` — a started deployment (:func:`kvverify.strategies.startup_cases`
  with ``starting``: block counts at the startup boundary or just above it, never below, as the
  properties ``assume`` a started one; every spec mix incl. Mamba + attention hybrids, FCFS and
  priority, ``max_num_seqs``, watermark) with the connector switched on (off sometimes), one or
  two batches in flight, and a speculative config (``num_speculative_tokens`` 0-3,
  ``num_lookahead_tokens`` equal to it, as MTP / EAGLE drafters reserve, or 0). Small pools
  first: ``max_model_len`` at most 2 blocks half the time (a started pool of a few blocks),
  and a hybrid layout (two or more layer kinds: two or more KV cache groups, or Mamba
  next to attention) half the time, with or without a drafter;
* :func:`request_scripts` — one request's external cache: hit length at block multiples
  +-1 (the prompt's last block boundary first), the whole prompt or one token short of it
  first; load latency 1-3 steps (or a synchronous load); ``None`` deferrals; a failed load; a
  delayed free;
* :func:`connector_workloads` — arrival lists with a :class:`ConnectorScript` for them (the
  connector's role and its load-failure policy). First branch, half the time, a *burst*
  (:func:`_burst_requests`): 2-4 requests arriving together (or within two steps), each with a
  scripted async load, whose prompts fill the pool to its boundary (the usable blocks + 0, +1,
  -1, +2); else (:func:`_connector_requests`) prompts at block multiples +-1, shared prefixes,
  a burst at step 0 or overlapping arrivals, priorities, some requests unscripted.
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
from kvverify.strategies import StartupCase, _memoized, _sampled, lengths, startup_cases

_LOAD_STEPS = st.sampled_from((1, 2, 0, 3))        # async in 1 step first; 0 = a synchronous load
_DEFERRALS = st.sampled_from((0, 1, 2))
_FREE_DELAY = st.sampled_from((0, 1, 2))
_SPEC_TOKENS = st.sampled_from((0, 1, 2, 3))        # MTP / EAGLE draft tokens (0: no drafter)
_ASYNC_LOAD_STEPS = st.sampled_from((1, 2, 3))
_FIRST = st.sampled_from((True, False))             # a branch taken half the time, the shrinker's target
#: priorities tie often (the FCFS order within a level is the boundary), else 0-2
_PRIORITIES = st.sampled_from((0, 0, 1, 2))
_CONSUMER_ROLES = tuple(r for r in KV_ROLES if r != "kv_producer")
_POOL_OFFSETS = st.sampled_from((0, 1, -1, 2))      # the burst's blocks - the pool's usable blocks
_PROMPT_OFFSETS = st.sampled_from((0, 1, -1))       # a prompt at a block multiple +-1
#: the longest max_model_len of the small-pool branch, in blocks (a started pool: a few blocks)
_SMALL_POOL_BLOCKS = 2


#: the same strategy object for the same knobs (a fresh one is validated on its first draw)
_startup_cases = _memoized(startup_cases)


@st.composite
def connector_cases(draw, *, max_len: int = 256, batches: tuple[int, ...] = (1, 2),
                    speculative: bool = True, connector_off: bool = True,
                    drafter_slots: bool = False) -> StartupCase:
    """A deployment with the scripted KV connector, ``vllm_config.kv_connector`` saying whether it
    is on (knobs: ``max_len``, ``batches`` in flight to draw from, ``speculative`` (draw a
    speculative config), ``connector_off`` (sometimes no connector: the same paths without it),
    ``drafter_slots`` (always a drafter with its own KV, MTP-style: 1-3 draft tokens, as many
    lookahead slots)). Drawn first: a small pool (``max_model_len`` at most 2 blocks, so a
    started pool is a few blocks; half the time, the shrinker's target) or up to ``max_len``;
    a hybrid layout (two or more layer kinds, :func:`~kvverify.strategies.layer_kinds`) half
    the time. Only deployments at or above the startup boundary are drawn (``starting``)."""
    blocks = _SMALL_POOL_BLOCKS if draw(_FIRST) else None
    hybrid = draw(st.booleans())
    case = draw(_startup_cases(allow_auto=False, max_len=max_len, workers=False, hybrid=hybrid, starting=True,
                               max_blocks=blocks), label="startup")
    on = draw(st.integers(0, 3)) > 0 if connector_off else True
    spec = draw(_SPEC_TOKENS) if speculative else 0
    if drafter_slots:
        spec = draw(st.integers(1, 3))
    lookahead = draw(_sampled((spec, 0))) if spec and not drafter_slots else spec
    cfg = case.vllm_config
    cfg = replace(cfg, kv_connector=on, max_concurrent_batches=draw(_sampled(batches)),
                  num_speculative_tokens=spec,
                  # a drafter with its own KV reserves its draft slots (MTP / EAGLE); below the
                  # budget, as upstream requires with a drafter
                  num_lookahead_tokens=min(lookahead, cfg.max_num_batched_tokens - 1))
    return replace(case, vllm_config=cfg)


@_memoized
def _hit_tokens(prompt_len: int, block_size: int, low: int) -> st.SearchStrategy[int]:
    """Hit lengths in ``[low, prompt_len]``, boundaries first (:func:`request_scripts`)."""
    near = _sampled(tuple(sorted({prompt_len, max(prompt_len - 1, low)})))
    top = max(1, prompt_len // block_size)
    blocks = st.builds(lambda j, d: max(low, min(prompt_len, (top - j) * block_size + d)),
                       st.integers(0, top), _PROMPT_OFFSETS)
    return st.one_of(near, blocks, st.integers(low, max(low, prompt_len)))


@_memoized
@st.composite
def request_scripts(draw, prompt_len: int, block_size: int, async_load: bool = False) -> RequestScript:
    """One request's external cache, hit lengths at the boundaries first (see the module):
    the whole prompt or one short of it; ``j`` blocks below the prompt's last block boundary
    (``j = 0`` first), +-1; anywhere. ``async_load``: a hit of at least one token, loaded
    asynchronously in 1-3 steps (a burst's loads)."""
    hit = draw(_hit_tokens(prompt_len, block_size, 1 if async_load else 0), label="hit_tokens")
    load_steps = draw(_ASYNC_LOAD_STEPS if async_load else _LOAD_STEPS)
    fail = load_steps > 0 and hit > 0 and draw(st.integers(0, 5)) == 0
    return RequestScript(hit_tokens=hit, load_steps=load_steps, deferrals=draw(_DEFERRALS),
                         fail_load=fail, free_delay_steps=draw(_FREE_DELAY))


@_memoized
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
            fill = left + draw(_sampled((0, -block_size, block_size)))
            prompt_len = min(max(fill, 1), max_model_len - 1)
        if left is not None:
            left -= -(-prompt_len // block_size) * block_size
        outputs = draw(st.integers(1, max(1, min(max_outputs, max_model_len - prompt_len))))
        common = min(prefix_len, prompt_len)
        prompt = tuple(range(common)) + tuple(10_000 * (i + 1) + j for j in range(prompt_len - common))
        arrival = 0 if burst else draw(st.integers(0, 8))
        # priorities tie often (the FCFS order within a level is the boundary), else 0-2
        priority = draw(_PRIORITIES)
        out.append(WorkloadSpec(f"r{i}", prompt, outputs, arrival, priority=priority))
    return out


@_memoized
@st.composite
def _burst_requests(draw, max_model_len: int, block_size: int, max_requests: int, max_outputs: int,
                    pool_tokens: int, min_requests: int = 1) -> list[WorkloadSpec]:
    """2..``max_requests`` requests arriving together (all at step 0 first, else within two
    steps) whose prompts fill the pool to its boundary: their blocks sum to the usable blocks
    (``pool_tokens // block_size``) + 0, +1, -1 or +2, each prompt ``k * block_size`` + 0, +1
    or -1 tokens (``k`` split off what is left, the first requests shrinking to one block),
    then 1.. outputs. The connector scripts an async load for each (:func:`connector_workloads`):
    loads in flight together at a tight pool, the shape of #45388, #57104 and #49674."""
    n = draw(st.integers(max(2, min_requests), max(2, min_requests, max_requests)))
    left = max(n, pool_tokens // block_size + draw(_POOL_OFFSETS))
    max_k = max(1, (max_model_len - 1) // block_size)
    together = draw(_FIRST)
    out: list[WorkloadSpec] = []
    for i in range(n):
        k = left if i == n - 1 else draw(st.integers(1, max(1, left - (n - 1 - i))))
        k = min(max(k, 1), max_k)
        left -= k
        prompt_len = min(max(k * block_size + draw(_PROMPT_OFFSETS), 1), max_model_len - 1)
        outputs = draw(st.integers(1, max(1, min(max_outputs, max_model_len - prompt_len))))
        arrival = 0 if together else draw(st.integers(0, 2))
        priority = draw(_PRIORITIES)
        prompt = tuple(10_000 * (i + 1) + j for j in range(prompt_len))
        out.append(WorkloadSpec(f"r{i}", prompt, outputs, arrival, priority=priority))
    return out


@_memoized
@st.composite
def connector_workloads(draw, max_model_len: int, block_size: int, *, max_requests: int = 4,
                        max_outputs: int = 32, pool_tokens: int | None = None, min_requests: int = 1
                        ) -> tuple[list[WorkloadSpec], ConnectorScript]:
    """``(workload, script)``: first branch (half the time, with a ``pool_tokens`` and room for
    two requests) a :func:`_burst_requests` burst, each request with an async load and the
    connector a consumer (``kv_both`` / ``kv_consumer``: a producer loads nothing); else
    :func:`_connector_requests` with a script per request (every request half the time, else
    most; some have no external hit); then a role and a failure policy."""
    scripts = {}
    roles: tuple[str, ...] = KV_ROLES
    if pool_tokens is not None and max_requests >= 2 and draw(_FIRST):
        work = draw(_burst_requests(max_model_len, block_size, max_requests, max_outputs, pool_tokens,
                                    min_requests), label="burst")
        for w in work:
            scripts[w.request_id] = draw(request_scripts(len(w.prompt_token_ids), block_size, async_load=True))
        roles = _CONSUMER_ROLES  # the loads happen: a producer-only connector loads nothing
    else:
        work = draw(_connector_requests(max_model_len, block_size, max_requests, max_outputs, pool_tokens,
                                        min_requests), label="workload")
        every = draw(st.booleans())  # half the time every request has its script (loads in flight together)
        for w in work:
            if every or draw(st.integers(0, 3)):
                scripts[w.request_id] = draw(request_scripts(len(w.prompt_token_ids), block_size))
    role = draw(_sampled(roles))
    policy = draw(_sampled(KV_LOAD_FAILURE_POLICIES))
    return work, ConnectorScript.of(scripts, kv_role=role, kv_load_failure_policy=policy)


__all__ = ["connector_cases", "connector_workloads", "request_scripts"]
