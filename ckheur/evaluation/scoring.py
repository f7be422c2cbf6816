"""Evaluating a selector on measurements: per problem, the model's pick against the measured oracle.

    rows = group_by_problem(df, job.family)                 # a dataset's measurements, by problem
    result = score_problems(rows, selector, "fwd", top_k=(3,), progress=bar)

Built for large data: a dataset is read with only the columns evaluation needs (strings as
categories), its rows are grouped by problem as arrays (no pandas group per problem), problems are
scored one after another with a progress callback, and what is kept per problem is a few numbers
and its candidates' efficiencies as small arrays: memory grows with the rows read, not with
Python objects per measurement.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ckheur.data.dataset import USABLE_COLUMNS
from ckheur.errors import UserError
from ckheur.job import Job

# The dataset columns evaluation reads (besides the family's problem fields), with every one ``usable``
# reads, so that evaluation holds its rows to the rule training's whole reads do.
COLUMNS = ("op", "direction", "backend", "kernel", "timestamp", *USABLE_COLUMNS)


@dataclass
class ProblemRows:
    """A dataset's measurements of one op grouped by problem: rows ``offsets[i]:offsets[i+1]`` are
    problem ``keys[i]`` (keys sorted; rows in dataset order within a problem)."""

    keys: list
    offsets: np.ndarray
    kernels: np.ndarray  # kernel name per row
    tflops: np.ndarray  # measured TFLOPS per row, NaN where the row is not a measurement
    censored: bool  # some rows are censored (a find-db lists only the fastest solvers)
    repeated: int = 0  # (problem, kernel) pairs given by more than one row, resolved by REPEATS_RULE

    def __len__(self) -> int:
        return len(self.keys)


def group_by_problem(df: Any, family: Any, exclude_suspect: bool = False) -> ProblemRows:
    """Group a dataset frame's rows by problem (``family``'s problem fields), as arrays."""
    import pandas as pd

    from ckheur.data.dataset import CENSORED, USABLE, row_hash, usable

    fields = list(family.problems.FIELDS)
    codes, _ = pd.factorize(row_hash(df, fields))  # by a hash of the fields: no copy of millions of rows
    first = np.unique(codes, return_index=True)[1]
    if any((df[f].to_numpy()[first][codes] != df[f].to_numpy()).any() for f in fields):  # a hash collision
        codes = df.groupby(fields, sort=False, observed=True).ngroup().to_numpy()
        first = np.unique(codes, return_index=True)[1]
    keys = [tuple(k) for k in df[fields].iloc[first].itertuples(index=False, name=None)]
    by_key = sorted(range(len(keys)), key=keys.__getitem__)  # problems in key order
    rank = np.empty(len(keys), dtype=np.int64)
    rank[by_key] = np.arange(len(keys))
    codes = rank[codes]
    raw = df["tflops"].to_numpy(dtype=float)
    claimed = np.flatnonzero(df["status"].isin(USABLE).to_numpy() & ~(np.isfinite(raw) & (raw > 0)))
    if len(claimed):
        i = int(claimed[0])
        raise EvaluationError(f"{len(claimed)} row(s) of the evaluation data have status {df['status'].iloc[i]} but "
                              f"tflops {raw[i]} (not a positive number), e.g. kernel {df['kernel'].iloc[i]} on "
                              f"{dict(zip(fields, df[fields].iloc[i]))}: refused, "
                              "not counted as failed picks; re-measure or remove them")
    tflops = np.where(usable(df, exclude_suspect), raw, np.nan)
    kernels = df["kernel"].astype("category")
    kcodes = kernels.cat.codes.to_numpy().astype(np.int64)
    keep, tflops, repeated = _resolve_repeats(codes, kcodes, tflops, lambda i: (keys[by_key[codes[i]]], kernels.iloc[i]))
    codes, kcodes = codes[keep], kcodes[keep]
    order = np.argsort(codes, kind="stable")
    counts = np.bincount(codes, minlength=len(keys))
    return ProblemRows(keys=[keys[i] for i in by_key], offsets=np.r_[0, np.cumsum(counts)],
                       kernels=np.asarray(kernels.cat.categories, dtype=object)[kcodes[order]],
                       tflops=tflops[keep][order], censored=bool((df["status"] == CENSORED).any()), repeated=repeated)


REPEATS_RULE = ("a (problem, kernel) pair given by several rows counts once: the median of its measurements "
                "(failed attempts beside a measurement are ignored); measurements more than 2x apart are refused")


def _resolve_repeats(codes: np.ndarray, kcodes: np.ndarray, tflops: np.ndarray,
                     describe: Callable[[int], tuple]) -> tuple[np.ndarray, np.ndarray, int]:
    """(rows to keep, TFLOPS with each repeated pair's median on its first row, pairs repeated) by
    REPEATS_RULE; a pair whose measurements are more than 2x apart is an EvaluationError."""
    import pandas as pd

    pair = codes.astype(np.int64) * (int(kcodes.max(initial=0)) + 1) + kcodes
    _, first, inverse, counts = np.unique(pair, return_index=True, return_inverse=True, return_counts=True)
    if not (counts > 1).any():
        return np.ones(len(pair), dtype=bool), tflops, 0
    rows = np.flatnonzero(counts[inverse] > 1)
    t = pd.Series(tflops[rows]).groupby(inverse[rows])
    lo, hi, med = t.min(), t.max(), t.median()
    far = np.flatnonzero((hi > 2 * lo).to_numpy())
    if len(far):
        pid = int(lo.index[far[0]])
        problem, kernel = describe(int(first[pid]))
        raise EvaluationError(f"kernel {kernel} on the problem {problem} is measured {counts[pid]} times, "
                              f"{lo.iloc[far[0]]:.4g} to {hi.iloc[far[0]]:.4g} TFLOPS (more than 2x apart): "
                              f"conflicting rows, refused ({len(far)} such pair(s)); keep one measurement per pair")
    keep = np.zeros(len(pair), dtype=bool)
    keep[first] = True
    tflops = tflops.copy()
    tflops[first[med.index.to_numpy()]] = med.to_numpy()
    return keep, tflops, int((counts > 1).sum())


@dataclass
class Scored:
    """Per-problem results of a selector on measured problems (one entry per scored problem)."""

    rows: list = field(default_factory=list)  # dicts: the problem, the pick, the oracle, efficiency metrics
    skipped: list = field(default_factory=list)  # {"problem", "reason"}: no oracle, not rankable, nothing measured
    kernels: list = field(default_factory=list)  # names of the kernels the efficiencies below index
    candidate_eff: list = field(default_factory=list)  # per row: (kernel indices, measured efficiency; 0 failed)
    # per row: (scores of the measured candidates, then -inf for the other kernels measured; their 1 / TFLOPS)
    choice: list = field(default_factory=list)
    pred_tflops: list = field(default_factory=list)  # per row: predicted TFLOPS of the candidates that ran
    meas_tflops: list = field(default_factory=list)  # ... and their measured TFLOPS
    slices: dict = field(default_factory=dict)  # slice name -> [bool per row]
    censored: bool = False  # the data lists only the fastest candidates (a find-db): unlisted ones are censored


def score_problems(rows: ProblemRows, selector: Any, direction: str, top_k: Sequence[int] = (),
                   slices: Mapping[str, Callable] | None = None,
                   progress: Callable[[int], None] | None = None) -> Scored:
    """Each measured problem's pick by ``selector`` against the measured oracle (the best of
    everything measured, candidate or not), and, per k in ``top_k``, the hybrid pick (the fastest
    of the model's k best, measured). ``slices`` (name -> predicate(problem, gemm)) are evaluated
    on the way; ``progress(n)`` is called as problems are done."""
    from ckheur.metrics import hybrid_pick, pick_efficiency

    mod = selector.family.problems
    fields = list(mod.FIELDS)
    slices = dict(slices if slices is not None else mod.SLICES)
    out = Scored(slices={name: [] for name in slices}, censored=rows.censored)
    index: dict[str, int] = {}
    done = 0
    for i, key in enumerate(rows.keys):
        r0, r1 = rows.offsets[i], rows.offsets[i + 1]
        p = mod.problem_from_dict(dict(zip(fields, key)))
        tf = rows.tflops[r0:r1]
        good = np.isfinite(tf)
        done += 1
        if progress is not None and (done % 256 == 0 or i == len(rows) - 1):
            progress(done)
            done = 0
        if not good.any():
            out.skipped.append({"problem": p.describe(), "reason": "no successful measurement (no oracle)"})
            continue
        try:
            ks, scores, tflops = selector.scores(p)
        except ValueError as e:
            out.skipped.append({"problem": p.describe(), "reason": str(e)})
            continue
        names = rows.kernels[r0:r1]
        measured = dict(zip(names, tf))
        cand = [j for j, k in enumerate(ks) if k.name in measured]
        if not cand:
            out.skipped.append({"problem": p.describe(), "reason": "none of the model's candidates was measured"})
            continue
        meas = np.array([measured[ks[j].name] for j in cand])
        best = float(tf[good].max())
        m = pick_efficiency(scores[cand], meas, best)
        pick = cand[int(np.argmax(scores[cand]))]
        hybrid = {}
        for k in top_k:
            j, timed = hybrid_pick(scores[cand], meas, k)
            hybrid[k] = {"efficiency": float(meas[j] / best) if np.isfinite(meas[j]) and meas[j] > 0 else 0.0,
                         "timed": timed, "pool": len(ks)}
        oracle = names[np.flatnonzero(good)[int(np.argmax(tf[good]))]]
        gemm = p.gemm(direction)
        out.rows.append({"problem": p.describe(), **p.to_dict(), "pick": ks[pick].name,
                         "pick_pipeline": ks[pick].pipeline, "oracle": oracle, "oracle_tflops": best,
                         "pick_tflops": float(measured[ks[pick].name]), "candidates": len(cand),
                         "pool_not_measured": len(ks) - len(cand), **m,
                         "oracle_latency_ms": p.flops / (best * 1e12) * 1e3, "hybrid": hybrid})
        for name, pred in slices.items():
            out.slices[name].append(bool(pred(p, gemm)))
        idx = np.array([index.setdefault(ks[j].name, len(index)) for j in cand], dtype=np.int32)
        ran = np.isfinite(meas)
        out.candidate_eff.append((idx, np.where(ran, meas / best, 0.0)))
        # beside the candidates, every other kernel measured for the problem, unranked (-inf): the
        # fastest listed one is the oracle even when the selector cannot rank it
        ranked = {ks[j].name for j in cand}
        rest = [n for n in names if n not in ranked]
        out.choice.append((np.r_[scores[cand], np.full(len(rest), -np.inf)],
                           1.0 / np.r_[meas, [measured[n] for n in rest]]))
        out.pred_tflops.append(tflops[cand][ran])
        out.meas_tflops.append(meas[ran])
    out.kernels = list(index)
    return out


def fixed_kernel_baseline(scored: Scored) -> tuple[str, np.ndarray]:
    """The kernel with the best mean efficiency over the problems (0 where it was not measured:
    chosen on this data, optimistic for the baseline) and its per-problem efficiency."""
    total = np.zeros(len(scored.kernels))
    for idx, eff in scored.candidate_eff:
        np.add.at(total, idx, eff)
    by_name = np.argsort(np.array(scored.kernels, dtype=object), kind="stable")
    best = int(by_name[np.argmax(total[by_name])])  # of equal means, the first name in sorted order
    per = np.array([float(eff[idx == best][0]) if (idx == best).any() else 0.0 for idx, eff in scored.candidate_eff])
    return scored.kernels[best], per


def random_kernel_baseline(scored: Scored) -> np.ndarray:
    """Expected efficiency of a uniformly random measured candidate, per problem."""
    return np.array([float(np.mean(eff)) for _, eff in scored.candidate_eff])


CATASTROPHIC = 0.5  # a pick below half the oracle's speed is a catastrophic pick


def catastrophic_rate(per_problem: Sequence[float]) -> float:
    """Share of problems whose pick has efficiency below ``CATASTROPHIC`` (a failed pick counts as 0)."""
    e = np.asarray(per_problem, dtype=float)
    return float((e < CATASTROPHIC).mean()) if len(e) else float("nan")


def efficiency_matrix(scored: Scored) -> np.ndarray:
    """Problems x kernels (``scored.kernels``): measured efficiency, 0 where not measured or failed."""
    out = np.zeros((len(scored.candidate_eff), len(scored.kernels)))
    for i, (idx, eff) in enumerate(scored.candidate_eff):
        out[i, idx] = eff
    return out


def greedy_coverage_list(eff: np.ndarray, names: Sequence[str], *, within: float = 0.95, share: float = 0.95,
                         max_size: int = 8) -> list[int]:
    """The fewest kernels that cover most problems well, greedily: each step adds the kernel that most
    raises the mean over problems of the best efficiency within the list, until ``share`` of the problems
    have a kernel within ``within`` of their oracle, the list has ``max_size`` kernels, or nothing adds.
    Equal gains go to the first name in sorted order (so the first kernel is the best fixed kernel)."""
    by_name = np.argsort(np.array(list(names), dtype=object), kind="stable")
    best = np.zeros(eff.shape[0])
    chosen: list[int] = []
    while len(chosen) < min(max_size, eff.shape[1]) and not (best >= within).mean() >= share:
        gain = np.maximum(eff, best[:, None]).mean(axis=0) - best.mean()
        gain[chosen] = -np.inf
        j = int(by_name[np.argmax(gain[by_name])])
        if not gain[j] > 0:
            break
        chosen.append(j)
        best = np.maximum(best, eff[:, j])
    return chosen


def first_applicable(eff: np.ndarray, order: Sequence[int]) -> np.ndarray:
    """Per problem, the efficiency of the first kernel of ``order`` that ran it (0 when none did): a
    static list used as MIOpen uses its solver order, not an oracle within the list."""
    out = np.zeros(eff.shape[0])
    left = np.ones(eff.shape[0], dtype=bool)
    for j in order:
        ran = left & (eff[:, j] > 0)
        out[ran] = eff[ran, j]
        left &= ~ran
    return out


def evaluation_metrics(scored: Scored, others: Mapping[str, Scored], *, tie_tolerance: float = 0.02,
                       top_k: Sequence[int] = ()) -> dict:
    """A scored model's summary (``metrics.json`` of stage=evaluate): efficiency (mean, median, P10,
    min, time-weighted), exact and tie-aware top-1, the hybrid top-k, slices, the pick's pipeline,
    baselines (the best fixed kernel, ``others`` scored on the same problems, a random kernel) and,
    on censored data, the picks in MIOpen's terms. Adds each baseline's efficiency to the rows."""
    from ckheur.metrics import summarize, time_weighted

    rows = scored.rows
    effs = [r["efficiency"] for r in rows]
    oracle_lat = [r["oracle_latency_ms"] for r in rows]
    m = {
        "problems_evaluated": len(rows), "problems_skipped": len(scored.skipped), "skipped": scored.skipped,
        "efficiency": {**summarize(effs), "time_weighted": time_weighted(effs, oracle_lat)},
        **{k: float(np.mean([r[k] for r in rows])) for k in ("top1", "within_1pct", "oracle_in_top5", "pick_failed")},
        "top1_tie_aware": float(np.mean([r["efficiency"] >= 1 - tie_tolerance for r in rows])),
        "catastrophic_rate": catastrophic_rate(effs),
        "tie_tolerance": tie_tolerance,
        "hybrid": {str(k): _hybrid_summary(rows, k, oracle_lat) for k in top_k},
        "pool_pairs_not_measured": int(sum(r["pool_not_measured"] for r in rows)),
        "slices": {}, "by_pick_pipeline": {}, "baselines": {},
    }
    for name, member in scored.slices.items():
        sel = [r["efficiency"] for r, keep in zip(rows, member) if keep]
        if sel:
            m["slices"][name] = summarize(sel)
    for pl in sorted({r["pick_pipeline"] for r in rows}):
        m["by_pick_pipeline"][pl] = summarize([r["efficiency"] for r in rows if r["pick_pipeline"] == pl])
    for name, b in _baselines(scored, others).items():
        m["baselines"][name] = {"catastrophic_rate": catastrophic_rate(b["per_problem"]),
                                **{k: v for k, v in b.items() if k != "per_problem"}, **summarize(b["per_problem"]),
                                "time_weighted": time_weighted(b["per_problem"], oracle_lat)}
        for r, x in zip(rows, b["per_problem"]):
            r[f"baseline: {name}"] = x
    if scored.censored:
        m["censored"] = _censored_report(scored, tie_tolerance)
        m["censored_beside"] = _censored_beside(scored, others, tie_tolerance)
        if scored.rows:
            m["censored_beside"]["best fixed kernel"] = _censored_fixed_order(scored, tie_tolerance)
    return m


def acceptance_gate(scored: Scored, baseline: Scored, *, mean_pts: float = 0.5, median_pts: float = 0.5,
                    p10_pts: float = 2.0, max_loss_pts: float = 10.0) -> dict:
    """A model against a baseline on their common problems: mean and median efficiency within
    ``mean_pts`` / ``median_pts`` points, P10 within ``p10_pts``, no problem losing more than
    ``max_loss_pts``; the failures, and whether it passed."""
    import math

    from ckheur.errors import UserError
    from ckheur.metrics import summarize

    for name, limit in (("mean_pts", mean_pts), ("median_pts", median_pts), ("p10_pts", p10_pts),
                        ("max_loss_pts", max_loss_pts)):
        if isinstance(limit, bool) or not isinstance(limit, (int, float)) or not math.isfinite(limit):
            raise UserError(f"evaluate.gate_{name}={limit!r}: give a finite number of points (a NaN limit "
                            "fails no model)")
    base = {r["problem"]: r["efficiency"] for r in baseline.rows}
    common = [r for r in scored.rows if r["problem"] in base]
    new, old = summarize([r["efficiency"] for r in common]), summarize([base[r["problem"]] for r in common])
    failures = []
    for key, limit in (("mean", mean_pts), ("median", median_pts), ("p10", p10_pts)):
        drop = 100 * (old[key] - new[key])
        if drop > limit:
            failures.append(f"{key} {100 * new[key]:.2f}% is {drop:.2f} points below the baseline's "
                            f"{100 * old[key]:.2f}% (limit {limit})")
    worst = max(((100 * (base[r["problem"]] - r["efficiency"]), r["problem"]) for r in common), default=(0.0, ""))
    if worst[0] > max_loss_pts:
        failures.append(f"problem {worst[1]} loses {worst[0]:.1f} points (limit {max_loss_pts})")
    return {"problems": len(common), "model": new, "baseline_metrics": old, "worst_loss_pts": worst[0],
            "failures": failures, "passed": not failures}


def _baselines(scored: Any, others: Mapping[str, Any]) -> dict:
    """Per-problem efficiencies of the baselines, on the same problems as the model: the best fixed
    kernel, the other selectors scored (the analytic model, CK model folders) and a random kernel."""
    fixed, per = fixed_kernel_baseline(scored)
    out = {"best fixed kernel": {"kernel": fixed, "per_problem": list(per),
                                 "note": "chosen on this evaluation data (optimistic for the baseline)"}}
    eff = efficiency_matrix(scored)
    order = greedy_coverage_list(eff, scored.kernels)
    out["greedy coverage list"] = {
        "kernels": [scored.kernels[j] for j in order], "size": len(order),
        "per_problem": list(first_applicable(eff, order)),
        "oracle_within_list_mean": float(eff[:, order].max(axis=1).mean()) if order else 0.0,
        "note": "greedy list (until 95% of problems have a kernel within 95% of their oracle, at most 8), chosen "
                "on this evaluation data; picks the list's first kernel that ran the problem. Its oracle within the "
                "list is an upper bound, not a selector"}
    for name, other in others.items():
        by = {r["problem"]: r["efficiency"] for r in other.rows}
        out[name] = {"per_problem": [by.get(r["problem"], 0.0) for r in scored.rows],
                     "problems_it_could_not_rank": sum(r["problem"] not in by for r in scored.rows)}
    out["random legal kernel"] = {"per_problem": list(random_kernel_baseline(scored)),
                                  "catastrophic_rate": float(np.mean([np.mean(e < CATASTROPHIC)
                                                                      for _, e in scored.candidate_eff])),
                                  "note": "expected efficiency of a uniformly random measured candidate"}
    return out



def _censored_report(scored: Any, tol: float) -> dict:
    """When unlisted candidates are censored (a find-db lists only the fastest few): the picks in
    MIOpen's terms and ours, both protocols (ckheur.metrics.censored_choice_report), overall and
    per slice."""
    from ckheur.metrics import censored_choice_report

    pid, scores, times = _choice_arrays(scored.choice)
    out = {"all": censored_choice_report(pid, scores, times, tol), "slices": {}}
    for name, member in scored.slices.items():
        keep = np.asarray(member, dtype=bool)[pid]
        if keep.any():
            out["slices"][name] = censored_choice_report(pid[keep], scores[keep], times[keep], tol)
    return out



def _choice_arrays(choice: Sequence[tuple]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Problem index, score and 1 / TFLOPS per measured kernel of ``Scored.choice`` entries, flat."""
    pid = np.concatenate([np.full(len(sc), i) for i, (sc, _) in enumerate(choice)])
    return pid, np.concatenate([sc for sc, _ in choice]), np.concatenate([t for _, t in choice])


