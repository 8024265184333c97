"""Guarantee 1 on the KV-transfer paths: connectors, async loads, skipped requests, fenced frees."""

from kvverify.props.connector import (  # noqa: F401  (collected by pytest)
    test_connector_predictor_equals_allocator,
    test_connector_workload_completes,
    test_no_zero_progress_preemption,
    test_request_slots_conserved,
    test_speculative_connector_workload_completes,
)
