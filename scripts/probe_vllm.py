#!/usr/bin/env python
"""Probe the pinned upstream vLLM (0.33.0) KV-cache API on CPU.

Run with the vllm venv's interpreter (see scripts/install-vllm-target.sh):

    .venv-vllm/bin/python scripts/probe_vllm.py [--quiet]

It exercises, for a few configurations, everything an adapter
(kvverify/targets/vllm.py) needs: the spec classes, the planner
(get_global_kv_cache_groups + get_kv_cache_configs with available memory, with
num_gpu_blocks_override and with max_model_len -1 auto-fit),
check_enough_kv_cache_memory, estimate_max_model_len,
get_max_concurrency_for_kv_cache_config, resolve_kv_cache_block_sizes,
BlockPool, KVCacheManager (get_computed_blocks / allocate_slots / free with real
Requests and a block hasher) and the v1 Scheduler driven by fake
ModelRunnerOutputs. It prints what it finds and checks a few facts with
`expect`; the exit status is the number of failed sections (0 = all fine).
Findings are written up in docs/vllm-target-notes.md.

It is a probe, not the adapter: no kvverify import, so it runs before the
adapter exists.
"""

from __future__ import annotations

import inspect
import os
import sys
import tempfile
import time
import traceback
from dataclasses import fields
from types import SimpleNamespace

# --- environment: must be set before vllm is imported --------------------------
os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("VLLM_CACHE_ROOT", tempfile.mkdtemp(prefix="kvverify-vllm-cache-"))
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")

QUIET = "--quiet" in sys.argv
MiB = 1 << 20

_t0 = time.perf_counter()
import torch  # noqa: E402

import vllm  # noqa: E402
from vllm.config import CacheConfig, SchedulerConfig, VllmConfig  # noqa: E402
from vllm.sampling_params import SamplingParams  # noqa: E402
from vllm.utils.hashing import get_hash_fn_by_name  # noqa: E402
from vllm.v1.attention.backends.utils import (  # noqa: E402
    get_supported_kv_cache_layouts,
    resolve_kv_cache_layout,
)
from vllm.v1.core.block_pool import BlockPool  # noqa: E402
from vllm.v1.core.kv_cache_manager import KVCacheManager  # noqa: E402
from vllm.v1.core.kv_cache_planning import (  # noqa: E402
    check_enough_kv_cache_memory,
    estimate_max_model_len,
    get_global_kv_cache_groups,
    get_kv_cache_configs,
    max_memory_usage_bytes,
)
from vllm.v1.core.kv_cache_utils import (  # noqa: E402
    generate_scheduler_kv_cache_config,
    get_max_concurrency_for_kv_cache_config,
    get_request_block_hasher,
    init_none_hash,
    resolve_kv_cache_block_sizes,
)
from vllm.v1.core.sched.scheduler import Scheduler  # noqa: E402
from vllm.v1.core.single_type_kv_cache_manager import (  # noqa: E402
    register_all_kvcache_specs,
)
from vllm.v1.kv_cache_interface import (  # noqa: E402
    ChunkedLocalAttentionSpec,
    FullAttentionSpec,
    MambaSpec,
    MLAAttentionSpec,
    SlidingWindowSpec,
)
from vllm.v1.outputs import ModelRunnerOutput  # noqa: E402
from vllm.v1.request import Request, RequestStatus  # noqa: E402
from vllm.v1.structured_output import StructuredOutputManager  # noqa: E402

IMPORT_S = time.perf_counter() - _t0

# The CPU attention backend needs einops (in the lock); it declares the layouts a
# real CPU worker reports.
from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend  # noqa: E402

CPU_LAYOUTS = [lay.name for lay in get_supported_kv_cache_layouts([CPUAttentionBackend])]
DEFAULT_LAYOUTS = [lay.name for lay in get_supported_kv_cache_layouts([])]

# ------------------------------------------------------------------ reporting
FAILED: list[str] = []
CHECKS = 0


def say(*args) -> None:
    if not QUIET:
        print(*args)


def expect(cond: bool, what: str) -> None:
    global CHECKS
    CHECKS += 1
    if not cond:
        raise AssertionError(what)
    say(f"    ok: {what}")


def section(title: str):
    def deco(fn):
        def run():
            print(f"\n=== {title}")
            t = time.perf_counter()
            try:
                fn()
                print(f"--- {title}: ok ({time.perf_counter() - t:.2f}s)")
            except Exception:  # noqa: BLE001 - a probe reports and goes on
                FAILED.append(title)
                traceback.print_exc()
                print(f"--- {title}: FAILED")

        run.__name__ = fn.__name__
        SECTIONS.append(run)
        return run

    return deco


SECTIONS: list = []

# ------------------------------------------------------------- config helpers


def stand_in_model_config(max_model_len: int, original_max_model_len: int | None = None):
    """The attributes of ModelConfig that the planner, managers and Scheduler
    read (0.33.0). A real ModelConfig needs a HF config (see notes)."""
    return SimpleNamespace(
        # planner
        max_model_len=max_model_len,
        original_max_model_len=(
            max_model_len if original_max_model_len is None else original_max_model_len
        ),
        supports_kv_cache_grouping=False,
        # Scheduler / VllmConfig properties it touches
        uses_mrope=False,
        is_encoder_decoder=False,
        runner_type="generate",
        is_diffusion=False,
        supports_multimodal_inputs=False,
        multimodal_config=None,
        return_sampling_mask=False,
        # StructuredOutputManager
        skip_tokenizer_init=True,
    )


