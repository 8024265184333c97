"""Guarantee 3: hash_block_size divides every group's block size."""

from kvverify.props.block_sizes import (  # noqa: F401  (collected by pytest)
    test_planned_block_sizes_are_consistent,
    test_resolved_block_sizes_accepted_by_coordinator,
)
