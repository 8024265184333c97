"""SGLang's contract: its own Target sub-protocols, next to vLLM's (:mod:`kvverify.targets.base`).

vLLM reserves at admission; SGLang admits optimistically and retracts under decode
pressure, so its guarantees are stated for that design. An SGLang target (the SGLang
reference, :class:`kvverify.targets.sglang_reference.SglangReferenceTarget`, or the adapter
over an installed SGLang, :mod:`kvverify.targets.sglang`) answers :class:`SglangTargetBase`
(name, version, the capabilities it offers in ``sglang_capabilities``, and ``lacks`` — why
not, for the rest); each capability is one sub-protocol (:data:`SGLANG_CAPABILITY_PROTOCOLS`),
and a property needing a capability the target lacks calls :func:`require_capability` and is
skipped with the reason (a release without it is *unknown drift*, never a pass nor a defect).
:func:`kvverify.targets.sglang_conformance.check_sglang_target` checks a target against the
members these protocols declare. The guarantees, one property each
(:mod:`kvverify.sglang.props`):

1. **admission** — a request the input validation accepts (``validate_input_length`` and
   ``init_req_max_new_tokens``) is schedulable on an empty pool (``PrefillAdder.add_one_req``
   puts it in ``can_run_list``);
2. **retraction frees enough** — after ``retract_decode`` the kept requests' next decode
   step fits and is allocated; no slot is lost;
3. **retraction terminates** — with one request left that still cannot fit, it is aborted
   with a reason: never an assertion, a raise or a hang;
4. **pool** — the pool size derived at startup (``max_total_num_tokens``) is the pool the
   allocator has, and a budget that yields no pool is a clear startup error;
5. **progress** — under any workload every admitted request finishes or is aborted with a
   reason (judged by progress, :mod:`kvverify.sglang.driver`, not by a step cap).

Inputs a target cannot express raise :class:`~kvverify.targets.base.TargetUnsupported`.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from kvverify.sglang.config import SglangConfig
from kvverify.sglang.driver import SglangRequestSpec, SglangSchedulerLike, SglangWorkloadResult
from kvverify.targets.base import protocol_members, skip_or_raise


class SglangCapability(str, enum.Enum):
    POOL = "sglang_pool"              # pool sizing and the allocator built over it
    ADMISSION = "sglang_admission"    # validation + PrefillAdder on an empty pool
    RETRACTION = "sglang_retraction"  # check_decode_mem / retract_decode / prepare_for_decode
    SCHEDULER = "sglang_scheduler"    # the event loop over a workload
    PAGED = "sglang_paged"            # page_size > 1 allocation runs here (else the probes take page_size 1)


@dataclass(frozen=True)
class PoolProbe:
    """Startup: the derived pool, and the allocator built over it (``error``: a startup refusal)."""

    max_total_num_tokens: int | None
    allocator_size: int | None
    available_size: int | None
    error: str | None = None


@dataclass(frozen=True)
class AdmissionProbe:
    """One request offered to a fresh engine (empty pool)."""

    max_total_num_tokens: int
    max_req_input_len: int
    validation_error: str | None
    #: ``max_new_tokens`` after ``init_req_max_new_tokens`` (None: refused before)
    max_new_tokens: int | None
    #: ``admitted`` (the request joined ``can_run_list``), else the ``AddReqResult`` name, lower
    #: case (``no_token`` / ``other``); None: refused before
    add_result: str | None
    rem_total_tokens: float | None = None

    @property
    def accepted(self) -> bool:
        return self.validation_error is None and self.max_new_tokens is not None


@dataclass(frozen=True)
class DecodingReqSpec:
    """A request mid-decode: ``input_len`` prompt tokens prefilled, ``output_len >= 1`` tokens out."""

    input_len: int
    output_len: int
    max_new_tokens: int


@dataclass(frozen=True)
class RetractProbe:
    """One decode step of a batch on a tight pool: what ``check_decode_mem`` / ``retract_decode``
    / ``prepare_for_decode`` did."""

    fits_before: bool
    retracted: tuple[str, ...] = ()
    aborted: tuple[tuple[str, str], ...] = ()  # (rid, reason)
    kept: tuple[str, ...] = ()
    decode_allocated: bool = False
    #: the pool's pages, free + held by kept requests + cached, after the step (conservation)
    available_after: int = 0
    held_after: int = 0
    pool_tokens: int = 0
    error: str | None = None  # an exception out of the step: "Type: message"
    evidence: dict[str, int] = field(default_factory=dict)


class SglangPoolTarget(Protocol):
    """``SglangCapability.POOL``."""

    def derive_pool(self, config: SglangConfig) -> PoolProbe:
        """Size the pool as the engine starts, build its allocator, read its size back."""
        ...


class SglangAdmissionTarget(Protocol):
    """``SglangCapability.ADMISSION``."""

    def probe_admission(self, config: SglangConfig, input_len: int, max_new_tokens: int) -> AdmissionProbe:
        """Validate one request and offer it to ``PrefillAdder`` on an empty pool."""
        ...


class SglangRetractionTarget(Protocol):
    """``SglangCapability.RETRACTION``."""

    def probe_retraction(self, config: SglangConfig, batch: Sequence[DecodingReqSpec]) -> RetractProbe:
        """Bring ``batch`` to its decode state on the config's pool, then run one decode step's
        memory path: ``check_decode_mem``, ``retract_decode`` if it fails, ``prepare_for_decode``."""
        ...


class SglangSchedulerTarget(Protocol):
    """``SglangCapability.SCHEDULER``."""

    def scheduler(self, config: SglangConfig) -> SglangSchedulerLike:
        """A fresh scheduler over the config's pool."""
        ...

    def run_workload(self, config: SglangConfig, workload: Sequence[SglangRequestSpec]) -> SglangWorkloadResult:
        """Run ``workload`` to a verdict (:func:`kvverify.sglang.driver.run_workload`)."""
        ...


