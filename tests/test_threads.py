"""The thread policy: usable CPUs from affinity and cgroup quota, one thread for small work, the
override, passive waits, and no LightGBM import that bypasses it."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

from ckheur import threads

PACKAGE = Path(__file__).resolve().parents[1]


def _cgroup(tmp_path: Path, v2: str | None = None, v1: tuple[str, str] | None = None) -> Path:
    tmp_path.mkdir()
    if v2 is not None:
        (tmp_path / "cpu.max").write_text(v2 + "\n")
    if v1 is not None:
        (tmp_path / "cpu").mkdir()
        (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text(v1[0] + "\n")
        (tmp_path / "cpu" / "cpu.cfs_period_us").write_text(v1[1] + "\n")
    return tmp_path


def test_usable_cpus_follow_affinity_and_the_cgroup_quota(tmp_path):
    affinity = len(os.sched_getaffinity(0))
    assert threads.available_cpus(tmp_path / "none") == affinity  # no cgroup files: the affinity mask
    assert threads.available_cpus(_cgroup(tmp_path / "a", v2="max 100000")) == affinity
    assert threads.available_cpus(_cgroup(tmp_path / "b", v2="150000 100000")) == min(affinity, 1)  # 1.5 CPUs -> 1
    assert threads.available_cpus(_cgroup(tmp_path / "c", v2="50000 100000")) == 1  # never below one
    assert threads.available_cpus(_cgroup(tmp_path / "d", v1=("100000", "100000"))) == 1
    assert threads.available_cpus(_cgroup(tmp_path / "e", v1=("-1", "100000"))) == affinity  # v1 unlimited
    assert threads.available_cpus(_cgroup(tmp_path / "f", v2="garbage")) == affinity


def test_small_work_gets_one_thread_large_work_the_usable_cpus(monkeypatch):
    monkeypatch.setattr(threads, "available_cpus", lambda *a: 8)
    assert threads.train_threads(0, 3_700, 60) == 1  # the real forward data
    assert threads.train_threads(0, 1_000_000, 60) == 8
    assert threads.train_threads(0, 100_000, 60) == 3  # 6M cells: three threads' worth
    assert threads.train_threads(5, 10, 10) == 5  # model.threads wins
    assert threads.predict_threads(0, 20) == 1 and threads.predict_threads(0, 10_000_000) == 8
    assert threads.predict_threads(2, 20) == 2


def test_waiting_threads_sleep_unless_the_user_chose(monkeypatch):
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    threads.quiet_openmp()
    assert os.environ["OMP_WAIT_POLICY"] == "PASSIVE"
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    threads.quiet_openmp()
    assert os.environ["OMP_WAIT_POLICY"] == "ACTIVE"


@pytest.mark.parametrize("folder", ["ckheur", "bench", "tools"])
def test_lightgbm_is_imported_only_through_the_policy(folder):
    direct = []
    for path in (PACKAGE / folder).rglob("*.py"):
        if path.name == "threads.py" and folder == "ckheur":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            direct += [f"{path.relative_to(PACKAGE)}:{node.lineno}" for n in names if n.split(".")[0] == "lightgbm"]
    assert not direct, f"import lightgbm through ckheur.threads.lightgbm(): {direct}"


def test_training_and_scoring_use_the_policy(monkeypatch):
    """fit() asks the policy for its thread count, with model.threads and the training rows; so
    does scoring, with the rows scored."""
    import numpy as np

    from ckheur.learn.training import Table, fit

    seen = []
    monkeypatch.setattr("ckheur.threads.train_threads", lambda requested, rows, feats: seen.append((requested, rows)) or 1)
    rng = np.random.default_rng(0)
    X = rng.random((40, 3)).astype(np.float32)
    pid = np.repeat(np.arange(10), 4)
    tb = Table(X=X, tflops=rng.random(40) + 0.1, pid=pid, kid=np.tile(np.arange(4), 10), problems=list(range(10)),
               kernels=list(range(4)), feature_names=["a", "b", "c"], full=np.ones(10, dtype=bool))
    model = {"learning_rate": 0.3, "num_leaves": 4, "min_data_in_leaf": 2, "feature_fraction": 1.0, "subsample": 1.0,
             "subsample_freq": 0, "lambda_l2": 0.0, "threads": 0}
    b = fit(tb, np.arange(40), model, "relative", [], 0, 3)
    assert seen == [(0, 40)] and b.current_iteration() == 3
    asked = []
    monkeypatch.setattr("ckheur.threads.predict_threads", lambda requested, rows: asked.append((requested, rows)) or 1)
    from ckheur.threads import predict

    assert len(predict(b, X[:7])) == 7 and asked == [(0, 7)]


def test_one_thread_predictor_equals_booster_predict():
    """The selector's scoring call (LightGBM's C API, set up once) gives Booster.predict's values
    bit for bit on the shipped bundle's real feature rows: float32 and float64, one row and a
    query's rows, with the wrapper's path for what it does not take (strided, many rows)."""
    import numpy as np

    from ckheur.learn.bundle import load_bundle
    from ckheur.selection.selector import Selector
    from ckheur.families.grouped_conv.problems import generate

    shipped = PACKAGE / "models" / "grouped_conv_fwd_bf16_gfx950"
    sel, b = Selector.load(shipped, cache_size=0), load_bundle(shipped)
    pool = sel._pools[2]
    probs = list(generate(3, 12, ndim=2))
    X = sel.engine.features(sel.engine.problem_arrays(probs, "fwd"), pool.feats, sel.arch, "fwd")
    assert X.dtype == np.float32 and len(X) == 12 * len(pool.kernels)
    for booster in (b.booster, b.tflops_booster):
        fast = threads.one_thread_predictor(booster)
        for rows in (X[:1], X[:20], X.astype(np.float64), X[::2], np.repeat(X, 200, axis=0)):
            assert np.array_equal(fast(rows), booster.predict(rows, num_threads=1))


def test_a_command_process_imports_lightgbm_without_its_scikit_learn_interface(tmp_path):
    """``python run.py`` (the console script) imports LightGBM without scikit-learn (and the scipy.stats
    it imports: about half of a short predict's CPU): the shipped model's predict prints what it
    prints in this process; scikit-learn stays importable for a stage that needs it (found, not
    refused), and LightGBM's core trains and predicts as it does here."""
    import subprocess
    import sys

    import numpy as np

    from conftest import run_cli

    problem = "problem=convbfp16 -n 16 -c 256 -H 28 -W 28 -k 128 -y 3 -x 3 -p 1 -q 1"
    train = ("import numpy as np; from ckheur.threads import lightgbm; rng = np.random.default_rng(0); "
             "X, y = rng.random((200, 4)), rng.random(200); lgb = lightgbm(); "
             "b = lgb.train({'verbose': -1, 'num_threads': 1, 'num_leaves': 4}, lgb.Dataset(X, y), 5); "
             "print(repr(b.predict(X[:5]).tolist()))")
    code = ("import runpy, sys; sys.argv = ['run.py', 'stage=predict', sys.argv[1], 'hydra.run.dir=' + sys.argv[2]]; "
            "runpy.run_path('run.py', run_name='__main__'); "
            "print('sklearn imported:', 'sklearn' in sys.modules, 'lightgbm imported:', 'lightgbm' in sys.modules); "
            "import importlib.util; assert importlib.util.find_spec('sklearn'); " + train)
    r = subprocess.run([sys.executable, "-c", code, problem, str(tmp_path)], cwd=PACKAGE, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "sklearn imported: False lightgbm imported: True" in r.stdout
    here = run_cli("stage=predict", problem, f"hydra.run.dir={tmp_path}")  # the same command in this process
    assert here.returncode == 0 and r.stdout.startswith(here.stdout), (r.stdout, here.stdout)
    rng = np.random.default_rng(0)
    X, y = rng.random((200, 4)), rng.random(200)
    lgb = threads.lightgbm()
    assert "LGBMRanker" in dir(lgb) and lgb.compat.SKLEARN_INSTALLED  # this process: the whole module
    b = lgb.train({"verbose": -1, "num_threads": 1, "num_leaves": 4}, lgb.Dataset(X, y), 5)
    assert r.stdout.rstrip().splitlines()[-1] == repr(b.predict(X[:5]).tolist())
