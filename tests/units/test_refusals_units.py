"""Every refusal of the mutated reference modules, in one table (docs/mutation.md).

The guide's standard: bad input gets a clear error naming the field and the allowed range.
One row per raise site of ``ConfigError`` / ``KVVerifyError`` / ``StartupCheckError`` /
``PoolExhaustedError`` / ``BlockSizeError`` / ``GroupingError`` (and of the ``ValueError`` /
``NotImplementedError`` that ``CrossAttentionManager`` raises as upstream does) and per ``require_int`` /
``require_count`` call in ``kvverify/reference/{arith,planner,grouping,block_sizes,pool,
managers/*,kv_cache_manager,scheduler}.py``: the call that reaches it and what the error must
say, checked exactly:

* the exception class (``type(err) is cls``, not a subclass or the base);
* a ``ConfigError``: ``.field`` (exactly the name of the parameter or config field),
  ``.value`` (the refused value, ``is`` for objects) and ``.allowed`` (the range/phrase);
* a free-text error: the whole message (it names the values refused; the planner's
  messages open with the upstream wording that ``kvverify.targets.vllm.planner`` matches on);
* a ``StartupCheckError``: its ``max_model_len`` / ``needed_bytes`` / ``available_bytes`` /
  ``estimated_max_model_len``, worked by hand in the row's comment.

:data:`ACCEPTED` holds the boundary next to each refusal (the smallest size, the exact fit,
the other side of each condition), which must not be refused.

``test_every_raise_site_has_a_row`` parses the modules (ast) and fails when a raise site or
a ``require_int``/``require_count`` call is reached by no row (found from each row's
traceback), unless :data:`EXEMPT` says why: a new refusal must join the table. It skips
under mutmut (the trampolined copies have other lines and names).

Kills the error-message mutants of the modules (field names garbled to ``XXfieldXX`` or
upper case, ``minimum=`` dropped, a message replaced by ``None`` or dropped, a refused
value changed), e.g. ``pool.xǁBlockPoolǁ__init____mutmut_16``,
``kv_cache_manager.xǁKVCacheManagerǁallocate_slots__mutmut_24`` / ``_43``,
``scheduler.xǁSchedulerǁ__init____mutmut_9`` / ``_10`` / ``_29``,
``scheduler.xǁSchedulerǁadd_request__mutmut_31`` / ``_33`` / ``_34``,
``planner.x_check_enough_kv_cache_memory_for_groups__mutmut_5`` / ``_13``,
``managers.mamba.xǁMambaManagerǁ__init____mutmut_16``,
``managers.sliding_window.x__window_of__mutmut_5``; the accepted boundaries kill e.g.
``managers.coordinator.x__validate_prefix_cache_retention_interval__mutmut_20`` / ``_21``,
``managers.cross_attention.x_refuse_encoder_decoder_prefix_caching__mutmut_1``,
``pool.xǁBlockPoolǁcache_full_blocks__mutmut_9``.
"""

from __future__ import annotations

import ast
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass, replace
from dataclasses import field as dc_field
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from runtime_helpers import chunked, cross, full, kv_config, mamba, swa  # noqa: E402

from kvverify import fixes  # noqa: E402
from kvverify.errors import (  # noqa: E402
    ConfigError,
    KVVerifyError,
    PoolExhaustedError,
    StartupCheckError,
)
from kvverify.reference import planner  # noqa: E402
from kvverify.reference.block_sizes import (  # noqa: E402
    BlockSizeError,
    resolve_kv_cache_block_sizes,
    validate_coordinator_block_sizes,
)
from kvverify.reference.config import VllmConfig  # noqa: E402
from kvverify.reference.grouping import (  # noqa: E402
    GroupingError,
    get_global_kv_cache_groups,
    get_kv_cache_groups,
)
from kvverify.reference.kv_cache_manager import KVCacheManager  # noqa: E402
from kvverify.reference.managers import chunked_local, sliding_window  # noqa: E402
from kvverify.reference.managers.chunked_local import ChunkedLocalAttentionManager  # noqa: E402
from kvverify.reference.managers.coordinator import KVCacheCoordinator  # noqa: E402
from kvverify.reference.managers.cross_attention import CrossAttentionManager  # noqa: E402
from kvverify.reference.managers.mamba import MambaManager  # noqa: E402
from kvverify.reference.managers.registry import get_manager_class  # noqa: E402
from kvverify.reference.pool import (  # noqa: E402
    BlockHashListWithBlockSize,
    BlockPool,
    FreeKVCacheBlockQueue,
    KVCacheBlock,
    get_request_block_hasher,
)
from kvverify.reference.connector import ConnectorScript, RequestScript  # noqa: E402
from kvverify.reference.request import Request, RequestStatus  # noqa: E402
from kvverify.reference.scheduler import Scheduler, scheduling_policy_override  # noqa: E402
from kvverify.reference.specs import (  # noqa: E402
    EncoderOnlyAttentionSpec,
    MLAAttentionSpec,
)

REFERENCE = Path(__file__).resolve().parents[2] / "kvverify" / "reference"
MODULES = ("arith.py", "planner.py", "grouping.py", "block_sizes.py", "pool.py",
           "managers/*.py", "kv_cache_manager.py", "scheduler.py", "sched/*.py", "connector.py")
ERRORS = {"ConfigError", "KVVerifyError", "StartupCheckError", "PoolExhaustedError",
          "BlockSizeError", "GroupingError",
          "ValueError", "NotImplementedError"}  # upstream's own (CrossAttentionManager, F8)
CHECKS = {"require_int", "require_count"}
_UNSET: Any = object()

# ------------------------------------------------------------------ builders (small, fast)

CFG = VllmConfig(block_size=16, max_model_len=64, max_num_batched_tokens=64)
FULL16 = kv_config(8, full(16))  # 8 blocks (null + 7) of one full-attention group, B = 16


def _kvm(**kw: Any) -> KVCacheManager:
    return KVCacheManager(FULL16, kw.pop("max_model_len", 64), 16, 16, **kw)


def _sched(**kw: Any) -> Scheduler:
    return Scheduler(VllmConfig(block_size=16, max_model_len=64, max_num_batched_tokens=64, **kw),
                     FULL16)


