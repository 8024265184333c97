"""``kvverify check``'s internals: will a deployment start, and does a full-length request finish?

``core`` (:func:`run_check`: plan, startup checks, runs, one result dict), ``runs`` (the
servability runs, by events or step by step), ``traps`` (this year's startup traps as
predictions), ``verdict`` (headline, verdict, exit code: one voice), ``table`` and ``plot``
(the faces of the result). The command line is :mod:`kvverify.cli.check`.
"""

from kvverify.check.core import run_check
from kvverify.check.plot import PLOT_FORMATS, render_check_plot, write_check_plot
from kvverify.check.table import print_check
from kvverify.check.verdict import exit_code, headline, verdict

__all__ = ["PLOT_FORMATS", "exit_code", "headline", "print_check", "render_check_plot", "run_check", "verdict",
           "write_check_plot"]
