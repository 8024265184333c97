"""Block sizes for scheduling and hashing (guarantee 3).

gcd/lcm are over concrete block sizes (never symbolic), so these lemmas enumerate small
group-size lists from the real set; ``prefix_match_unit`` is symbolic where it can be.
The last lemma runs the reference's ``resolve_kv_cache_block_sizes`` and the
coordinator's assertions over an enumerated grid of hybrid layouts (Mamba mode, cache
block size, prefix caching, KV connector, unit): it is proved by exhaustion of that
finite domain.
"""

from __future__ import annotations

import itertools
from typing import Iterator, Mapping

from kvverify.reference import arith
from kvverify.reference.block_sizes import BlockSizeError, resolve_kv_cache_block_sizes, validate_coordinator_block_sizes
from kvverify.reference.config import VllmConfig
from kvverify.reference.grouping import KVCacheGroupSpec
from kvverify.lemmas.core import BLOCK_SIZES, Case, Lemma, ReplayOutcome, Var
from kvverify.lemmas.replay import full_layer
from kvverify.reference.ops import and_, divides, gcd, implies, lcm
from kvverify.reference.planner import KVCacheConfig
from kvverify.reference.specs import MambaSpec

#: real block sizes plus 181 (the odd group size of the #51108 seed)
SIZES = BLOCK_SIZES + (181,)


def _lists(lengths: tuple[int, ...]) -> Iterator[tuple[int, ...]]:
    for n in lengths:
        yield from itertools.combinations_with_replacement(SIZES, n)


def _gcd_lcm_cases() -> Iterator[Case]:
    for sizes in _lists((1, 2, 3)):
        def claim(v: Mapping, sizes=sizes) -> object:
            g, m = gcd(*sizes), lcm(*sizes)
            return and_(*[divides(g, b) for b in sizes], *[divides(b, m) for b in sizes],
                        arith.prefix_match_unit_valid(g, sizes))

        yield Case(f"sizes={list(sizes)}", {"sizes": sizes}, (), domain=lambda v: [], claim=claim)


GCD_LCM = Lemma(
    name="block_sizes_gcd_lcm",
    topic="block sizes",
    statement=("gcd(group sizes) divides every group size (so the default hash size is a valid "
               "prefix_match_unit), lcm(group sizes) is a multiple of each"),
    domain=(f"every list of 1 to 3 group block sizes from {list(SIZES)} "
            f"(exhaustive, {sum(1 for _ in _lists((1, 2, 3)))} lists)"),
    cases=_gcd_lcm_cases)


def _unit_cases() -> Iterator[Case]:
    for sizes in _lists((2, 3)):
        def claim(v: Mapping, sizes=sizes) -> object:
            return implies(arith.prefix_match_unit_valid(v["u"], sizes), divides(v["u"], lcm(*sizes)))

        yield Case(f"sizes={list(sizes)}", {"sizes": sizes}, (Var("u", 1, 2**20),),
                   domain=lambda v: [], claim=claim, shrink=("u",))


UNIT = Lemma(
    name="block_sizes_prefix_match_unit",
    topic="block sizes",
    statement=("a valid prefix_match_unit u (divides every group size) divides the scheduler block "
               "size lcm(group sizes): hash | every group size | scheduler"),
    domain=(f"u symbolic in [1, 2^20]; every list of 2 or 3 group sizes from {list(SIZES)} "
            f"(exhaustive, {sum(1 for _ in _lists((2, 3)))} lists)"),
    cases=_unit_cases)


# --- the resolver over an enumerated grid of hybrid layouts ----------------------------------

ATTENTION_SIZES = (16, 64, 181, 544)