def _censored_beside(scored: Any, others: Mapping[str, Any], tol: float) -> dict:
    """The model beside each other selector in MIOpen's terms, both protocols, on the problems
    both ranked (another selector may rank only its own domain, as TunaNet does)."""
    from ckheur.metrics import censored_choice_report

    out = {}
    for name, other in others.items():
        theirs = {r["problem"]: i for i, r in enumerate(other.rows)}
        common = [(i, theirs[r["problem"]]) for i, r in enumerate(scored.rows) if r["problem"] in theirs]
        if common:
            out[name] = {"problems": len(common),
                         "model": censored_choice_report(*_choice_arrays([scored.choice[i] for i, _ in common]), tol),
                         name: censored_choice_report(*_choice_arrays([other.choice[j] for _, j in common]), tol)}
    return out


def _censored_fixed_order(scored: Any, tol: float) -> dict:
    """The best fixed kernel beside the model in MIOpen's terms: every problem ranks the kernels in
    one order, by mean efficiency over these problems (chosen on this data: optimistic), so its open
    pick is the best fixed kernel and its listed pick the first of that order the problem lists."""
    from ckheur.metrics import censored_choice_report

    mean = efficiency_matrix(scored).mean(axis=0)
    fixed = [(np.r_[mean[idx], np.full(len(t) - len(idx), -np.inf)], t)  # (kernels no candidate: unranked)
             for (idx, _), (_, t) in zip(scored.candidate_eff, scored.choice)]
    return {"problems": len(fixed), "model": censored_choice_report(*_choice_arrays(scored.choice), tol),
            "best fixed kernel": censored_choice_report(*_choice_arrays(fixed), tol)}


