"""Sweeps of a budget in rounds (strategy active, random or stratified).

Each round trains a bootstrap ensemble of small models on what is measured so far (its
out-of-bag efficiency is the learning curve), chooses problems (active: farthest points in log
problem space first, then by the ensemble's uncertainty and distance; random / stratified:
seeded orders, the baselines) and, per problem, the kernels to time (the ensemble's best
floor(sqrt(n)) plus half that at random; every kernel with sweep.active.all_kernels_max). Once
every problem is measured, active rounds deepen: they time the (problem, kernel) pairs the
ensemble expects to beat the problem's best measured kernel. The round's plan is written to
``active_sweep.json`` in the dataset folder before anything is measured, so a killed sweep
resumes by finishing that plan: nothing is measured twice, and the rounds are the same as
without the kill. Measurements are ordinary sweep data (same schema, atomic part files).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ckheur.files import save_png, write_file
from ckheur.progress import Progress
from ckheur.sweeping.measuring import SweepError, SweepPlan, measure_batches, record_batches, skipped_lines

STATE_FILE = "active_sweep.json"
MIN_ENSEMBLE_PROBLEMS = 5  # fewer measured problems than this: no ensemble (choices without a model)
STRATA = 10  # shape clusters of strategy=stratified


STRATEGIES = ("active", "random", "stratified")
ACQUISITIONS = ("combined", "regret", "disagreement", "distance")


@dataclass(frozen=True)
class RoundOptions:
    """How a sweep spends its budget in rounds (conf: sweep.strategy, sweep.budget, sweep.min_gain,
    sweep.active.*); budgets of rounds are shares of ``budget``."""

    strategy: str = "active"  # active (model uncertainty), random, stratified (seeded orders: baselines)
    budget: float | None = None  # pairs to measure (> 1) or a fraction of the runnable pairs (<= 1)
    min_gain: float = 0.0  # stop when a round's estimated gain in mean efficiency is below this
    first_round: float = 0.25  # share of the budget for the seeded diverse first round
    round_size: float = 0.125  # share of the budget per later round
    acquisition: str = "combined"  # combined (regret + distance), regret, disagreement, distance
    ensemble: int = 5  # bootstrap models over the measured problems
    trees: int = 100  # trees per ensemble model
    ensemble_model: str = "relative"  # conf/model option giving the members' tree settings
    top: int | None = None  # kernels timed per chosen problem: the ensemble's best (None: floor(sqrt(n)))
    explore: int | None = None  # ... plus this many at random (None: half of top)
    all_kernels_max: int = 0  # problems with at most this many runnable kernels get every kernel timed
    seed: int = 0
    # a bundle ranking a problem's kernels before the ensemble exists (instead of the analytic model);
    # "served": served_ranker's, resolved by stage=sweep
    ranker: str | None = None
    threads: int = 0  # LightGBM threads of the members (0: ckheur.threads decides)
    partial: str = "naive"  # partly measured problems in the members' training (as train.partial)

    def check(self) -> None:
        """Refuse, naming the option, values out of range."""
        if self.strategy not in STRATEGIES:
            raise SweepError(f"sweep.strategy={self.strategy!r}: allowed values are full, {', '.join(STRATEGIES)}")
        if self.acquisition not in ACQUISITIONS:
            raise SweepError(f"sweep.active.acquisition={self.acquisition!r}: allowed values are "
                             f"{', '.join(ACQUISITIONS)}")
        _check(asdict(self))


SERVED = "served"  # sweep.active.ranker=served: what stage=predict serves the sweep's device


def served_ranker(job: Any, models: str | Path, sim_models: str | Path) -> tuple[str | None, str]:
    """What ``sweep.active.ranker=served`` ranks with: the bundle ``stage=predict`` serves the job's
    device (its own bundle, else ``predicting.serving``'s: the nearest GPU's bundle or the model
    across GPUs), and which and why in words; None where that is the analytic model (the sweep's
    own ranking without a ranker). SweepError when nothing would serve it."""
    from ckheur.selection.predicting import bundle_dir, serving

    own = bundle_dir(job, models=models, sim_models=sim_models)
    if own.is_dir():
        return str(own), f"{own}: {job.arch_name}'s own bundle"
    served = None if job.family.analytic else serving(job, models)
    if served is not None:
        return str(served.path), (f"{served.path}: {served.what}; {job.arch_name} has no bundle of its own"
                                  + (f"; {served.why}" if served.why else ""))
    if job.family.analytic:
        return None, f"the analytic model (no trained bundle {own} for {job.model_name})"
    raise SweepError(f"sweep.active.ranker={SERVED}: nothing serves {job.model_name}: no bundle {own}, and no other "
                     f"GPU's bundle or model across GPUs of {job.family.name} {job.direction} {job.dtype} under "
                     f"{models}; give a bundle's folder, or null to time every runnable solver")


def _load_ranker(path: str, job: Any) -> Any:
    """The bundle of ``sweep.active.ranker`` as a selector of the job's op and arch (a model across
    GPUs with the job's device's descriptors; a SweepError names the option when it is not one)."""
    from ckheur.errors import UserError
    from ckheur.learn.bundle import load_spec
    from ckheur.selection.selector import Selector

    if path == SERVED:  # resolved by stage=sweep, which knows paths.models
        raise SweepError(f"sweep.active.ranker={SERVED}: resolve it first (served_ranker(job, models, sim_models) "
                         "gives the bundle's folder)")
    try:
        # GPU descriptors as features (a model across GPUs, a bring-up's): it ranks for this sweep's device
        ranker = Selector.load(path, **({"arch": job.arch} if load_spec(path).get("hardware") else {}))
    except (UserError, OSError) as e:
        raise SweepError(f"sweep.active.ranker={path}: not a bundle ckheur can load ({str(e)[:300]})") from None
    if (ranker.family.name, ranker.direction, ranker.dtype) != (job.family.name, job.direction, job.dtype):
        raise SweepError(f"sweep.active.ranker={path}: a {ranker.family.name} {ranker.direction} {ranker.dtype} "
                         f"bundle; this sweep is {job.family.name} {job.direction} {job.dtype}")
    return ranker


def budget_pairs(budget: float | None, runnable_pairs: int, log: Callable[[str], None] = print) -> int:
    """The budget in pairs: a count (> 1) or a fraction (0 < b <= 1) of the runnable pairs."""
    if budget is None:
        raise SweepError("sweep.budget is required with this sweep.strategy: pairs to measure (> 1) or a "
                         "fraction of the problem set's pairs (0 < budget <= 1)")
    if not 0 < budget < float("inf"):
        raise SweepError(f"sweep.budget={budget}: must be a finite number > 0 (pairs, or a fraction <= 1)")
    if budget > runnable_pairs:
        log(f"sweep.budget={budget:g} is more than the {runnable_pairs} runnable pairs: measuring them all")
        return runnable_pairs
    return int(round(budget * runnable_pairs)) if budget <= 1 else int(budget)


def _check(a: Any) -> None:
    for name, lo, hi in (("first_round", 0.0, 1.0), ("round_size", 0.0, 1.0)):
        v = float(a[name])
        if not lo < v <= hi:
            raise SweepError(f"sweep.active.{name}={v}: must be in (0, 1], a share of sweep.budget")
    for name, lo in (("ensemble", 2), ("trees", 1), ("top", 1), ("explore", 0), ("all_kernels_max", 0)):
        if a[name] is not None and int(a[name]) < lo:
            raise SweepError(f"sweep.active.{name}={a[name]}: must be >= {lo}")


def load_state(folder: Path) -> dict:
    """The rounds recorded in a dataset folder (empty when none)."""
    path = folder / STATE_FILE
    if not path.exists():
        return {"rounds": []}
    try:
        state = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as e:
        raise SweepError(f"{path} is not valid JSON ({e}); move it aside to start the rounds afresh") from None
    if not _is_state(state):
        raise SweepError(f"{path} is not an active-sweep record (an object with \"rounds\": a list of rounds, each "
                         f"with \"pairs\": [problem fields..., kernel name]); move it aside to start the rounds afresh")
    return state


def _is_state(state: Any) -> bool:
    """Whether JSON has the shape save_state writes."""
    def pair(t: Any) -> bool:
        return (isinstance(t, list) and len(t) >= 2 and isinstance(t[-1], str)
                and all(isinstance(v, (int, float, str)) and not isinstance(v, bool) for v in t))

    return (isinstance(state, dict) and isinstance(state.get("rounds"), list)
            and isinstance(state.get("final", {}), dict)
            and all(isinstance(r, dict) and isinstance(r.get("pairs"), list) and all(map(pair, r["pairs"]))
                    for r in state["rounds"]))


def save_state(folder: Path, state: dict) -> None:
    """Write the rounds atomically (a kill leaves the old or the new file, never half of one)."""
    from ckheur.files import make_folder

    write_file(make_folder(folder, "dataset folder") / STATE_FILE, json.dumps(state, separators=(",", ":")))  # compact


def _ensemble_model(name: str, threads: int) -> dict:
    """Tree settings of the ensemble members: a conf/model option of its own, so the members stay
    the uncertainty estimators the sweep was measured with whatever model is trained later."""
    from ckheur.config import CONF_DIR, load_option

    names = sorted(p.stem for p in (CONF_DIR / "model").glob("*.yaml"))
    if name not in names:
        raise SweepError(f"sweep.active.ensemble_model={name!r}: allowed values are {', '.join(names)}")
    return {**load_option(f"model/{name}"), "prior": "none", "threads": threads}


class _Rounds:
    """What the rounds share: the plan, the candidates' geometry and kernel indices, the config."""

    def __init__(self, options: RoundOptions, plan: SweepPlan) -> None:
        from ckheur.families.engines import get_engine
        from ckheur.problems.space import log_space

        self.options, self.plan, self.job = options, plan, plan.job
        self.a = asdict(options)
        self.ensemble_model = _ensemble_model(options.ensemble_model, options.threads)
        self.strategy = options.strategy
        self.seed = options.seed
        self.engine = get_engine(self.job.family.name)
        self.problems = plan.problems
        self.index = {p.key(): i for i, p in enumerate(self.problems)}
        self.Z = log_space(self.problems)
        self.kernels = plan.pool.kernels
        self.kpos = {k.name: i for i, k in enumerate(self.kernels)}
        self.group_idx = {g: np.array([self.kpos[k.name] for k in ks], dtype=np.int64) for g, ks in plan.groups.items()}
        self.runnable = [self.group_idx[p.group][plan.masks[p.key()]] for p in self.problems]
        self.runnable_pairs = int(sum(len(r) for r in self.runnable))
        self.order: np.ndarray | None = None  # random / stratified: the fixed order of problems
        self._sim: tuple | None = None  # simulator parameters and kernel arrays per group (analytic ranking)
        self.ranker = _load_ranker(options.ranker, self.job) if options.ranker else None

    def all_kernels(self, i: int) -> bool:
        # A family without an analytic model (MIOpen's solvers) has nothing to rank a new problem's
        # kernels by before the ensemble exists unless a ranker is given: every runnable one is timed.
        return len(self.runnable[i]) <= int(self.a["all_kernels_max"]) or \
            (not self.job.family.analytic and self.ranker is None)

    def first_top(self, idx: np.ndarray, n: int) -> dict[int, np.ndarray]:
        """Per problem index: its runnable kernels in the order that picks them before the ensemble
        exists: the ranker's when one is given (every one, those it does not rank last), else the
        analytic model's (best n)."""
        if self.ranker is None:
            return self.analytic_top(idx, n)
        from ckheur.families.problem_base import ProblemError

        out = {}
        for i in idx:
            try:
                ranked = self.ranker.rank(self.problems[i], k=None)
            except ProblemError:  # the ranker ranks none of its kernels here: the runnable ones in order
                ranked = []
            runnable = [int(k) for k in self.runnable[i]]
            order = [self.kpos[name] for name, _ in ranked if name in self.kpos]
            ranked_set, runnable_set = set(order), set(runnable)
            out[int(i)] = np.array([k for k in order if k in runnable_set] + [k for k in runnable if k not in ranked_set],
                                   dtype=np.int64)
        return out

    def top_explore(self, i: int) -> tuple[int, int]:
        """(kernels from the ranking, kernels at random) to time on problem i."""
        n = len(self.runnable[i])
        top = int(self.a["top"]) if self.a["top"] is not None else max(1, int(np.sqrt(n)))
        explore = int(self.a["explore"]) if self.a["explore"] is not None else int(np.ceil(top / 2))
        return min(top, n), min(explore, n - min(top, n))

    def measured(self) -> np.ndarray:
        """Per candidate problem: has any of its pairs been attempted?"""
        done = {t[:-1] for t in self.plan.done}
        return np.array([p.key() in done for p in self.problems], dtype=bool)

    def fixed_order(self) -> np.ndarray:
        from ckheur.sweeping.acquisition import stratified_order
        from ckheur.problems.space import cluster_shapes

        if self.order is None:
            if self.strategy == "random":
                self.order = np.random.default_rng(self.seed).permutation(len(self.problems))
            else:
                self.order = stratified_order(cluster_shapes(self.problems, STRATA, self.seed), self.seed)
        return self.order

    # ------------------------------------------------------------------ the model's view
    def table(self) -> Any:
        from ckheur.data.dataset import read_dataset
        from ckheur.learn.training import TrainingError, build_table
        from ckheur.sweeping.measuring import own_device_rows

        if not self.plan.out.exists():
            return None
        df = read_dataset(self.plan.out)
        df = df[own_device_rows(df, self.job.arch)]  # another device's rows of the arch are not this sweep's
        try:
            return build_table(df, self.job.op, self.job.arch, self.kernels, self.engine, None)
        except TrainingError:
            return None  # nothing usable measured yet

    def candidate_rows(self, cand: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(pid into cand, kernel index) of the pairs the ensemble scores: every runnable kernel,
        or for large pools the analytic model's top candidates (the selector's cascade)."""
        from ckheur.sim import CASCADE_THRESHOLD, CASCADE_TOP

        pid, kid = [], []
        big = [j for j, i in enumerate(cand) if len(self.runnable[i]) > CASCADE_THRESHOLD]
        top = self.analytic_top(cand[big], CASCADE_TOP) if big else {}
        for j, i in enumerate(cand):
            ks = top.get(int(i), self.runnable[i])
            pid.append(np.full(len(ks), j))
            kid.append(ks)
        return np.concatenate(pid), np.concatenate(kid)

    def analytic_top(self, idx: np.ndarray, n: int) -> dict[int, np.ndarray]:
        """Per problem index: its runnable kernels ranked by the analytic model, best n first."""
        from ckheur.sim import kernel_arrays, predict_latency_ms, problem_arrays

        if self._sim is None:
            self._sim = ({**self.job.sim_params, "dtype": self.job.dtype},
                         {g: kernel_arrays([self.kernels[k] for k in gk]) for g, gk in self.group_idx.items()})
        params, sim_kernels = self._sim
        direction = self.job.direction
        out: dict[int, np.ndarray] = {}
        by_group: dict[Any, list[int]] = {}
        for i in idx:
            by_group.setdefault(self.problems[i].group, []).append(int(i))
        for g, members in by_group.items():
            gk, karr = self.group_idx[g], sim_kernels[g]
            step = max(1, 1_000_000 // len(gk))
            for s in range(0, len(members), step):
                chunk = members[s:s + step]
                lat = predict_latency_ms(problem_arrays([self.problems[i] for i in chunk], direction), karr,
                                         self.job.arch, params, direction)
                for row, i in zip(lat, chunk):
                    row = np.where(self.plan.masks[self.problems[i].key()], row, np.inf)
                    best = np.argsort(row, kind="stable")[:n]
                    out[i] = gk[best[np.isfinite(row[best])]]
        return out

    def scores_of(self, idx: np.ndarray, pid: np.ndarray, kid: np.ndarray) -> np.ndarray:
        """Feature rows of the pairs (problems[idx[pid]], kernels[kid])."""
        from ckheur.families.engines import pair_features

        return pair_features(self.engine, [self.problems[i] for i in idx], self.kernels, pid, kid, self.job.arch,
                             self.job.direction)

    def scores(self, boosters: list, cand: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(pid, kernel index, member scores [E, rows]) over the candidates' scored pairs."""
        pid, kid = self.candidate_rows(cand)
        X = self.scores_of(cand, pid, kid)
        from ckheur.threads import predict

        return pid, kid, np.stack([predict(b, X) for b in boosters])

    # ------------------------------------------------------------------ kernels per problem
    def kernels_for(self, i: int, ranked: np.ndarray | None, rnd: int) -> list[int]:
        """Kernels to time on (unmeasured) problem i: all runnable ones (small pools), else the best
        `top` of ``ranked`` (the ensemble's order, or the analytic model's) plus `explore` at random."""
        if self.all_kernels(i):
            return [int(k) for k in self.runnable[i]]
        n_top, n_explore = self.top_explore(i)
        allowed = set(int(k) for k in self.runnable[i])
        top = [int(k) for k in ranked if int(k) in allowed][:n_top]
        rest = sorted(allowed - set(top))
        rng = np.random.default_rng([self.seed, rnd, i])
        explore = rng.choice(rest, size=min(len(rest), n_explore), replace=False).tolist() if rest else []
        return top + sorted(int(k) for k in explore)

    def cost(self, i: int) -> int:
        return len(self.runnable[i]) if self.all_kernels(i) else sum(self.top_explore(i))


