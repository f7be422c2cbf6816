"""op.available: the solvers the user's MIOpen ships (a list of names, or MIOpen's files that name
them). Only the arch table's solvers among them are ranked (predict, evaluate, the C package),
swept, and served from a remembered answer; a bad name or path is an error naming the field.
Real data: the MI60 slice of tests/data/miopen_fdb (its MIOpen predates the MLIR solvers that
gfx906's table holds, from MI50's file) and a shipped bundle."""

from __future__ import annotations

import copy
import json

import pytest

from conftest import ROOT, run_cli

SLICES = ROOT / "tests" / "data" / "miopen_fdb"
MI60 = SLICES / "gfx906_64.HIP.fdb.txt.bz2"
GPUS = ROOT / "models" / "miopen_fwd_fp32_gpus"
PROBLEM = "problem=conv -n 32 -c 256 -H 56 -W 56 -k 256 -y 3 -x 3 -p 1 -q 1 -F 1"
MI60_JOB = ("op=miopen/fwd", "op.dtype=fp32", "arch=gfx906", "arch.num_cus=64")
# a few forward solvers a small MIOpen build might ship (the served model's picks on the MI60 slice
# are mostly ConvHipImplicitGemmV4R1Fwd, which this list leaves out)
FEW = ["ConvAsm1x1U", "ConvBinWinogradRxSf2x3g1", "ConvBinWinogradRxSf2x3", "ConvOclDirectFwd",
       "ConvOclDirectFwd1x1", "GemmFwd1x1_0_1", "GemmFwdRest"]


def test_the_names_in_miopen_files_and_the_pool_they_keep(tmp_path):
    """A find-db path gives every solver its file lists (MI60's: no MLIR solver); a folder, every
    file's; a text or SQLite perf-db, its entries' solvers. The job's pool, which sweeps time, is
    the table's solvers among them, and without the option the whole table."""
    from ckheur.families.miopen.solvers import table_names
    from ckheur.integrations.miopen.find_db import read_find_db, solver_names
    from ckheur.job import Job
    from ckheur.stages import compose_config

    names = solver_names(MI60)
    assert set(names) == set(read_find_db(MI60).entries["solver"]) and not [n for n in names if "Mlir" in n]
    (tmp_path / "db").mkdir()  # a ROCm install's share/miopen/db holds such files side by side
    for f in (MI60, SLICES / "gfx906_60.HIP.fdb.txt.bz2"):
        (tmp_path / "db" / f.name).write_bytes(f.read_bytes())
    folder = solver_names(tmp_path / "db")
    assert set(names) < set(folder) and "ConvMlirIgemmFwd" in folder  # MI50's file lists them
    # MIOpen's perf-db text format: KEY=Solver:tuning parameters;... (parameters made up for the test)
    perf = tmp_path / "gfx906_64.HIP.db.txt"
    perf.write_text("64-56-56-3x3-64-56-56-32-1x1-1x1-1x1-0-NCHW-FP32-F=ConvBinWinogradRxSf2x3g1:1;"
                    "ConvOclDirectFwd:8,8,4,1,1,1\n")
    assert solver_names(perf) == ["ConvBinWinogradRxSf2x3g1", "ConvOclDirectFwd"]
    # an older release's SQLite perf-db (MIOpen's perf_db table; rows made up for the test), plain and
    # compressed; a .db that is no SQLite file, or no perf-db, is refused naming the field
    import bz2
    import sqlite3

    from ckheur.errors import UserError

    binary = tmp_path / "gfx906_64.db"
    with sqlite3.connect(binary) as con:
        con.execute("CREATE TABLE perf_db (id INTEGER PRIMARY KEY, solver TEXT, config INTEGER, params TEXT)")
        con.executemany("INSERT INTO perf_db (solver, config, params) VALUES (?, ?, ?)",
                        [("ConvAsm1x1U", 1, "1,16,1,64,2,1,1,2"), ("ConvAsm1x1U", 2, "1,8,1,64,2,1,1,2"),
                         ("ConvHipImplicitGemmV4R1Fwd", 1, "64,64,16,16,4,4")])
    con.close()
    assert solver_names(binary) == ["ConvAsm1x1U", "ConvHipImplicitGemmV4R1Fwd"]
    if hasattr(sqlite3.Connection, "deserialize"):  # Python 3.11 reads a compressed one from memory
        (tmp_path / "gfx906_64.db.bz2").write_bytes(bz2.compress(binary.read_bytes()))
        assert solver_names(tmp_path / "gfx906_64.db.bz2") == ["ConvAsm1x1U", "ConvHipImplicitGemmV4R1Fwd"]
    (tmp_path / "text.db").write_text("not a database\n")
    with sqlite3.connect(tmp_path / "other.udb") as con:
        con.execute("CREATE TABLE config (id INTEGER)")
    con.close()
    for bad, says in (("text.db", "is no SQLite database"), ("other.udb", "is no MIOpen perf-db")):
        with pytest.raises(UserError, match="op.available") as e:
            solver_names(tmp_path / bad)
        assert says in str(e.value)

    table = table_names("fwd", "gfx906")
    whole = Job.from_config(compose_config(list(MI60_JOB)))
    assert [k.name for k in whole.pool.kernels] == table  # null: the whole table, as before
    job = Job.from_config(compose_config([*MI60_JOB, f"op.available={MI60}"]))
    assert [k.name for k in job.pool.kernels] == [n for n in table if n in names]
    assert "ConvMlirIgemmFwd" in table and job.op["available"] == sorted(set(names) & set(table))
    from ckheur.selection.selector import as_problem
    from ckheur.sweeping import plan_sweep

    problem = as_problem(PROBLEM.split("=", 1)[1], job.family, "fwd", "fp32")
    plan = plan_sweep(job, [problem], tmp_path / "sweep", backend={"name": "replay"})
    timed = [k.name for k, ok in zip(plan.groups["all"], plan.masks[problem.key()]) if ok]
    assert timed and set(timed) <= set(names)  # a sweep never times a solver the MIOpen given lacks


