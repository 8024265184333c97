"""Properties that fail on the faithful reference because upstream does: known findings.

One registry, used by the suite files (``xfail(strict=True)`` marks) and by
``kvverify fuzz`` (which must recognise them wherever it runs, suite files or not).
"""

from __future__ import annotations

from typing import Callable

import pytest

KNOWN_FAILURES: dict[str, str] = {
    "test_reported_concurrency_matches_servability":
        "finding F1: upstream reports N / blocks, so 1.00x for a pool whose N - 1 usable blocks cannot "
        "serve one request (reports/findings/F1-concurrency-counts-null-block.md)",
    "test_chunked_local_held_blocks_within_admission_caps":
        "finding F2: the chunked-local cap has no +1 for chunks that start mid-block "
        "(reports/findings/F2-chunked-local-cap-misaligned-chunk.md)",
    "test_startup_refusal_is_necessary":
        "finding F3: the check reserves a block for the never-computed last token "
        "(reports/findings/F3-check-reserves-never-computed-token.md)",
    "test_startup_check_passes_implies_servable_with_lookahead":
        "finding F4: SWA / chunked admission caps ignore num_lookahead_tokens "
        "(reports/findings/F4-admission-caps-ignore-lookahead.md)",
}


def xfail_mark(name: str) -> pytest.MarkDecorator:
    """The strict known-failure mark for property ``name``."""
    return pytest.mark.xfail(strict=True, raises=AssertionError, reason=KNOWN_FAILURES[name])


def known_failure(fn: Callable) -> Callable:
    """Mark a property (or its suite wrapper) as the strict known failure its name registers."""
    return xfail_mark(fn.__name__)(fn)