def _layouts() -> Iterator[dict]:
    for att in itertools.chain.from_iterable(
            itertools.combinations_with_replacement(ATTENTION_SIZES, n) for n in (1, 2)):
        mambas: list[tuple[str, int] | None] = [None, ("none", 2048)]
        mambas += [("align", b) for b in sorted(set(att))]
        for mamba in mambas:
            single = len(att) + (mamba is not None) == 1
            # one group: nothing rescales it, its block size is the cache block size
            for cache_bs in (att[0],) if single else sorted({16, max(att)}):
                for caching, connector in ((True, False), (False, False), (False, True)):
                    if mamba is not None and mamba[0] != "align" and caching:
                        continue  # Mamba prefix caching requires align mode (MambaManager refuses)
                    for unit in (None, 1, 16, 3):
                        yield {"attention_sizes": att, "mamba": mamba, "cache_block_size": cache_bs,
                               "enable_prefix_caching": caching, "kv_connector": connector,
                               "prefix_match_unit": unit}


def _build(layout: Mapping) -> tuple[KVCacheConfig, VllmConfig]:
    groups = [KVCacheGroupSpec((f"attn.{i}",), full_layer(b)) for i, b in enumerate(layout["attention_sizes"])]
    mode = "none"
    if layout["mamba"] is not None:
        mode, size = layout["mamba"]
        groups.append(KVCacheGroupSpec(("mamba.0",), MambaSpec(block_size=size, shapes=((1,),),
                                                              dtypes=("float32",), mamba_cache_mode=mode)))
    kv = KVCacheConfig(num_blocks=2, kv_cache_tensors=(), kv_cache_groups=tuple(groups))
    cfg = VllmConfig(block_size=layout["cache_block_size"], max_model_len=2048, kv_cache_memory_bytes=1,
                     enable_prefix_caching=layout["enable_prefix_caching"],
                     kv_connector=layout["kv_connector"], prefix_match_unit=layout["prefix_match_unit"],
                     mamba_cache_mode=mode)
    return kv, cfg


def resolve_and_validate(layout: Mapping) -> tuple[bool, str]:
    """(ok, what happened): ok when the coordinator's assertions hold, or the resolver gave a
    clear error naming an explicitly set prefix_match_unit."""
    kv, cfg = _build(layout)
    try:
        scheduler, hash_size = resolve_kv_cache_block_sizes(kv, cfg)
    except BlockSizeError as e:
        clear = cfg.prefix_match_unit is not None and "prefix_match_unit" in str(e)
        return clear, f"resolver refused: {e}"
    try:
        validate_coordinator_block_sizes(kv, scheduler, hash_size, cfg.enable_prefix_caching)
    except BlockSizeError as e:
        return False, f"resolved (scheduler={scheduler}, hash={hash_size}); coordinator refuses: {e}"
    return True, f"scheduler={scheduler}, hash={hash_size}"


def _resolver_cases() -> Iterator[Case]:
    for layout in _layouts():
        yield Case(str(layout), dict(layout), (), domain=lambda v: [],
                   claim=lambda v, layout=layout: resolve_and_validate(layout)[0])


def _replay_resolver(case: Case, v: Mapping[str, int]) -> ReplayOutcome:
    ok, detail = resolve_and_validate(case.params)
    return ReplayOutcome(not ok, f"resolve_kv_cache_block_sizes: {detail}", {})


RESOLVER = Lemma(
    name="block_sizes_resolver_hash_divides",
    topic="block sizes",
    statement=("resolve_kv_cache_block_sizes never yields an undivisible hash: the coordinator's "
               "assertions (scheduler multiple of hash and of every group; hash divides every "
               "prefix-cacheable group) hold, or an invalid prefix_match_unit gets a clear error"),
    domain=(f"exhaustive grid ({sum(1 for _ in _layouts())} layouts): 1-2 attention groups with sizes "
            f"from {list(ATTENTION_SIZES)}; no Mamba / Mamba none (size = L) / Mamba align (size = an "
            "attention size); cache block size {16, largest}; prefix caching / KV connector; "
            "prefix_match_unit {unset, 1, 16, 3}"),
    cases=_resolver_cases, replay=_replay_resolver,
    catches=("mamba_hash_fallback_by_block_size",))

LEMMAS = [GCD_LCM, UNIT, RESOLVER]