@pytest.mark.skipif(not GPUS.is_dir(), reason="no shipped model across GPUs")
def test_available_restricts_predict_and_evaluate(tmp_path):
    """stage=predict for MI60 with op.available (MI60's own find-db) leaves out gfx906's MLIR
    solvers, which its MIOpen lacks, and says which it drops; stage=evaluate picks only among the
    names given. Unknown names, a missing path and a file naming no solver exit 2 with the field named."""
    import pandas as pd

    from ckheur.data.dataset import write_part
    from ckheur.errors import UserError
    from ckheur.families.miopen.solvers import available_note, available_table, solver_tables
    from ckheur.integrations.miopen.find_db import dataset_rows, read_find_db

    mine = run_cli("stage=predict", *MI60_JOB, PROBLEM, "predict.k=40", f"op.available={MI60}")
    assert mine.returncode == 0, mine.stderr
    assert "op.available: keeps 20 of the 29 solvers of the gfx906 fwd table; not in the MIOpen given: " \
           "ConvMlirIgemmFwd," in mine.stdout
    assert "ConvMlirIgemmFwd " not in mine.stdout and "ConvBinWinogradRxSf2x3g1 " in mine.stdout
    # without the option, the job says it ranks gfx906's MLIR GEMM, which MI60's MIOpen lacks
    assert "op.available is not set" not in mine.stdout
    unset = available_note({"family": "miopen", "direction": "fwd", "dtype": "fp32"}, {"name": "gfx906"})
    assert unset.startswith("op.available is not set: ConvMlirIgemmFwd ranked too")

    data = tmp_path / "miopen_fwd_fp32_gfx906" / "gfx906_64.parquet"
    rows, _ = dataset_rows(read_find_db(MI60, "gfx906"), "fwd", "fp32", "gfx906",
                           solver_tables("fwd")["solvers"]["gfx906"], MI60.name, "2026-01-01T00:00:00+00:00")
    write_part(data, rows)
    r = run_cli("stage=evaluate", *MI60_JOB, "evaluate.plots=false", "evaluate.nearest_gpu=false",
                f"data.eval_paths=[{data}]", f"op.available=[{','.join(FEW)}]", f"hydra.run.dir={tmp_path / 'e'}")
    assert r.returncode == 0, r.stderr
    assert "op.available: keeps 7 of the 29 solvers of the gfx906 fwd table" in r.stdout
    scored = pd.read_csv(tmp_path / "e" / "per_problem.csv")
    # (without the option, the served model picks ConvHipImplicitGemmV4R1Fwd for most of these problems)
    assert set(scored["pick"].dropna()) <= set(FEW) and set(scored["oracle"].dropna()) - set(FEW)
    # Trained with it: the bundle learns those solvers only and keeps the list, so it ranks them alone.
    r = run_cli("stage=train", *MI60_JOB, f"data.paths=[{data}]", f"op.available=[{','.join(FEW)}]",
                f"train.output={tmp_path / 'm'}", "train.folds=2", "train.seeds=1", "train.cluster_cv=false",
                f"hydra.run.dir={tmp_path / 't'}")
    assert r.returncode == 0 and "op.available: keeps 7 of the 29 solvers" in r.stdout, r.stderr
    learned = {k["name"] for k in json.loads((tmp_path / "m" / "kernels.json").read_text())}
    assert learned and learned <= set(FEW)
    assert json.loads((tmp_path / "m" / "feature_spec.json").read_text())["op_config"]["available"] == sorted(FEW)

    for value, says in (("[ConvNoSuchSolver,GemmFwdRest]", "op.available: ConvNoSuchSolver is no fwd solver"),
                        (str(tmp_path / "none.fdb.txt"), "no such file or folder")):
        r = run_cli("stage=predict", *MI60_JOB, PROBLEM, f"op.available={value}")
        assert r.returncode == 2 and says in r.stderr and "Traceback" not in r.stderr, (value, r.stderr[-600:])
        assert "a list of solver names, or a path to MIOpen's files" in r.stderr
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("no MIOpen file here\n")
    op, gfx906 = {"family": "miopen", "direction": "fwd", "dtype": "fp32"}, {"name": "gfx906"}
    for value, says in ((["GemmBwdRest"], "op.available: GemmBwdRest is no fwd solver"),
                        (str(tmp_path / "empty"), "holds no MIOpen find-db or perf-db"),
                        (str(SLICES / "README.md"), "not a MIOpen find-db or perf-db"),
                        (["ConvHipImplicitGemmFwdXdlops"], "op.available keeps none of the 29 solvers of the gfx906")):
        with pytest.raises(UserError) as e:
            available_table({**op, "available": value}, gfx906)
        assert says in str(e.value) and "a list of solver names" in str(e.value)


