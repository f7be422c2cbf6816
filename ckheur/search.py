"""Surrogate search over an op's legal kernel space: random top-k and discrete differential
evolution, with a trained model (or the analytic model) as the objective.

The space is the legal pool for one problem (kernels of its group that support it). Each
kernel is a vector of value indices, one per trait (tile_m, tile_n, ..., pipeline, ...);
a proposal anywhere in that index box is projected onto the nearest legal kernel (L1 over
indices scaled to [0, 1] per trait, ties to the lowest pool index), so every result is legal.
Everything is deterministic for a seed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np


@dataclass
class Space:
    """The legal kernels of one problem as index vectors per trait."""

    kernels: list
    traits: list[str]
    codes: np.ndarray  # [n_kernels, n_traits] value index of each trait
    sizes: np.ndarray  # values per trait

    @classmethod
    def of(cls, kernels: Sequence[Any], traits: Sequence[str]) -> "Space":
        rows = [k.traits() for k in kernels]
        keep, cols, sizes = [], [], []
        for t in traits:
            values = sorted({r[t] for r in rows}, key=lambda v: (str(type(v)), v))
            if len(values) > 1:  # a trait with one value is no search dimension
                index = {v: i for i, v in enumerate(values)}
                keep.append(t)
                cols.append([index[r[t]] for r in rows])
                sizes.append(len(values))
        codes = np.array(cols, dtype=np.float64).T if cols else np.zeros((len(rows), 0))
        return cls(list(kernels), keep, codes, np.array(sizes, dtype=np.float64))

    def project(self, x: np.ndarray) -> int:
        """Index of the legal kernel nearest to a point of the index box."""
        scale = np.maximum(self.sizes - 1.0, 1.0)
        d = (np.abs(self.codes - x[None, :]) / scale).sum(axis=1)
        return int(np.argmin(d))


@dataclass
class Objective:
    """Scores kernels of the space by index, once each, and counts model evaluations."""

    score: Callable[[np.ndarray], np.ndarray]
    cache: dict[int, float] = field(default_factory=dict)

    def __call__(self, idx: Sequence[int]) -> np.ndarray:
        new = sorted({int(i) for i in idx} - set(self.cache))
        if new:
            for i, s in zip(new, self.score(np.array(new))):
                self.cache[i] = float(s)
        return np.array([self.cache[int(i)] for i in idx])

    @property
    def evaluations(self) -> int:
        return len(self.cache)


def random_topk(space: Space, objective: Objective, budget: int, seed: int) -> None:
    """Score ``budget`` distinct legal kernels drawn uniformly."""
    rng = np.random.default_rng(seed)
    n = min(budget, len(space.kernels))
    objective(rng.choice(len(space.kernels), size=n, replace=False))


def differential_evolution(space: Space, objective: Objective, budget: int, seed: int, population: int = 24,
                           mutation: float = 0.6, crossover: float = 0.7) -> None:
    """Discrete DE/rand/1/bin over trait indices, proposals projected onto the legal space."""
    rng = np.random.default_rng(seed)
    n, dims = len(space.kernels), space.codes.shape[1]
    if n <= budget or dims == 0:
        objective(np.arange(n))
        return
    pop = rng.choice(n, size=min(population, n), replace=False)
    fit = objective(pop)
    stall = 0
    while objective.evaluations < budget and stall < 20:
        before = objective.evaluations
        for i in range(len(pop)):
            a, b, c = rng.choice([j for j in range(len(pop)) if j != i], size=3, replace=False)
            mutant = space.codes[pop[a]] + mutation * (space.codes[pop[b]] - space.codes[pop[c]])
            cross = rng.random(dims) < crossover
            cross[rng.integers(dims)] = True
            trial = np.clip(np.rint(np.where(cross, mutant, space.codes[pop[i]])), 0, space.sizes - 1)
            t = space.project(trial)
            ft = objective([t])[0]
            if ft >= fit[i]:
                pop[i], fit[i] = t, ft
            if objective.evaluations >= budget:
                break
        if objective.evaluations == before:
            stall += 1  # converged onto cached kernels: re-seed the worse half, within budget
            worst = np.argsort(fit)[: min(len(pop) // 2, budget - objective.evaluations)]
            pop[worst] = rng.choice(n, size=len(worst), replace=False)
            fit[worst] = objective(pop[worst])
        else:
            stall = 0


METHODS = {"random": random_topk, "de": differential_evolution}
