"""Encoder-decoder layouts (cross-attention): startup vs runtime both ways, predictor ==
allocator, a started engine serves its workload; F3 and F8."""

from kvverify import fixes
from kvverify.props.encoder_decoder import (  # noqa: F401  (collected by pytest)
    test_encoder_decoder_predictor_equals_allocator,
    test_encoder_decoder_startup_passes_implies_servable,
    test_encoder_decoder_workload_completes,
)
from kvverify.props.encoder_decoder import test_encoder_decoder_refusal_is_necessary as _refusal
from kvverify.props.encoder_decoder import test_encoder_decoder_with_prefix_caching_completes as _caching
from kvverify.props.findings import known_failure
from kvverify.targets import Feature, require

test_encoder_decoder_with_prefix_caching_completes = known_failure(_caching)


def test_encoder_decoder_with_prefix_caching_under_fix(target) -> None:
    """Under the proposed fix (refuse prefix caching for cross-attention at startup) it holds."""
    require(target, Feature.FIX_OPTIONS)
    with fixes.enabled("encoder_decoder_prefix_caching_refused"):
        _caching(target=target)


test_encoder_decoder_refusal_is_necessary = known_failure(_refusal)


def test_encoder_decoder_refusal_is_necessary_under_fix(target) -> None:
    """Under the proposed fix for F3 the refusal direction holds for cross-attention too."""
    require(target, Feature.FIX_OPTIONS)
    with fixes.enabled("check_plans_computed_tokens"):
        _refusal(target=target)
