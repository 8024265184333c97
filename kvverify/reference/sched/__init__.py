"""The scheduler, one idea per module (upstream ``vllm/v1/core/sched/``).

* :mod:`.scheduler` — ``Scheduler``: the running pass, preemption, ``update_from_output``;
* :mod:`.waiting` — the waiting pass: ``kv_holding_waiting`` first, skipped requests, async loads;
* :mod:`.kv_transfer` — the connector's scheduler side: promotion, the worker's report, the
  async-load reservation (#44560, #57104), delayed frees;
* :mod:`.fences` — deferred block frees behind step fences (two batches in flight);
* :mod:`.engine` — the batch queue (``EngineCore.step_with_batch_queue``);
* :mod:`.request_queue` — FCFS / priority queue operations;
* :mod:`.output` — ``SchedulerOutput`` and the fake worker's ``ModelRunnerOutput``.
"""

from kvverify.reference.sched.output import ModelRunnerOutput, SchedulerOutput
from kvverify.reference.sched.scheduler import (
    SCHEDULING_POLICIES,
    VARIANT_POLICIES,
    Scheduler,
    mamba_prefill_checkpoint_position,
    scheduling_policy_override,
)

__all__ = ["ModelRunnerOutput", "SCHEDULING_POLICIES", "Scheduler", "SchedulerOutput", "VARIANT_POLICIES",
           "mamba_prefill_checkpoint_position", "scheduling_policy_override"]
