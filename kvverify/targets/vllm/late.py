"""The late capabilities: release symbols the operator checks import only when asked.

Part of the one place release differences are detected (:mod:`.compat` holds the up-front
probes, :func:`.compat.detect`); these are separate because their modules pull in transformers
or the compilation stack, which every ``--target vllm`` run would otherwise import.
"""

from __future__ import annotations

import importlib
import types
from collections.abc import Callable, Mapping
from typing import Any

#: Capabilities the operator checks (``kvverify check``: lengths, startup traps) use, whose
#: modules pull in transformers or the compilation stack — too heavy for :func:`detect`'s
#: up-front imports, so they are imported when first asked for, through :func:`late` (the one
#: reader): capability -> ((module, names), ...) (a name may be ``Class.member``), in import order (``vllm.config`` before
#: ``vllm.transformers_utils.config``). A release without one skips what needs it.
LATE_CAPABILITIES: Mapping[str, tuple[tuple[str, tuple[str, ...]], ...]] = {
    "max_model_len_derivation": (
        ("vllm.config", ()),
        ("vllm.transformers_utils.config", ("get_config", "get_hf_text_config")),
        ("vllm.transformers_utils.model_arch_config_convertor",
         ("MODEL_ARCH_CONFIG_CONVERTORS", "ModelArchConfigConvertorBase")),
        ("vllm.config.model", ("_get_and_verify_max_len",)),
    ),
    "cudagraph_resolution": (
        ("vllm.config.compilation", ("CompilationConfig", "CompilationConfig.resolve_cudagraph_mode_and_sizes",
                                     "CUDAGraphMode", "CompilationMode")),
        ("vllm.v1.attention.backend", ("AttentionCGSupport",)),
    ),
    "encoder_budget": (("vllm.v1.core.encoder_cache_manager", ("compute_mm_encoder_budget",)),),
}


def late(capability: str, version: str,
         import_module: Callable[[str], Any] = importlib.import_module) -> types.SimpleNamespace:
    """The names of a :data:`LATE_CAPABILITIES` entry, imported now (one namespace, by name).

    A release that lacks a module or a name raises
    :class:`~kvverify.targets.vllm.refusals.ReleaseLacks` naming the capability, the symbol and
    the release (the property or check that needs it skips, with that reason).
    """
    from kvverify.targets.vllm.refusals import ReleaseLacks

    found: dict[str, Any] = {}
    for module, names in LATE_CAPABILITIES[capability]:
        try:
            m = import_module(module)
        except ImportError as e:
            raise ReleaseLacks(version, f"lacks {capability} (no module {module}: {e})") from None
        for name in names:  # "Class.member": the class is kept, the member only checked
            head, *rest = name.split(".")
            obj: Any = m
            for part in (head, *rest):
                if not hasattr(obj, part):
                    raise ReleaseLacks(version, f"lacks {capability} (no {module}.{name})")
                obj = getattr(obj, part)
            found[head] = getattr(m, head)
    return types.SimpleNamespace(**found)


__all__ = ["LATE_CAPABILITIES", "late"]
