"""A request as the scheduler and the KV cache manager see it (upstream ``vllm/v1/request.py``).

Only what capacity and admission read: token ids (prompt + outputs), how many are
computed, the status, and the chained block hashes (kept up to date as tokens are
appended, at ``hash_block_size`` granularity, when prefix caching is on).
"""

from __future__ import annotations

import enum
import zlib
from collections.abc import Callable, Mapping, Sequence

from kvverify.errors import MAX_TOKENS, ConfigError, KVVerifyError, WorkerError
from kvverify.reference.validation import require_int
from kvverify.reference.pool import BlockHash


class RequestStatus(enum.Enum):
    """Upstream ``RequestStatus`` (the states this model reaches)."""

    WAITING = "waiting"
    #: an asynchronous KV load through the connector is in flight (upstream, same name)
    WAITING_FOR_REMOTE_KVS = "waiting_for_remote_kvs"
    RUNNING = "running"
    PREEMPTED = "preempted"
    FINISHED_LENGTH_CAPPED = "finished_length_capped"
    #: ended by the engine, e.g. its KV load failed under ``kv_load_failure_policy="fail"``
    FINISHED_ERROR = "finished_error"
    #: ended from outside the step: the engine core's abort (a client that disconnects)
    FINISHED_ABORTED = "finished_aborted"

    @property
    def is_finished(self) -> bool:
        return self in (RequestStatus.FINISHED_LENGTH_CAPPED, RequestStatus.FINISHED_ERROR,
                        RequestStatus.FINISHED_ABORTED)


def fake_output_token(request_id: str, position: int) -> int:
    """Deterministic stand-in for a sampled token: ``crc32("id:pos") % 32000``."""
    return zlib.crc32(f"{request_id}:{position}".encode()) % 32000


def check_sampled_within_max_model_len(num_computed_tokens: int, max_model_len: int) -> None:
    """The model runner's check on a request that samples this step: its token lands at
    ``num_computed_tokens`` (after the schedule: the step's scheduled tokens, draft
    placeholders included) ``+ 1``, which must stay within ``max_model_len`` (upstream's
    ``RuntimeError: Sampled token IDs exceed the max model length``, an engine-killing crash:
    a padded decode with no room left for its sampled token, #53812). Raises
    :class:`~kvverify.errors.WorkerError`; every fake worker (the reference's, the vLLM
    adapters') runs it, so a scheduler that leaves no room is caught on any target."""
    if num_computed_tokens + 1 > max_model_len:
        raise WorkerError("Sampled token IDs exceed the max model length. Total number of tokens: "
                          f"{num_computed_tokens + 1} > max_model_len: {max_model_len}")


def check_scheduled_token_counts(num_scheduled_tokens: Mapping[str, int]) -> None:
    """The model runner takes a positive token count for every request a step schedules
    (upstream's GPU model runner expands the counts with ``np.repeat``, which raises on a negative
    one, and ``Scheduler.update_from_output`` asserts ``num_tokens_scheduled > 0``): a scheduler
    that schedules a request for ``<= 0`` tokens kills the engine (0.25 - 0.27: a padded new decode
    scheduled again while its batch is in flight, flaw ``spec_pad_rescheduled_negative``). Raises
    :class:`~kvverify.errors.WorkerError`; every fake worker runs it."""
    for rid, n in num_scheduled_tokens.items():
        if n <= 0:
            raise WorkerError(f"scheduled {n} tokens for request {rid}: the model runner takes a positive count "
                              "(np.repeat: repeats may not contain negative values; update_from_output asserts "
                              "num_tokens_scheduled > 0)")