def sweep_rounds(plan: SweepPlan, options: RoundOptions, *, progress: str = "auto", log_every_s: float = 10.0,
                 log: Callable[[str], None] = print) -> dict:
    """Measure up to ``options.budget`` pairs of the plan in rounds, resuming the rounds recorded
    in its dataset folder; returns the summary with the learning curve (``interrupted`` after Ctrl-C)."""
    from ckheur.backends import make_backend

    options.check()
    job = plan.job
    R = _Rounds(options, plan)
    budget = budget_pairs(options.budget, R.runnable_pairs, log)
    state = load_state(plan.out)
    spent = sum(len(r["pairs"]) for r in state["rounds"])
    log(f"sweep: strategy={R.strategy} {job.label} via backend={plan.backend['name']}: {len(R.problems)} problems, "
        f"{R.runnable_pairs} runnable pairs; budget {budget} pairs ({100 * budget / max(1, R.runnable_pairs):.1f}%), "
        f"{spent} spent in {len(state['rounds'])} earlier rounds; dataset {plan.out}")
    for line in skipped_lines(plan.skipped):
        log(line)
    measurer = make_backend(plan.backend, job.op, job.arch)
    pcols, kcols = plan.columns()
    bar = Progress(max(0, budget - spent), progress, log_every_s)
    statuses: Counter = Counter()
    t0 = time.perf_counter()
    interrupted, stopped = False, None
    by_key = {p.key(): p for p in R.problems}

    def measure(pairs: list) -> bool:
        # Pairs of earlier rounds outside today's problem set or pool are left alone.
        todo = [(by_key[tuple(t[:-1])], plan.pool.kernels[R.kpos[t[-1]]]) for t in pairs
                if tuple(t) not in plan.done and tuple(t[:-1]) in by_key and t[-1] in R.kpos]
        got, stop = record_batches(plan.out, measure_batches(todo, measurer), measurer, job, pcols, kcols, bar)
        statuses.update(got)
        plan.done.update(tuple(t) for t in pairs)  # a pair whose batch was lost in a kill is measured on resume
        return stop

    try:
        if state["rounds"]:  # finish the plan of a killed run first
            interrupted = measure([p for r in state["rounds"] for p in r["pairs"]])
        while not interrupted:
            rnd = len(state["rounds"])
            record, pairs = _plan_round(R, rnd, budget - spent, budget, float(options.min_gain))
            if not pairs:
                stopped = record["stopped"]
                state.setdefault("final", {}).update(record)
                break
            record["pairs"] = pairs
            spent += len(pairs)
            record["spent_after"] = spent
            state["rounds"].append(record)
            save_state(plan.out, state)
            log(_round_line(record, budget))
            interrupted = measure(pairs)
    finally:
        bar.close()
        measurer.close()
    if not interrupted:
        save_state(plan.out, state)
    wall = time.perf_counter() - t0
    return _summary(R, plan, state, budget, spent, statuses, wall, interrupted, stopped, measurer.name)