def _coordinator(config: Any = FULL16, *, max_model_len: int = 64, max_in_flight_tokens: int = 64,
                 enable_caching: bool = True, block_size: int = 16,
                 retention_interval: int | None = 0) -> KVCacheCoordinator:
    return KVCacheCoordinator(config, max_model_len, max_in_flight_tokens, enable_caching,
                              block_size, block_size, retention_interval=retention_interval)


def _request(rid: str = "r", prompt: int = 20) -> Request:
    return Request(rid, list(range(prompt)), 8)


def _allocate(num_new_tokens: int, **kw: Any) -> Any:
    kvm = _kvm()
    req = _request()
    req.set_block_hasher(kvm.request_block_hasher)
    return kvm.allocate_slots(req, num_new_tokens, **kw)


def _add_twice() -> None:
    sched = _sched()
    sched.add_request(_request("a"))
    sched.add_request(_request("a"))


_NOT_A_PAIR: Any = (("a", 3),)  # a script that is not a RequestScript
_STALE = _request("stale")
_STALE.status = RequestStatus.RUNNING


def _add_stale() -> None:
    _sched().add_request(_STALE)


def _queue_pop_empty() -> None:
    FreeKVCacheBlockQueue([]).popleft()


def _queue_pop_n() -> None:
    FreeKVCacheBlockQueue([KVCacheBlock(1)]).popleft_n(2)


def _queue_remove_detached() -> None:
    FreeKVCacheBlockQueue([KVCacheBlock(1)]).remove(KVCacheBlock(5))


def _queue_append_queued() -> None:
    b = KVCacheBlock(1)
    FreeKVCacheBlockQueue([b]).append(b)


def _cache_without_hashes() -> None:
    """A request with 20 tokens has one full 16-token block hash; caching 2 blocks is refused."""
    pool = BlockPool(4, True, 16)
    req = _request()
    req.set_block_hasher(get_request_block_hasher(16))
    pool.cache_full_blocks(req, pool.get_new_blocks(2), 0, 2, 16, 0)


def _cache_hashed_blocks() -> int:
    """32 tokens: two block hashes, both blocks cached."""
    pool = BlockPool(4, True, 16)
    req = _request(prompt=32)
    req.set_block_hasher(get_request_block_hasher(16))
    pool.cache_full_blocks(req, pool.get_new_blocks(2), 0, 2, 16, 0)
    return len(pool.cached_block_hash_to_block)


def _corrupt_free_block() -> None:
    pool = BlockPool(4, True, 16)
    pool.blocks[1].ref_cnt = 1  # free (in the queue) yet referenced: corrupt state
    pool.get_new_blocks(1)


def _double_free() -> None:
    pool = BlockPool(4, True, 16)
    (b,) = pool.get_new_blocks(1)
    pool.free_blocks([b])
    pool.free_blocks([b])


def _over_allocate() -> None:
    BlockPool(4, True, 16).get_new_blocks(4)  # 3 usable blocks (block 0 is the null block)


def _manager_kw(caching: bool = True) -> dict[str, Any]:
    return dict(enable_caching=caching, kv_cache_group_id=0, scheduler_block_size=16)


def _mamba_manager(spec: Any) -> None:
    pool = BlockPool(4, True, 16)
    MambaManager(spec, pool, **_manager_kw())


def _cross_cache_blocks() -> None:
    pool = BlockPool(4, True, 16)
    CrossAttentionManager(cross(16), pool, **_manager_kw()).cache_blocks(_request(), 16)


def _chunked_misaligned() -> None:
    pool = BlockPool(4, True, 16)
    ChunkedLocalAttentionManager.find_longest_cache_hit([], 32, [0], pool, chunked(32, 16), 32)


def _two_groups(*specs: Any) -> Any:
    return kv_config(8, *specs)


def _with_fix(name: str, call: Callable[[], object]) -> Callable[[], object]:
    def run() -> object:
        with fixes.enabled(name):
            return call()
    return run


# planner: one full-attention layer, B = 16, bf16, 1 KV head, D = 64:
#   page = 16 * 1 * (64 + 64) * 2 = 4096 bytes; L = 64 needs cdiv(64, 16) = 4 pages = 16384
SPEC = {"l": full(16)}
GROUPS = get_kv_cache_groups(CFG, SPEC)
SPEC1 = {"l": full(1)}  # B = 1: page = 1 * 1 * (64 + 64) * 2 = 256 bytes, L = 64 needs 64 pages
GROUPS1 = get_kv_cache_groups(CFG, SPEC1)
AUTO = VllmConfig(block_size=16, max_model_len=-1, max_position_embeddings=64)


def _auto_fit_nothing() -> int:
    # plan_kv_cache passes the config at max_position_embeddings (64); no memory at all: not
    # even one block fits, the search returns 0
    return planner._auto_fit_max_model_len(CFG, [GROUPS], [0])


# ------------------------------------------------------------------ the table


@dataclass(frozen=True)
class Refusal:
    """One refusal: ``call()`` must raise exactly ``exc`` saying what the row says."""

    id: str
    call: Callable[[], object]
    exc: type[Exception]
    field: str | None = None            # ConfigError.field, exactly
    value: Any = _UNSET                  # ConfigError.value (== ; ``is`` for objects)
    allowed: str | None = None           # ConfigError.allowed, exactly
    message: str | None = None           # str(err), exactly (free-text errors)
    attrs: dict[str, int] = dc_field(default_factory=dict)  # StartupCheckError numbers


NO_MEMORY = ("No available memory for the cache blocks. "
             "Try increasing `gpu_memory_utilization` when initializing the engine.")

