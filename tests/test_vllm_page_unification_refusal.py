"""The vllm target's page-unification refusal (no vLLM needed).

Before vLLM padded Mamba pages in ``unify_kv_cache_spec_page_size`` (0.28.0 does, 0.14.1 …
0.19.1 do not), the function scales every smaller page up by its block size and then *asserts*
the page grew to the largest one; a Mamba page (its state shapes, padded to ``page_size_padded``)
does not grow, so a layout with a larger attention page next to it fails that assert at startup
(measured on 0.19.1 by ``test_auto_fit_counts_every_group``: full attention padded to 256 bytes,
SWA 128, Mamba padded to 128). The release refuses the model; the adapter rejects the example as
it does the ``NotImplementedError`` of the same function, and only an assert raised *inside* that
function counts (:func:`kvverify.targets.vllm.planner._raised_in`): an assert elsewhere in the grouping
stays a ``GroupingError``, a failure to look at.
"""

from __future__ import annotations

from kvverify.targets.vllm.planner import _raised_in


def unify_kv_cache_spec_page_size() -> None:  # named as upstream's
    assert 256 == 128


def _get_kv_cache_groups() -> None:
    unify_kv_cache_spec_page_size()


def _elsewhere() -> None:
    assert False, "another grouping assert"


def _caught(fn) -> BaseException:
    try:
        fn()
    except AssertionError as e:
        return e
    raise AssertionError(f"{fn.__name__} did not raise")


def test_an_assert_inside_page_unification_is_recognised() -> None:
    assert _raised_in(_caught(_get_kv_cache_groups), "unify_kv_cache_spec_page_size")


def test_an_assert_elsewhere_is_not() -> None:
    e = _caught(_elsewhere)
    assert not _raised_in(e, "unify_kv_cache_spec_page_size")
    assert _raised_in(e, "_elsewhere")