def _plan_round(R: _Rounds, rnd: int, left: int, budget: int, min_gain: float) -> tuple[dict, list]:
    """Choose the next round's pairs; returns its record (why, learning-curve point) and the pairs."""
    from ckheur.sweeping.acquisition import Uncertainty, choose_batch, farthest_points, oob_efficiency, uncertainty
    from ckheur.sweeping.acquisition import train_ensemble

    t0 = time.perf_counter()
    a = R.a
    measured = R.measured()
    cand = np.flatnonzero(~measured)
    record: dict[str, Any] = {"round": rnd, "strategy": R.strategy}
    tb = R.table()
    boosters: list = []
    u: Uncertainty | None = None
    pid = kid = S = None
    if tb is not None and len(tb.problems) >= MIN_ENSEMBLE_PROBLEMS:
        cat = [tb.feature_names.index(c) for c in R.engine.CATEGORICAL]
        boosters, oob = train_ensemble(tb, R.ensemble_model, int(a["ensemble"]), int(a["trees"]), cat,
                                       R.seed + 1000 * rnd, R.options.partial)
        record["oob_efficiency"] = oob_efficiency(tb, boosters, oob)
        record["measured_problems"] = len(tb.problems)
        record["measured_rows"] = int(len(tb.pid))
        if len(cand):
            pid, kid, S = R.scores(boosters, cand)
            u = uncertainty(S, pid, len(cand))
            record["estimated_loss_unmeasured"] = float(u.regret.mean())
    if not len(cand):
        if R.strategy != "active" or not boosters:
            return {**record, "stopped": "every problem of the set is measured"}, []
        return _deepen(R, record, tb, boosters, rnd, left, budget, min_gain, t0)
    first = not boosters or rnd == 0
    size = min(left, int(round(budget * float(a["first_round" if rnd == 0 else "round_size"]))))
    costs = np.array([R.cost(i) for i in cand])
    if size < costs.min():
        size = min(left, int(costs.min()))
    if left < costs.min():
        return {**record, "stopped": f"budget spent ({budget - left} of {budget} pairs)"}, []
    if R.strategy in ("random", "stratified"):
        pos = {int(i): j for j, i in enumerate(cand)}
        picks = _fill([pos[int(i)] for i in R.fixed_order() if int(i) in pos], costs, size)
        why: list[dict] = [{} for _ in picks]
    elif first:
        picks = _fill(farthest_points(R.Z[cand], len(cand), R.Z[measured], R.seed), costs, size)
        why = [{"reason": "farthest point"} for _ in picks]
    else:
        picks, why = choose_batch(str(a["acquisition"]), u, R.Z[cand], R.Z[measured], costs, size)
    if u is not None:
        # The set's mean efficiency would rise by the picks' expected regret if measuring them removed it.
        stop = _gain_stop(record, float(u.regret[picks].sum()) / len(R.problems), min_gain)
        if stop:
            return stop, []
    pairs, chosen = [], []
    partial = [int(cand[j]) for j in picks if not R.all_kernels(int(cand[j]))]
    first_order = R.first_top(np.array(partial), max(R.top_explore(i)[0] for i in partial)) \
        if partial and S is None else {}
    for j, w in zip(picks, why):
        i = int(cand[j])
        ranked = first_order.get(i)
        if not R.all_kernels(i) and S is not None:
            rows = np.flatnonzero(pid == j)
            ranked = kid[rows[np.argsort(-S[:, rows].mean(axis=0), kind="stable")]]
        ks = R.kernels_for(i, ranked, rnd)
        key = R.problems[i].key()
        pairs += [[*key, R.kernels[k].name] for k in ks]
        chosen.append({"problem": R.problems[i].describe(), "kernels": len(ks), **w})
    record.update(acquisition=str(a["acquisition"]) if R.strategy == "active" and not first else
                  ("farthest point" if R.strategy == "active" else R.strategy),
                  problems=chosen, choose_s=round(time.perf_counter() - t0, 3), candidates=int(len(cand)))
    return record, pairs