REFUSALS: list[Refusal] = [
    # --- pool.py
    Refusal("hasher-hash_block_size", lambda: get_request_block_hasher(0), ConfigError,
            "hash_block_size", 0, "must be >= 1"),
    Refusal("hashlist-hash_block_size", lambda: BlockHashListWithBlockSize([], 0, 16), ConfigError,
            "hash_block_size", 0, "must be >= 1"),
    Refusal("hashlist-target_block_size", lambda: BlockHashListWithBlockSize([], 16, 0), ConfigError,
            "target_block_size", 0, "must be >= 1"),
    Refusal("hashlist-not-a-multiple", lambda: BlockHashListWithBlockSize([], 16, 24), KVVerifyError,
            message="target_block_size=24 must be a multiple of hash_block_size=16"),
    Refusal("queue-popleft-empty", _queue_pop_empty, PoolExhaustedError,
            message="Cannot get 1 free blocks from the pool"),
    Refusal("queue-popleft_n", _queue_pop_n, PoolExhaustedError,
            message="Cannot get 2 free blocks from the pool"),
    Refusal("queue-remove-detached", _queue_remove_detached, KVVerifyError,
            message="remove() called on block 5, which is not in the free queue"),
    Refusal("queue-append-queued", _queue_append_queued, KVVerifyError,
            message="block 1 is already in the free queue"),
    Refusal("queue-remove-sentinel",  # half-linked (the head sentinel has no prev): refused too
            lambda: (q := FreeKVCacheBlockQueue([KVCacheBlock(1)])).remove(q.fake_free_list_head),
            KVVerifyError, message="remove() called on block -1, which is not in the free queue"),
    Refusal("queue-append-sentinel",  # half-linked (the tail sentinel has no next): refused too
            lambda: (q := FreeKVCacheBlockQueue([KVCacheBlock(1)])).append(q.fake_free_list_tail),
            KVVerifyError, message="block -1 is already in the free queue"),
    Refusal("pool-num_gpu_blocks", lambda: BlockPool(0, True, 16), ConfigError,
            "num_gpu_blocks", 0, "must be >= 1"),
    Refusal("pool-hash_block_size", lambda: BlockPool(4, True, 0), ConfigError,
            "hash_block_size", 0, "must be >= 1"),
    Refusal("pool-enable_caching", lambda: BlockPool(4, 1, 16), KVVerifyError,  # type: ignore[arg-type]
            message="enable_caching=1 is invalid: must be a bool"),
    Refusal("pool-cache-missing-hashes", _cache_without_hashes, KVVerifyError,
            message="cache_full_blocks: request has 1 block hashes at block_size=16, "
                    "fewer than num_full_blocks=2"),
    Refusal("pool-num_blocks", lambda: BlockPool(4, True, 16).get_new_blocks(-1), ConfigError,
            "num_blocks", -1, "must be >= 0"),
    Refusal("pool-num_blocks-not-int", lambda: BlockPool(4, True, 16).get_new_blocks(2.0),  # type: ignore[arg-type]
            ConfigError, "num_blocks", 2.0, "must be an integer"),
    Refusal("pool-exhausted", _over_allocate, PoolExhaustedError,
            message="Cannot get 4 free blocks from the pool"),
    Refusal("pool-corrupt-free-block", _corrupt_free_block, KVVerifyError,
            message="free block 1 has ref_cnt=1, expected 0"),
    Refusal("pool-double-free", _double_free, KVVerifyError,
            message="double free of block 1 (ref_cnt=0)"),
    # --- kv_cache_manager.py
    Refusal("kvm-max_model_len",
            # the first bad argument is named (the coordinator would refuse max_model_len too,
            # but only after the watermark)
            lambda: _kvm(max_model_len=0, watermark=1.0), ConfigError,
            "max_model_len", 0, "must be >= 1"),
    Refusal("kvm-watermark-1", lambda: _kvm(watermark=1.0), ConfigError,
            "watermark", 1.0, "must be in [0, 1)"),
    Refusal("kvm-watermark-negative", lambda: _kvm(watermark=-0.5), ConfigError,
            "watermark", -0.5, "must be in [0, 1)"),
    Refusal("kvm-watermark-bool", lambda: _kvm(watermark=True), ConfigError,
            "watermark", True, "must be in [0, 1)"),
    Refusal("kvm-watermark-str", lambda: _kvm(watermark="0.1"), ConfigError,
            "watermark", "0.1", "must be in [0, 1)"),
    Refusal("alloc-num_new_tokens", lambda: _allocate(-1), ConfigError,
            "num_new_tokens", -1, "must be >= 0"),
    Refusal("alloc-num_new_computed_tokens", lambda: _allocate(4, num_new_computed_tokens=-1),
            ConfigError, "num_new_computed_tokens", -1, "must be >= 0"),
    Refusal("alloc-num_lookahead_tokens", lambda: _allocate(4, num_lookahead_tokens=-1),
            ConfigError, "num_lookahead_tokens", -1, "must be >= 0"),
    Refusal("alloc-num_encoder_tokens", lambda: _allocate(4, num_encoder_tokens=-1),
            ConfigError, "num_encoder_tokens", -1, "must be >= 0"),
    Refusal("alloc-num_external_computed_tokens", lambda: _allocate(4, num_external_computed_tokens=-1),
            ConfigError, "num_external_computed_tokens", -1, "must be >= 0"),

    Refusal("alloc-nothing", lambda: _allocate(0), ConfigError,
            "num_new_tokens", 0, "must be > 0 when there are no computed tokens to adopt"),
    # --- scheduler.py
    Refusal("policy-override", lambda: scheduling_policy_override("lifo").__enter__(), ConfigError,
            "scheduling_policy", "lifo",
            "must be one of ('fcfs', 'priority', 'fcfs_fewest_computed_victim')"),
    Refusal("sched-scheduler_block_size-alone",
            lambda: Scheduler(CFG, FULL16, scheduler_block_size=16), ConfigError,
            "hash_block_size", None, "give both scheduler_block_size and hash_block_size, or neither"),
    Refusal("sched-hash_block_size-alone",
            lambda: Scheduler(CFG, FULL16, hash_block_size=16), ConfigError,
            "hash_block_size", 16, "give both scheduler_block_size and hash_block_size, or neither"),
    Refusal("sched-auto-max_model_len", lambda: Scheduler(AUTO, FULL16), ConfigError,
            "max_model_len", -1, "must be resolved (>= 1) before scheduling; plan the startup first"),
    Refusal("sched-duplicate-request_id", _add_twice, ConfigError,
            "request_id", "a", "must be unique"),
    Refusal("sched-prompt-too-long", lambda: _sched().add_request(_request(prompt=64)), ConfigError,
            "prompt_token_ids", "<64 tokens>",
            "prompt length must be in [1, 63] (max_model_len=64 minus one output token)"),
    Refusal("sched-stale-request", _add_stale, ConfigError,
            "request", _STALE, "must be a fresh WAITING request"),
    Refusal("sched-connector-without-kv_connector",
            lambda: Scheduler(CFG, FULL16, connector=ConnectorScript()), ConfigError,
            "kv_connector", False,
            "must be True when a connector script is given (it decides the hash block size)"),
    Refusal("sched-connector-encoder-decoder",
            lambda: Scheduler(replace(CFG, kv_connector=True, enable_prefix_caching=False),
                              kv_config(8, full(16), cross(16)), connector=ConnectorScript()), ConfigError,
            "connector", "<ConnectorScript>",
            "encoder-decoder models take no KV connector (upstream asserts it)"),
    # --- connector.py
    Refusal("script-hit_tokens", lambda: RequestScript(hit_tokens=-1), ConfigError,
            "hit_tokens", -1, "must be in [0, 1099511627776]"),
    Refusal("script-load_steps", lambda: RequestScript(load_steps=65), ConfigError,
            "load_steps", 65, "must be in [0, 64]"),
    Refusal("script-deferrals", lambda: RequestScript(deferrals=-1), ConfigError,
            "deferrals", -1, "must be in [0, 64]"),
    Refusal("script-free_delay_steps", lambda: RequestScript(free_delay_steps=65), ConfigError,
            "free_delay_steps", 65, "must be in [0, 64]"),
    Refusal("script-fail_load-type", lambda: RequestScript(fail_load=1), ConfigError,  # type: ignore[arg-type]
            "fail_load", 1, "must be a bool"),
    Refusal("script-fail_load-sync", lambda: RequestScript(load_steps=0, fail_load=True), ConfigError,
            "fail_load", True, "only an asynchronous load (load_steps >= 1) can fail"),
    Refusal("script-duplicate-ids",
            lambda: ConnectorScript((("a", RequestScript()), ("a", RequestScript()))), ConfigError,
            "requests", ["a", "a"], "must name each request once"),
    Refusal("script-not-a-pair", lambda: ConnectorScript(_NOT_A_PAIR), ConfigError,
            "requests", _NOT_A_PAIR[0], "must be (request id, RequestScript) pairs"),
    Refusal("script-kv_role", lambda: ConnectorScript(kv_role="kv_sink"), ConfigError,
            "kv_role", "kv_sink", "must be one of ('kv_both', 'kv_consumer', 'kv_producer')"),
    Refusal("script-failure-policy", lambda: ConnectorScript(kv_load_failure_policy="retry"), ConfigError,
            "kv_load_failure_policy", "retry", "must be one of ('fail', 'recompute')"),
    # --- managers/coordinator.py
    Refusal("coord-max_model_len", lambda: _coordinator(max_model_len=0), ConfigError,
            "max_model_len", 0, "must be >= 1"),
    Refusal("coord-max_in_flight_tokens", lambda: _coordinator(max_in_flight_tokens=0), ConfigError,
            "max_in_flight_tokens", 0, "must be >= 1"),
    Refusal("coord-retention-no-swa", lambda: _coordinator(retention_interval=16), ConfigError,
            "prefix_cache_retention_interval", 16,
            "must be 0 or None: this model has no sliding-window or Mamba KV cache group, "
            "so retention has no effect"),
    Refusal("coord-retention-negative",
            lambda: _coordinator(kv_config(8, swa(32, 16)), retention_interval=-16), ConfigError,
            "prefix_cache_retention_interval", -16,
            "must be non-negative and a multiple of scheduler_block_size (16)"),
    Refusal("coord-retention-not-a-multiple",
            lambda: _coordinator(kv_config(8, swa(32, 16)), retention_interval=8), ConfigError,
            "prefix_cache_retention_interval", 8,
            "must be non-negative and a multiple of scheduler_block_size (16)"),
    Refusal("coord-retention-from-config",  # KVCacheManager.from_config passes the field on
            lambda: KVCacheManager.from_config(FULL16, VllmConfig(
                block_size=16, max_model_len=64, prefix_cache_retention_interval=16)), ConfigError,
            "prefix_cache_retention_interval", 16,
            "must be 0 or None: this model has no sliding-window or Mamba KV cache group, "
            "so retention has no effect"),
    Refusal("coord-retention-from-scheduler",  # so does Scheduler.__init__
            lambda: _sched(prefix_cache_retention_interval=16), ConfigError,
            "prefix_cache_retention_interval", 16,
            "must be 0 or None: this model has no sliding-window or Mamba KV cache group, "
            "so retention has no effect"),
    # --- managers/cross_attention.py (fix option of finding F8)
    Refusal("cross-prefix-caching-fix",
            _with_fix("encoder_decoder_prefix_caching_refused",
                      lambda: _coordinator(kv_config(8, full(16), cross(16)))),
            ConfigError, "enable_prefix_caching", True,
            "must be False for encoder-decoder models (cross-attention layers): "
            "their KV cache cannot be prefix-cached (finding F8)"),
    # --- managers/cross_attention.py: upstream's own exceptions and messages (finding F8)
    Refusal("cross-cache_blocks", _cross_cache_blocks, ValueError,
            message="Should not be called as prefix caching is disabled."),
    Refusal("cross-find_longest_cache_hit",
            lambda: CrossAttentionManager.find_longest_cache_hit(
                [], 16, [0], BlockPool(4, True, 16), cross(16), 16),
            NotImplementedError, message="CrossAttentionManager does not support caching"),
    # --- managers/{chunked_local,mamba,registry,sliding_window}.py
    Refusal("chunked-wrong-spec", lambda: chunked_local._chunk_of(full(16)), KVVerifyError,
            message="ChunkedLocalAttentionManager needs a ChunkedLocalAttentionSpec, "
                    "got FullAttentionSpec"),
    Refusal("chunked-misaligned-hit", _chunked_misaligned, KVVerifyError,
            message="KV cache groups with different block sizes are not compatible with chunked "
                    "local attention (block_size=16, alignment=32)"),
    Refusal("mamba-wrong-spec", lambda: _mamba_manager(full(16)), KVVerifyError,
            message="MambaManager needs a MambaSpec, got FullAttentionSpec"),
    Refusal("mamba-caching-not-align", lambda: _mamba_manager(mamba(16, "none")), KVVerifyError,
            message="Mamba prefix caching requires mamba_cache_mode='align' (got 'none')"),
    Refusal("registry-no-manager",
            lambda: get_manager_class(EncoderOnlyAttentionSpec(block_size=16, num_kv_heads=1,
                                                                head_size=64)),
            KVVerifyError,
            message="no KV cache manager for spec type EncoderOnlyAttentionSpec (encoder-only "
                    "layers keep no KV cache and form no group (upstream registers no manager "
                    "for them))"),
    Refusal("registry-unknown-kind", lambda: get_manager_class(object()), KVVerifyError,  # type: ignore[arg-type]
            message="no KV cache manager for spec type object (not a registered spec kind)"),
    Refusal("swa-wrong-spec", lambda: sliding_window._window_of(full(16)), KVVerifyError,
            message="SlidingWindowManager needs a SlidingWindowSpec, got FullAttentionSpec"),
    # --- block_sizes.py
    Refusal("resolve-unit-one-group",
            lambda: resolve_kv_cache_block_sizes(FULL16, VllmConfig(block_size=16, prefix_match_unit=8)),
            BlockSizeError,
            message="Invalid prefix_match_unit=8; with a single KV cache group, prefix-cache hits "
                    "land on the block size (16). Unset it or set it to 16."),
    Refusal("resolve-unit-not-dividing",
            lambda: resolve_kv_cache_block_sizes(_two_groups(full(16), swa(32, 32)),
                                                 VllmConfig(block_size=16, prefix_match_unit=12)),
            BlockSizeError,
            message="Invalid prefix_match_unit=12; prefix-cacheable KV cache group block sizes "
                    "must be divisible by prefix_match_unit. Got group block sizes=[16, 32], "
                    "prefix-cacheable=[16, 32]."),
    Refusal("coord-sizes-below-1", lambda: validate_coordinator_block_sizes(FULL16, 16, 0, True),
            BlockSizeError, message="block sizes must be >= 1, got scheduler=16, hash=0"),
    Refusal("coord-scheduler-size-below-1",
            lambda: validate_coordinator_block_sizes(FULL16, 0, 16, True),
            BlockSizeError, message="block sizes must be >= 1, got scheduler=0, hash=16"),
    Refusal("coord-scheduler-not-a-multiple",
            lambda: validate_coordinator_block_sizes(FULL16, 24, 8, True), BlockSizeError,
            message="scheduler_block_size=24 must be a multiple of hash_block_size=8 and of "
                    "every group block size [16]"),
    Refusal("coord-unitary-hash-size",
            lambda: validate_coordinator_block_sizes(FULL16, 16, 8, True), BlockSizeError,
            message="UnitaryKVCacheCoordinator assumes hash_block_size == block_size (got 8 and 16)"),
    Refusal("coord-hybrid-hash-size",
            lambda: validate_coordinator_block_sizes(_two_groups(full(16), swa(32, 32)), 32, 32, True),
            BlockSizeError,
            message="Each KV cache group's real block_size must be divisible by hash_block_size. "
                    "block_sizes=[16, 32], hash_block_size=32"),
    Refusal("coord-chunked-alignment-fix",
            _with_fix("chunked_local_alignment_checked_at_startup",
                      lambda: validate_coordinator_block_sizes(
                          _two_groups(chunked(32, 16), full(32)), 32, 16, True)),
            BlockSizeError,
            message="KV cache groups with different block sizes are not compatible with chunked "
                    "local attention: layers ['layer.0'] have block_size=16, cache hits are "
                    "aligned to 32 tokens"),
    # --- grouping.py
    Refusal("grouping-promote",
            lambda: get_kv_cache_groups(
                VllmConfig(block_size=16, max_model_len=256, disable_hybrid_kv_cache_manager=True),
                {"a": swa(64, 16), "b": swa(128, 16)}),
            GroupingError, message="Failed to promote local KV cache specs to one unified type."),
    Refusal("grouping-unpaddable",
            lambda: get_kv_cache_groups(CFG, {
                "mla": MLAAttentionSpec(block_size=16, num_kv_heads=1, head_size=12),
                "chunked": chunked(32, 16)}),
            GroupingError,
            message="Layer mla: page size 384 does not divide the maximum page size 4096 and "
                    "cannot be padded (padding is only supported for non-MLA attention layers)."),
    Refusal("grouping-workers-disagree",
            lambda: get_global_kv_cache_groups(CFG, [{"a": full(16)}, {"a": full(32)}]),
            GroupingError, message="layer 'a' has different KV cache specs on different workers"),
    # --- planner.py (page 4096 bytes, L = 64 -> 4 pages = 16384 bytes)
    Refusal("startup-no-memory",
            lambda: planner.check_enough_kv_cache_memory_for_groups(0, GROUPS, CFG),
            StartupCheckError, message=NO_MEMORY,
            attrs=dict(max_model_len=64, needed_bytes=0, available_bytes=0,
                       estimated_max_model_len=0)),
    Refusal("startup-not-enough",
            # 3 pages (12288 bytes) hold 48 tokens: the estimate is 48
            lambda: planner.check_enough_kv_cache_memory_for_groups(12288, GROUPS, CFG),
            StartupCheckError,
            message="To serve at least one request with the model's max seq len (64), 16384 bytes "
                    "of KV cache are needed, which is larger than the available KV cache memory "
                    "(12288 bytes). Based on the available memory, the estimated maximum model "
                    "length is 48. Try increasing `gpu_memory_utilization` or decreasing "
                    "`max_model_len` when initializing the engine.",
            attrs=dict(max_model_len=64, needed_bytes=16384, available_bytes=12288,
                       estimated_max_model_len=48)),
    Refusal("startup-one-byte",  # 1 byte is memory (not "no memory"), just not enough
            lambda: planner.check_enough_kv_cache_memory_for_groups(1, GROUPS, CFG),
            StartupCheckError,
            message="To serve at least one request with the model's max seq len (64), 16384 bytes "
                    "of KV cache are needed, which is larger than the available KV cache memory "
                    "(1 bytes). Try increasing `gpu_memory_utilization` or decreasing "
                    "`max_model_len` when initializing the engine.",
            attrs=dict(max_model_len=64, needed_bytes=16384, available_bytes=1,
                       estimated_max_model_len=0)),
    Refusal("startup-not-enough-no-estimate",
            # less than a page: no length fits, the estimate sentence is left out
            lambda: planner.check_enough_kv_cache_memory_for_groups(4000, GROUPS, CFG),
            StartupCheckError,
            message="To serve at least one request with the model's max seq len (64), 16384 bytes "
                    "of KV cache are needed, which is larger than the available KV cache memory "
                    "(4000 bytes). Try increasing `gpu_memory_utilization` or decreasing "
                    "`max_model_len` when initializing the engine.",
            attrs=dict(max_model_len=64, needed_bytes=16384, available_bytes=4000,
                       estimated_max_model_len=0)),
    Refusal("available_memory-per-worker",
            lambda: planner.plan_kv_cache(CFG, [SPEC], [1 << 20, 1 << 20]), ConfigError,
            "available_memory", [1 << 20, 1 << 20], "must give one value per worker (1)"),
    Refusal("available_memory-negative",
            lambda: planner.plan_kv_cache(CFG, [SPEC, SPEC], [1 << 20, -1]), ConfigError,
            "available_memory[1]", -1, "must be in [0, 1125899906842624]"),
    Refusal("available_memory-too-large",
            lambda: planner.plan_kv_cache(CFG, [SPEC], [2**50 + 1]), ConfigError,
            "available_memory[0]", 2**50 + 1, "must be in [0, 1125899906842624]"),
    Refusal("get_kv_cache_configs-refused",
            # 16384 bytes less the null block's page = 12288 bytes checked against 16384
            lambda: planner.get_kv_cache_configs(CFG, [SPEC], [16384]),
            StartupCheckError,
            message="To serve at least one request with the model's max seq len (64), 16384 bytes "
                    "of KV cache are needed, which is larger than the available KV cache memory "
                    "(12288 bytes). Based on the available memory, the estimated maximum model "
                    "length is 48. Try increasing `gpu_memory_utilization` or decreasing "
                    "`max_model_len` when initializing the engine.",
            attrs=dict(max_model_len=64, needed_bytes=16384, available_bytes=12288,
                       estimated_max_model_len=0)),
    Refusal("kv_cache_specs-empty", lambda: planner.plan_kv_cache(CFG, []), ConfigError,
            "kv_cache_specs", [], "must list at least one worker's specs"),
    Refusal("auto-fit-nothing", _auto_fit_nothing, StartupCheckError,
            message="Cannot auto-fit max_model_len: not enough KV cache memory to serve even a "
                    "single token. Try increasing `gpu_memory_utilization`.",
            attrs=dict(max_model_len=64, needed_bytes=0, available_bytes=0,
                       estimated_max_model_len=0)),
    Refusal("public-check-no-memory",
            # 4096 bytes less one reserved page (the null block) = 0
            lambda: planner.check_enough_kv_cache_memory(CFG, SPEC, 4096), StartupCheckError,
            message="No available memory for the cache blocks.",
            attrs=dict(max_model_len=64, needed_bytes=0, available_bytes=0,
                       estimated_max_model_len=0)),
    Refusal("public-check-not-enough",
            # 16384 - 4096 (null block) = 12288 checked against 16384: 48 tokens fit
            lambda: planner.check_enough_kv_cache_memory(CFG, SPEC, 16384), StartupCheckError,
            message="To serve at least one request with the model's max seq len (64), 16384 bytes "
                    "of KV cache are needed, which is larger than the available KV cache memory "
                    "(12288 bytes). Based on the available memory, the estimated maximum model "
                    "length is 48. ",
            attrs=dict(max_model_len=64, needed_bytes=16384, available_bytes=12288,
                       estimated_max_model_len=48)),
    Refusal("public-check-estimate-1",
            # B = 1: page = 1 * 1 * 128 * 2 = 256 bytes; 512 - 256 (null) = 256 = one token
            lambda: planner.check_enough_kv_cache_memory(CFG, SPEC1, 512), StartupCheckError,
            message="To serve at least one request with the model's max seq len (64), 16384 bytes "
                    "of KV cache are needed, which is larger than the available KV cache memory "
                    "(256 bytes). Based on the available memory, the estimated maximum model "
                    "length is 1. ",
            attrs=dict(max_model_len=64, needed_bytes=16384, available_bytes=256,
                       estimated_max_model_len=1)),
    Refusal("public-check-one-byte",  # 4097 - 4096 (null) = 1 byte: memory, not enough
            lambda: planner.check_enough_kv_cache_memory(CFG, SPEC, 4097), StartupCheckError,
            message="To serve at least one request with the model's max seq len (64), 16384 bytes "
                    "of KV cache are needed, which is larger than the available KV cache memory "
                    "(1 bytes). ",
            attrs=dict(max_model_len=64, needed_bytes=16384, available_bytes=1,
                       estimated_max_model_len=0)),
    Refusal("public-check-no-estimate",
            # 8096 - 4096 (null) = 4000 bytes: less than a page, no length fits
            lambda: planner.check_enough_kv_cache_memory(CFG, SPEC, 8096), StartupCheckError,
            message="To serve at least one request with the model's max seq len (64), 16384 bytes "
                    "of KV cache are needed, which is larger than the available KV cache memory "
                    "(4000 bytes). ",
            attrs=dict(max_model_len=64, needed_bytes=16384, available_bytes=4000,
                       estimated_max_model_len=0)),
    Refusal("startup-estimate-1",
            lambda: planner.check_enough_kv_cache_memory_for_groups(256, GROUPS1, CFG),
            StartupCheckError,
            message="To serve at least one request with the model's max seq len (64), 16384 bytes "
                    "of KV cache are needed, which is larger than the available KV cache memory "
                    "(256 bytes). Based on the available memory, the estimated maximum model "
                    "length is 1. Try increasing `gpu_memory_utilization` or decreasing "
                    "`max_model_len` when initializing the engine.",
            attrs=dict(max_model_len=64, needed_bytes=16384, available_bytes=256,
                       estimated_max_model_len=1)),
]

