"""kvverify's benchmarks: how fast the suite finds bugs, proves lemmas and runs the reference.

One command runs them all and prints a table (see ``benchmarks/README.md``)::

    python -m benchmarks.run [--quick] [--json PATH] [--only SECTION,...]

Each section is a module with a ``run(quick: bool) -> dict`` and a ``table(data)``:
``props`` (examples/s per property and the pytest wall time), ``detect`` (time to detect
each bug-zoo flaw over 10 seeds), ``lemmas`` (proof times), ``runtime`` (BlockPool ops/s
and scheduler steps/s from 10^3 to 10^6 blocks).
"""