def _fill(order: list, costs: np.ndarray, size: int) -> list:
    """Candidates taken in ``order`` while their pairs fit in ``size``."""
    picks, total = [], 0
    for j in order:
        if total + costs[j] <= size:
            picks.append(j)
            total += int(costs[j])
    return picks


def _gain_stop(record: dict, gain: float, min_gain: float) -> dict | None:
    """Record a round's estimated gain; the stop record when it is below sweep.min_gain."""
    record["estimated_gain"] = gain
    if min_gain > 0 and gain < min_gain:
        return {**record, "stopped": f"estimated gain {100 * gain:.3f} pts < sweep.min_gain {100 * min_gain:.3f} pts"}
    return None


def _deepen(R: _Rounds, record: dict, tb: Any, boosters: list, rnd: int, left: int, budget: int, min_gain: float,
            t0: float) -> tuple[dict, list]:
    """Every problem is measured: time more kernels of them, the unmeasured (problem, kernel)
    pairs with the largest expected improvement over the problem's best measured kernel."""
    from ckheur.sweeping.acquisition import expected_improvement
    from ckheur.threads import predict

    size = min(left, int(round(budget * float(R.a["round_size"]))))
    if size <= 0:
        return {**record, "stopped": f"budget spent ({budget - left} of {budget} pairs)"}, []
    meas = np.flatnonzero(R.measured())
    pid, kid = R.candidate_rows(meas)
    best: dict[int, tuple[float, int]] = {}  # candidate position -> (TFLOPS, kernel) of its best measured kernel
    pos = {int(i): j for j, i in enumerate(meas)}
    for t, p_tb, k in zip(tb.tflops, tb.pid, tb.kid):
        i = R.index.get(tb.problems[p_tb].key())
        if i is not None and i in pos and t > best.get(pos[i], (-1.0, -1))[0]:
            best[pos[i]] = (float(t), int(k))
    # Rows of the best measured kernels (added where the cascade left them out).
    have = set(zip(pid.tolist(), kid.tolist()))
    extra = [(j, k) for j, (_, k) in best.items() if (j, k) not in have]
    if extra:
        pid = np.r_[pid, [j for j, _ in extra]]
        kid = np.r_[kid, [k for _, k in extra]]
    keep = np.array([j in best for j in pid.tolist()], dtype=bool)
    pid, kid = pid[keep], kid[keep]
    X = R.scores_of(meas, pid, kid)
    S = np.stack([predict(b, X) for b in boosters])
    row_of = {pair: r for r, pair in enumerate(zip(pid.tolist(), kid.tolist()))}
    best_row = np.zeros(len(meas), dtype=np.int64)
    for j, (_, k) in best.items():
        best_row[j] = row_of[(j, k)]
    ei = expected_improvement(S, pid, best_row)
    done = np.array([(*R.problems[meas[j]].key(), R.kernels[k].name) in R.plan.done for j, k in zip(pid, kid)])
    ei[done] = -1.0
    order = np.argsort(-ei, kind="stable")
    chosen = order[ei[order] > 0][:size]
    if not len(chosen):
        return {**record, "stopped": "every problem is measured and the ensemble expects no kernel to beat "
                                     "the measured best"}, []
    stop = _gain_stop(record, float(ei[chosen].sum()) / len(R.problems), min_gain)
    if stop:
        return stop, []
    pairs, per = [], {}
    for r in sorted(chosen, key=lambda r: (pid[r], kid[r])):
        i = int(meas[pid[r]])
        pairs.append([*R.problems[i].key(), R.kernels[kid[r]].name])
        d = per.setdefault(i, {"problem": R.problems[i].describe(), "kernels": 0, "expected_improvement": 0.0})
        d["kernels"] += 1
        d["expected_improvement"] = round(d["expected_improvement"] + float(ei[r]), 5)
    record.update(acquisition="expected improvement (deepening)", problems=list(per.values()),
                  choose_s=round(time.perf_counter() - t0, 3), candidates=int(len(meas)))
    return record, pairs


