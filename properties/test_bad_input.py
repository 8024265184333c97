"""Bad input gets a clear ValueError naming the field and range."""

from kvverify.props.validation import test_bad_input_is_a_clear_error  # noqa: F401