#: raise sites / checks no row reaches, each with its reason (keyed by module, function, text)
EXEMPT: dict[tuple[str, str, str], str] = {
    ("pool.py", "require_count", "require_int(field"):
        "the generic hot-path helper: it passes its caller's field on; every caller has a row",
}


def _check(row: Refusal, err: BaseException) -> None:
    assert type(err) is row.exc, f"{row.id}: {type(err).__name__} is not {row.exc.__name__}: {err}"
    if isinstance(err, ConfigError):
        assert (err.field, err.allowed) == (row.field, row.allowed), row.id
        if row.value is _UNSET or isinstance(row.value, (int, float, str, list, type(None))):
            assert type(err.value) is type(row.value) and err.value == row.value, \
                f"{row.id}: value {err.value!r} != {row.value!r}"
        else:
            assert err.value is row.value, row.id
        assert str(err) == f"{row.field}={row.value!r} is invalid: {row.allowed}"
    else:
        assert row.message is not None, row.id
        assert str(err) == row.message, row.id
    for name, expected in row.attrs.items():
        assert getattr(err, name) == expected, f"{row.id}: {name}={getattr(err, name)!r} != {expected}"


@pytest.mark.parametrize("row", REFUSALS, ids=[r.id for r in REFUSALS])
def test_refusal(row: Refusal) -> None:
    with pytest.raises(Exception) as info:
        row.call()
    _check(row, info.value)


