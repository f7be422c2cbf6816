"""Measuring: sweeps (every pair, or a budget in rounds) and tuning into a tuning database.

``plan_sweep`` says what a sweep works on, ``sweep_all`` measures every pair,
``sweep_rounds`` a budget in rounds chosen by a model's uncertainty (or at random), and
``tune`` the selector's top-k per problem into a tuning database. Every measurement is appended
to a dataset as its batch completes (part files), so a kill loses at most one batch.
"""

from __future__ import annotations

from ckheur.sweeping.measuring import SweepError, SweepPlan, plan_sweep, sweep_all
from ckheur.sweeping.rounds import RoundOptions, plot_learning_curve, sweep_rounds
from ckheur.sweeping.tuning import tune

__all__ = ["RoundOptions", "SweepError", "SweepPlan", "plan_sweep", "plot_learning_curve", "sweep_all",
           "sweep_rounds", "tune"]
