"""Quality tests for SGLang's bug zoo: every SGLang flaw is caught from a cold start.

As ``tests/test_zoo.py`` for vLLM: each flaw's catching property runs derandomized with no
example database on the SGLang reference with the flaw on; it must fail within the budget
and name the property it is catalogued with. The unflawed reference passes the same
properties (``pytest properties/test_sglang.py``).
"""

from __future__ import annotations

import pytest

from kvverify.sglang import flaws as sglang_flaws
from kvverify.zoo import all_flaws, run_flaw

#: flaw -> max examples to the first failure
BUDGET = {
    "sglang_max_new_tokens_unclamped": 100,
    "sglang_decode_mem_counts_tokens": 200,
    "sglang_retract_counts_tokens": 300,
    "sglang_retract_ignores_multiplier": 300,
    "sglang_retract_asserts_last_request": 200,
    "sglang_retract_raises_last_request": 200,
    "sglang_profiled_tokens_negative": 50,
}


def test_every_sglang_flaw_has_a_catcher_and_budget() -> None:
    assert set(sglang_flaws.CATALOG) == set(BUDGET)
    assert set(sglang_flaws.CATALOG) <= set(all_flaws())
    for flaw in sglang_flaws.CATALOG.values():
        assert flaw.caught_by.startswith("kvverify.sglang.props.")
        assert flaw.catching_property().__name__ == flaw.property_name


@pytest.mark.parametrize("flaw", sorted(sglang_flaws.CATALOG))
def test_sglang_flaw_is_caught_from_cold_start(flaw: str) -> None:
    result = run_flaw(flaw, max_examples=1000)
    assert result.caught, f"{flaw} escaped {result.property} after {result.examples} examples"
    assert result.error is None, f"{flaw}: the property crashed instead of reporting: {result.error}"
    assert result.examples <= BUDGET[flaw], (flaw, result.examples)
    assert result.property == sglang_flaws.CATALOG[flaw].property_name
    print(f"{flaw}: caught by {result.property} after {result.examples} examples, "
          f"{result.seconds:.2f}s; shrunk: {result.counterexample}")


def test_flaw_names_do_not_collide_across_engines() -> None:
    from kvverify import flaws
    assert not set(flaws.CATALOG) & set(sglang_flaws.CATALOG)
