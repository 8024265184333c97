"""Event-based runs of one request alone on a fresh pool (what ``kvverify check`` runs).

:func:`run_alone` returns the step-by-step driver's :class:`~kvverify.reference.driver.WorkloadResult`
and timeline trace at a cost that grows with the number of stretches and picture rows, not with
``max_model_len``; it raises :class:`Unsupported` (:class:`Preempts` when a step would outgrow
the pool) where it would not be exact, and the caller runs the driver instead.
"""

from kvverify.eventrun.held import GroupModel, Unsupported, group_model, modelled_recycling_kinds
from kvverify.eventrun.runner import Preempts, run_alone

__all__ = ["GroupModel", "Preempts", "Unsupported", "group_model", "modelled_recycling_kinds", "run_alone"]