def _queue_remove_queued() -> int:
    block = KVCacheBlock(1)
    queue = FreeKVCacheBlockQueue([block])
    queue.remove(block)
    return len(queue)


def _coordinator_kind(config: Any, **kw: Any) -> str:
    return _coordinator(config, **kw).kind


def _mamba_accepted(mode: str, caching: bool) -> str:
    pool = BlockPool(4, caching, 16)
    return MambaManager(mamba(16, mode), pool, **_manager_kw(caching)).mamba_cache_mode


def _with_policy(policy: str | None) -> str:
    with scheduling_policy_override(policy):
        return Scheduler(CFG, FULL16).policy


def _add_longest_prompt() -> int:
    sched = _sched()
    sched.add_request(_request(prompt=63))  # max_model_len - 1: room for one output token
    return len(sched.waiting)


#: the boundary next to each refusal is accepted: ``(id, call, what it returns)``
ACCEPTED: list[tuple[str, Callable[[], object], object]] = [
    ("hasher-hash_block_size-1", lambda: callable(get_request_block_hasher(1)), True),
    ("hashlist-sizes-1", lambda: BlockHashListWithBlockSize([b"a", b"b"], 1, 1).scale_factor, 1),
    ("hashlist-multiple", lambda: len(BlockHashListWithBlockSize([b"a", b"b"], 16, 32)), 1),
    ("queue-remove-queued", _queue_remove_queued, 0),
    ("pool-cache-every-hashed-block", _cache_hashed_blocks, 2),
    ("queue-popleft_n-all", lambda: len(FreeKVCacheBlockQueue([KVCacheBlock(1)]).popleft_n(1)), 1),
    ("pool-one-block", lambda: BlockPool(1, False, 1).get_num_free_blocks(), 0),
    ("pool-num_blocks-0", lambda: BlockPool(4, True, 16).get_new_blocks(0), []),
    ("pool-all-free-blocks", lambda: len(BlockPool(4, True, 16).get_new_blocks(3)), 3),
    ("kvm-max_model_len-1", lambda: _kvm(max_model_len=1).max_model_len, 1),
    ("kvm-watermark-0", lambda: _kvm(watermark=0).max_model_len, 64),
    ("kvm-watermark-below-1", lambda: _kvm(watermark=0.99).max_model_len, 64),
    ("alloc-one-token", lambda: _allocate(1).get_block_ids(), ([1],)),
    ("policy-override-none", lambda: _with_policy(None), "fcfs"),
    ("policy-override-priority", lambda: _with_policy("priority"), "priority"),
    ("policy-override-variant", lambda: _with_policy("fcfs_fewest_computed_victim"),
     "fcfs_fewest_computed_victim"),
    ("sched-both-block-sizes",
     lambda: Scheduler(CFG, FULL16, scheduler_block_size=16, hash_block_size=16).block_size, 16),
    ("sched-longest-prompt", _add_longest_prompt, 1),
    ("coord-lengths-1", lambda: _coordinator_kind(FULL16, max_model_len=1, max_in_flight_tokens=1),
     "unitary"),
    ("coord-retention-default",  # default 0: accepted without an SWA or Mamba group
     lambda: KVCacheCoordinator(FULL16, 64, 64, True, 16, 16).kind, "unitary"),
    ("coord-retention-none", lambda: _coordinator_kind(FULL16, retention_interval=None), "unitary"),
    ("coord-retention-swa", lambda: _coordinator_kind(kv_config(8, swa(32, 16)), retention_interval=32),
     "unitary"),
    ("coord-retention-swa-0",
     lambda: _coordinator_kind(kv_config(8, swa(32, 16)), retention_interval=0), "unitary"),
    ("coord-retention-swa-none",
     lambda: _coordinator_kind(kv_config(8, swa(32, 16)), retention_interval=None), "unitary"),
    ("cross-prefix-caching-without-fix",
     lambda: _coordinator_kind(kv_config(8, full(16), cross(16))), "hybrid"),
    ("cross-no-caching-with-fix",
     _with_fix("encoder_decoder_prefix_caching_refused",
               lambda: _coordinator_kind(kv_config(8, full(16), cross(16)), enable_caching=False)),
     "no_prefix_cache"),
    ("mamba-align-caching", lambda: _mamba_accepted("align", True), "align"),
    ("mamba-none-without-caching", lambda: _mamba_accepted("none", False), "none"),
    ("chunked-aligned-hit",  # the finished chunk [0, 32) counts as computed (2 null blocks)
     lambda: ChunkedLocalAttentionManager.find_longest_cache_hit(
         [], 32, [0], BlockPool(4, True, 16), chunked(32, 16), 16)[1], 32),
    ("resolve-unit-equal-block",
     lambda: resolve_kv_cache_block_sizes(FULL16, VllmConfig(block_size=16, prefix_match_unit=16)),
     (16, 16)),
    ("resolve-unit-without-hashing",
     lambda: resolve_kv_cache_block_sizes(
         FULL16, VllmConfig(block_size=16, prefix_match_unit=8, enable_prefix_caching=False)),
     (16, 16)),
    ("resolve-unit-dividing",
     lambda: resolve_kv_cache_block_sizes(_two_groups(full(16), swa(32, 32)),
                                          VllmConfig(block_size=16, prefix_match_unit=8)), (32, 8)),
    ("coord-sizes-1", lambda: validate_coordinator_block_sizes(kv_config(8, full(1)), 1, 1, True), None),
    ("coord-unitary-without-caching", lambda: validate_coordinator_block_sizes(FULL16, 16, 8, False),
     None),
    ("coord-hybrid-hash-dividing",
     lambda: validate_coordinator_block_sizes(_two_groups(full(16), swa(32, 32)), 32, 16, True), None),
    ("coord-chunked-aligned-fix",
     _with_fix("chunked_local_alignment_checked_at_startup",
               lambda: validate_coordinator_block_sizes(
                   _two_groups(chunked(32, 32), full(32)), 32, 32, True)), None),
    ("grouping-workers-agree",
     lambda: len(get_global_kv_cache_groups(CFG, [{"a": full(16)}, {"a": full(16)}])), 1),
    ("startup-exact-fit", lambda: planner.check_enough_kv_cache_memory_for_groups(16384, GROUPS, CFG),
     None),
    ("available_memory-bounds",
     lambda: planner.plan_kv_cache(CFG, [SPEC, SPEC], [0, 2**50]).starts, False),
    ("public-check-exact-fit", lambda: planner.check_enough_kv_cache_memory(CFG, SPEC, 16384 + 4096),
     None),
    ("auto-fit-one-token", lambda: planner._auto_fit_max_model_len(CFG, [GROUPS1], [256]), 1),
]


