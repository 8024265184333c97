"""Runtime: predictor == allocator, the SWA/chunked caps, and the pool state machine."""

from kvverify.props.pool_machine import TestPoolMachine  # noqa: F401
from kvverify.props.runtime import (  # noqa: F401
    test_held_blocks_within_admission_caps,
    test_predictor_equals_allocator,
)