def make_config(
    *,
    max_model_len: int = 4096,
    block_size: int = 16,
    max_num_batched_tokens: int = 2048,
    max_num_seqs: int = 64,
    num_gpu_blocks_override: int | None = None,
    enable_prefix_caching: bool = True,
    mamba_cache_mode: str = "none",
    layout: str | None = "resolve-later",
    auto_fit: bool = False,
    disable_hybrid_kv_cache_manager: bool | None = None,
) -> VllmConfig:
    """Minimal VllmConfig for the planner/managers/scheduler. With auto_fit the
    model config mimics `max_model_len=-1`: max_model_len holds the model's
    derived maximum, original_max_model_len is -1."""
    cache = CacheConfig(
        block_size=block_size,
        num_gpu_blocks_override=num_gpu_blocks_override,
        enable_prefix_caching=enable_prefix_caching,
        mamba_cache_mode=mamba_cache_mode,
    )
    sched = SchedulerConfig(
        max_model_len=max_model_len,  # InitVar: only validated against
        is_encoder_decoder=False,  # InitVar
        max_num_batched_tokens=max_num_batched_tokens,
        max_num_seqs=max_num_seqs,
        disable_hybrid_kv_cache_manager=disable_hybrid_kv_cache_manager,
    )
    vc = VllmConfig(cache_config=cache, scheduler_config=sched)
    # VllmConfig(model_config=None) skips all model-dependent post-init; the
    # stand-in is assigned afterwards (no validation on assignment).
    vc.model_config = stand_in_model_config(
        max_model_len, original_max_model_len=-1 if auto_fit else None
    )
    # Registers FullAttentionSpec -> FullAttentionManager etc. The engine core does
    # this in _initialize_kv_caches; without it get_global_kv_cache_groups asserts.
    register_all_kvcache_specs(vc)
    return vc


def plan(vc: VllmConfig, specs: dict, available_memory: int, supported=None):
    """The engine core's order: resolve layout, global groups, per-worker configs,
    scheduler config, block sizes. One worker."""
    layout = resolve_kv_cache_layout(vc, [list(supported or DEFAULT_LAYOUTS)], specs.values())
    groups = get_global_kv_cache_groups(vc, [specs])
    configs = get_kv_cache_configs(vc, [specs], [available_memory], groups)
    sched_cfg = generate_scheduler_kv_cache_config(configs)
    sched_cfg.kv_cache_layout = vc.cache_config.kv_cache_layout
    bs = resolve_kv_cache_block_sizes(sched_cfg, vc)
    return layout, groups, configs[0], sched_cfg, bs


def show_config(cfg, vc=None) -> None:
    say(f"    num_blocks={cfg.num_blocks}  groups={len(cfg.kv_cache_groups)}")
    for i, g in enumerate(cfg.kv_cache_groups):
        s = g.kv_cache_spec
        extra = ""
        for name in ("sliding_window", "attention_chunk_size", "page_size_padded", "mamba_cache_mode"):
            v = getattr(s, name, None)
            if v is not None:
                extra += f" {name}={v}"
        say(
            f"    group {i}: {type(s).__name__} block_size={s.block_size} "
            f"page={s.page_size_bytes}{extra} layers={g.layer_names}"
        )
    for t in cfg.kv_cache_tensors:
        say(
            f"    tensor: size={t.size} layers={t.layers} layer_stride={t.layer_stride} "
            f"block_stride={t.block_stride} offset={t.offset}"
        )
    if vc is not None:
        say(
            f"    max_concurrency={get_max_concurrency_for_kv_cache_config(vc, cfg):.3f} "
            f"at max_model_len={vc.model_config.max_model_len}"
        )


F16 = torch.float16


def full(bs=16, heads=2, head=64, dtype=F16, **kw):
    return FullAttentionSpec(block_size=bs, num_kv_heads=heads, head_size=head, dtype=dtype, **kw)


def swa(window=256, bs=16, heads=2, head=64, dtype=F16):
    return SlidingWindowSpec(
        block_size=bs, num_kv_heads=heads, head_size=head, dtype=dtype, sliding_window=window
    )


def chunked(chunk=512, bs=16, heads=2, head=64, dtype=F16):
    return ChunkedLocalAttentionSpec(
        block_size=bs, num_kv_heads=heads, head_size=head, dtype=dtype, attention_chunk_size=chunk
    )


def mla(bs=16, head=576, dtype=F16):
    return MLAAttentionSpec(block_size=bs, num_kv_heads=1, head_size=head, dtype=dtype)


def mamba(bs=16, mode="none", shapes=((3, 128), (8, 16, 16)), dtypes=(F16, torch.float32)):
    return MambaSpec(block_size=bs, shapes=shapes, dtypes=dtypes, mamba_cache_mode=mode)


def layers(pattern: str) -> dict:
    """'FFSF' -> {'model.layers.0.attn': full(), ...} (F full, S swa, C chunked,
    M mla, N mamba none, A mamba align)."""
    make = {"F": full, "S": swa, "C": chunked, "M": mla, "N": mamba, "A": lambda: mamba(mode="align")}
    return {f"model.layers.{i}.attn": make[c]() for i, c in enumerate(pattern)}