def _round_line(r: dict, budget: int) -> str:
    bits = [f"sweep: round {r['round']} ({r['acquisition']}): {len(r['problems'])} problems, {len(r['pairs'])} "
            f"pairs (spent {r['spent_after']}/{budget})"]
    if "oob_efficiency" in r:
        bits.append(f"model so far: OOB efficiency {100 * r['oob_efficiency']['mean']:.2f}% "
                    f"on {r['oob_efficiency']['n']} problems")
    if "estimated_gain" in r:
        bits.append(f"estimated gain {100 * r['estimated_gain']:.2f} pts")
    bits.append(f"chosen in {r['choose_s']:.2f}s")
    return "; ".join(bits)


def _summary(R: "_Rounds", plan: SweepPlan, state: dict, budget: int, spent: int, statuses: Counter, wall: float,
             interrupted: bool, stopped: str | None, backend: str) -> dict:
    rounds = [{k: v for k, v in r.items() if k != "pairs"} | {"pairs": len(r["pairs"])} for r in state["rounds"]]
    curve, before = [], 0
    for r in state["rounds"] + ([state["final"]] if "final" in state else []):
        if "oob_efficiency" in r:
            curve.append({"pairs_measured": before, "round": r["round"], "oob_mean": r["oob_efficiency"]["mean"],
                          "oob_p10": r["oob_efficiency"]["p10"], "oob_problems": r["oob_efficiency"]["n"],
                          "estimated_loss_unmeasured": r.get("estimated_loss_unmeasured")})
        before += len(r.get("pairs", []))
    return {"dataset": str(plan.out), "strategy": R.strategy, "backend": backend, "problems": len(R.problems),
            "problems_skipped": [{"problem": d, "reason": r} for d, r in plan.skipped],
            "pool": len(plan.pool.kernels), "pairs_runnable": R.runnable_pairs, "budget_pairs": budget,
            "budget_fraction": budget / max(1, R.runnable_pairs), "pairs_spent": spent,
            "pairs_measured": int(sum(statuses.values())), "by_status": dict(statuses), "wall_s": round(wall, 3),
            "interrupted": interrupted, "stopped": stopped or (state.get("final") or {}).get("stopped"),
            "options": asdict(R.options), "rounds": rounds, "learning_curve": curve}


