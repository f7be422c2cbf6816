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

from ckheur.errors import UserError


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


@dataclass(frozen=True)
class SearchOptions:
    """How ``search_problem`` searches (conf: search.*)."""

    method: str = "de"  # de (discrete differential evolution) or random (random top-k)
    budget: int = 500  # model evaluations
    top_k: int = 5
    population: int = 24  # de
    mutation: float = 0.6  # de: differential weight F
    crossover: float = 0.7  # de: crossover rate CR
    seed: int = 0
    full_pool_max: int = 50000  # also score the whole legal pool when it is at most this large

    def check(self) -> None:
        """Refuse, naming the option, values out of range."""
        if self.method not in METHODS:
            raise SearchError(f"search.method={self.method!r}: allowed values are {', '.join(METHODS)}")
        for name in ("top_k", "budget", "population"):
            if int(getattr(self, name)) < 1:
                raise SearchError(f"search.{name}={getattr(self, name)}: must be >= 1")


class SearchError(UserError):
    """A problem cannot be searched as asked; the message says why."""


def check_searchable(family: Any) -> None:
    """SearchError unless the family's kernels are points of a tile-trait space (CK's grouped_conv
    and GEMM, which the analytic model also scores); MIOpen's solvers are a table, ranked whole."""
    if not family.analytic:
        raise SearchError(f"stage=search searches a space of tile kernels (grouped_conv, gemm); {family.name}'s "
                          "kernels are a table of named solvers: stage=predict ranks every one of them")


def search_problem(selector: Any, pool: Sequence[Any], problem: Any, options: SearchOptions = SearchOptions()) -> dict:
    """Search one problem's legal kernels with the selector's model as the objective; beside the
    whole legal pool's argmax when it is at most ``options.full_pool_max`` kernels."""
    from ckheur.sim import kernel_arrays as sim_kernel_arrays

    s = options
    s.check()
    fam = selector.family
    check_searchable(fam)
    group = [k for k in pool if k.group == problem.group]
    if not group:
        raise SearchError(f"no kernel for {problem.describe()} in the pool")
    mask, reason = fam.kernels.support_mask(problem, fam.kernels.support_arrays(group), selector.op)
    legal = [k for k, ok in zip(group, mask) if ok]
    if not legal:
        raise SearchError(reason)
    space = Space.of(legal, [c for c in fam.kernels.COLUMNS if c != "ndim"])
    feats = selector.engine.kernel_arrays(legal) if selector.engine is not None else None
    simk = sim_kernel_arrays(legal)

    def score(idx: np.ndarray) -> np.ndarray:
        f = {k: v[idx] for k, v in feats.items()} if feats is not None else None
        return selector._predict_arrays(problem, f, {k: v[idx] for k, v in simk.items()})[0]

    objective = Objective(score)
    kw = {"population": s.population, "mutation": s.mutation, "crossover": s.crossover} if s.method == "de" else {}
    METHODS[s.method](space, objective, int(s.budget), int(s.seed), **kw)
    found = sorted(objective.cache.items(), key=lambda kv: (-kv[1], kv[0]))[: int(s.top_k)]
    idx = np.array([i for i, _ in found])
    out = {"problem": problem.describe(), "method": s.method, "legal_kernels": len(legal),
           "search_dims": space.traits, "evaluations": objective.evaluations, "top": []}
    full_best = None
    if len(legal) <= int(s.full_pool_max):
        all_scores = score(np.arange(len(legal)))
        full_best = int(np.argmax(all_scores))
        idx = np.append(idx, full_best)
    _, tflops = selector._predict_arrays(problem, {k: v[idx] for k, v in feats.items()} if feats is not None else None,
                                        {k: v[idx] for k, v in simk.items()})
    out["top"] = [{"kernel": legal[i].name, "score": sc, "pred_tflops": float(tf)}
                  for (i, sc), tf in zip(found, tflops)]
    if full_best is not None:
        out["full_pool"] = {"kernel": legal[full_best].name, "pred_tflops": float(tflops[-1]),
                            "found": legal[found[0][0]].name == legal[full_best].name,
                            "ratio": float(tflops[0] / tflops[-1]) if tflops[-1] > 0 else float("nan")}
    return out