class SglangTargetBase(Protocol):
    """What every SGLang target answers, whatever capabilities it offers (as vLLM's
    :class:`~kvverify.targets.base.TargetBase`): properties ask these, never a name."""

    @property
    def name(self) -> str:
        """The name it reports under (``sglang-reference``; ``sglang-X.Y.Z`` for an installed release)."""
        ...

    @property
    def version(self) -> str:
        """The SGLang release it answers for (the reference: the release it mirrors)."""
        ...

    @property
    def sglang_capabilities(self) -> frozenset[SglangCapability]:
        """The capability groups it really offers."""
        ...

    def lacks(self, capability: SglangCapability) -> str | None:
        """``None`` if it offers ``capability``, else why not (the skip reason, naming the
        target or release)."""
        ...


class SglangTarget(SglangTargetBase, SglangPoolTarget, SglangAdmissionTarget, SglangRetractionTarget,
                   SglangSchedulerTarget, Protocol):
    """The whole SGLang contract; ``sglang_capabilities`` says which groups are really offered."""


class SglangPagedTarget(Protocol):
    """``SglangCapability.PAGED``: no methods of its own; the retraction probe takes any page size."""


#: capability -> the sub-protocol holding its methods
SGLANG_CAPABILITY_PROTOCOLS: dict[SglangCapability, type] = {
    SglangCapability.PAGED: SglangPagedTarget,
    SglangCapability.POOL: SglangPoolTarget,
    SglangCapability.ADMISSION: SglangAdmissionTarget,
    SglangCapability.RETRACTION: SglangRetractionTarget,
    SglangCapability.SCHEDULER: SglangSchedulerTarget,
}


def sglang_capability_methods(capability: SglangCapability) -> tuple[str, ...]:
    """The members a target offering ``capability`` must have (read off its sub-protocol)."""
    return tuple(protocol_members(SGLANG_CAPABILITY_PROTOCOLS[capability]))


#: the members every SGLang target has (read off :class:`SglangTargetBase`)
SGLANG_BASE_MEMBERS: tuple[str, ...] = tuple(protocol_members(SglangTargetBase))


def require_capability(target: SglangTargetBase, capability: SglangCapability) -> None:
    """Go on if ``target`` offers ``capability``; else skip the property with the target's
    reason (:func:`~kvverify.targets.base.skip_or_raise`)."""
    why = target.lacks(capability)
    if why is not None:
        skip_or_raise(why)


__all__ = ["AdmissionProbe", "DecodingReqSpec", "PoolProbe", "RetractProbe", "SGLANG_BASE_MEMBERS",
           "SGLANG_CAPABILITY_PROTOCOLS", "SglangAdmissionTarget", "SglangCapability", "SglangPagedTarget",
           "SglangPoolTarget", "SglangRetractionTarget", "SglangSchedulerTarget", "SglangTarget", "SglangTargetBase",
           "require_capability", "sglang_capability_methods"]
