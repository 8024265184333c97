"""SGLang's bug zoo: real historical SGLang defects, re-introduced on the SGLang reference.

Its own catalogue, next to vLLM's (:mod:`kvverify.flaws`), over the same machinery
(:class:`kvverify.switches.Switches`, :class:`kvverify.flaws.Flaw`): each flaw is off by
default, switched at the place SGLang had it, and names the property that must catch it.
``kvverify.flaws.ENGINE_CATALOGS`` (or, before that exists, :func:`kvverify.zoo`'s
dispatch) routes a name to its catalogue, so ``--flaw NAME`` works for either engine.
"""

from __future__ import annotations

from kvverify.flaws import Budget, Flaw
from kvverify.switches import Switches

_P = "kvverify.sglang.props."

CATALOG: dict[str, Flaw] = {f.name: f for f in (
    Flaw(name='sglang_max_new_tokens_unclamped', upstream='#28530, fixed by #25126',
         symptom='a request passes validation, then waits in the queue forever (0 tok/s)',
         defect='init_req_max_new_tokens clamps max_new_tokens to max_req_len - input_len - 1 only, not to the empty-pool budget that PrefillAdder charges',
         switched_in='kvverify.sglang.arith',
         caught_by=_P + 'test_sglang_validated_request_is_schedulable',
         budget=Budget(examples=100, shrunk_len=1 << 20),
         regression=""),
    Flaw(name='sglang_decode_mem_counts_tokens', upstream='#4602, fixed by #4913',
         symptom='RuntimeError: Decode out of memory with --page-size 64 while tokens are free',
         defect='check_decode_mem asks for one token per request instead of one page per request that starts a new page',
         switched_in='kvverify.sglang.arith',
         caught_by=_P + 'test_sglang_retraction_frees_enough',
         budget=Budget(examples=200, shrunk_len=1 << 20),
         regression=""),
    Flaw(name='sglang_retract_counts_tokens', upstream='#9982 / #6731, fixed by #9989',
         symptom='retract_decode stops too early when page_size > 1; the next decode allocation fails',
         defect="the retract loop's budget counts one token per kept request instead of the pages the next decode step allocates",
         switched_in='kvverify.sglang.arith',
         caught_by=_P + 'test_sglang_retraction_frees_enough',
         budget=Budget(examples=300, shrunk_len=1 << 20),
         regression=""),
    Flaw(name='sglang_retract_ignores_multiplier', upstream='#14939',
         symptom='decode OOM right after a retraction under speculative decoding',
         defect="the retract loop's budget reserves one token per request, ignoring the tokens-per-step multiplier (speculative draft tokens)",
         switched_in='kvverify.sglang.arith',
         caught_by=_P + 'test_sglang_retraction_frees_enough',
         budget=Budget(examples=300, shrunk_len=1 << 20),
         regression=""),
    Flaw(name='sglang_retract_asserts_last_request', upstream='#14948',
         symptom='AssertionError: No space left for only one request',
         defect='retract_decode asserts when one request is left and it still does not fit',
         switched_in='kvverify.sglang.batch',
         caught_by=_P + 'test_sglang_retraction_terminates_with_reason',
         budget=Budget(examples=200, shrunk_len=1 << 20),
         regression=""),
    Flaw(name='sglang_retract_raises_last_request', upstream='#19881',
         symptom='ValueError out of retract_decode kills the scheduler instead of aborting one request',
         defect='when the last request cannot fit, retract_decode raises instead of aborting it with a reason',
         switched_in='kvverify.sglang.batch',
         caught_by=_P + 'test_sglang_retraction_terminates_with_reason',
         budget=Budget(examples=200, shrunk_len=1 << 20),
         regression=""),
    Flaw(name='sglang_profiled_tokens_negative', upstream='#7691',
         symptom="'max_total_tokens=131072 is larger than the profiled value -561981', then a memory fault",
         defect='pool sizing keeps a negative profiled token count instead of refusing to start',
         switched_in='kvverify.sglang.arith',
         caught_by=_P + 'test_sglang_pool_size_is_allocator_pool',
         budget=Budget(examples=50, shrunk_len=1 << 20),
         regression=""),
)}

_SWITCHES = Switches("flaw", CATALOG)
check_name = _SWITCHES.check_name
is_on = _SWITCHES.is_on
active = _SWITCHES.active
enabled = _SWITCHES.enabled
only = _SWITCHES.only
set_global = _SWITCHES.set_global
