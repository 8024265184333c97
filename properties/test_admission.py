"""Guarantee 1: admission passes only if completion is possible, and never refuses forever."""

from kvverify.props.admission import (  # noqa: F401  (collected by pytest)
    test_admitted_workload_completes,
    test_request_within_startup_bound_is_admitted,
)
