"""Hypothesis strategies for the SGLang properties, biased toward the boundaries.

Each composite's first ``one_of`` branch is the boundary (a length at the validation bound,
a sequence at a page boundary, a pool one page short), so the shrinker lands on small
boundary cases; the second branch is uniform over the knob's range.

* :func:`page_sizes` — SGLang's ``--page-size`` values (1 … 64);
* :func:`configs` — ``SglangConfig`` with a pool of a few pages (``max_total_num_tokens``),
  a ``context_len`` below or above it, chunked prefill on or off;
* :func:`admission_cases` — a config and one request near the input bound;
* :func:`retraction_cases` — a config and a decoding batch filling its pool;
* :func:`pool_cases` — a byte budget (negative, zero, tiny, ample) and a cell size;
* :func:`workloads` — requests with arrivals, shared prefixes and decode lengths.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import strategies as st

from kvverify.sglang.config import SglangConfig
from kvverify.sglang.driver import SglangRequestSpec
from kvverify.targets.sglang_contract import DecodingReqSpec


PAGE_SIZES = (1, 2, 4, 8, 16, 32, 64)


def page_sizes(paged: bool = True) -> st.SearchStrategy[int]:
    """SGLang's page sizes (``paged=False``: 1 only, for a target without paged allocation)."""
    return st.sampled_from(PAGE_SIZES if paged else (1,))


@st.composite
def configs(draw: st.DrawFn, *, max_pages: int = 16, tokens_per_step: int | None = 1,
            paged: bool = True) -> SglangConfig:
    """A config whose pool is ``pages`` whole pages."""
    p = draw(page_sizes(paged), label="page_size")
    pages = draw(st.integers(1, max_pages), label="pages")
    pool = pages * p
    ctx = draw(st.one_of(st.just(pool + 1), st.integers(2, 4 * pool + 8)), label="context_len")
    # the chunk budget at the page size +- 1 first (chunks are cut at page boundaries)
    chunk = draw(st.one_of(st.sampled_from(sorted({max(1, p - 1), p, p + 1})), st.none(),
                           st.integers(1, 4 * pool)), label="chunked_prefill_size")
    k = tokens_per_step if tokens_per_step is not None else draw(st.integers(1, 4), label="tokens_per_step")
    return SglangConfig(page_size=p, context_len=ctx, max_total_num_tokens=pool, chunked_prefill_size=chunk,
                        max_prefill_tokens=max(pool, 1), tokens_per_step=k)


@dataclass(frozen=True)
class AdmissionCase:
    config: SglangConfig
    input_len: int
    max_new_tokens: int

    def describe(self) -> str:
        """One line: the config, the request."""
        return f"{self.config.describe()}; input_len={self.input_len} max_new_tokens={self.max_new_tokens}"


@st.composite
def admission_cases(draw: st.DrawFn) -> AdmissionCase:
    cfg = draw(configs())
    assert cfg.max_total_num_tokens is not None
    pool, p = cfg.max_total_num_tokens, cfg.page_size
    bound = min(cfg.context_len - 1, pool - 1) - 5
    near = [x for x in (bound - 1, bound - 2, pool - p, pool - p - 1, pool - 2 * p) if x >= 1]
    length = draw(st.one_of(st.sampled_from(near) if near else st.just(1), st.integers(1, pool + 8)),
                  label="input_len")
    max_new = draw(st.one_of(st.just(1 << 30), st.integers(0, 2 * pool)), label="max_new_tokens")
    return AdmissionCase(cfg, length, max_new)


@dataclass(frozen=True)
class RetractionCase:
    config: SglangConfig
    batch: tuple[DecodingReqSpec, ...]

    def describe(self) -> str:
        """One line: the config, then each decoding request (``seq`` = tokens held before the step)."""
        reqs = ", ".join(f"seq={b.input_len + b.output_len - 1} (in={b.input_len} out={b.output_len} "
                         f"max_new={b.max_new_tokens})" for b in self.batch)
        return f"{self.config.describe()}; batch: {reqs}"


@st.composite
def retraction_cases(draw: st.DrawFn, *, tokens_per_step: int | None = 1, paged: bool = True) -> RetractionCase:
    """A decoding batch whose pages fill the pool (or nearly), at page boundaries first."""
    cfg = draw(configs(max_pages=12, tokens_per_step=tokens_per_step, paged=paged))
    p, pool = cfg.page_size, cfg.max_total_num_tokens or 0
    n = draw(st.integers(1, 4), label="batch_size")
    batch = []
    for i in range(n):
        # seq_len = input + output - 1; at a page boundary the next decode starts a page
        seq = draw(st.one_of(st.integers(1, 3).map(lambda m: m * p), st.integers(1, 3 * p + 1)),
                   label=f"seq_len_{i}")
        out = draw(st.integers(1, min(seq, 3)), label=f"output_len_{i}")
        inp = seq - out + 1
        batch.append(DecodingReqSpec(inp, out, out + draw(st.integers(1, 8), label=f"more_{i}")))
    used = sum(-(-(b.input_len + b.output_len - 1) // p) * p for b in batch)
    pool = draw(st.one_of(st.just(used), st.integers(used, used + 2 * p)), label="pool")
    pool = pool // p * p
    cfg = SglangConfig(page_size=p, context_len=max(cfg.context_len, pool + 64), max_total_num_tokens=max(pool, p),
                       chunked_prefill_size=None, max_prefill_tokens=max(pool, 1),
                       tokens_per_step=cfg.tokens_per_step)
    return RetractionCase(cfg, tuple(batch))


@st.composite
def pool_cases(draw: st.DrawFn) -> SglangConfig:
    p = draw(page_sizes(), label="page_size")
    cell = draw(st.one_of(st.sampled_from([1, 2, 64, 4096]), st.integers(1, 1 << 20)), label="cell_size")
    avail = draw(st.one_of(st.sampled_from([-cell * 7, -1, 0, cell * p - 1, cell * p]),
                           st.integers(-(1 << 24), 1 << 26)), label="available_bytes")
    cap = draw(st.one_of(st.none(), st.integers(1, 1 << 16)), label="max_total_tokens")
    return SglangConfig(page_size=p, available_bytes=avail, cell_size=cell, max_total_tokens=cap)


@st.composite
def workloads(draw: st.DrawFn, config: SglangConfig, *, max_requests: int = 5) -> tuple[SglangRequestSpec, ...]:
    pool = config.max_total_num_tokens or 64
    n = draw(st.integers(1, max_requests), label="requests")
    out = []
    for i in range(n):
        length = draw(st.one_of(st.integers(1, max(1, pool // 2)), st.integers(1, pool + 4)), label=f"prompt_{i}")
        max_new = draw(st.one_of(st.integers(1, 12), st.integers(1, pool)), label=f"max_new_{i}")
        arrival = draw(st.one_of(st.just(0), st.integers(0, 12)), label=f"arrival_{i}")
        group = draw(st.integers(0, 1), label=f"group_{i}")
        shared = draw(st.one_of(st.just(0), st.integers(0, length)), label=f"shared_{i}")
        out.append(SglangRequestSpec(length, max_new, arrival, group, shared))
    return tuple(out)
