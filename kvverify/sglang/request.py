"""``Req``: one request's state as the scheduler, ``PrefillAdder`` and ``ScheduleBatch`` see it."""

from __future__ import annotations

from dataclasses import dataclass, field

from kvverify.sglang.radix_cache import TreeNode


@dataclass(eq=False)
class Req:
    rid: str
    origin_input_ids: list[int]
    #: after ``init_req_max_new_tokens``
    max_new_tokens: int
    output_ids: list[int] = field(default_factory=list)
    #: pages matched in the radix cache (locked through ``last_node``), then its own pages
    prefix_pages: list[int] = field(default_factory=list)
    last_node: TreeNode | None = None
    own_pages: list[int] = field(default_factory=list)
    #: tokens whose KV slots are allocated (``kv_allocated_len``)
    seq_len: int = 0
    #: tokens of ``fill_ids`` already prefilled (chunked prefill resumes here)
    prefilled: int = 0
    finished_reason: str | None = None
    aborted: bool = False
    num_retractions: int = 0

    @property
    def fill_ids(self) -> list[int]:
        """``origin_input_ids + output_ids``: what a (re-)prefill computes."""
        return self.origin_input_ids + self.output_ids

    @property
    def pages(self) -> list[int]:
        return self.prefix_pages + self.own_pages

    def finished(self) -> bool:
        return self.finished_reason is not None

    def check_finished(self) -> None:
        """``update_finish_state``: done at ``max_new_tokens`` (no EOS in these workloads)."""
        if self.finished_reason is None and len(self.output_ids) >= self.max_new_tokens:
            self.finished_reason = "length"
