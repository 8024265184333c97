"""Flaws and fixes share one switch machinery (kvverify.switches): scoped, exact, named."""

from __future__ import annotations

import threading

import pytest

from kvverify import fixes, flaws
from kvverify.errors import ConfigError
from kvverify.props.known import KNOWN_FINDINGS


@pytest.mark.parametrize("module, name", [(flaws, "null_block_not_reserved"), (fixes, "swa_cap_exact")])
def test_enabled_is_scoped_and_nests(module, name: str) -> None:
    other = next(n for n in module.CATALOG if n != name)
    assert not module.is_on(name)
    with module.enabled(name):
        assert module.is_on(name) and module.active() == {name}
        with module.enabled(other):
            assert module.active() == {name, other}
        with module.only(other):
            assert module.active() == {other}
        with module.only():
            assert module.active() == frozenset()
        assert module.active() == {name}
    assert not module.is_on(name)


@pytest.mark.parametrize("module, field", [(flaws, "flaw"), (fixes, "fix")])
def test_unknown_names_are_a_clear_error(module, field: str) -> None:
    with pytest.raises(ConfigError, match=f"unknown {field}; known: "):
        with module.enabled("no_such_switch"):
            pass
    with pytest.raises(ConfigError, match=field):
        module.set_global(["no_such_switch"])


def test_switches_do_not_leak_across_threads() -> None:
    seen: list[bool] = []
    with flaws.enabled("null_block_not_reserved"):
        t = threading.Thread(target=lambda: seen.append(flaws.is_on("null_block_not_reserved")))
        t.start()
        t.join()
    assert seen == [False]


def test_known_findings_derive_from_the_fix_catalog() -> None:
    assert KNOWN_FINDINGS == {"chunked_local_cap_plus_one": "F2", "caps_count_lookahead": "F4",
                              # the KV-transfer findings: the general connector properties meet them
                              "spec_decode_padding_fits_budget": "F10", "async_load_reserves_own_need": "F11",
                              "landed_load_not_reloaded": "F12", "mamba_align_counts_loaded_state": "F13"}
    for fix in fixes.CATALOG.values():
        assert (fix.name in KNOWN_FINDINGS) == fix.explains_general_failures
        assert fix.finding_id == fix.finding.split("-")[0] and fix.finding_id.startswith("F")
