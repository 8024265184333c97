"""The nightly loop's tools: merging shard databases, the coverage table (``docs/nightly.md``).

``python -m kvverify.nightly merge ...`` and ``python -m kvverify.nightly coverage ...``
(see :mod:`kvverify.nightly.__main__`); the databases themselves are
:mod:`kvverify.exampledb`, the profiles :mod:`kvverify.profiles`.
"""