# ================================================================== sections


@section("versions and environment")
def _versions():
    print(f"    vllm {vllm.__version__} from {os.path.dirname(vllm.__file__)}")
    print(f"    torch {torch.__version__} (cuda={torch.version.cuda}), python {sys.version.split()[0]}")
    print(f"    import of the KV modules took {IMPORT_S:.1f}s")
    print(f"    layouts: CPU worker reports {CPU_LAYOUTS}; no backend declares -> {DEFAULT_LAYOUTS}")
    expect(vllm.__version__ == "0.33.0", "vllm is the pinned 0.33.0")
    expect(CPU_LAYOUTS == ["LBHNC"], "CPU attention backend declares only LBHNC")
    expect(DEFAULT_LAYOUTS[0] == "LBNHC", "default preference starts with LBNHC")
    vc = make_config()
    print(
        f"    VllmConfig(model_config=None) defaults: block_size={vc.cache_config.block_size} "
        f"prefix_caching={vc.cache_config.enable_prefix_caching} "
        f"hash_algo={vc.cache_config.prefix_caching_hash_algo} "
        f"async_scheduling={vc.scheduler_config.async_scheduling} "
        f"max_concurrent_batches={vc.max_concurrent_batches} "
        f"max_in_flight_tokens={vc.max_in_flight_tokens} "
        f"device={vc.device_config.device_type} "
        f"kv_cache_layout={vc.cache_config.kv_cache_layout}"
    )
    try:
        vc.cache_config.get_resolved_kv_cache_layout()
        raise AssertionError("layout should be unresolved before resolve_kv_cache_layout")
    except ValueError as e:
        expect("not been resolved" in str(e), "layout is unresolved until resolve_kv_cache_layout")


