"""Small LightGBM models on simulated measurements, for exercising the export and its benchmark.

The bundle's manifest says ``data_kind: sim``: these models are never presented as measured.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import numpy as np


def train_quick_bundle(out: str | Path, op: Mapping[str, Any], arch: Mapping[str, Any], objective: str = "relative",
                       analytic: bool = False, n_problems: int = 40, trees: int = 25, kernel_sample: int | None = None,
                       lgb_params: Mapping[str, Any] | None = None, nan_fraction: float = 0.0,
                       bagging: int = 1) -> Path:
    """Train a small model of ``objective`` on simulated latencies of seeded random problems; save a bundle.

    ``kernel_sample`` trains on that many kernels per group (the bundle keeps the whole pool);
    ``nan_fraction`` blanks feature values at random so LightGBM learns missing-value branches;
    ``bagging``: that many seeds averaged into one model (``models.training.average_boosters``)."""
    from ckheur.learn.training import average_boosters, member_seed
    from ckheur.kernels import enumerate_pool
    from ckheur.learn.bundle import save_bundle
    from ckheur.families import get_family
    from ckheur.problems import random_problems
    from ckheur.sim import load_params, simulate
    from ckheur.threads import lightgbm

    lgb = lightgbm()

    pool = enumerate_pool(op, arch).kernels
    family = get_family(op["family"])
    engine = family.features
    params = {**load_params(), "dtype": op["dtype"]}
    names = engine.feature_names(analytic)
    rng = np.random.default_rng(0)
    groups = sorted({k.group for k in pool}, key=str)
    X, y, log_tf, sizes = [], [], [], []
    for g in groups:
        ks = [k for k in pool if k.group == g]
        if kernel_sample and len(ks) > kernel_sample:
            ks = [ks[i] for i in sorted(rng.choice(len(ks), kernel_sample, replace=False))]
        ps = random_problems(family, [g], n_problems // len(groups), seed=11)
        lat = simulate(ps, ks, arch, params, op["direction"], seed=0)
        tf = np.array([p.flops for p in ps], dtype=np.float64)[:, None] / (lat * 1e-3) / 1e12
        X.append(engine.features(engine.problem_arrays(ps, op["direction"]), engine.kernel_arrays(ks), arch,
                                 op["direction"], params if analytic else None))
        rel = tf / tf.max(axis=1, keepdims=True)
        y.append({"relative": rel, "regression_log": np.log1p(tf), "lambdarank": np.round(30 * rel ** 8)}[objective]
                 .reshape(-1))
        log_tf.append(np.log1p(tf).reshape(-1))
        sizes += [len(ks)] * len(ps)
    X, target, log_tf = np.vstack(X), np.concatenate(y), np.concatenate(log_tf)
    if nan_fraction:
        X = X.copy()
        X[rng.random(X.shape) < nan_fraction] = np.nan
    cat = [names.index(c) for c in engine.CATEGORICAL]
    base = {"num_leaves": 15, "learning_rate": 0.2, "min_data_in_leaf": 5, "verbose": -1, "num_threads": 1,
            "seed": 0, **(lgb_params or {})}

    def fit(objective_: str, y_: np.ndarray, rounds: int, group: list | None = None, seed: int = 0) -> Any:
        ds = lgb.Dataset(X, y_, group=group, categorical_feature=cat, free_raw_data=False)
        extra = {"seed": seed, "bagging_fraction": 0.8, "bagging_freq": 1} if bagging > 1 else {}
        return lgb.train({**base, "objective": objective_, **extra}, ds, rounds)

    members = [fit("lambdarank", target, trees, sizes, member_seed(0, i)) if objective == "lambdarank" else
               fit("regression", target, trees, seed=member_seed(0, i)) for i in range(bagging)]
    booster = members[0] if bagging == 1 else average_boosters(members)
    companion = None if objective == "regression_log" else fit("regression", log_tf, 10)
    spec = {"engine": op["family"], "encoding_version": engine.ENCODING_VERSION, "feature_names": names,
            "categorical": list(engine.CATEGORICAL), "analytic": analytic,
            "analytic_params": load_params() if analytic else None, "objective": objective, "arch": dict(arch),
            "op": {"family": op["family"], "direction": op["direction"], "dtype": op["dtype"]}, "op_config": dict(op),
            "bagging_seeds": bagging}
    return save_bundle(out, booster, companion, spec, pool, {}, {}, {"data_kind": "sim", "trained_by": "quick"})