def test_c_ranks_the_available_solvers_as_python_and_drops_their_remembered_answers(tmp_path, monkeypatch):
    """A shipped bundle with remembered answers, loaded with op.available leaving out the solver it
    remembers most: the compiled selector (its C package) has only the solvers available, ranks
    them as the Python selector does, and neither serves a remembered answer naming the solver
    left out; the package says which solvers it holds."""
    import warnings
    from collections import Counter

    from ckheur import Selector
    from ckheur.c_export.compiled import find_compiler
    from ckheur.families.miopen.problems import generate_varied
    from ckheur.integrations.miopen.find_db import read_find_db
    from ckheur.learn.bundle import load_bundle
    from test_export import assert_parity, names_of
    from test_miopen import _first_trees, _slice_problems

    if find_compiler() is None:
        pytest.skip("no C compiler")
    monkeypatch.setenv("CKHEUR_CACHE_DIR", str(tmp_path / "cache"))
    path = _first_trees(ROOT / "models" / "miopen_fwd_fp32_gfx942", tmp_path / "b", trees=10)
    b = load_bundle(path)
    gone = Counter(b.answers.values()).most_common(1)[0][0]
    kept = [k.name for k in b.kernels if k.name != gone]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback to the Python path
        c = Selector.load(path, compiled=True, available=kept, cache_size=0)
    assert c.compiled is not None and names_of(c.compiled) == kept
    assert c.compiled.info["remembered_problems"] == sum(1 for n in b.answers.values() if n != gone) > 0
    assert "only the" in c.compiled.info["ranked"] and "op.available" in c.compiled.info["ranked"]
    py = copy.copy(c)
    py.compiled = None
    problems = _slice_problems(read_find_db(SLICES / "gfx942130.HIP.fdb.txt.bz2"), "fwd", "fp32") \
        + generate_varied(3, 40)
    assert assert_parity(py, c.compiled, problems)["ranked"] > 100
    from ckheur.families import get_family

    fields = get_family("miopen").problems
    lost = [fields.problem_from_dict(dict(zip(fields.FIELDS, key))) for key, n in b.answers.items() if n == gone][:5]
    whole = Selector.load(path, cache_size=0)
    assert lost and any(whole.select(p).kernel == gone for p in lost)  # remembered without the option
    assert gone not in c.answers.values() and gone in whole.answers.values()
    for sel in (py, c):
        assert all(sel.select(p).kernel != gone for p in lost)
    assert json.loads((next((tmp_path / "cache").rglob("export.json"))).read_text())["kernel_names"] == kept
