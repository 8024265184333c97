"""Block conservation across finish and abort (:mod:`kvverify.props.release`)."""

from kvverify.props.release import (  # noqa: F401
    test_aborts_behind_batches_in_flight_return_their_blocks,
    test_connector_finished_requests_return_their_blocks,
    test_finished_requests_return_their_blocks,
    test_fine_grained_prefix_hits_return_their_blocks,
)
