"""Training tables, labels per objective, grouped K-fold CV with early stopping on an inner
group split of the training folds (never on the scored fold), and the final fit."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ckheur.errors import UserError

OBJECTIVES = ("regression_log", "relative", "lambdarank")
# Tree counts a model may be cut at (train.budget_loss_pts): selection time follows the tree count.
TREE_BUDGETS = (25, 50, 75, 100, 150, 200, 250, 300, 400, 500, 600, 800, 1000, 1500, 2000, 3000)
PARTIAL_TARGETS = ("pairwise", "naive", "drop")


class TrainingError(UserError):
    """The data cannot be trained on as configured; the message says why."""


@dataclass
class Table:
    """One row per measured (problem, kernel), sorted by problem; features in X."""

    X: np.ndarray
    tflops: np.ndarray
    pid: np.ndarray  # problem index (a CV group: the full problem identity)
    kid: np.ndarray  # kernel index into `kernels`
    problems: list
    kernels: list
    feature_names: list[str]
    full: np.ndarray = None  # per problem: every candidate kernel that can run it was attempted
    report: dict = field(default_factory=dict)
    prior: np.ndarray | None = None  # per row: the analytic prior (init score) the trees correct (models.prior)
    # New problems -> (feature rows of their pairs with the measured kernels, problem index per row):
    # what a distilled student trains on beyond the measured problems (fit, model.distill_*).
    featurize: Callable[[Sequence[Any]], tuple[np.ndarray, np.ndarray]] | None = None
    build_problem: Callable[[dict], Any] | None = None  # a dict of fields -> a checked problem
    span_blocks: tuple = ()  # fields drawn together when new problems are drawn (problems.space.span_problems)
    weight: np.ndarray | None = None  # per row: its weight in training (None: all 1; train.target_weight)


def build_table(df: Any, op: Mapping[str, Any], arch: Mapping[str, Any], pool: Sequence[Any], engine: Any,
                analytic_params: Mapping[str, Any] | None, exclude_suspect: bool = False) -> Table:
    """Training table from a dataset frame: usable rows of this op/arch whose kernel is in the pool.

    Marks each problem fully or partly measured: full when every candidate kernel (measured
    somewhere in the data) that can run the problem has a row for it, whatever its status."""
    from ckheur.data.dataset import CENSORED, usable
    from ckheur.families.engines import pair_features
    from ckheur.families import get_family
    from ckheur.families.hardware import devices_of, one_device

    family = get_family(op["family"])
    problems_mod = family.problems
    fields = list(problems_mod.FIELDS)
    report: dict[str, Any] = {"rows_read": int(len(df))}
    mine = df[(df.arch == arch["name"]) & (df.direction == op["direction"]) & (df.dtype == op["dtype"])]
    report["rows_other_op_or_arch"] = int(len(df) - len(mine))
    device, note = one_device(mine, arch)  # MI60's rows never train a model of MI50 (both gfx906)
    if note:
        report["device"] = note
        report["rows_other_device"] = int(len(mine) - device.sum())
        mine = mine[device]
    censored = (mine.status == CENSORED).to_numpy()
    good = usable(mine, exclude_suspect) | censored
    ok = mine[good].copy()
    ok.loc[ok.status == CENSORED, "tflops"] = 0.0  # ranks below every measured kernel of its problem
    report["rows_not_used_by_status"] = {str(k): int(v) for k, v in mine[~good].status.value_counts().items()}
    report["rows_censored"] = int(censored.sum())
    names = {k.name: i for i, k in enumerate(pool)}
    outside = ok[~ok.kernel.isin(list(names))]
    report["rows_kernel_not_in_pool"] = int(len(outside))
    report["kernels_not_in_pool"] = sorted(outside.kernel.unique().tolist())[:50]
    ok = ok[ok.kernel.isin(list(names))]
    report["problems_only_censored"] = 0
    if censored.any():  # a problem whose every row is censored has no measurement to rank against: left out
        measured = ok.groupby(fields, sort=False, dropna=False)["tflops"].transform("max").to_numpy() > 0
        report["problems_only_censored"] = int(ok[~measured][fields].drop_duplicates().shape[0])
        ok = ok[measured]
    if ok.empty:
        others = sorted(set(df[(df.direction == op["direction"]) & (df.dtype == op["dtype"])].arch) - {arch["name"]})
        hint = f"; the data has rows of {', '.join(others)}: features.hardware=true trains one model across those " \
            f"GPUs for {arch['name']}" if mine.empty and others else ""
        if mine.empty and len(df) and not others:  # none of the job's op, dtype or arch: say what the data holds
            held = sorted({f"{o} {t} on {a}" for o, t, a in df[["op", "dtype", "arch"]].astype(str).itertuples(
                index=False, name=None)})
            raise TrainingError(f"no rows of {op['family']}/{op['direction']} {op['dtype']} on {arch['name']} in the "
                                f"data ({len(df)} rows of {', '.join(held[:6])}{' ...' if len(held) > 6 else ''}): "
                                "check data.paths, or set op, op.dtype and arch to the data's")
        raise TrainingError(f"no usable rows: {report} (check data.paths, arch, op and the kernel pool){hint}")
    report["devices"] = devices_of(ok, arch)  # MI210 (gfx90a, 104 CUs) for arch=gfx90a's MI250X: the bundle says so
    keys = list(ok[fields].itertuples(index=False, name=None))
    uniq = sorted(set(keys))
    index = {k: i for i, k in enumerate(uniq)}
    pid = np.fromiter((index[k] for k in keys), dtype=np.int64, count=len(keys))
    kid = ok.kernel.map(names).to_numpy(dtype=np.int64)
    order = np.lexsort((kid, pid))
    pid, kid = pid[order], kid[order]
    tflops = ok.tflops.to_numpy(dtype=np.float64)[order]
    problems = [problems_mod.problem_from_dict(dict(zip(fields, k))) for k in uniq]
    X = pair_features(engine, problems, pool, pid, kid, arch, op["direction"], analytic_params)
    full = _fully_measured(mine[mine.kernel.isin(list(names))], fields, uniq, set(ok.kernel), pool, family, op)
    report.update(rows_used=int(len(X)), problems=len(problems), problems_fully_measured=int(full.sum()),
                  problems_partly_measured=int((~full).sum()), kernels_measured=int(len(np.unique(kid))),
                  pool=len(pool))
    measured = sorted(set(kid.tolist()))

    def featurize(new: Sequence[Any]) -> tuple[np.ndarray, np.ndarray]:
        """Feature rows of new problems paired with the measured kernels that can run them."""
        new_pid, new_kid, groups = [], [], {}
        for i, p in enumerate(new):
            if p.group not in groups:
                ks = [j for j in measured if pool[j].group == p.group]
                groups[p.group] = (np.array(ks, dtype=np.int64), family.kernels.support_arrays([pool[j] for j in ks]))
            ks, support = groups[p.group]
            runs = ks[np.asarray(family.kernels.support_mask(p, support, op)[0], dtype=bool)] if len(ks) else ks
            new_pid += [i] * len(runs)
            new_kid += runs.tolist()
        new_pid_a, new_kid_a = np.asarray(new_pid, dtype=np.int64), np.asarray(new_kid, dtype=np.int64)
        if not len(new_pid_a):
            return np.empty((0, X.shape[1])), new_pid_a
        return pair_features(engine, new, pool, new_pid_a, new_kid_a, arch, op["direction"], analytic_params), new_pid_a

    return Table(X=X, tflops=tflops, pid=pid, kid=kid, problems=problems, kernels=list(pool),
                 feature_names=engine.feature_names(analytic_params is not None), full=full, report=report,
                 featurize=featurize, build_problem=problems_mod.problem_from_dict,
                 span_blocks=tuple(getattr(problems_mod, "SPAN_BLOCKS", getattr(problems_mod, "PARTNERS", ()))))


def scored_rows(table: Table, rows: np.ndarray | None = None) -> np.ndarray:
    """Of ``rows`` (default every row), those selection figures score: the rows of fully measured
    problems, or all of them when none is (each pick then judged against its problem's best measured
    kernel)."""
    rows = np.arange(len(table.X)) if rows is None else rows
    if table.full is None:
        return rows
    full = rows[table.full[table.pid[rows]]]
    return full if len(full) else rows


def build_table_across_archs(df: Any, op: Mapping[str, Any], arch: Mapping[str, Any], pool: Sequence[Any],
                             engine: Any, analytic_params: Mapping[str, Any] | None,
                             exclude_suspect: bool = False, target_weight: float = 1.0,
                             own_pools: bool = False) -> Table:
    """One training table of this op's rows on every device in the data (one model across GPUs):
    each device's rows featurized with its own config (the arch's ``conf/arch``, or its ``devices``
    entry: a row's device is the one it records or its find-db file name says,
    ``families.hardware.row_devices``; MI50 and MI60 rows get their own descriptors), so ``engine``
    should describe the hardware (``families.hardware``). ``arch`` is the target device: its rows come first and weigh
    ``target_weight`` each in training (others 1), and its table (when the data has rows of it)
    makes the generated problems of distillation. ``pool``: the kernels ranked; ``own_pools``:
    each device's rows are those of its own arch's pool, indexed into ``pool`` (their union: a
    model for any GPU). A solver a device's rows list for no problem stays in its rows, censored:
    served, it is a candidate there (leaving such rows out put MI60's unlisted picks at 71% of its
    unseen backward-data FP16 problems, against 10% with them). A device without usable rows is
    left out; the report says so per device."""
    from ckheur.config import load_arch
    from ckheur.families.hardware import device_config, device_key, device_label, row_devices
    from ckheur.kernels import enumerate_pool

    mine = df[(df.direction == op["direction"]) & (df.dtype == op["dtype"])]
    cus = row_devices(mine)
    configs: dict[tuple, tuple[dict, Any]] = {}  # device -> its config, its rows
    for name, n in sorted(set(zip(mine.arch.astype(str), cus.tolist()))):
        # the target device's rows take the job's config (as given); 0: an arch without a shipped config
        own = name == arch["name"] and n in (0, int(arch["num_cus"]))
        cfg = dict(arch) if own else device_config(load_arch(name), n)
        rows = (mine.arch.astype(str) == name).to_numpy() & (cus == n)
        key = device_key(cfg)
        configs[key] = (cfg, rows | configs[key][1] if key in configs else rows)
    # The target's rows: its device's; where the data has none, its arch's other devices' (MI210's file
    # for arch=gfx90a, MI250X): what the job measured of its GPU, each with its own descriptors.
    target = {device_key(arch)} & set(configs) or {k for k, (c, _) in configs.items() if c["name"] == arch["name"]}
    order = sorted(configs, key=lambda k: (k not in target, device_label(configs[k][0])))  # the target first
    at = {k.name: i for i, k in enumerate(pool)}
    tables, per_arch, start = [], {}, 0
    for key in order:
        cfg, rows = configs[key]
        label = device_label(cfg)
        part = mine[rows]
        own = [k for k in enumerate_pool(op, cfg).kernels if k.name in at] if own_pools else pool
        try:
            tb = build_table(part, op, cfg, own, engine, analytic_params, exclude_suspect)
        except (TrainingError, UserError) as e:
            per_arch[label] = {"error": str(e)}
            continue
        if own_pools:  # its kernels indexed into the union
            remap = np.array([at[k.name] for k in tb.kernels], dtype=np.int64)
            tb = replace(tb, kid=remap[tb.kid], kernels=list(pool))
        per_arch[label] = {k: tb.report[k] for k in ("rows_used", "problems", "rows_kernel_not_in_pool")}
        per_arch[label].update(arch=cfg["name"], num_cus=int(cfg["num_cus"]), row_span=[start, start + len(tb.X)])
        start += len(tb.X)
        if key in target:
            per_arch[label]["target"] = True
        if key in target and target_weight != 1:
            tb = replace(tb, weight=np.full(len(tb.X), float(target_weight)))
            per_arch[label]["weight"] = float(target_weight)
        tables.append(tb)
    if not tables:
        raise TrainingError(f"no usable rows on any device of the data "
                            f"({', '.join(sorted(set(mine.arch.astype(str)))) or 'none of this op'}): {per_arch}")
    out = concat_tables(tables)
    used = [r["arch"] for r in per_arch.values() if "error" not in r]
    out.report.update(rows_read=int(len(df)), rows_other_op_or_arch=int(len(df) - mine.arch.isin(used).sum()),
                      archs=per_arch, pool=len(pool))
    return out


def concat_tables(tables: Sequence[Table]) -> Table:
    """Tables over one kernel pool as one (problem indices offset; the first table's featurize)."""
    first = tables[0]
    offsets = np.cumsum([0] + [len(t.problems) for t in tables[:-1]])
    report: dict[str, Any] = {}
    for t in tables:  # counts add up, counts by key add up by key, lists join
        for k, v in t.report.items():
            if isinstance(v, dict):
                report[k] = {**report.get(k, {}), **{c: report.get(k, {}).get(c, 0) + n for c, n in v.items()}}
            elif isinstance(v, list):
                report[k] = sorted(set(report.get(k, [])) | set(v))
            elif isinstance(v, (int, float)) and not isinstance(v, bool):
                report[k] = report.get(k, 0) + v
    report["pool"] = first.report.get("pool", len(first.kernels))
    report["kernels_measured"] = int(len(np.unique(np.concatenate([t.kid for t in tables]))))
    return Table(X=np.vstack([t.X for t in tables]), tflops=np.concatenate([t.tflops for t in tables]),
                 pid=np.concatenate([t.pid + o for t, o in zip(tables, offsets)]),
                 kid=np.concatenate([t.kid for t in tables]), problems=[p for t in tables for p in t.problems],
                 kernels=first.kernels, feature_names=first.feature_names,
                 full=np.concatenate([t.full for t in tables]), report=report, featurize=first.featurize,
                 build_problem=first.build_problem, span_blocks=first.span_blocks,
                 weight=None if all(t.weight is None for t in tables) else
                 np.concatenate([np.ones(len(t.X)) if t.weight is None else t.weight for t in tables]))


def _fully_measured(rows: Any, fields: list, keys: list, candidates: set, pool: Sequence[Any], family: Any,
                    op: Mapping[str, Any]) -> np.ndarray:
    """Per problem key: were all candidate kernels able to run it attempted (any status)?"""
    attempted: dict[tuple, set] = {}
    for key, kernel in zip(rows[fields].itertuples(index=False, name=None), rows.kernel):
        attempted.setdefault(key, set()).add(kernel)
    groups: dict[Any, tuple] = {}  # group -> (kernel positions, support arrays, candidate mask)
    out = np.ones(len(keys), dtype=bool)
    for i, key in enumerate(keys):
        seen = attempted.get(key, set())
        if candidates <= seen:
            continue
        # Kernels that cannot run the problem (another group, unsupported shape) are not missing.
        p = family.problems.problem_from_dict(dict(zip(fields, key)))
        if p.group not in groups:
            ks = [k for k in pool if k.group == p.group]
            groups[p.group] = ({k.name: j for j, k in enumerate(ks)}, family.kernels.support_arrays(ks),
                               np.array([k.name in candidates for k in ks], dtype=bool))
        pos, support, cand = groups[p.group]
        missing = cand.copy()
        missing[[pos[n] for n in seen if n in pos]] = False
        if missing.any():
            out[i] = not np.any(np.asarray(family.kernels.support_mask(p, support, op)[0]) & missing)
    return out


def labels(objective: str, tflops: np.ndarray, pid: np.ndarray, rank_power: float = 8.0) -> np.ndarray:
    """Training target of an objective (relative ones against the best measured kernel)."""
    if objective == "regression_log":
        return np.log1p(tflops)
    best = np.zeros(pid.max() + 1)
    np.maximum.at(best, pid, tflops)
    # A problem with no usable time (every row censored) labels 0, as LightGBM reads a NaN label.
    rel = np.divide(tflops, best[pid], out=np.zeros(len(tflops)), where=best[pid] > 0)
    if objective == "relative":
        return rel
    if objective == "lambdarank":
        return np.clip(np.round(30.0 * rel ** rank_power), 0, 30).astype(np.int64)
    raise TrainingError(f"objective={objective!r}: allowed values are {', '.join(OBJECTIVES)}")


def lgb_params(model: Mapping[str, Any], objective: str, seed: int) -> dict:
    """LightGBM parameters from the model config (bagging on through subsample + freq)."""
    p = {"learning_rate": model["learning_rate"], "num_leaves": model["num_leaves"],
         "min_data_in_leaf": model["min_data_in_leaf"], "feature_fraction": model["feature_fraction"],
         "bagging_fraction": model["subsample"], "bagging_freq": model["subsample_freq"],
         "lambda_l2": model["lambda_l2"], "seed": seed, "deterministic": True, "force_row_wise": True,
         "verbose": -1}
    if objective == "lambdarank":
        p.update(objective="lambdarank", metric="ndcg", eval_at=[1], label_gain=list(range(31)))
    else:
        p.update(objective="regression", metric="l2")
    return p


def _dataset(X: np.ndarray, y: np.ndarray, pid: np.ndarray, objective: str, categorical: list[int], ref: Any = None,
             init_score: np.ndarray | None = None, weight: np.ndarray | None = None):
    from ckheur.threads import lightgbm

    ds = lightgbm().Dataset(X, y, categorical_feature=categorical, free_raw_data=False, reference=ref,
                            init_score=init_score, weight=weight)
    if objective == "lambdarank":
        _, counts = np.unique(pid, return_counts=True)  # rows are sorted by pid
        ds.set_group(counts)
    return ds


def pairwise_terms(tflops: np.ndarray, pid: np.ndarray, partial_rows: np.ndarray) -> tuple[np.ndarray, ...]:
    """Pairs (i, j) of measured rows within each partly measured problem, with the target score
    difference (t_i - t_j) / best measured and a weight 1/(m-1) (m: kernels measured there), so each
    row weighs as much as one squared-error row. Nothing is said about unmeasured kernels, nor
    about the level of the scores: the best measured kernel is not claimed to be the oracle."""
    rows = np.flatnonzero(partial_rows)
    pi, pj, delta, w = [], [], [], []
    if len(rows):
        bounds = np.flatnonzero(np.diff(pid[rows])) + 1
        for g in np.split(rows, bounds):  # rows are sorted by problem
            m = len(g)
            if m < 2:
                continue
            a, b = np.triu_indices(m, 1)
            best = tflops[g].max()
            pi.append(g[a])
            pj.append(g[b])
            delta.append((tflops[g[a]] - tflops[g[b]]) / best)
            w.append(np.full(len(a), 1.0 / (m - 1)))
    cat = lambda xs, dt: np.concatenate(xs).astype(dt) if xs else np.zeros(0, dt)  # noqa: E731
    return cat(pi, np.int64), cat(pj, np.int64), cat(delta, float), cat(w, float)


def _mixed_loss(y: np.ndarray, full_rows: np.ndarray, tflops: np.ndarray, pid: np.ndarray, pair_weight: float,
                row_weight: np.ndarray | None = None):
    """Objective and metric for `relative` with partial problems: squared error against the
    relative target on fully measured problems, squared error of score differences on pairs of
    measured kernels within partly measured ones; each row's term (a pair's: its first row's, the
    rows of a problem weigh alike) times its weight (``row_weight``: train.target_weight; LightGBM
    does not apply a dataset's weights to a custom objective)."""
    pi, pj, delta, w = pairwise_terms(tflops, pid, ~full_rows)
    rw = np.ones(len(y)) if row_weight is None else np.asarray(row_weight, dtype=float)
    w = w * pair_weight * rw[pi]

    def grad_hess(preds: np.ndarray, _data: Any = None) -> tuple[np.ndarray, np.ndarray]:
        grad = np.where(full_rows, rw * (preds - y), 0.0)
        hess = np.where(full_rows, rw, 0.0)
        r = w * (preds[pi] - preds[pj] - delta)
        np.add.at(grad, pi, r)
        np.add.at(grad, pj, -r)
        np.add.at(hess, pi, w)
        np.add.at(hess, pj, w)
        return grad, np.maximum(hess, 1e-6)  # rows of single-kernel partial problems carry no information

    def loss(preds: np.ndarray) -> float:
        full = float(np.sum(np.where(full_rows, rw * (preds - y) ** 2, 0.0)))
        pairs = float(np.sum(w * (preds[pi] - preds[pj] - delta) ** 2))
        return 0.5 * (full + pairs) / max(1, len(preds))

    return grad_hess, loss


def member_seed(seed: int, member: int) -> int:
    """The seed of one member of a bagged model (member 0 keeps the model's seed)."""
    return seed + 7919 * member


def fit(table: Table, rows: np.ndarray, model: Mapping[str, Any], objective: str, categorical: list[int],
        seed: int, n_trees: int, valid_rows: np.ndarray | None = None, init_model: Any = None,
        partial: str = "naive", pair_weight: float = 1.0):
    """Train one booster on `rows`; with `valid_rows`, early stopping on them.

    ``partial`` is the target for partly measured problems under the `relative` objective:
    ``naive`` (relative to the best measured kernel), ``pairwise`` (:func:`_mixed_loss`), or
    ``drop`` (their rows are left out). Threads: ``model.threads``, else ``ckheur.threads``' policy.

    ``model.bagging_seeds`` > 1 trains that many members (seeds :func:`member_seed`, each with its
    own early stopping) and returns their average as one booster (:func:`average_boosters`): every
    path that scores a booster (CV, bundles, the selectors, the C and CK exports) scores the average.
    The booster's ``member_iterations`` lists each member's tree count."""
    if int(model.get("distill_trees", 0)) > 0:
        if init_model is not None:
            raise TrainingError("model.distill_trees: a distilled model cannot warm-start (train.warm_start)")
        teacher = fit(table, rows, {**model, "distill_trees": 0}, objective, categorical, seed, n_trees, valid_rows,
                      None, partial, pair_weight)
        return distill(teacher, table, rows, model, seed)
    members = max(1, int(model.get("bagging_seeds", 1)))
    if members == 1 and (init_model is None or table.prior is None):
        booster = _fit_one(table, rows, model, objective, categorical, seed, n_trees, valid_rows, init_model,
                           table.prior, partial, pair_weight)
        booster.member_iterations = [int(booster.best_iteration or booster.current_iteration())]
        return booster
    # A warm start with a prior or several members: the new trees are trained from the old model's
    # score (LightGBM would otherwise replace the init score by the old model's) and appended to it.
    start, base = table.prior, init_model
    if base is not None:
        start = (np.zeros(len(table.X)) if start is None else start.copy())
        used = rows if valid_rows is None else np.concatenate([rows, valid_rows])
        start[used] += base.predict(table.X[used], raw_score=True)
    boosters = [_fit_one(table, rows, model, objective, categorical, member_seed(seed, i), n_trees, valid_rows, None,
                         start, partial, pair_weight) for i in range(members)]
    iterations = [int(b.best_iteration or b.current_iteration()) for b in boosters]
    booster = boosters[0] if members == 1 else average_boosters(boosters, iterations)
    if base is not None:
        booster = append_trees(base, booster)
    booster.member_iterations = iterations
    return booster


def distill(teacher: Any, table: Table, rows: np.ndarray, model: Mapping[str, Any], seed: int) -> Any:
    """A compact student of ``teacher``: ``model.distill_trees`` trees of ``model.distill_leaves``
    leaves regressing the teacher's raw score over the problems of ``rows`` plus
    ``model.distill_problems`` new problems drawn from the space those problems span. It ranks
    like the teacher at a fraction of the trees (selection time follows the tree count). Inside
    CV each fold distills its own teacher, so the CV figure is the student's."""
    from ckheur.problems.space import span_problems
    from ckheur.threads import lightgbm, predict, train_threads

    lgb = lightgbm()
    trees = int(model["distill_trees"])
    X = table.X[rows]
    count = int(model.get("distill_problems", 0))
    if count > 0:
        if table.featurize is None or table.build_problem is None:
            raise TrainingError("model.distill_problems: this table cannot featurize new problems")
        known = [table.problems[i] for i in np.unique(table.pid[rows])]
        new = span_problems(known, count, seed, table.build_problem, table.span_blocks)
        X_new, _ = table.featurize(new)
        X = np.concatenate([X, X_new]) if len(X_new) else X
    threads = int(model.get("threads", 0))
    y = predict(teacher, X, threads, raw_score=True)
    params = {**lgb_params(model, "relative", seed), "objective": "regression", "metric": "l2",
              "num_leaves": int(model.get("distill_leaves", 15))}
    params["num_threads"] = train_threads(threads, len(X), X.shape[1])
    student = lgb.train(params, lgb.Dataset(X, y, free_raw_data=True), num_boost_round=trees)
    # The teacher's early-stopping counts: what CV reports and the final fit trains the teacher with.
    student.member_iterations = list(getattr(teacher, "member_iterations", [teacher.current_iteration()]))
    student.distilled = True
    student.teacher = teacher  # CV scores the fold's teacher beside its student (the quality bound)
    return student


def _fit_one(table: Table, rows: np.ndarray, model: Mapping[str, Any], objective: str, categorical: list[int],
             seed: int, n_trees: int, valid_rows: np.ndarray | None, init_model: Any, start: np.ndarray | None,
             partial: str, pair_weight: float):
    """One LightGBM training (:func:`fit` without bagging); ``start``: the init score per table row."""
    from ckheur.threads import lightgbm, train_threads

    lgb = lightgbm()

    if partial not in PARTIAL_TARGETS:
        raise TrainingError(f"train.partial={partial!r}: allowed values are {', '.join(PARTIAL_TARGETS)}")
    full_rows = table.full[table.pid] if table.full is not None else np.ones(len(table.pid), dtype=bool)
    mixed = objective == "relative" and partial == "pairwise" and not full_rows.all()
    if objective == "relative" and partial == "drop":
        rows = rows[full_rows[rows]]
        valid_rows = valid_rows[full_rows[valid_rows]] if valid_rows is not None else None
        if not len(rows):
            raise TrainingError("train.partial=drop leaves no fully measured problem to train on")
        if valid_rows is not None and not len(valid_rows):
            valid_rows = None
    y = labels(objective, table.tflops, table.pid, model.get("rank_label_power", 8.0))
    params = lgb_params(model, objective, seed)
    params["num_threads"] = train_threads(int(model.get("threads", 0)), len(rows), table.X.shape[1])
    init = lambda r: None if start is None else start[r]  # noqa: E731
    weight = lambda r: None if table.weight is None else table.weight[r]  # noqa: E731
    train = _dataset(table.X[rows], y[rows], table.pid[rows], objective, categorical, init_score=init(rows),
                     weight=weight(rows))
    kw: dict[str, Any] = {}
    if mixed:
        params["objective"], _ = _mixed_loss(y[rows], full_rows[rows], table.tflops[rows], table.pid[rows],
                                             pair_weight, weight(rows))
        params["metric"] = "None"
    if valid_rows is not None:
        valid = _dataset(table.X[valid_rows], y[valid_rows], table.pid[valid_rows], objective, categorical, ref=train,
                         init_score=init(valid_rows), weight=weight(valid_rows))
        kw["valid_sets"] = [valid]
        kw["callbacks"] = [lgb.early_stopping(model["early_stopping_rounds"], verbose=False)]
        if mixed:
            _, valid_loss = _mixed_loss(y[valid_rows], full_rows[valid_rows], table.tflops[valid_rows],
                                        table.pid[valid_rows], pair_weight, weight(valid_rows))
            kw["feval"] = lambda preds, _data: ("mixed_l2", valid_loss(preds), False)
    return lgb.train(params, train, num_boost_round=n_trees, init_model=init_model, **kw)


def _tree_blocks(booster: Any, iterations: int | None = None) -> tuple[str, list[str], str]:
    """A booster's model text cut into its header, its tree blocks (each ``Tree=i`` ... ) and the
    rest, keeping the first ``iterations`` trees."""
    text = booster.model_to_string(num_iteration=iterations or None)
    head, rest = text.split("\nTree=0\n", 1)
    trees, tail = ("Tree=0\n" + rest).split("\nend of trees\n", 1)
    blocks = ["Tree=" + b for b in ("\n" + trees).split("\nTree=") if b.strip()]
    return head, blocks, tail


def average_boosters(boosters: Sequence[Any], iterations: Sequence[int] | None = None) -> Any:
    """One booster whose raw score is the mean of ``boosters``' (each cut at its iteration count):
    their trees in order, every leaf (and internal) value divided by their number."""
    import re

    from ckheur.threads import lightgbm

    n = len(boosters)
    head, tail, blocks = "", "", []
    for i, b in enumerate(boosters):
        h, bs, t = _tree_blocks(b, iterations[i] if iterations else None)
        head, tail = (h, t) if i == 0 else (head, tail)
        blocks += bs

    def scaled(m: re.Match) -> str:
        return m[1] + " ".join(repr(float(v) / n) for v in m[2].split())

    out = []
    for j, block in enumerate(blocks):
        block = re.sub(r"^Tree=\d+$", f"Tree={j}", block, count=1, flags=re.M)
        out.append(re.sub(r"^(leaf_value=|internal_value=)(.*)$", scaled, block, flags=re.M).rstrip("\n"))
    head = re.sub(r"^tree_sizes=.*\n", "", head, flags=re.M)  # LightGBM then reads the trees in order
    return lightgbm().Booster(model_str=head + "\n" + "\n\n".join(out) + "\n\nend of trees\n" + tail)


def append_trees(first: Any, then: Any) -> Any:
    """One booster whose raw score is ``first``'s plus ``then``'s (the trees of both, in order).

    A warm start with a prior needs it: LightGBM replaces a dataset's init score by the initial
    model's predictions, so the new trees are trained from (prior + old trees) as init score
    and appended here."""
    from ckheur.threads import lightgbm

    import re

    a, b = first.model_to_string(), then.model_to_string()
    head, rest = a.split("\nTree=0\n", 1)
    trees_a, tail = rest.split("\nend of trees\n", 1)
    trees_b = "Tree=0\n" + b.split("\nTree=0\n", 1)[1].split("\nend of trees\n", 1)[0]
    n = first.num_trees()
    trees_b = re.sub(r"^Tree=(\d+)$", lambda m: f"Tree={int(m[1]) + n}", trees_b, flags=re.M)
    head = re.sub(r"^tree_sizes=.*\n", "", head, flags=re.M)  # optional: LightGBM then reads trees in order
    return lightgbm().Booster(model_str=f"{head}\nTree=0\n{trees_a}\n{trees_b}\nend of trees\n{tail}")


def cross_validate(table: Table, model: Mapping[str, Any], objective: str, categorical: list[int],
                   folds: int, inner_valid_fraction: float, seed: int, groups: np.ndarray | None = None,
                   partial: str = "naive", pair_weight: float = 1.0,
                   fold_table: Callable[[int, np.ndarray], Table] | None = None, split_seed: int | None = None,
                   cuts: Sequence[int] = ()) -> dict:
    """Grouped K-fold CV: out-of-fold scores, the tree counts early stopping chose, metrics.

    Folds never split a problem; ``groups`` (per problem) makes them coarser, e.g. shape
    clusters. Efficiency is scored on fully measured problems when there are any (a partly
    measured problem has no known oracle). ``fold_table(fold, training rows)``, when given,
    is the table a fold trains and scores on (same rows; features or prior may depend on the
    training rows, as in ``models.fold_calibration``). ``seed`` seeds the models; ``split_seed``
    (default: ``seed``) the inner early-stopping split, so the models' seed can vary alone. ``cuts``:
    tree counts each fold's single model or student is also scored at (its first trees only; a fold that
    stopped earlier is scored whole), their metrics under ``"cut_metrics"``. A distilled model's folds
    also score their teachers: ``"teacher_metrics"`` (None otherwise)."""
    from sklearn.model_selection import GroupKFold, GroupShuffleSplit

    from ckheur.metrics import selection_report
    from ckheur.threads import predict

    n_problems = len(table.problems)
    if n_problems < folds:
        raise TrainingError(f"train.folds={folds} but only {n_problems} problems in the data")
    fold_groups = table.pid if groups is None else np.asarray(groups)[table.pid]
    oof = np.full(len(table.X), np.nan)
    oof_cut = {int(k): np.full(len(table.X), np.nan) for k in cuts}
    oof_teacher = np.full(len(table.X), np.nan)  # a distilled model's: each fold's teacher
    best_iters = []
    fold_of = np.full(len(table.X), -1)
    for f, (tr, te) in enumerate(GroupKFold(n_splits=folds).split(table.X, groups=fold_groups)):
        tb = table if fold_table is None else fold_table(f, tr)
        split = seed if split_seed is None else split_seed
        inner_tr, inner_va = next(GroupShuffleSplit(n_splits=1, test_size=inner_valid_fraction, random_state=split + f)
                                  .split(tr, groups=table.pid[tr]))
        assert not set(table.pid[te]) & set(table.pid[tr])  # CV groups never split a problem
        booster = fit(tb, np.sort(tr[inner_tr]), model, objective, categorical, seed, model["max_trees"],
                      valid_rows=np.sort(tr[inner_va]), partial=partial, pair_weight=pair_weight)
        best_iters += booster.member_iterations
        threads = int(model.get("threads", 0))
        student = getattr(booster, "distilled", False)
        # A single model is cut at its early-stopping iteration; an average already holds only its members' best;
        # a student has no early stopping (its first k trees are the student of k trees).
        used = booster.current_iteration() if student else \
            booster.member_iterations[0] if len(booster.member_iterations) == 1 else None
        oof[te] = predict(booster, tb.X[te], threads, num_iteration=used)
        if student:
            oof_teacher[te] = predict(booster.teacher, tb.X[te], threads)
        for k, cut in oof_cut.items():
            if used is None:
                raise TrainingError("train.budget_loss_pts: a bag of models is not cut (model.bagging_seeds > 1)")
            cut[te] = predict(booster, tb.X[te], threads, num_iteration=min(k, used))
        if tb.prior is not None:
            for scores in (oof, oof_teacher, *oof_cut.values()):
                scores[te] += tb.prior[te]
        fold_of[te] = f
    scored = scored_rows(table)
    metrics = selection_report(table.pid[scored], oof[scored], table.tflops[scored])
    metrics["scored_problems"] = int(len(np.unique(table.pid[scored])))
    metrics["oracle"] = "measured" if table.full is None or table.full.any() else "best measured kernel"
    cut_metrics = {k: selection_report(table.pid[scored], cut[scored], table.tflops[scored])
                   for k, cut in oof_cut.items()}
    teacher = selection_report(table.pid[scored], oof_teacher[scored], table.tflops[scored]) \
        if not np.isnan(oof_teacher).any() else None
    return {"oof": oof, "fold": fold_of, "best_iterations": best_iters, "metrics": metrics,
            "cut_metrics": cut_metrics, "oof_cut": oof_cut, "teacher_metrics": teacher}


def tree_budget(uncut: Mapping[str, Any], cut_metrics: Mapping[int, Mapping[str, Any]],
                loss_pts: float) -> int | None:
    """The fewest trees whose CV mean efficiency is within ``loss_pts`` points of the uncut model's
    (``cross_validate``'s ``metrics`` and ``cut_metrics``); None when no cut is (keep every tree)."""
    ok = [k for k, m in sorted(cut_metrics.items())
          if 100 * (uncut["efficiency"]["mean"] - m["efficiency"]["mean"]) <= loss_pts]
    return ok[0] if ok else None


def leave_cluster_out_cv(table: Table, model: Mapping[str, Any], objective: str, categorical: list[int], folds: int,
                        inner_valid_fraction: float, clusters: int, seed: int, **cv_kw: Any) -> dict:
    """Leave-cluster-out CV: folds of whole clusters of problems in log problem space, so
    each test fold holds shapes unlike the training ones. It estimates how far to trust the
    model on a new workload, beside the grouped CV (which tests on neighbours of training shapes).
    The clusters are drawn with ``split_seed`` when given (else ``seed``)."""
    from ckheur.problems.space import cluster_shapes

    split = cv_kw.get("split_seed")
    cluster = cluster_shapes(table.problems, clusters, seed if split is None else split)
    cv = cross_validate(table, model, objective, categorical, folds, inner_valid_fraction, seed, groups=cluster, **cv_kw)
    return {**cv, "cluster_sizes": np.bincount(cluster).tolist()}
