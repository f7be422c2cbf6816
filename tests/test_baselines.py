"""The baselines of every evaluation report on a hand-made table: the greedy coverage list (scored as a
static list picking its first kernel that ran, and its oracle within the list) and the catastrophic-pick rate."""

from __future__ import annotations

import numpy as np
import pytest

from ckheur.evaluation.scoring import (Scored, _baselines, catastrophic_rate, efficiency_matrix, first_applicable,
                                      greedy_coverage_list)

# Four problems, three kernels; efficiency of each (0: not measured or failed).
#            a     b     c
TABLE = [(1.00, 0.30, 0.90),   # p0
         (0.40, 1.00, 0.00),   # p1 (c does not run it)
         (1.00, 0.45, 0.96),   # p2
         (0.00, 0.20, 1.00)]   # p3 (a does not run it)
NAMES = ["a", "b", "c"]


def _scored() -> Scored:
    s = Scored(kernels=list(NAMES))
    for row in TABLE:
        idx = np.array([j for j, e in enumerate(row) if e > 0 or j < 3], dtype=np.int32)
        s.candidate_eff.append((idx, np.array([row[j] for j in idx])))
    return s


def test_greedy_list_by_hand():
    eff = efficiency_matrix(_scored())
    assert eff.tolist() == [list(r) for r in TABLE]
    # Step 1: mean efficiency a 0.60, b 0.4875, c 0.715 -> c. Step 2: best-in-list with a: (1, .4, 1, 1) = 0.85,
    # with b: (.9, 1, .96, 1) = 0.965 -> b; now p0 (0.90) is the only problem not within 95%: 3/4 < 95% covered.
    # Step 3: a lifts p0 to 1.0: every problem covered, stop.
    assert greedy_coverage_list(eff, NAMES) == [2, 1, 0]
    assert greedy_coverage_list(eff, NAMES, max_size=2) == [2, 1]
    assert greedy_coverage_list(eff, NAMES, within=0.9, share=0.75) == [2]  # c alone: p0 .90, p2 .96, p3 1 of 4
    # As a static list: the first kernel of [c, b] that ran each problem: c, b (c fails p1), c, c.
    assert first_applicable(eff, [2, 1]).tolist() == [0.90, 1.00, 0.96, 1.00]
    assert first_applicable(eff, [0]).tolist() == [1.00, 0.40, 1.00, 0.00]


def test_catastrophic_rate_by_hand():
    assert catastrophic_rate([1.0, 0.49, 0.5, 0.0]) == 0.5  # 0.49 and the failed pick; 0.5 is not below half
    assert np.isnan(catastrophic_rate([]))


def test_baselines_carry_the_greedy_list_and_random_catastrophes():
    b = _baselines(_scored(), {})
    assert list(b) == ["best fixed kernel", "greedy coverage list", "random legal kernel"]
    assert b["best fixed kernel"]["kernel"] == "c" and b["best fixed kernel"]["per_problem"] == [0.90, 0.0, 0.96, 1.0]
    g = b["greedy coverage list"]
    assert (g["kernels"], g["size"]) == (["c", "b", "a"], 3)
    assert g["per_problem"] == [0.90, 1.00, 0.96, 1.00]  # c first wherever it runs: a is never reached
    assert g["oracle_within_list_mean"] == pytest.approx(1.0)
    # Random: the expected share of candidates below 50% per problem: p0 1/3, p1 2/3 (0.40 and the failed c),
    # p2 1/3, p3 2/3 (the failed a, 0.20): mean 0.5.
    assert b["random legal kernel"]["catastrophic_rate"] == pytest.approx(0.5)
