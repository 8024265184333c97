"""Encoder-decoder layouts (cross-attention): a started engine serves its workload; F8."""

import pytest

from kvverify import fixes
from kvverify.props.encoder_decoder import (  # noqa: F401  (collected by pytest)
    test_encoder_decoder_workload_completes,
)
from kvverify.props.encoder_decoder import test_encoder_decoder_with_prefix_caching_completes as _caching
from kvverify.props.findings import known_failure

test_encoder_decoder_with_prefix_caching_completes = known_failure(_caching)


def test_encoder_decoder_with_prefix_caching_under_fix(target) -> None:
    """Under the proposed fix (refuse prefix caching for cross-attention at startup) it holds."""
    if target.name != "reference":
        pytest.skip("fixes are options on the reference")
    with fixes.enabled("encoder_decoder_prefix_caching_refused"):
        _caching(target=target)
