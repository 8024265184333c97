"""The ``vllm`` target: the reference's interface over an installed vLLM release.

One adapter for every supported release (:mod:`.support`: the range, written once); what
differs between releases is detected (which modules, functions, parameters and fields exist)
in one module, :mod:`.compat`. Importing kvverify never imports vLLM: every vLLM import is inside
:func:`.env.upstream`, called when a :class:`VllmTarget` is built. ``VllmTarget()`` raises
a clear :class:`~kvverify.errors.KVVerifyError` when vLLM is not importable (install it
with ``scripts/install-vllm-target.sh``) or is outside the supported range.

By concern:

* :mod:`.support` — the supported range and the pin.
* :mod:`.env` — environment, CPU platform, the lazy import (:class:`.env.Upstream`).
* :mod:`.compat` — the per-release differences (capabilities, keyword drift), every probe.
* :mod:`.findings` — which known findings each release has.
* :mod:`.refusals` — per-input rejection, per-property skip, per-release "lacks" skip.
* :mod:`.specs`, :mod:`.config`, :mod:`.knobs` — kvverify specs / plans / configs <-> upstream.
* :mod:`.planner` — ``plan``, the public capacity helpers, block sizes and the coordinator.
* :mod:`.runtime` — the pool, the KV cache manager, empty-pool admission.
* :mod:`.scheduler` — :class:`UpstreamScheduler`, the shim the workload driver steps.

Upstream objects are rebuilt from the plan on every call (upstream mutates its config),
so a plan is plain data and can be replayed. Knobs the adapter cannot express on upstream
(``kv_connector``, ``max_concurrent_batches != 1``, or a knob the installed release does
not have, e.g. ``num_prefill_lookahead_tokens`` before 0.31) reject the example; a capability the release
lacks skips the property with the reason.
"""

from __future__ import annotations

from kvverify.targets.vllm.config import upstream_config
from kvverify.targets.vllm.env import vllm_available
from kvverify.targets.vllm.refusals import (
    ReleaseLacks,
    TargetUnsupported,
    lacks,
    skip_unsupported,
    unsupported,
)
from kvverify.targets.vllm.runtime import UpstreamKVCacheManager
from kvverify.targets.vllm.scheduler import UpstreamScheduler
from kvverify.targets.vllm.support import REFERENCE_RELEASE, SUPPORTED
from kvverify.targets.vllm.target import VllmTarget

__all__ = ["REFERENCE_RELEASE", "SUPPORTED", "ReleaseLacks", "TargetUnsupported", "UpstreamKVCacheManager",
           "UpstreamScheduler", "VllmTarget", "lacks", "skip_unsupported", "unsupported",
           "upstream_config", "vllm_available"]
