"""Quality tests: every bug-zoo flaw is caught from a cold start, with a small counterexample.

In the spirit of Hypothesis's own ``tests/quality``: each flaw's catching property runs
derandomized with no example database; it must fail within the stated example budget,
and the shrunk counterexample must sit at the boundary (small lengths and block counts).
The unflawed reference passes the same properties (``pytest properties/``).
"""

from __future__ import annotations

import pytest

from kvverify import flaws
from kvverify.zoo import CATCHERS, run_flaw

# flaw -> (max examples to first failure, bound on the shrunk case's L[, bound on its N, else 8])
BUDGET = {
    "override_ignored_in_check": (600, 64),
    "null_block_not_reserved": (100, 64),
    "autofit_ignores_null_block": (100, 64),
    "autofit_first_group_only": (600, 64),
    "swa_admission_uncapped": (200, 256),
    "swa_cap_on_allocation": (200, 256),
    "mamba_hash_fallback_by_block_size": (200, 4096),
    "mamba_align_zero_chunk": (200, 256),
    "no_positive_validation": (50, 64),
    "evictable_hits_not_counted": (200, 256),
    # the KV-transfer paths (issue 29): two or three requests whose prompts fill a pool at the
    # startup boundary; the shrinker keeps N with L (N = blocks for L + 1), so N may stay larger
    "async_load_unreserved": (300, 256, 64),
    "skipped_queue_not_split_by_blocks": (300, 256, 64),
    "spec_blocks_unreserved_after_load": (300, 256, 64),
    "deferred_requests_hold_slots": (300, 256, 64),
    "deferred_free_preemption_cascade": (300, 256, 64),
}


def test_every_catalogued_flaw_has_a_catcher_and_budget() -> None:
    assert set(CATCHERS) == set(flaws.CATALOG) == set(BUDGET)
    for name, flaw in flaws.CATALOG.items():
        assert CATCHERS[name] is flaw.catching_property()
        assert CATCHERS[name].__name__ == flaw.property_name
        assert flaw.caught_by.startswith("kvverify.props.")


@pytest.mark.parametrize("flaw", sorted(flaws.CATALOG))
def test_flaw_is_caught_from_cold_start(flaw: str) -> None:
    result = run_flaw(flaw, max_examples=1000)
    max_examples, max_len, *max_blocks = BUDGET[flaw]
    assert result.caught, f"{flaw} escaped {result.property} after {result.examples} examples"
    assert result.error is None, f"{flaw}: the property crashed instead of reporting: {result.error}"
    assert result.examples <= max_examples, (flaw, result.examples)
    # the shrunk counterexample is small: read L and N back from the one-line summary
    fields = dict(p.split("=", 1) for part in result.counterexample.split("; ") for p in part.split(" ")
                  if "=" in p)
    if "L" in fields:
        assert int(fields["L"]) <= max_len, result.counterexample
    if "N" in fields:
        assert int(fields["N"]) <= (max_blocks[0] if max_blocks else 8), result.counterexample
    print(f"{flaw}: caught by {result.property} after {result.examples} examples, "
          f"{result.seconds:.2f}s; shrunk: {result.counterexample}")


@pytest.mark.parametrize("flaw", sorted(set(CATCHERS.values()), key=lambda f: f.__name__),
                         ids=lambda f: f.__name__)
def test_catching_properties_pass_unflawed(flaw) -> None:
    """The same properties pass on the faithful reference (quick run)."""
    from hypothesis import HealthCheck, settings

    from kvverify.hypothesis_hooks import rebuild
    from kvverify.targets import get_target

    rebuild(flaw, settings=settings(max_examples=60, derandomize=True, database=None, deadline=None,
                                    suppress_health_check=list(HealthCheck)))(target=get_target("reference"))
