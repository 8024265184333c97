"""SGLang's KV-cache capacity and admission logic, under SGLang's names (the second engine).

SGLang admits optimistically and retracts under decode pressure, so its guarantees are its
own (:mod:`kvverify.targets.sglang_contract`). The modules mirror SGLang 0.5.23:

* :mod:`.arith` — every boundary formula (page rounding, the ``- 5`` of the input bound,
  the empty-pool clamp of ``max_new_tokens``, the prefill charge, the decode/retract budget,
  pool sizing), written once over :mod:`kvverify.reference.ops` (int and z3);
* :mod:`.config` — ``SglangConfig``, the server arguments these pieces read;
* :mod:`.pool` — pool sizing (``pool_configurator``: ``max_total_num_tokens``);
* :mod:`.allocator` — ``TokenToKVPoolAllocator`` / ``PagedTokenToKVPoolAllocator``;
* :mod:`.radix_cache` — ``RadixCache`` (match, insert, lock refs, LRU eviction);
* :mod:`.validation` — ``validate_input_length`` and ``init_req_max_new_tokens``;
* :mod:`.prefill_adder` — ``PrefillAdder.add_one_req``;
* :mod:`.batch` — ``ScheduleBatch``: ``prepare_for_extend`` / ``_decode``,
  ``check_decode_mem``, ``retract_decode``;
* :mod:`.scheduler`, :mod:`.driver` — the event loop and a workload driver that reports a
  stall (no progress) instead of hanging;
* :mod:`.flaws` — SGLang's bug zoo; :mod:`.fixes` — the proposed fixes for its findings.
"""

#: the SGLang release the reference mirrors (its target's ``version``)
REFERENCE_RELEASE = "0.5.23"