@pytest.mark.parametrize(("call", "expected"), [row[1:] for row in ACCEPTED],
                         ids=[row[0] for row in ACCEPTED])
def test_boundary_accepted(call: Callable[[], object], expected: object) -> None:
    assert call() == expected


def test_row_ids_are_unique() -> None:
    ids = [r.id for r in REFUSALS] + [row[0] for row in ACCEPTED]
    assert len(ids) == len(set(ids))


# ------------------------------------------------------------------ the meta-test


@dataclass(frozen=True)
class Site:
    module: str          # relative to kvverify/reference
    function: str        # enclosing qualname
    text: str            # start of the call's source
    first: int
    last: int


def _sites() -> list[Site]:
    sites: list[Site] = []
    for pattern in MODULES:
        for path in sorted(REFERENCE.glob(pattern)):
            source = path.read_text()
            rel = path.relative_to(REFERENCE).as_posix()

            def visit(node: ast.AST, qual: str) -> None:
                for child in ast.iter_child_nodes(node):
                    if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                        visit(child, f"{qual}.{child.name}" if qual else child.name)
                        continue
                    call: ast.AST | None = None
                    if isinstance(child, ast.Raise) and isinstance(child.exc, ast.Call):
                        func = child.exc.func
                        if isinstance(func, ast.Name) and func.id in ERRORS:
                            call = child
                    elif isinstance(child, ast.Call) and isinstance(child.func, ast.Name) \
                            and child.func.id in CHECKS:
                        call = child
                    if call is not None:
                        seg = ast.get_source_segment(source, call) or ""
                        text = " ".join(seg.removeprefix("raise ").split(",")[0].split())
                        first = getattr(call, "lineno", 0)
                        sites.append(Site(rel, qual, text, first, getattr(call, "end_lineno", first)))
                    visit(child, qual)

            visit(ast.parse(source), "")
    return sites


