"""Training tables, labels per objective, grouped K-fold CV with early stopping on an inner
group split of the training folds (never on the scored fold), and the final fit."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from ckheur.errors import UserError

OBJECTIVES = ("regression_log", "relative", "lambdarank")


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
    report: dict = field(default_factory=dict)


def build_table(df: Any, op: Mapping[str, Any], arch: Mapping[str, Any], pool: Sequence[Any], engine: Any,
                analytic_params: Mapping[str, Any] | None) -> Table:
    """Training table from a dataset frame: status-ok rows of this op/arch whose kernel is in the pool."""
    from ckheur.ops import get_family

    problems_mod = get_family(op["family"]).problems
    fields = list(problems_mod.FIELDS)
    report: dict[str, Any] = {"rows_read": int(len(df))}
    mine = df[(df.arch == arch["name"]) & (df.direction == op["direction"]) & (df.dtype == op["dtype"])]
    report["rows_other_op_or_arch"] = int(len(df) - len(mine))
    ok = mine[(mine.status == "ok") & (mine.tflops > 0)]
    report["rows_not_ok_by_status"] = {str(k): int(v) for k, v in mine[mine.status != "ok"].status.value_counts().items()}
    names = {k.name: i for i, k in enumerate(pool)}
    outside = ok[~ok.kernel.isin(list(names))]
    report["rows_kernel_not_in_pool"] = int(len(outside))
    report["kernels_not_in_pool"] = sorted(outside.kernel.unique().tolist())[:50]
    ok = ok[ok.kernel.isin(list(names))]
    if ok.empty:
        raise TrainingError(f"no usable rows: {report} (check data.paths, arch, op and the kernel pool)")
    keys = list(ok[fields].itertuples(index=False, name=None))
    uniq = sorted(set(keys))
    index = {k: i for i, k in enumerate(uniq)}
    pid = np.fromiter((index[k] for k in keys), dtype=np.int64, count=len(keys))
    kid = ok.kernel.map(names).to_numpy(dtype=np.int64)
    order = np.lexsort((kid, pid))
    pid, kid = pid[order], kid[order]
    tflops = ok.tflops.to_numpy(dtype=np.float64)[order]
    problems = [problems_mod.problem_from_dict(dict(zip(fields, k))) for k in uniq]
    # Features over the problem x pool grid (the same call prediction makes), then the measured rows.
    grid = engine.features(engine.problem_arrays(problems, op["direction"]), engine.kernel_arrays(pool), arch,
                           op["direction"], analytic_params)
    X = grid[pid * len(pool) + kid]
    report.update(rows_used=int(len(X)), problems=len(problems),
                  kernels_measured=int(len(np.unique(kid))), pool=len(pool))
    return Table(X=X, tflops=tflops, pid=pid, kid=kid, problems=problems, kernels=list(pool),
                 feature_names=engine.feature_names(analytic_params is not None), report=report)


def labels(objective: str, tflops: np.ndarray, pid: np.ndarray, rank_power: float = 8.0) -> np.ndarray:
    """Training target of an objective."""
    if objective == "regression_log":
        return np.log1p(tflops)
    best = np.zeros(pid.max() + 1)
    np.maximum.at(best, pid, tflops)
    rel = tflops / best[pid]
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
         "verbose": -1, "num_threads": model["threads"]}
    if objective == "lambdarank":
        p.update(objective="lambdarank", metric="ndcg", eval_at=[1], label_gain=list(range(31)))
    else:
        p.update(objective="regression", metric="l2")
    return p


def _dataset(X: np.ndarray, y: np.ndarray, pid: np.ndarray, objective: str, categorical: list[int], ref: Any = None):
    import lightgbm as lgb

    ds = lgb.Dataset(X, y, categorical_feature=categorical, free_raw_data=False, reference=ref)
    if objective == "lambdarank":
        _, counts = np.unique(pid, return_counts=True)  # rows are sorted by pid
        ds.set_group(counts)
    return ds


def fit(table: Table, rows: np.ndarray, model: Mapping[str, Any], objective: str, categorical: list[int],
        seed: int, n_trees: int, valid_rows: np.ndarray | None = None, init_model: Any = None):
    """Train one booster on `rows`; with `valid_rows`, early stopping on them."""
    import lightgbm as lgb

    y = labels(objective, table.tflops, table.pid, model.get("rank_label_power", 8.0))
    train = _dataset(table.X[rows], y[rows], table.pid[rows], objective, categorical)
    kw: dict[str, Any] = {}
    if valid_rows is not None:
        kw["valid_sets"] = [_dataset(table.X[valid_rows], y[valid_rows], table.pid[valid_rows], objective,
                                     categorical, ref=train)]
        kw["callbacks"] = [lgb.early_stopping(model["early_stopping_rounds"], verbose=False)]
    return lgb.train(lgb_params(model, objective, seed), train, num_boost_round=n_trees, init_model=init_model, **kw)


def cross_validate(table: Table, model: Mapping[str, Any], objective: str, categorical: list[int],
                   folds: int, inner_valid_fraction: float, seed: int) -> dict:
    """Grouped K-fold CV: out-of-fold scores, the tree counts early stopping chose, metrics."""
    from sklearn.model_selection import GroupKFold, GroupShuffleSplit

    from ckheur.metrics import selection_report

    n_problems = len(table.problems)
    if n_problems < folds:
        raise TrainingError(f"train.folds={folds} but only {n_problems} problems in the data")
    oof = np.full(len(table.X), np.nan)
    best_iters = []
    fold_of = np.full(len(table.X), -1)
    for f, (tr, te) in enumerate(GroupKFold(n_splits=folds).split(table.X, groups=table.pid)):
        inner_tr, inner_va = next(GroupShuffleSplit(n_splits=1, test_size=inner_valid_fraction, random_state=seed + f)
                                  .split(tr, groups=table.pid[tr]))
        assert not set(table.pid[te]) & set(table.pid[tr])  # CV groups never split a problem
        booster = fit(table, np.sort(tr[inner_tr]), model, objective, categorical, seed, model["max_trees"],
                      valid_rows=np.sort(tr[inner_va]))
        best_iters.append(int(booster.best_iteration or booster.current_iteration()))
        oof[te] = booster.predict(table.X[te], num_iteration=best_iters[-1])
        fold_of[te] = f
    return {"oof": oof, "fold": fold_of, "best_iterations": best_iters,
            "metrics": selection_report(table.pid, oof, table.tflops)}