def plot_learning_curve(path: Path, s: dict, subject: str = "") -> None:
    """Learning curve: out-of-bag efficiency of the round's ensemble and its estimated loss on
    the unmeasured problems, against pairs measured; ``subject`` (op, dtype, arch) in the title."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    c = s["learning_curve"]
    fig, ax = plt.subplots(figsize=(6, 4))
    if c:
        x = [p["pairs_measured"] for p in c]
        ax.plot(x, [100 * p["oob_mean"] for p in c], "o-", label="OOB mean efficiency (measured problems)")
        loss = [(p["pairs_measured"], 100 * (1 - p["estimated_loss_unmeasured"])) for p in c
                if p["estimated_loss_unmeasured"] is not None]
        if loss:
            ax.plot(*zip(*loss), "s--", label="100 - estimated loss on unmeasured problems")
    ax.axvline(s["budget_pairs"], color="k", linewidth=0.8, linestyle=":", label="budget")
    ax.set_xlabel("pairs measured")
    ax.set_ylabel("efficiency (%): OOB on measured times, loss estimated")
    ax.set_xlim(left=0)
    ax.set_ylim(0, 101)
    data = "SIMULATED data (backend sim)" if s.get("backend") == "sim" else f"backend {s.get('backend')}"
    ax.set_title(f"sweep.strategy={s['strategy']}: {s['pairs_spent']} of {s['pairs_runnable']} pairs\n"
                 + ", ".join(filter(None, [subject, data])), fontsize=9)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    save_png(fig, path)
    plt.close(fig)
