"""Release differences, read off the installed SGLang's code (capability detection, never a
version list): which capabilities it offers, how its constructors are called, which
attributes a method reads. Anything the adapter cannot map is :class:`SglangDriftError`
(or, for a whole capability, the reason its target's ``lacks`` gives) — never a defect or a pass.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Callable
from typing import Any

from kvverify.targets.sglang.env import SglangDriftError, load
from kvverify.targets.sglang_contract import SglangCapability

#: capability -> (module, attribute path) that must exist for it
REQUIRED: dict[SglangCapability, tuple[tuple[str, str], ...]] = {
    SglangCapability.POOL: (("sglang.srt.model_executor.pool_configurator", "DefaultPoolConfigurator.calculate_pool_sizes"),
                            ("sglang.srt.model_executor.pool_configurator", "MemoryPoolConfig"),
                            ("sglang.srt.mem_cache.allocator", "PagedTokenToKVPoolAllocator")),
    SglangCapability.ADMISSION: (("sglang.srt.managers.utils", "validate_input_length"),
                                 ("sglang.srt.managers.scheduler", "Scheduler.init_req_max_new_tokens"),
                                 ("sglang.srt.managers.tp_worker", "TpModelWorker.get_worker_info"),
                                 ("sglang.srt.managers.schedule_policy", "PrefillAdder.add_one_req")),
    SglangCapability.RETRACTION: (("sglang.srt.managers.schedule_batch", "ScheduleBatch.check_decode_mem"),
                                  ("sglang.srt.managers.schedule_batch", "ScheduleBatch.retract_decode"),
                                  ("sglang.srt.managers.schedule_batch", "ScheduleBatch.prepare_for_decode"),
                                  ("sglang.srt.managers.schedule_batch", "ScheduleBatch.merge_batch")),
}
#: capabilities the adapter does not offer on any release, and why
NOT_OFFERED: dict[SglangCapability, str] = {
    SglangCapability.SCHEDULER: "SGLang's event loop (Scheduler.event_loop_normal) needs a model runner and "
                                "ZMQ sockets; the adapter drives its memory paths, the reference drives the loop",
}


def _resolve(module: str, path: str) -> Any:
    obj: Any = load(module)
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


def detect() -> tuple[frozenset[SglangCapability], dict[SglangCapability, str]]:
    """The capabilities this release offers, and the reason for each one it does not."""
    offered, missing = set(), dict(NOT_OFFERED)
    for cap, needs in REQUIRED.items():
        for module, path in needs:
            try:
                _resolve(module, path)
            except ImportError as e:
                missing[cap] = f"{module} does not import on a CPU-only install ({type(e).__name__}: {e})"[:200]
                break
            except AttributeError as e:
                missing[cap] = f"{module}.{path} is not in this release ({e})"[:200]
                break
        else:
            offered.add(cap)
    if paged_allocator_runs_on_cpu():
        offered.add(SglangCapability.PAGED)
    else:
        missing[SglangCapability.PAGED] = ("PagedTokenToKVPoolAllocator launches Triton kernels unconditionally "
                                           "(no CPU path): page_size > 1 needs a GPU")
    return frozenset(offered), missing


def call_kw(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    """Call ``fn`` with the keyword arguments its signature accepts; a required parameter the
    adapter does not supply is drift, named."""
    sig = inspect.signature(fn)
    params = sig.parameters
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        use = kwargs
    else:
        use = {k: v for k, v in kwargs.items() if k in params}
    try:
        sig.bind(*args, **use)
    except TypeError as e:
        raise SglangDriftError(f"{getattr(fn, '__qualname__', fn)}{sig}: the adapter cannot call it ({e})") from None
    return fn(*args, **use)


def returned_names(fn: Callable[..., Any]) -> list[str]:
    """The names in ``fn``'s last ``return (a, b, ...)`` (e.g. ``get_worker_info``'s tuple order)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    tuples = [n.value for n in ast.walk(tree) if isinstance(n, ast.Return) and isinstance(n.value, ast.Tuple)]
    if not tuples:
        raise SglangDriftError(f"{fn.__qualname__} no longer returns a tuple")
    return [ast.unparse(e) for e in tuples[-1].elts]


class Bare:
    """A stand-in ``self`` for one real method: exactly the attributes given; reading any other
    is drift, named (the method changed what it reads)."""

    def __init__(self, owner: str, **attrs: Any) -> None:
        object.__setattr__(self, "_owner", owner)
        for k, v in attrs.items():
            object.__setattr__(self, k, v)

    def __getattr__(self, name: str) -> Any:
        raise SglangDriftError(f"{object.__getattribute__(self, '_owner')} reads self.{name}, which the adapter "
                               f"does not provide (the release changed it)")


def paged_allocator_runs_on_cpu() -> bool:
    """Whether ``PagedTokenToKVPoolAllocator.alloc_extend`` has a plain-torch path (0.5.2x:
    ``use_triton_kernels`` / ``alloc_extend_naive``); earlier releases always launch Triton."""
    alloc_mod = load("sglang.srt.mem_cache.allocator")
    src = inspect.getsource(alloc_mod.PagedTokenToKVPoolAllocator.alloc_extend)
    return "alloc_extend_naive(" in src


def input_ids_container() -> type:
    """What ``Req`` takes as ``origin_input_ids``: ``array('q')`` (0.5.2x, annotated
    ``array[int]``) or a ``list`` (earlier, ``List[int]``), read off its signature."""
    from array import array
    sb = load("sglang.srt.managers.schedule_batch")
    ann = inspect.signature(sb.Req.__init__).parameters["origin_input_ids"].annotation
    return array if "array" in str(ann) else list