class Request:
    """A generation request: prompt, ``max_tokens``, progress and block hashes."""

    __slots__ = (
        "_all_token_ids",
        "_block_hasher",
        "arrival_step",
        "block_hashes",
        "drop_stale_output",
        "is_prefill_chunk",
        "last_sched_seq",
        "max_tokens",
        "num_computed_tokens",
        "num_encoder_tokens",
        "num_in_flight_tokens",
        "num_preemptions",
        "num_stale_output_tokens",
        "priority",
        "prompt_token_ids",
        "request_id",
        "shared_prefix_boundary",
        "spec_token_ids",
        "status",
    )

    def __init__(self, request_id: str, prompt_token_ids: Sequence[int], max_tokens: int, *,
                 num_encoder_tokens: int = 0, arrival_step: int = 0, priority: int = 0,
                 block_hasher: Callable[[Request], list[BlockHash]] | None = None) -> None:
        if not isinstance(request_id, str) or not request_id:
            raise ConfigError("request_id", request_id, "must be a non-empty str")
        if len(prompt_token_ids) < 1:
            raise ConfigError("prompt_token_ids", list(prompt_token_ids),
                              "must hold at least 1 token (the prompt cannot be empty)")
        for i, tok in enumerate(prompt_token_ids):
            if type(tok) is not int or not 0 <= tok < 2**31:
                require_int(f"prompt_token_ids[{i}]", tok, minimum=0, maximum=2**31 - 1)
        require_int("max_tokens", max_tokens, minimum=1, maximum=MAX_TOKENS)
        require_int("num_encoder_tokens", num_encoder_tokens, minimum=0, maximum=MAX_TOKENS)
        require_int("arrival_step", arrival_step, minimum=0, maximum=MAX_TOKENS)
        require_int("priority", priority, minimum=-(2**31), maximum=2**31 - 1)
        self.request_id = request_id
        self.prompt_token_ids = tuple(prompt_token_ids)
        self.max_tokens = max_tokens
        self.num_encoder_tokens = num_encoder_tokens
        self.arrival_step = arrival_step
        #: upstream ``Request.priority``: lower is served first under the priority policy
        self.priority = priority
        self._all_token_ids: list[int] = list(self.prompt_token_ids)
        self.num_computed_tokens = 0
        self.status = RequestStatus.WAITING
        self.block_hashes: list[BlockHash] = []
        self.num_preemptions = 0
        #: scheduled but not yet settled tokens (always 0 between synchronous steps)
        self.num_in_flight_tokens = 0
        #: upstream ``Request.last_sched_seq``: the scheduler's non-empty step counter when the
        #: request was last scheduled (fences its deferred block free)
        self.last_sched_seq = 0
        #: upstream ``num_stale_output_tokens`` / ``drop_stale_output``: output of steps still in
        #: flight when the request was preempted (delivered, or dropped, when it returns)
        self.num_stale_output_tokens = 0
        self.drop_stale_output = False
        #: upstream ``Request.is_prefill_chunk``: the last scheduled chunk left prompt to compute
        self.is_prefill_chunk = False
        #: upstream ``Request.spec_token_ids``: draft tokens to verify (the fake model runner
        #: proposes none; padded decode steps schedule ``-1`` placeholders instead)
        self.spec_token_ids: list[int] = []
        #: upstream ``Request.shared_prefix_boundary``: the junction of a shared prefix a
        #: sparse-retention group has not cached yet (set by the prefix lookup, 0 if none)
        self.shared_prefix_boundary = 0
        self._block_hasher = block_hasher
        self.update_block_hashes()

    def set_block_hasher(self, block_hasher: Callable[[Request], list[BlockHash]] | None) -> None:
        """Attach the engine's hasher (upstream builds requests with it) and hash."""
        if self.block_hashes:
            raise KVVerifyError(f"request {self.request_id} is already hashed")
        self._block_hasher = block_hasher
        self.update_block_hashes()

    def update_block_hashes(self) -> None:
        """Hash any new full blocks (upstream ``Request.update_block_hashes``)."""
        if self._block_hasher is not None:
            self.block_hashes.extend(self._block_hasher(self))

    def append_output_token_ids(self, token_id: int) -> None:
        """Append one sampled token and hash newly full blocks."""
        self._all_token_ids.append(token_id)
        self.update_block_hashes()

    @property
    def all_token_ids(self) -> list[int]:
        return self._all_token_ids

    @property
    def num_tokens(self) -> int:
        """Prompt plus output tokens so far."""
        return len(self._all_token_ids)

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self._all_token_ids) - len(self.prompt_token_ids)

    @property
    def output_token_ids(self) -> list[int]:
        return self._all_token_ids[len(self.prompt_token_ids):]

    def is_finished(self) -> bool:
        return self.status.is_finished

    def __repr__(self) -> str:
        return (f"Request({self.request_id!r}, prompt={self.num_prompt_tokens}, "
                f"outputs={self.num_output_tokens}/{self.max_tokens}, "
                f"computed={self.num_computed_tokens}, {self.status.value})")