@section("spec classes: fields, page sizes, max memory per request")
def _specs():
    vc = make_config(max_model_len=4096, max_num_batched_tokens=2048)
    cases = {
        "full": full(),
        "full fp32": full(dtype=torch.float32),
        "swa(256)": swa(),
        "chunked(512)": chunked(),
        "mla(576)": mla(),
        "mamba none": mamba(),
        "mamba align": mamba(mode="align"),
    }
    for name, s in cases.items():
        say(
            f"    {name:13s} {type(s).__name__:26s} page={s.page_size_bytes:7d} "
            f"max_mem_per_req={s.max_memory_usage_bytes(vc):9d} "
            f"blocks_per_req={s.max_num_blocks_per_req(vc, 4096)}"
        )
    expect(full().page_size_bytes == 16 * 2 * (64 + 64) * 2, "full page = bs*heads*(k+v)*dtype")
    expect(mla().page_size_bytes == 16 * 1 * 576 * 2, "MLA page = bs*1*head_size*dtype (head_size_v=0)")
    expect(
        swa().max_memory_usage_bytes(vc)
        == ((256 - 1 + vc.max_in_flight_tokens + 15) // 16 + 1) * swa().page_size_bytes,
        "SWA per-request = (cdiv(min(window-1+in_flight, max_len), bs)+1) pages",
    )
    expect(
        chunked().max_memory_usage_bytes(vc)
        == -(-min(512 + vc.max_in_flight_tokens, 4096) // 16) * chunked().page_size_bytes,
        "chunked per-request = cdiv(min(chunk+in_flight, max_len), bs) pages",
    )
    # Mamba: dtypes are torch dtypes; its page does not depend on block_size.
    m = mamba()
    expect(m.page_size_bytes == 3 * 128 * 2 + 8 * 16 * 16 * 4, "mamba page = sum(prod(shape)*dtype)")
    expect(mamba(bs=64).page_size_bytes == m.page_size_bytes, "mamba page independent of block_size")
    for dt in ("float16", "torch.float16"):
        try:
            _ = mamba(dtypes=(dt, dt)).page_size_bytes
            say(f"    MambaSpec(dtypes=({dt!r},...)) accepted")
        except Exception as e:  # noqa: BLE001
            say(f"    MambaSpec(dtypes=({dt!r},...)).page_size_bytes -> {type(e).__name__}: {e}")
    # Mamba max memory depends on cache_config.mamba_cache_mode, NOT the spec field.
    vc_align = make_config(mamba_cache_mode="align")
    say(
        f"    mamba max_mem: cache_config none -> {m.max_memory_usage_bytes(vc)} "
        f"(1 page); align -> {m.max_memory_usage_bytes(vc_align)} (2 pages)"
    )
    expect(m.max_memory_usage_bytes(vc) == m.page_size_bytes, "mamba (none) holds 1 state page per request")
    expect(m.max_memory_usage_bytes(vc_align) == 2 * m.page_size_bytes, "mamba (align) holds 2 pages per request")
    say("    field lists (init=True):")
    for cls in (FullAttentionSpec, SlidingWindowSpec, ChunkedLocalAttentionSpec, MLAAttentionSpec, MambaSpec):
        say(f"      {cls.__name__}: {[f.name for f in fields(cls) if f.init]}")


@section("planner: uniform full attention, layouts, kv_cache_tensors")
def _uniform():
    specs = layers("FFFF")
    page = full().page_size_bytes
    mem = 64 * MiB
    for supported in (DEFAULT_LAYOUTS, CPU_LAYOUTS, ["BLHNC"]):
        vc = make_config()
        layout, groups, cfg, _, bs = plan(vc, specs, mem, supported)
        say(f"  supported={supported} -> layout {layout.name}; block sizes {bs}")
        show_config(cfg, vc)
        expect(cfg.num_blocks == mem // (4 * page), "num_blocks = mem // (layers*page)")
        t = cfg.kv_cache_tensors
        expect(len(t) == 1 and t[0].size == cfg.num_blocks * 4 * page, "one tensor of num_blocks*layers*page bytes")
        if layout.is_layer_compact:
            expect(
                (t[0].layer_stride, t[0].block_stride) == (cfg.num_blocks * page, page),
                "layer-outer: layer_stride=num_blocks*page, block_stride=page",
            )
        else:
            expect(
                (t[0].layer_stride, t[0].block_stride) == (page, 4 * page),
                "block-outer: layer_stride=page, block_stride=layers*page",
            )


@section("planner: hybrid SWA+full (and chunked+full, mla, mamba+full)")
def _hybrid():
    mem = 64 * MiB
    page = full().page_size_bytes
    for supported in (DEFAULT_LAYOUTS, CPU_LAYOUTS, ["BLHNC"]):
        vc = make_config()
        layout, groups, cfg, sched_cfg, bs = plan(vc, layers("FSSFSS"), mem, supported)
        say(f"  FSSFSS, supported={supported} -> layout {layout.name}; block sizes {bs}")
        show_config(cfg, vc)
        expect(len(cfg.kv_cache_groups) == 3, "2 full + 4 swa -> 3 groups of 2 layers")
        if layout.is_layer_compact:
            expect(cfg.num_blocks == mem // (2 * page), "num_blocks = mem // (group_size*page)")
            expect(
                all(t.offset == 0 and t.size == cfg.num_blocks * 2 * page for t in cfg.kv_cache_tensors),
                "every group's tensor starts at offset 0 of one shared allocation (groups alias)",
            )
    # chunked local + full
    vc = make_config()
    _, _, cfg, _, bs = plan(vc, layers("CCCF"), mem)
    say(f"  CCCF -> block sizes {bs}")
    show_config(cfg, vc)
    # all-SWA (uniform type, one group) and disable_hybrid_kv_cache_manager
    vc = make_config()
    _, _, cfg, _, _ = plan(vc, layers("SSSS"), mem)
    say("  SSSS:")
    show_config(cfg, vc)
    vc = make_config(disable_hybrid_kv_cache_manager=True)
    _, _, cfg, _, _ = plan(vc, layers("FSSFSS"), mem)
    say("  FSSFSS with disable_hybrid_kv_cache_manager=True:")
    show_config(cfg, vc)
    expect(len(cfg.kv_cache_groups) == 1, "hybrid manager disabled -> one full-attention group")
    # MLA
    vc = make_config()
    _, _, cfg, _, _ = plan(vc, layers("MMMM"), mem)
    say("  MMMM:")
    show_config(cfg, vc)
    # Mamba + full: mamba page padded (or attention block size grown) to unify pages
    for mode, supported in (("none", DEFAULT_LAYOUTS), ("align", DEFAULT_LAYOUTS), ("none", CPU_LAYOUTS)):
        vc = make_config(mamba_cache_mode=mode)
        pattern = "NNNF" if mode == "none" else "AAAF"
        try:
            layout, _, cfg, sched_cfg, bs = plan(vc, layers(pattern), mem, supported)
            say(f"  {pattern} (mamba_cache_mode={mode}) -> layout {layout.name}; block sizes {bs}")
            show_config(cfg, vc)
        except Exception as e:  # noqa: BLE001
            say(f"  {pattern} (mamba_cache_mode={mode}) -> {type(e).__name__}: {e}")
            raise


@section("planner: num_gpu_blocks_override and max_model_len=-1 auto-fit")
def _override_autofit():
    specs = layers("FFFF")
    page = full().page_size_bytes
    vc = make_config(num_gpu_blocks_override=300, max_model_len=4096)
    _, _, cfg, _, _ = plan(vc, specs, 64 * MiB)
    show_config(cfg)
    expect(cfg.num_blocks == 300, "override wins over available memory")
    expect(cfg.kv_cache_tensors[0].size == 300 * 4 * page, "tensor shrinks to the override")
    vc = make_config(num_gpu_blocks_override=300, max_model_len=4096)
    _, _, cfg, _, _ = plan(vc, specs, 1 * MiB)
    expect(cfg.num_blocks == 300, "override also wins over too LITTLE available memory (no check against it)")
    # the admission check runs against the override, not the memory
    vc = make_config(num_gpu_blocks_override=100, max_model_len=4096)
    try:
        plan(vc, specs, 64 * MiB)
        raise AssertionError("override below one max-length request should fail")
    except ValueError as e:
        expect("estimated maximum model length is 1584" in str(e), "override 100 blocks: check fails, estimate (100-1)*16")
    # override too small for one max-length request -> error (null block reserved)
    vc = make_config(num_gpu_blocks_override=4096 // 16, max_model_len=4096)
    try:
        plan(vc, specs, 1 << 40)
        raise AssertionError("override of exactly cdiv(max_len, bs) blocks should fail (null block)")
    except ValueError as e:
        expect("available KV cache memory" in str(e), "override = blocks for one request fails: null block reserved")
        say(f"    message: {str(e)[:200]}...")
    vc = make_config(num_gpu_blocks_override=4096 // 16 + 1, max_model_len=4096)
    _, _, cfg, _, _ = plan(vc, specs, 1 << 40)
    expect(cfg.num_blocks == 4096 // 16 + 1, "override = cdiv(max_len, bs) + 1 fits exactly")
    # auto-fit: derived max 32768, memory for ~ 1000 tokens
    for mem_blocks in (10, 64, 3000):
        vc = make_config(max_model_len=32768, auto_fit=True)
        mem = mem_blocks * 4 * page
        _, _, cfg, _, _ = plan(vc, specs, mem)
        say(
            f"    auto-fit with {mem_blocks} blocks of memory -> max_model_len "
            f"{vc.model_config.max_model_len}, num_blocks {cfg.num_blocks}"
        )
        expect(
            vc.model_config.max_model_len == min(32768, (mem_blocks - 1) * 16),
            f"auto-fit = min(derived, (blocks-1)*bs) for {mem_blocks} blocks (null block reserved)",
        )
    # hybrid auto-fit
    vc = make_config(max_model_len=32768, auto_fit=True)
    _, _, cfg, _, _ = plan(vc, layers("FSSFSS"), 200 * 2 * page)
    say(f"    FSSFSS auto-fit with 200 blocks -> max_model_len {vc.model_config.max_model_len}")
    vc = make_config(max_model_len=32768, auto_fit=True)
    try:
        plan(vc, specs, 4 * page)  # one block = only the null block
        raise AssertionError("auto-fit with memory for just the null block should fail")
    except ValueError as e:
        expect("Cannot auto-fit" in str(e), "auto-fit with no usable block raises 'Cannot auto-fit'")


@section("check_enough_kv_cache_memory / estimate_max_model_len / concurrency")
def _checks():
    specs = layers("FFFF")
    page = full().page_size_bytes
    vc = make_config(max_model_len=4096)
    need = max_memory_usage_bytes(vc, specs.values())
    try:
        check_enough_kv_cache_memory(vc, specs, need * 2)
        raise AssertionError("check before layout resolution should raise")
    except ValueError as e:
        expect("not been resolved" in str(e), "check_enough_kv_cache_memory needs the layout resolved first")
    resolve_kv_cache_layout(vc, [DEFAULT_LAYOUTS], specs.values())
    expect(need == 4096 // 16 * 4 * page, "max_memory_usage_bytes = sum over layers")
    # the check reserves one block (null block) of the pool
    check_enough_kv_cache_memory(vc, specs, need + 4 * page)
    say(f"    need={need}: check passes with need + 1 block")
    try:
        check_enough_kv_cache_memory(vc, specs, need)
        raise AssertionError("check should fail with exactly `need` (null block)")
    except ValueError as e:
        expect("estimated maximum model length is" in str(e), "check fails at exactly `need`; message has estimate")
        say(f"    message: {str(e)[:240]}...")
    try:
        check_enough_kv_cache_memory(vc, specs, 0)
    except ValueError as e:
        expect("No available memory" in str(e), "available_memory<=0 -> 'No available memory'")
    check_enough_kv_cache_memory(vc, {}, 0)
    say("    empty spec dict (attention-free): check is a no-op, even with 0 memory")
    est = estimate_max_model_len(vc, specs, need // 2)
    expect(est == 2048, "estimate_max_model_len(need/2) = 2048 (no null-block reservation here)")
    expect(vc.model_config.max_model_len == 4096, "estimate restores max_model_len")
    say(f"    estimate_max_model_len(vc, specs, need/2) = {est}")
    # The public estimate does not reserve the null block; the check does. So the
    # estimate's own answer fails the check for the same memory (API-level only:
    # inside vLLM the estimate is only called by the check, on reduced memory).
    vc.model_config.max_model_len = est
    try:
        check_enough_kv_cache_memory(vc, specs, need // 2)
        est_passes = True
    except ValueError:
        est_passes = False
    finally:
        vc.model_config.max_model_len = 4096
    expect(not est_passes, "check_enough(max_len=estimate(mem), mem) FAILS: only the check reserves the null block")
    say(f"    signature: estimate_max_model_len{inspect.signature(estimate_max_model_len)}")
    say(f"    signature: check_enough_kv_cache_memory{inspect.signature(check_enough_kv_cache_memory)}")
    _, _, cfg, sched_cfg, _ = plan(vc, specs, 10 * need)
    conc = get_max_concurrency_for_kv_cache_config(vc, cfg)
    conc_s = get_max_concurrency_for_kv_cache_config(vc, sched_cfg)
    say(f"    concurrency: worker cfg {conc:.4f}, scheduler cfg {conc_s:.4f}, num_blocks {cfg.num_blocks}")
    expect(abs(conc - cfg.num_blocks / (4096 // 16)) < 1e-9, "concurrency = num_blocks / blocks_per_request")
    expect(conc == conc_s, "worker and scheduler configs agree on concurrency")


@section("resolve_kv_cache_block_sizes")
def _block_sizes():
    mem = 64 * MiB
    rows = []
    for label, pattern, kw, specs_override in (
        ("single group bs16", "FFFF", {}, None),
        ("single group, prefix caching off", "FFFF", {"enable_prefix_caching": False}, None),
        # equal pages (8192) with different block sizes keep their block sizes
        ("full bs16 + swa bs32 (equal pages)", None, {}, {"a": full(bs=16), "b": swa(bs=32, heads=1)}),
        ("  same, prefix caching off", None, {"enable_prefix_caching": False}, {"a": full(bs=16), "b": swa(bs=32, heads=1)}),
        # unequal pages: the smaller page's block size is scaled up to match
        ("full bs16 + swa bs32 (pages 8K/16K)", None, {}, {"a": full(bs=16), "b": swa(bs=32)}),
        ("full bs16 + mamba bs64 (none)", None, {}, {"a": full(), "b": mamba(bs=64)}),
        ("full bs16 + mamba bs64 (align)", None, {"mamba_cache_mode": "align"}, {"a": full(), "b": mamba(bs=64, mode="align")}),
    ):
        vc = make_config(**kw)
        specs = specs_override or layers(pattern)
        try:
            _, _, cfg, sched_cfg, bs = plan(vc, specs, mem)
            gbs = [g.kv_cache_spec.block_size for g in sched_cfg.kv_cache_groups]
            rows.append((label, gbs, bs))
        except Exception as e:  # noqa: BLE001
            rows.append((label, None, f"{type(e).__name__}: {e}"))
    for label, gbs, bs in rows:
        say(f"    {label:38s} group block sizes {gbs} -> (scheduler, hash) {bs}")
    d = {label: bs for label, _, bs in rows}
    expect(d["single group bs16"] == (16, 16), "single group: (bs, bs)")
    expect(d["full bs16 + swa bs32 (equal pages)"] == (32, 16), "two groups with caching: (lcm, gcd)")
    expect(d["  same, prefix caching off"] == (32, 32), "no caching: hash size = scheduler size")
    expect(d["full bs16 + swa bs32 (pages 8K/16K)"] == (32, 32), "page unification grows the full group's block size to 32")
    expect(d["full bs16 + mamba bs64 (none)"] == (64, 64), "mamba not in align mode: hash size = scheduler size")
    expect(d["full bs16 + mamba bs64 (align)"] == (64, 16), "mamba align: (lcm, gcd)")
    say(f"    signature: resolve_kv_cache_block_sizes{inspect.signature(resolve_kv_cache_block_sizes)}")


@section("BlockPool")
def _block_pool():
    say(f"    signature: BlockPool{inspect.signature(BlockPool.__init__)}")
    pool = BlockPool(num_gpu_blocks=10, enable_caching=True, hash_block_size=16)
    expect(pool.get_num_free_blocks() == 9, "10 blocks -> 9 free (block 0 is the null block)")
    expect(pool.null_block.block_id == 0 and pool.null_block.is_null, "null block is block 0")
    blocks = pool.get_new_blocks(4)
    say(f"    get_new_blocks(4) -> ids {[b.block_id for b in blocks]}, ref_cnt {[b.ref_cnt for b in blocks]}")
    expect(pool.get_num_free_blocks() == 5, "4 taken -> 5 free")
    say(f"    usage {pool.get_usage():.3f}")
    try:
        pool.get_new_blocks(6)
        raise AssertionError("over-allocation should raise")
    except ValueError as e:
        expect("Cannot get 6 free blocks" in str(e), "over-allocation raises ValueError")
    pool.free_blocks(blocks)
    expect(pool.get_num_free_blocks() == 9, "free_blocks returns them")
    # Edge: a pool of one block has no usable block.
    pool1 = BlockPool(num_gpu_blocks=1, enable_caching=False, hash_block_size=16)
    expect(pool1.get_num_free_blocks() == 0, "BlockPool(1) has 0 free blocks")


def _hasher(hash_block_size: int, algo: str = "sha256"):
    fn = get_hash_fn_by_name(algo)
    init_none_hash(fn)  # must run once per process before hashing
    return get_request_block_hasher(hash_block_size, fn)


def _request(rid: str, prompt, hasher, max_tokens: int = 8) -> Request:
    return Request(
        request_id=rid,
        prompt_token_ids=list(prompt),
        sampling_params=SamplingParams(max_tokens=max_tokens, ignore_eos=True),
        pooling_params=None,
        block_hasher=hasher,
    )


@section("KVCacheManager.get_computed_blocks / allocate_slots / free")
def _manager():
    say(f"    signature: KVCacheManager{inspect.signature(KVCacheManager.__init__)}")
    say(f"    signature: allocate_slots{inspect.signature(KVCacheManager.allocate_slots)}")
    say(f"    signature: get_computed_blocks{inspect.signature(KVCacheManager.get_computed_blocks)}")
    say(f"    signature: Request{inspect.signature(Request.__init__)}")
    page = full().page_size_bytes
    vc = make_config(max_model_len=320)  # 20 blocks per request + the null block = 21
    _, _, cfg, sched_cfg, (sbs, hbs) = plan(vc, layers("FFFF"), 21 * 4 * page)
    expect(sched_cfg.num_blocks == 21, "21 blocks planned")
    mgr = KVCacheManager(
        kv_cache_config=sched_cfg,
        max_model_len=vc.model_config.max_model_len,
        scheduler_block_size=sbs,
        hash_block_size=hbs,
        max_in_flight_tokens=vc.max_in_flight_tokens,
        enable_caching=True,
    )
    hasher = _hasher(hbs)
    r1 = _request("r1", range(100), hasher)
    say(f"    request: num_tokens={r1.num_tokens} block_hashes={len(r1.block_hashes)} status={r1.status.name}")
    expect(len(r1.block_hashes) == 100 // 16, "block hashes computed at construction (full blocks only)")
    blocks, n_hit, boundary = mgr.get_computed_blocks(r1)
    expect(n_hit == 0, "cold cache: no hit")
    new = mgr.allocate_slots(r1, 100, n_hit, blocks)
    ids = new.get_block_ids()
    say(f"    allocate_slots(r1, 100) -> {ids}; free {mgr.block_pool.get_num_free_blocks()}")
    expect(len(ids[0]) == 7, "100 tokens -> 7 blocks")
    # same prompt: prefix hit of the 6 full blocks (capped at num_tokens-1)
    r2 = _request("r2", range(100), hasher)
    blocks2, n_hit2, _ = mgr.get_computed_blocks(r2)
    say(f"    r2 same prompt: hit {n_hit2} tokens, blocks {blocks2.get_block_ids()}")
    expect(n_hit2 == 96, "prefix hit = 6 full blocks = 96 tokens")
    new2 = mgr.allocate_slots(r2, 100 - n_hit2, n_hit2, blocks2)
    expect(len(new2.get_block_ids()[0]) == 1, "only the tail block is new")
    free_before = mgr.block_pool.get_num_free_blocks()
    # a request that does not fit -> None, state unchanged
    r3 = _request("r3", range(1000, 1250), hasher)
    b3, h3, _ = mgr.get_computed_blocks(r3)
    res = mgr.allocate_slots(r3, 250, h3, b3)
    expect(res is None, "allocation beyond free blocks returns None")
    expect(mgr.block_pool.get_num_free_blocks() == free_before, "failed allocation changes nothing")
    # admission gate with full_sequence_must_fit
    r4 = _request("r4", range(2000, 2200), hasher)
    b4, h4, _ = mgr.get_computed_blocks(r4)
    res = mgr.allocate_slots(r4, 16, h4, b4, full_sequence_must_fit=True)
    say(f"    full_sequence_must_fit for 200 tokens with {free_before} free -> {res is not None}")
    if res is not None:
        mgr.free(r4)
    mgr.free(r1)
    mgr.free(r2)
    expect(mgr.block_pool.get_num_free_blocks() == 20, "all blocks back after free (cached ones evictable)")
    say(f"    usage after free {mgr.usage:.3f}")


@section("Scheduler: construct on CPU, step with fake ModelRunnerOutput")
def _scheduler():
    say(f"    signature: Scheduler{inspect.signature(Scheduler.__init__)}")
    page = full().page_size_bytes
    results = {}
    # per request at max_model_len 512: full 32 blocks; swa(256) cdiv(255+128,16)+1 = 25
    for label, pattern, nblocks in (("uniform FFFF", "FFFF", 40), ("hybrid FSFS", "FSFS", 70)):
        vc = make_config(max_model_len=512, max_num_batched_tokens=128, max_num_seqs=4)
        group_layers = 4 if pattern == "FFFF" else 2
        _, _, cfg, sched_cfg, (sbs, hbs) = plan(vc, layers(pattern), nblocks * group_layers * page)
        vc.cache_config.num_gpu_blocks = sched_cfg.num_blocks  # engine core sets this
        sched = Scheduler(
            vllm_config=vc,
            kv_cache_config=sched_cfg,
            structured_output_manager=StructuredOutputManager(vc),
            block_size=sbs,
            hash_block_size=hbs,
            log_stats=True,
        )
        hasher = _hasher(hbs)
        for i in range(8):
            sched.add_request(_request(f"{label}-{i}", [i + 1] * (150 + 10 * i), hasher, max_tokens=40))
        steps, preemptions, max_running = 0, 0, 0
        free_min = sched_cfg.num_blocks
        while sched.has_unfinished_requests():
            out = sched.schedule()
            rids = list(out.num_scheduled_tokens)
            sampled = []
            for rid in rids:
                r = sched.requests[rid]
                # A request whose prefill finished in this step (or is decoding) samples one token.
                sampled.append([42] if r.num_computed_tokens >= r.num_tokens else [])
            mro = ModelRunnerOutput(
                req_ids=rids, req_id_to_index={r: i for i, r in enumerate(rids)}, sampled_token_ids=sampled
            )
            sched.update_from_output(out, mro)
            steps += 1
            preemptions += len(out.preempted_req_ids or ())
            max_running = max(max_running, len(sched.running))
            free_min = min(free_min, sched.kv_cache_manager.block_pool.get_num_free_blocks())
            if steps > 2000:
                raise AssertionError("scheduler did not drain")
        free_end = sched.kv_cache_manager.block_pool.get_num_free_blocks()
        results[label] = (steps, preemptions, max_running, free_min, free_end, sched_cfg.num_blocks)
        say(
            f"    {label}: {sched_cfg.num_blocks} blocks, 8 requests -> {steps} steps, "
            f"{preemptions} preemptions, max running {max_running}, min free {free_min}, "
            f"free at end {free_end}"
        )
        expect(free_end == sched_cfg.num_blocks - 1, f"{label}: every block but the null block free at end")
    expect(results["uniform FFFF"][1] > 0, "tight pool forces preemptions (recompute)")


TINY_LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_hidden_layers": 2,
    "vocab_size": 1000,
    "max_position_embeddings": 2048,
    "torch_dtype": "float16",
    "rms_norm_eps": 1e-5,
    "bos_token_id": 1,
    "eos_token_id": 2,
}


@section("real ModelConfig offline (local config.json, skip_tokenizer_init)")
def _real_model_config():
    import json

    from vllm.config import ModelConfig

    d = tempfile.mkdtemp(prefix="kvverify-tiny-llama-")
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(TINY_LLAMA, f)
    t = time.perf_counter()
    mc = ModelConfig(model=d, skip_tokenizer_init=True, max_model_len=1024, dtype="float16")
    say(
        f"    ModelConfig built in {time.perf_counter() - t:.1f}s: max_model_len={mc.max_model_len} "
        f"original={mc.original_max_model_len} runner={mc.runner_type}"
    )
    mc2 = ModelConfig(model=d, skip_tokenizer_init=True, max_model_len=-1, dtype="float16")
    say(f"    max_model_len=-1 -> max_model_len={mc2.max_model_len}, original_max_model_len={mc2.original_max_model_len}")
    expect(
        (mc2.max_model_len, mc2.original_max_model_len) == (2048, -1),
        "-1 = derived max (max_position_embeddings) with original_max_model_len=-1",
    )
    sc = SchedulerConfig(max_model_len=1024, is_encoder_decoder=False, max_num_batched_tokens=256, max_num_seqs=4)
    vc = VllmConfig(model_config=mc, cache_config=CacheConfig(block_size=16), scheduler_config=sc)
    register_all_kvcache_specs(vc)
    specs = {f"model.layers.{i}.self_attn.attn": full(heads=2, head=16) for i in range(2)}
    _, _, cfg, sched_cfg, (sbs, hbs) = plan(vc, specs, 100 * 2 * full(heads=2, head=16).page_size_bytes)
    vc.cache_config.num_gpu_blocks = sched_cfg.num_blocks
    sched = Scheduler(
        vllm_config=vc,
        kv_cache_config=sched_cfg,
        structured_output_manager=StructuredOutputManager(vc),
        block_size=sbs,
        hash_block_size=hbs,
    )
    sched.add_request(_request("real-0", range(40), _hasher(hbs), max_tokens=3))
    steps = 0
    while sched.has_unfinished_requests() and steps < 20:
        out = sched.schedule()
        rids = list(out.num_scheduled_tokens)
        mro = ModelRunnerOutput(
            req_ids=rids, req_id_to_index={r: i for i, r in enumerate(rids)}, sampled_token_ids=[[7] for _ in rids]
        )
        sched.update_from_output(out, mro)
        steps += 1
    expect(not sched.has_unfinished_requests(), f"Scheduler on a real ModelConfig drains ({steps} steps)")


@section("cost per call (for property-test budgets)")
def _costs():
    n = 50
    t = time.perf_counter()
    for _ in range(n):
        make_config()
    per_cfg = (time.perf_counter() - t) / n
    vc_specs = []
    t = time.perf_counter()
    for _ in range(n):
        vc = make_config()
        plan(vc, layers("FSSFSS"), 64 * MiB)
        vc_specs.append(vc)
    per_plan = (time.perf_counter() - t) / n - per_cfg
    vc = make_config(max_model_len=2048)
    _, _, _, sched_cfg, (sbs, hbs) = plan(vc, layers("FFFF"), 1000 * 4 * full().page_size_bytes)
    hasher = _hasher(hbs)
    t = time.perf_counter()
    for i in range(n):
        mgr = KVCacheManager(sched_cfg, vc.model_config.max_model_len, sbs, hbs, vc.max_in_flight_tokens)
        r = _request(f"c{i}", range(500), hasher)
        b, h, _ = mgr.get_computed_blocks(r)
        mgr.allocate_slots(r, 500, h, b)
        mgr.free(r)
    per_mgr = (time.perf_counter() - t) / n
    print(
        f"    make_config {per_cfg * 1e3:.1f} ms; plan (hybrid, 6 layers) {per_plan * 1e3:.1f} ms; "
        f"KVCacheManager build+alloc+free (1000 blocks) {per_mgr * 1e3:.1f} ms"
    )


def main() -> int:
    for run in SECTIONS:
        run()
    print(
        f"\nprobe_vllm: {len(SECTIONS) - len(FAILED)} sections ok, {len(FAILED)} failed, "
        f"{CHECKS} checks passed; total {time.perf_counter() - _t0:.1f}s"
    )
    if FAILED:
        print("failed sections:", ", ".join(FAILED))
    return len(FAILED)


if __name__ == "__main__":
    sys.exit(main())