def _hybrid_summary(rows: list[dict], k: int, oracle_lat: list[float]) -> dict:
    """Efficiency when the model's top-k are measured, and what that costs in kernels timed."""
    from ckheur.metrics import summarize, time_weighted

    effs = [r["hybrid"][k]["efficiency"] for r in rows]
    timed = [r["hybrid"][k]["timed"] for r in rows]
    return {**summarize(effs), "time_weighted": time_weighted(effs, oracle_lat), "catastrophic_rate": catastrophic_rate(effs),
            "kernels_timed_per_problem": float(np.mean(timed)),
            "fraction_of_pool_timed": float(np.mean([t / r["hybrid"][k]["pool"] for t, r in zip(timed, rows)]))}


def evaluate(selector: Any, df: Any, job: Job, *, top_k: Sequence[int] = (), tie_tolerance: float = 0.02,
             exclude_suspect: bool = False, baselines: Mapping[str, Any] | None = None, gate_against: Any = None,
             gate: Mapping[str, float] | None = None, progress: str = "none", log_every_s: float = 10.0,
             log: Callable[[str], None] = print) -> tuple[dict, Scored]:
    """Score ``selector``'s pick on every measured problem of the job in ``df`` (dataset rows)
    against the measured oracle, beside ``baselines`` (label -> a selector scored on the same
    problems: the analytic model, CK folders ...); with ``gate_against`` (a selector), the
    acceptance gate (``gate``: acceptance_gate's point limits). Returns the metrics
    (``evaluation_metrics``, plus ``data_kind``, ``cascade`` and ``gate``) and the scored rows."""
    from ckheur.families.hardware import one_device
    from ckheur.progress import Progress

    top_k = check_options(top_k, tie_tolerance)
    df = df[(df.arch == job.arch_name) & (df.direction == job.direction) & (df.dtype == job.dtype)]
    device, note = one_device(df, job.arch)  # MI60's rows never score a pick for MI50 (both gfx906)
    if note:
        log(f"evaluate: {note}")
        df = df[device]
    if df.empty:
        raise EvaluationError(f"no rows for {job.direction} {job.dtype} on {job.arch_name} in the evaluation data")
    fields = list(job.family.problems.FIELDS)
    problems = int(df[fields].drop_duplicates().shape[0])
    baselines = dict(baselines or {})
    bar = Progress(problems * (1 + len(baselines) + (gate_against is not None)), progress, log_every_s,
                   prefix="evaluate", unit="problem")
    rows = group_by_problem(df, job.family, exclude_suspect)
    try:
        scored = score_problems(rows, selector, job.direction, top_k, progress=bar.update)
        if not scored.rows:
            raise EvaluationError(f"no problem could be evaluated: {scored.skipped[:3]}")
        others = {label: score_problems(rows, other, job.direction, (), progress=bar.update)
                  for label, other in baselines.items()}
        checked = None
        if gate_against is not None:
            base = score_problems(rows, gate_against, job.direction, (), progress=bar.update)
            checked = acceptance_gate(scored, base, **dict(gate or {}))
    finally:
        bar.close()
    remembered = getattr(selector, "answers", None) or {}
    metrics = {"data_kind": "simulated" if "sim" in set(df.backend) else "real",
               "cascade": len(selector.kernels) > selector.cascade_threshold,
               "remembered_problems": sum(key in remembered for key in rows.keys),
               "repeated_pairs": rows.repeated, "repeats_rule": REPEATS_RULE,
               **evaluation_metrics(scored, others, tie_tolerance=tie_tolerance, top_k=top_k)}
    if checked is not None:
        metrics["gate"] = checked
    if note:
        metrics["device"] = note
    return metrics, scored


class EvaluationError(UserError):
    """An evaluation cannot run as asked; the message says why."""


def check_options(top_k: Sequence[int], tie_tolerance: float) -> list[int]:
    """The hybrid k's, sorted and distinct; refused when a k is below 1 or the tolerance outside [0, 1)."""
    ks = sorted({int(k) for k in top_k})
    if any(k < 1 for k in ks):
        raise EvaluationError(f"evaluate.top_k={list(top_k)}: each k must be >= 1")
    if not 0 <= tie_tolerance < 1:
        raise EvaluationError(f"evaluate.tie_tolerance={tie_tolerance}: must be in [0, 1)")
    return ks
