"""The reference scheduler's public module (the implementation: :mod:`kvverify.reference.sched`).

Kept under upstream's module name so ``from kvverify.reference.scheduler import Scheduler``
works as before; see :mod:`kvverify.reference.sched.scheduler` for what one step does.
"""

from kvverify.reference.request import Request, RequestStatus
from kvverify.reference.sched.output import ModelRunnerOutput, SchedulerOutput
from kvverify.reference.sched.scheduler import (
    _POLICY_OVERRIDE,
    SCHEDULING_POLICIES,
    VARIANT_POLICIES,
    Scheduler,
    mamba_prefill_checkpoint_position,
    scheduling_policy_override,
)

__all__ = [
    "ModelRunnerOutput",
    "Request",
    "RequestStatus",
    "SCHEDULING_POLICIES",
    "Scheduler",
    "SchedulerOutput",
    "VARIANT_POLICIES",
    "_POLICY_OVERRIDE",
    "mamba_prefill_checkpoint_position",
    "scheduling_policy_override",
]
