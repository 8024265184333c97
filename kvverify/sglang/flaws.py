"""SGLang's bug zoo: real historical SGLang defects, re-introduced on the SGLang reference.

Its own catalogue, next to vLLM's (:mod:`kvverify.flaws`), over the same machinery
(:class:`kvverify.switches.Switches`, :class:`kvverify.flaws.Flaw`) and with the same facts:
each flaw is off by default, switched at the place SGLang had it (``switched_in``), names the
property that must catch it within its budget, its regression case
(:mod:`kvverify.sglang.zoo_cases`), and why no lemma or recorded case sees it where none
does. :mod:`kvverify.engines` routes a name to its catalogue, so ``--flaw NAME`` works for
either engine; ``tests/test_zoo.py`` checks every engine's catalogue alike.

Budgets (``tests/test_zoo.py``): examples to the first failure from a cold start, with
slack over the measured runs (``kvverify zoo`` and ``benchmarks/detect.py``'s 10 seeds,
docs/performance.md); the shrunk case's pool ``C`` (and each request's length, a byte
budget's size) at most ``shrunk_len`` tokens and its pages at most ``shrunk_blocks``
(:attr:`kvverify.engines.Engine.shrunk_bounds`).
"""

from __future__ import annotations

from kvverify.flaws import Budget, Flaw
from kvverify.switches import Switches

_P = "kvverify.sglang.props."
_R = "kvverify.sglang.zoo_cases."
#: why no recorded case can see an SGLang flaw
_NOT_RECORDED = "an SGLang flaw: the recorded corpus is vLLM 0.33.0's, replayed on vLLM's reference"

CATALOG: dict[str, Flaw] = {f.name: f for f in (
    Flaw(name='sglang_max_new_tokens_unclamped', upstream='#28530, fixed by #25126',
         symptom='a request passes validation, then waits in the queue forever (0 tok/s)',
         defect='init_req_max_new_tokens clamps max_new_tokens to max_req_len - input_len - 1 only, not to the empty-pool budget that PrefillAdder charges',
         switched_in='kvverify/sglang/arith.py',
         caught_by=_P + 'test_sglang_validated_request_is_schedulable',
         budget=Budget(examples=100, shrunk_len=16),  # measured: 3 (zoo), 3-38 over 10 seeds; C=8
         regression=_R + 'sglang_max_new_tokens_unclamped',
         not_in_recorded=_NOT_RECORDED),
    Flaw(name='sglang_decode_mem_counts_tokens', upstream='#4602, fixed by #4913',
         symptom='RuntimeError: Decode out of memory with --page-size 64 while tokens are free',
         defect='check_decode_mem asks for one token per request instead of one page per request that starts a new page',
         switched_in='kvverify/sglang/arith.py',
         caught_by=_P + 'test_sglang_retraction_frees_enough',
         budget=Budget(examples=400, shrunk_len=16),  # measured: 124, 21-140; C=6 (3 pages)
         regression=_R + 'sglang_decode_mem_counts_tokens',
         not_in_recorded=_NOT_RECORDED),
    Flaw(name='sglang_retract_counts_tokens', upstream='#9982 / #6731, fixed by #9989',
         symptom='retract_decode stops too early when page_size > 1; the next decode allocation fails',
         defect="the retract loop's budget counts one token per kept request instead of the pages the next decode step allocates",
         switched_in='kvverify/sglang/arith.py',
         caught_by=_P + 'test_sglang_retraction_frees_enough',
         budget=Budget(examples=600, shrunk_len=16),  # measured: 218, 24-375; C=6
         regression=_R + 'sglang_retract_counts_tokens',
         not_in_recorded=_NOT_RECORDED),
    Flaw(name='sglang_retract_ignores_multiplier', upstream='#14939',
         symptom='decode OOM right after a retraction under speculative decoding',
         defect="the retract loop's budget reserves one token per request, ignoring the tokens-per-step multiplier (speculative draft tokens)",
         switched_in='kvverify/sglang/arith.py',
         caught_by=_P + 'test_sglang_retraction_frees_enough',
         budget=Budget(examples=600, shrunk_len=16),  # measured: 237, 5-265; C=4
         regression=_R + 'sglang_retract_ignores_multiplier',
         not_in_recorded=_NOT_RECORDED),
    Flaw(name='sglang_retract_asserts_last_request', upstream='#14948',
         symptom='AssertionError: No space left for only one request',
         defect='retract_decode asserts when one request is left and it still does not fit',
         switched_in='kvverify/sglang/batch.py',
         caught_by=_P + 'test_sglang_retraction_terminates_with_reason',
         budget=Budget(examples=20, shrunk_len=4, shrunk_blocks=2),  # measured: 1 on every seed; C=1
         regression=_R + 'sglang_retract_asserts_last_request',
         no_lemma="retract_decode's control flow with one request left (an assertion instead of the abort), not a formula the lemmas prove",
         not_in_recorded=_NOT_RECORDED),
    Flaw(name='sglang_retract_raises_last_request', upstream='#19881',
         symptom='ValueError out of retract_decode kills the scheduler instead of aborting one request',
         defect='when the last request cannot fit, retract_decode raises instead of aborting it with a reason',
         switched_in='kvverify/sglang/batch.py',
         caught_by=_P + 'test_sglang_retraction_terminates_with_reason',
         budget=Budget(examples=20, shrunk_len=4, shrunk_blocks=2),  # measured: 1 on every seed; C=1
         regression=_R + 'sglang_retract_raises_last_request',
         no_lemma="retract_decode's control flow with one request left (a raise instead of the abort), not a formula the lemmas prove",
         not_in_recorded=_NOT_RECORDED),
    Flaw(name='sglang_profiled_tokens_negative', upstream='#7691',
         symptom="'max_total_tokens=131072 is larger than the profiled value -561981', then a memory fault",
         defect='pool sizing keeps a negative profiled token count instead of refusing to start',
         switched_in='kvverify/sglang/pool.py',
         caught_by=_P + 'test_sglang_pool_size_is_allocator_pool',
         budget=Budget(examples=20, shrunk_len=16),  # measured: 1 on every seed; -7 bytes
         regression=_R + 'sglang_profiled_tokens_negative',
         no_lemma="the startup refusal of a pool of <= 0 tokens (MemoryPoolConfig's check) is control flow; sglang_page_rounding proves the page floor the faithful sizing applies",
         not_in_recorded=_NOT_RECORDED),
)}

_SWITCHES = Switches("flaw", CATALOG)
check_name = _SWITCHES.check_name
is_on = _SWITCHES.is_on
active = _SWITCHES.active
enabled = _SWITCHES.enabled
only = _SWITCHES.only
set_global = _SWITCHES.set_global