def _reached(row: Refusal) -> tuple[str, int]:
    """(module, line) of the innermost reference frame that raised (the field helpers ``require_count``
    and ``validation.require_int`` skipped: the row is reached at their caller)."""
    try:
        row.call()
    except Exception as err:  # noqa: BLE001 - any refusal; test_refusal checks its class
        frames = traceback.extract_tb(err.__traceback__)
    else:
        raise AssertionError(f"{row.id}: nothing raised")
    for frame in reversed(frames):
        path = Path(frame.filename).resolve()
        if REFERENCE in path.parents and frame.name != "require_count" and path.name != "validation.py":
            return path.relative_to(REFERENCE).as_posix(), frame.lineno or 0
    raise AssertionError(f"{row.id}: no reference frame in the traceback")


def test_every_raise_site_has_a_row() -> None:
    """A new raise site or ``require_int`` call in the mutated modules must join :data:`REFUSALS`
    (or :data:`EXEMPT`, with its reason)."""
    import kvverify.reference.pool as pool_module
    if "__mutmut_" in Path(pool_module.__file__).read_text():
        pytest.skip("under mutmut: trampolined copies have other lines (docs/mutation.md)")
    reached = {_reached(row) for row in REFUSALS}
    sites = _sites()
    assert len(sites) > 50  # the scan sees the modules
    missing, exempt_used = [], set()
    for s in sites:
        key = next((k for k in EXEMPT if k[:2] == (s.module, s.function) and s.text.startswith(k[2])),
                   None)
        if key is not None:
            exempt_used.add(key)
            continue
        if not any(m == s.module and s.first <= line <= s.last for m, line in reached):
            missing.append(f"{s.module}:{s.first} {s.function}: {s.text}")
    assert not missing, "raise sites without a row in REFUSALS:\n" + "\n".join(missing)
    assert exempt_used == set(EXEMPT), f"stale EXEMPT entries: {set(EXEMPT) - exempt_used}"
