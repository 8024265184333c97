"""Planning and block sizes on upstream: ``get_kv_cache_configs`` and its helpers, translated back.

* :func:`plan`: the release's layout resolution (where it has one), grouping and
  ``get_kv_cache_configs`` (auto-fit and the startup check included); a ``ValueError`` of
  the check becomes ``starts=False`` with the message, as the reference records it. The
  plan is translated back into kvverify's :class:`~kvverify.reference.planner.StartupPlan`.
* :func:`resolve_block_sizes`, :func:`coordinator_accepts`,
  :func:`resolve_cache_hit_alignment_tokens`: the release's ``resolve_kv_cache_block_sizes``,
  its KV cache coordinator (whose constructor holds the divisibility assertions) and its
  cache-hit alignment; a release without the resolver skips with the reason.

What the release has is asked of :class:`~.compat.Compat` (``target.compat``), never probed here.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from kvverify.errors import ConfigError, KVVerifyError
from kvverify.reference import specs as kv
from kvverify.reference.block_sizes import BlockSizeError
from kvverify.reference.config import VllmConfig
from kvverify.reference.grouping import GroupingError
from kvverify.reference.ops import cdiv
from kvverify.reference.planner import KVCacheConfig, StartupPlan
from kvverify.targets.vllm import compat
from kvverify.targets.vllm.config import runtime_len, upstream_config
from kvverify.targets.vllm.env import LOCK, Upstream, preserved_environ
from kvverify.targets.vllm.findings import CheckRules
from kvverify.targets.vllm.knobs import apply_kv_cache_config_knobs
from kvverify.targets.vllm.refusals import lacks, unsupported
from kvverify.targets.vllm.specs import Translator

T = TypeVar("T")

if TYPE_CHECKING:
    from kvverify.targets.vllm.target import VllmTarget

#: Startup-check refusals (``ValueError`` messages of ``get_kv_cache_configs``).
CHECK_MESSAGES = ("No available memory", "To serve at least one request", "Cannot auto-fit")


def is_check_refusal(e: BaseException) -> bool:
    return isinstance(e, ValueError) and any(m in str(e) for m in CHECK_MESSAGES)


@contextlib.contextmanager
def startup_checks_disabled(up: Upstream) -> Iterator[None]:
    """Let ``get_kv_cache_configs`` finish after a refusal, to learn what it would allocate
    (the release's check helpers, ``Compat.check_helpers``, answer nothing meanwhile)."""
    planning = up.planning
    saved = {n: getattr(planning, n) for n in up.compat.check_helpers}
    for n in saved:
        setattr(planning, n, lambda *a, **k: None)
    try:
        yield
    finally:
        for n, fn in saved.items():
            setattr(planning, n, fn)


def group_blocks(spec: Any, vc: Any, up: Upstream) -> int:
    """Blocks one max_model_len request holds in a group (``_max_memory_usage_bytes_from_groups``)."""
    if up.compat.uniform_pages and isinstance(spec, up.iface.UniformTypeKVCacheSpecs):
        return int(spec.max_memory_usage_pages(vc))
    return cdiv(int(spec.max_memory_usage_bytes(vc)), int(spec.page_size_bytes))


def resolve_layout(target: VllmTarget, vc: Any, specs: Sequence[Mapping[str, Any]]) -> None:
    up = target.up
    if not up.compat.layout_resolution:
        return  # <= 0.28: one layout, nothing to resolve
    up.resolve_kv_cache_layout(vc, [list(target.supported_layouts)], [s for w in specs for s in w.values()])


def _global_groups(up: Upstream, vc: Any, specs: list[dict[str, Any]]) -> list[Any]:
    """The whole model's groups: ``get_global_kv_cache_groups`` (>= 0.33) or, before it, what
    ``get_kv_cache_configs`` computes inside (``get_kv_cache_groups`` on the merged specs)."""
    p = up.planning
    if up.compat.global_groups:
        return list(p.get_global_kv_cache_groups(vc, specs))
    merged: dict[str, Any] = {}
    for w in specs:
        for name, spec in w.items():
            merged.setdefault(name, spec)
    return list(p.get_kv_cache_groups(vc, merged))


def _configs(up: Upstream, vc: Any, specs: list[dict[str, Any]], memory: list[int], groups: list[Any]) -> list[Any]:
    p = up.planning
    if up.compat.global_groups:
        return list(p.get_kv_cache_configs(vc, specs, memory, groups))
    return list(p.get_kv_cache_configs(vc, specs, memory))


def _project(up: Upstream, groups: list[Any], worker: Mapping[str, Any]) -> list[Any]:
    p = up.planning
    if up.compat.worker_projection:
        return list(p._project_kv_cache_groups_to_worker(groups, worker))
    # <= 0.32 projects inline: each group keeps the worker's layers, empty groups stay
    # (as kv_cache_utils.get_kv_cache_configs does before its per-worker check)
    return [type(g)([n for n in g.layer_names if n in worker], g.kv_cache_spec) for g in groups]


def _bytes_per_block(up: Upstream, vc: Any, groups: list[Any]) -> int:
    p = up.planning
    if not groups:
        return 0
    how = up.compat.pool_bytes
    if how == "builder":
        return int(p._pool_bytes_per_block_from_builder(up.get_kv_cache_config_builder(vc), vc, groups))
    if how == "vllm_config":
        return int(p._pool_bytes_per_block(vc, groups))
    if how == "groups":  # 0.22 and 0.29 - 0.31 take only the groups
        return int(p._pool_bytes_per_block(groups))
    # the page of one block summed over one layer per group and the layers of the largest group
    page = int(groups[0].kv_cache_spec.page_size_bytes)
    return int(page * max(len(g.layer_names) for g in groups))


def _probe_starts(target: VllmTarget, memory_pages: int, override: int | None) -> bool:
    """Does the release's own ``get_kv_cache_configs`` start a one-layer model (B=2, L=4)
    on ``memory_pages`` pages (and ``num_gpu_blocks_override``)? One request needs 2 blocks
    whether the check plans ``L`` or ``L - 1`` tokens (finding F3's fix), so the answer
    does not depend on that patch."""
    up = target.up
    spec = kv.FullAttentionSpec(block_size=2, num_kv_heads=1, head_size=8, dtype="float32")
    tr = Translator(up)
    specs = [{"probe.0": tr.spec(spec)}]
    config = VllmConfig(block_size=2, max_model_len=4, num_gpu_blocks_override=override,
                        kv_cache_memory_bytes=max(memory_pages, 1) * spec.page_size_bytes,
                        enable_prefix_caching=False)
    vc = upstream_config(config)
    resolve_layout(target, vc, specs)
    groups = _global_groups(up, vc, specs)
    try:
        _configs(up, vc, specs, [memory_pages * specs[0]["probe.0"].page_size_bytes], groups)
    except ValueError:
        return False
    return True


def _probe_two_groups_start(target: VllmTarget) -> bool:
    """Does the release's own ``get_kv_cache_configs`` start a full + sliding-window model
    (B=2, L=8, window 4: 4 + 5 blocks a request, one layer per group, equal pages) on 5 pages?
    A check that sizes the groups by the first one (``_max_memory_usage_bytes_from_groups``'s
    ``any_spec = kv_cache_groups[0]``, before #36030: 4 blocks) accepts, null block reserved or
    not; one that counts every group (9 blocks) refuses."""
    up = target.up
    full = kv.FullAttentionSpec(block_size=2, num_kv_heads=1, head_size=8, dtype="float32")
    window = kv.SlidingWindowSpec(block_size=2, num_kv_heads=1, head_size=8, dtype="float32", sliding_window=4)
    tr = Translator(up)
    specs = [{"probe.0": tr.spec(full), "probe.1": tr.spec(window)}]
    page = full.page_size_bytes
    config = VllmConfig(block_size=2, max_model_len=8, kv_cache_memory_bytes=5 * page,
                        enable_prefix_caching=False)
    vc = upstream_config(config)
    resolve_layout(target, vc, specs)
    groups = _global_groups(up, vc, specs)
    try:
        _configs(up, vc, specs, [5 * page], groups)
    except ValueError:
        return False
    return True


def memory_rules(target: VllmTarget) -> CheckRules:
    """``(override_counted, reserves_null_block, counts_every_group)`` of the release's startup
    check, probed once on its own planner: does ``num_gpu_blocks_override`` replace the profiled
    memory in the check (from 0.2x), does the check keep the null block out of the usable memory
    (from 0.3x; before, a pool of exactly one request's blocks starts with one block short), and
    does it count every KV cache group's blocks (from 0.19, #36030; before, every group is sized
    by the first: zoo flaw ``autofit_first_group_only``)? The plan's ``available_memory`` /
    ``check_memory`` report what the check saw."""
    up = target.up
    rules = up.memory_rules
    if rules is None:
        with LOCK, preserved_environ():
            counted = _probe_starts(target, 1, 4)         # 1 page profiled, 4 blocks by override
            reserves = not _probe_starts(target, 2, None)  # exactly 2 pages for 2 blocks
            every_group = not _probe_two_groups_start(target)
        rules = up.memory_rules = CheckRules(counted, reserves, every_group)
    return rules


def plan(target: VllmTarget, vllm_config: VllmConfig, kv_cache_specs: Sequence[Mapping[str, kv.KVCacheSpec]],
         available_memory: Sequence[int] | None = None) -> StartupPlan:
    """The release's startup plan (see the module docstring)."""
    from kvverify.reference.planner import _available_memory

    up = target.up
    if not kv_cache_specs:
        raise ConfigError("kv_cache_specs", [], "must list at least one worker's specs")
    memory = _available_memory(vllm_config, available_memory, len(kv_cache_specs))
    tr = Translator(up)
    up_specs = [{n: tr.spec(s) for n, s in w.items()} for w in kv_cache_specs]

    def attempt(checks: bool) -> tuple[Any, list[Any], list[Any]]:
        vc = upstream_config(vllm_config)
        try:
            resolve_layout(target, vc, up_specs)
            groups = _global_groups(up, vc, [dict(w) for w in up_specs])
        except (AssertionError, ValueError, NotImplementedError, TypeError) as e:
            if ((isinstance(e, NotImplementedError) and _has_padded_page(kv_cache_specs))
                    or (isinstance(e, AssertionError) and _raised_in(e, "unify_kv_cache_spec_page_size"))):
                # page unification that pads (a padded layer next to others, >= 0.32) is missing:
                # the release refuses the model at startup; not a capacity verdict. Before Mamba
                # pages were padded there (0.28.0 has it, 0.19.1 not) a Mamba page smaller than
                # the largest is scaled by its block size, does not grow, and fails the assert
                unsupported(f"vLLM {target.version} cannot unify the page sizes of padded layers "
                            f"(upstream grouping: {e})")
            raise GroupingError(f"upstream grouping refused the specs: {type(e).__name__}: {e}") from e
        with contextlib.ExitStack() as stack:
            if not checks:
                stack.enter_context(startup_checks_disabled(up))
            configs = _configs(up, vc, [dict(w) for w in up_specs], list(memory), groups)
        return vc, groups, configs

    with LOCK, preserved_environ():
        (vc, groups, configs), error = checked_attempt(attempt, target.version)
        projected = [_project(up, groups, w) for w in up_specs]
        # a worker whose groups hold no layer (a pipeline stage without KV cache layers) is
        # reported as planning holds none: only a release with the F15 patch gets here with one
        holds = [bool(g) and any(x.layer_names for x in g) for g in projected]
        bpb_worker = [_bytes_per_block(up, vc, g) if k else 0 for g, k in zip(projected, holds)]
        override = vllm_config.num_gpu_blocks_override
        rules = memory_rules(target)
        counted, reserves = rules.override_counted, rules.reserves_null_block
        effective = [override * b if (override is not None and k and counted) else m
                     for k, b, m in zip(holds, bpb_worker, memory)]
        check_mem = [m - b if (k and reserves) else m for k, b, m in zip(holds, bpb_worker, effective)]
        bpb = _bytes_per_block(up, vc, groups)
        resolved_len = vc.model_config.max_model_len
        blocks_per_group = tuple(group_blocks(g.kv_cache_spec, vc, up) for g in groups)
    auto_fit_len = None
    if vllm_config.auto_max_model_len and (error is None or "Cannot auto-fit" not in error):
        auto_fit_len = resolved_len
    config = vllm_config.with_max_model_len(resolved_len)
    return StartupPlan(
        vllm_config=config, groups=tr.groups_back(groups),
        kv_cache_configs=tuple(tr.kv_cache_config_back(c) for c in configs),
        available_memory=tuple(effective), check_memory=tuple(check_mem), bytes_per_block=bpb,
        blocks_per_group=blocks_per_group, starts=error is None, error=error,
        auto_fit_max_model_len=auto_fit_len,
        worker_groups=tuple(tr.groups_back(g) for g in projected))


def checked_attempt(attempt: Callable[[bool], T], version: str) -> tuple[T, str | None]:
    """``attempt(checks=True)``; on the startup check's refusal, the plan past the check
    (``attempt(checks=False)``, to describe the refused plan) and the refusal's message.

    Another ``ValueError`` is upstream's planning failing (a :class:`KVVerifyError` saying so,
    e.g. a pydantic ``ValidationError`` naming a field). A crash of the second attempt is not the
    engine's answer: the engine stopped at its check, planning on past it is kvverify's doing
    (:class:`CheckRefusedUnplannable`, which carries the refusal)."""
    try:
        return attempt(True), None
    except KVVerifyError:
        raise
    except ValueError as e:
        if not is_check_refusal(e):
            raise KVVerifyError(f"upstream planning failed: {type(e).__name__}: {e}") from e
        error = str(e)
    try:
        return attempt(False), error
    except (ArithmeticError, AssertionError, ValueError, TypeError, IndexError) as crash:
        raise CheckRefusedUnplannable(version, error, crash) from crash


class CheckRefusedUnplannable(KVVerifyError):
    """The release's startup check refused the deployment, and the plan past the check, which
    the adapter builds to describe a refused plan (groups, tensors), cannot be built either (e.g.
    ``num_gpu_blocks_override=0``: 0.22.0's check refuses with "No available memory", then the
    cross-worker block minimum divides by the override). The engine's answer is the refusal."""

    def __init__(self, version: str, refusal: str, crash: BaseException) -> None:
        self.refusal = refusal
        super().__init__(f"{refusal} (vLLM {version}'s startup check refused; the plan past the check "
                         f"cannot be described: {type(crash).__name__}: {crash})")


def _raised_in(e: BaseException, function: str) -> bool:
    """Whether ``e`` was raised inside upstream's ``function`` (its traceback's innermost frames)."""
    tb, names = e.__traceback__, []
    while tb is not None:
        names.append(tb.tb_frame.f_code.co_name)
        tb = tb.tb_next
    return function in names


def _has_padded_page(kv_cache_specs: Sequence[Mapping[str, kv.KVCacheSpec]]) -> bool:
    return any(getattr(s, "page_size_padded", None) is not None for w in kv_cache_specs for s in w.values())


def _one_worker(target: VllmTarget, vllm_config: VllmConfig,
                kv_cache_spec: Mapping[str, kv.KVCacheSpec]) -> tuple[Any, dict[str, Any]]:
    tr = Translator(target.up)
    specs = {n: tr.spec(s) for n, s in kv_cache_spec.items()}
    vc = upstream_config(vllm_config)
    resolve_layout(target, vc, [specs])
    return vc, specs


def estimate_max_model_len(target: VllmTarget, vllm_config: VllmConfig,
                           kv_cache_spec: Mapping[str, kv.KVCacheSpec], available_memory: int) -> int:
    """Upstream's public ``estimate_max_model_len``."""
    if "estimate_max_model_len" not in target.compat.capacity_helpers:
        lacks(target.version, "has no public estimate_max_model_len")
    with LOCK, preserved_environ():
        vc, specs = _one_worker(target, vllm_config, kv_cache_spec)
        return int(target.up.estimate_max_model_len(vc, specs, available_memory))


def check_enough_kv_cache_memory(target: VllmTarget, vllm_config: VllmConfig,
                                 kv_cache_spec: Mapping[str, kv.KVCacheSpec], available_memory: int) -> str | None:
    """Upstream's public ``check_enough_kv_cache_memory``: ``None`` if it passes, else the message."""
    if "check_enough_kv_cache_memory" not in target.compat.capacity_helpers:
        lacks(target.version, "has no public check_enough_kv_cache_memory")
    with LOCK, preserved_environ():
        vc, specs = _one_worker(target, vllm_config, kv_cache_spec)
        try:
            target.up.check_enough_kv_cache_memory(vc, specs, available_memory)
        except ValueError as e:
            return str(e)
    return None


# ------------------------------------------------------------------------ block sizes

def _no_resolver(target: VllmTarget) -> None:
    if not target.compat.block_size_resolution:
        lacks(target.version, target.compat.lacking()["block_sizes"])


def resolve_block_sizes(target: VllmTarget, kv_cache_config: KVCacheConfig, vllm_config: VllmConfig) -> tuple[int, int]:
    """Upstream ``resolve_kv_cache_block_sizes`` on the scheduler's view of the config.

    Its ``ValueError`` (invalid ``prefix_match_unit``) is a :class:`BlockSizeError`;
    any other exception (an assertion) is a :class:`KVVerifyError` naming it.
    """
    _no_resolver(target)
    up = target.up
    tr = Translator(up)
    cfg = up.generate_scheduler_kv_cache_config([tr.kv_cache_config(kv_cache_config)])
    with LOCK, preserved_environ():
        vc = upstream_config(vllm_config, max_model_len=runtime_len(vllm_config))
        try:
            sizes = up.resolve_kv_cache_block_sizes(cfg, vc)
        except ValueError as e:
            raise BlockSizeError(str(e)) from e
        except Exception as e:
            raise KVVerifyError(f"upstream resolve_kv_cache_block_sizes raised "
                                f"{type(e).__name__}: {e}") from e
        return int(sizes[0]), int(sizes[1])


#: keyword -> neutral value for ``get_kv_cache_coordinator`` across releases
COORDINATOR_NEUTRAL = {"max_in_flight_tokens": None, "dcp_world_size": 1, "pcp_world_size": 1,
                       "scheduler_block_size": None, "hash_block_size": None}


def coordinator_kwargs(target: VllmTarget, cfg: Any, max_model_len: int, vllm_config: VllmConfig,
                       scheduler_block_size: int | None, hash_block_size: int | None) -> dict[str, Any]:
    caps = target.up.compat
    kw: dict[str, Any] = dict(kv_cache_config=cfg, max_model_len=max_model_len,
              max_in_flight_tokens=vllm_config.max_in_flight_tokens, use_eagle=False,
              enable_caching=vllm_config.enable_prefix_caching, enable_kv_cache_events=False,
              dcp_world_size=1, pcp_world_size=1, scheduler_block_size=scheduler_block_size,
              hash_block_size=hash_block_size)
    if not caps.has("get_kv_cache_coordinator", "max_in_flight_tokens"):
        kw["max_in_flight_tokens"] = None  # the release sizes no in-flight window
        if caps.in_flight_param("get_kv_cache_coordinator") == "max_num_batched_tokens":
            # 0.20 - 0.25: the window is the scheduler's token budget (as their Scheduler passes)
            kw["max_num_batched_tokens"] = vllm_config.max_num_batched_tokens
    if not caps.block_size_resolution:
        kw["scheduler_block_size"] = kw["hash_block_size"] = None
    elif not caps.coordinator_block_sizes:
        # 0.20 - 0.22 resolve a scheduler block size but hand it to the Scheduler only
        # (Scheduler(block_size=...)); their coordinator receives the hash block size alone
        kw["scheduler_block_size"] = None
    if caps.has("get_kv_cache_coordinator", "block_size") and not caps.has("get_kv_cache_coordinator",
                                                                            "hash_block_size"):
        kw["block_size"] = hash_block_size
    try:
        return compat.fit_kwargs(caps, "get_kv_cache_coordinator", kw, COORDINATOR_NEUTRAL)
    except compat.KnobMissing as e:
        unsupported(f"vLLM {caps.version}: {e}")


def coordinator_accepts(target: VllmTarget, kv_cache_config: KVCacheConfig, vllm_config: VllmConfig,
                        scheduler_block_size: int, hash_block_size: int) -> str | None:
    """Build upstream's KV cache coordinator; ``None`` if it accepts, else its error."""
    _no_resolver(target)
    up = target.up
    tr = Translator(up)
    cfg = apply_kv_cache_config_knobs(
        up.compat, up.generate_scheduler_kv_cache_config([tr.kv_cache_config(kv_cache_config)]), vllm_config)
    kw = coordinator_kwargs(target, cfg, runtime_len(vllm_config), vllm_config,
                            scheduler_block_size, hash_block_size)
    try:
        up.get_kv_cache_coordinator(**kw)
    except Exception as e:  # noqa: BLE001 - the constructor's assertions are the answer
        return f"{type(e).__name__}: {e}"
    return None


def resolve_cache_hit_alignment_tokens(target: VllmTarget, kv_cache_config: KVCacheConfig,
                                       vllm_config: VllmConfig, scheduler_block_size: int,
                                       hash_block_size: int) -> int:
    """The release's ``kv_cache_utils.resolve_cache_hit_alignment_tokens`` on the scheduler's
    view of a kvverify ``KVCacheConfig``; a release without it skips with the reason."""
    up = target.up
    if not up.compat.cache_hit_alignment:
        lacks(target.version, "has no resolve_cache_hit_alignment_tokens")
    cfg = apply_kv_cache_config_knobs(
        up.compat, up.generate_scheduler_kv_cache_config([Translator(up).kv_cache_config(kv_cache_config)]),
        vllm_config)
    with LOCK, preserved_environ():
        vc = upstream_config(vllm_config, max_model_len=runtime_len(vllm_config))
        return int(up.resolve_cache_hit_alignment_tokens(cfg, vc, scheduler_block_size, hash_block_size))


__all__ = ["check_enough_kv_cache_memory", "coordinator_accepts", "estimate_max_model_len", "plan",
           "resolve_block_sizes", "resolve_cache_hit_alignment_tokens"]
