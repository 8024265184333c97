"""Engine mutation: how many faults in the installed vLLM's KV-cache modules do the properties catch?

``kvverify mutate --target vllm [--module NAME]`` (:mod:`kvverify.cli.mutate`, thin over this
package) mutates one of the installed vLLM's KV-cache files at a time, never the venv: each
mutant is an overlay (:func:`kvverify.targets.overlay.build_mutant`, one mutated file, the rest
symlinks) put first on the runs' ``PYTHONPATH``. Then the suites run against it:

* ``guarantee``: the guarantee properties (``properties/`` with ``--target vllm``, without the
  reference-vs-engine differential and the reference-only suites);
* ``differential``: ``properties/test_differential*.py`` (reference vs engine, live);
* ``vllm-tests``: vLLM's own unit tests of those modules, when ``--vllm-tests PATH`` is given.

Each test's outcome is compared with its outcome on the unmutated engine (the baseline run); a
changed outcome is a kill of one kind (:mod:`kvverify.mutate.outcomes`): ``property`` (a
guarantee property's own verdict: an assertion), ``differential`` (the differential's
assertion), ``crash`` (an exception that is not an assertion, an import error, a test the
unmutated engine ran now skipped) or ``timeout`` (the per-mutant CPU-time limit).

Modules: :mod:`~kvverify.mutate.modules` (the registry of engine modules),
:mod:`~kvverify.mutate.generate` (mutants from mutmut's operators),
:mod:`~kvverify.mutate.run` (the subprocess runs, limits, no leftovers),
:mod:`~kvverify.mutate.outcomes` (JUnit -> kill kinds), :mod:`~kvverify.mutate.report`
(tables, Wilson intervals, survivor diffs, equivalents).
"""
