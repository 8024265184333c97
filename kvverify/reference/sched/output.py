"""What a step hands the worker and what comes back (upstream ``SchedulerOutput``,
``ModelRunnerOutput`` and ``KVConnectorOutput``, reduced to what capacity and progress read)."""

from __future__ import annotations

from dataclasses import dataclass, field

from kvverify.reference.connector import ConnectorMeta, TransferResults


@dataclass
class SchedulerOutput:
    """What one ``schedule()`` call decided (upstream ``SchedulerOutput``, reduced)."""

    step: int
    num_scheduled_tokens: dict[str, int] = field(default_factory=dict)
    scheduled_new_reqs: list[str] = field(default_factory=list)
    scheduled_resumed_reqs: list[str] = field(default_factory=list)
    scheduled_running_reqs: list[str] = field(default_factory=list)
    preempted_reqs: list[str] = field(default_factory=list)
    #: padded new decodes: ``-1`` draft placeholders to verify (upstream, same name)
    scheduled_spec_decode_tokens: dict[str, list[int]] = field(default_factory=dict)
    #: the connector's loads and sends to start with this step (``build_connector_meta``)
    kv_connector_metadata: ConnectorMeta | None = None
    #: requests admitted as asynchronous KV loads this step (status WAITING_FOR_REMOTE_KVS)
    async_load_reqs: list[str] = field(default_factory=list)
    #: filled by ``update_from_output``: requests that sampled a token / finished
    sampled_reqs: list[str] = field(default_factory=list)
    finished_reqs: list[str] = field(default_factory=list)

    @property
    def total_num_scheduled_tokens(self) -> int:
        return sum(self.num_scheduled_tokens.values())


@dataclass(frozen=True)
class ModelRunnerOutput:
    """The fake worker's answer for one step: sampled tokens per request, the connector's
    transfer report (upstream ``ModelRunnerOutput.kv_connector_output``)."""

    sampled_token_ids: dict[str, list[int]]
    kv_connector_output: TransferResults | None = None


__all__ = ["ModelRunnerOutput", "SchedulerOutput"]
