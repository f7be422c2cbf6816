"""One rule for impossible times everywhere (``dataset.usable``, which applies ``time_refusals`` to
the time and the FLOPs of the row's problem): a row stored as ok at 1e-9 ms, by an older version
or another tool with its TFLOPS column left plausible, is not served, not exported to MIOpen's
user find-db, not trained on and not evaluated."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq


def _database(tmp_path):
    """A MIOpen fwd fp16 gfx942 tuning database of one problem timed on two solvers, the faster
    one then rewritten in place to 1e-9 ms with its TFLOPS kept (as a row stored before the rule)."""
    from ckheur.backends import Results
    from ckheur.config import load_option
    from ckheur.data.tuning_db import TuningDB
    from ckheur.families.miopen.problems import problem_from_dict
    from ckheur.job import Job

    op, arch = load_option("op/miopen/fwd"), load_option("arch/gfx942")
    op["dtype"] = "fp16"
    job = Job(op, arch)
    p = problem_from_dict({"N": 8, "C": 64, "K": 64, "Hi": 14, "Wi": 14, "Y": 3, "X": 3, "pad_h": 1, "pad_w": 1})
    solvers = [k for k in job.pool.kernels if k.algorithm not in ("winograd", "fft")][:2]
    res = Results()
    res.add(0.5, workspace_bytes=0)
    res.add(0.25, workspace_bytes=0)
    db = TuningDB.open(tmp_path / "db", job.op, "gfx942", create=True)
    part = db.record(p, solvers, res)
    table = pq.read_table(part)
    df = table.to_pandas()
    assert list(df.status) == ["ok", "ok"]
    df.loc[df.kernel == solvers[1].name, "latency_ms"] = 1e-9  # tflops left as it was: plausible
    pq.write_table(pa.Table.from_pandas(df, schema=table.schema, preserve_index=False), part)
    return job, p, solvers, tmp_path / "db"


def test_an_impossible_stored_time_is_never_served_exported_trained_or_evaluated(tmp_path):
    from ckheur.data.dataset import read_dataset, usable
    from ckheur.data.tuning_db import TuningDB
    from ckheur.evaluation.scoring import COLUMNS, group_by_problem
    from ckheur.families import get_family
    from ckheur.integrations.miopen.find_db import parse_line, write_user_find_db
    from ckheur.learn.training import TrainingError, build_table

    job, p, (slow, fast), db = _database(tmp_path)
    rows = read_dataset(db)
    assert rows.loc[rows.kernel == fast.name, "tflops"].iloc[0] < 1000  # the stored TFLOPS look plausible
    assert list(usable(rows)) == [name == slow.name for name in rows.kernel]
    # Served: the tier answers the measured solver, not the impossible one.
    assert TuningDB.open(db, job.op, "gfx942").best(p.key())[0] == slow.name
    # Exported: the user find-db holds the measured time alone.
    out = tmp_path / "gfx942130.HIP.3_2_0.ufdb.txt"
    write_user_find_db(db, out, job)
    [line] = out.read_text().splitlines()
    assert [(e.solver, e.time_ms) for e in parse_line(line).entries] == [(slow.name, 0.5)]
    # Trained on: the training table has the measured row alone.
    table = build_table(rows, job.op, job.arch, job.pool.kernels, _engine(), None)
    assert [table.kernels[k].name for k in table.kid] == [slow.name]
    # Evaluated: its time is no measurement to score against (read as stage=evaluate reads).
    ev = group_by_problem(read_dataset(db, columns=[*COLUMNS, *job.family.problems.FIELDS]), get_family("miopen"))
    got = dict(zip(ev.kernels, ev.tflops))
    assert math.isnan(got[fast.name]) and got[slow.name] > 0
    # Only impossible rows: nothing to train on, said in one line.
    only = rows[rows.kernel == fast.name]
    try:
        build_table(only, job.op, job.arch, job.pool.kernels, _engine(), None)
    except TrainingError as e:
        assert "no usable rows" in str(e)
    else:
        raise AssertionError("an impossible time was trained on")


def _engine():
    from ckheur.families.engines import get_engine

    return get_engine("miopen")


def test_rows_whose_fields_are_no_problem_are_not_usable():
    """A stored row whose problem has an empty output (no FLOPs) has no time to use."""
    from ckheur.data.dataset import problem_flops

    frame = pd.DataFrame({"op": ["grouped_conv/fwd"] * 2, "N": [1, 1], "C": [8, 8], "K": [8, 8], "G": [1, 1],
                          "Di": [1, 1], "Hi": [8, 2], "Wi": [8, 8], "Z": [1, 1], "Y": [3, 5], "X": [3, 3],
                          "stride_d": [1, 1], "stride_h": [1, 1], "stride_w": [1, 1], "pad_d": [0, 0], "pad_h": [1, 0],
                          "pad_w": [1, 1], "dilation_d": [1, 1], "dilation_h": [1, 1], "dilation_w": [1, 1]})
    flops = problem_flops(frame)
    assert flops[0] == 2 * 1 * 8 * 8 * 8 * 8 * 3 * 3 and np.isnan(flops[1])


def test_a_measured_winograd_time_gets_the_imports_allowance(tmp_path):
    """A sweep's Winograd time beyond the dense peak (fewer multiplications than the FLOPs counted) is
    kept, as an import keeps it (MI60's find-db lists such times), when it is measured and on every
    read (``usable``: its TFLOPS too); a direct solver's is refused."""
    from ckheur.backends import Results
    from ckheur.config import load_option
    from ckheur.data.dataset import PEAK_MARGIN, arch_peaks, read_dataset, refuse_impossible, usable
    from ckheur.data.tuning_db import TuningDB
    from ckheur.families.miopen.problems import problem_from_dict
    from ckheur.job import Job

    op, arch = load_option("op/miopen/fwd"), load_option("arch/gfx906")
    op["dtype"] = "fp16"
    job = Job(op, arch)
    p = problem_from_dict({"N": 8, "C": 64, "K": 64, "Hi": 14, "Wi": 14, "Y": 3, "X": 3, "pad_h": 1, "pad_w": 1})
    wino = next(k for k in job.pool.kernels if k.algorithm == "winograd")
    direct = next(k for k in job.pool.kernels if k.algorithm not in ("winograd", "fft"))
    ms = p.flops / (1.5 * PEAK_MARGIN * arch_peaks(arch)["fp16"] * 1e12) * 1e3  # 1.5 times the margin
    res = Results()
    res.add(ms, workspace_bytes=0)
    res.add(ms, workspace_bytes=0)
    assert refuse_impossible([(p, wino), (p, direct)], res, "fp16", arch) == 1
    assert list(res.status) == ["ok", "failed"] and "not a real measurement" in res.error[1]
    db = TuningDB.open(tmp_path / "db", job.op, "gfx906", create=True)
    db.record(p, [wino, direct], res)
    rows = read_dataset(tmp_path / "db")
    assert list(usable(rows)) == [name == wino.name for name in rows.kernel]
    assert TuningDB.open(tmp_path / "db", job.op, "gfx906").best(p.key())[0] == wino.name
    from ckheur.evaluation.scoring import COLUMNS, group_by_problem

    read = read_dataset(tmp_path / "db", columns=[*COLUMNS, *job.family.problems.FIELDS])  # what stage=evaluate reads
    assert list(np.isfinite(group_by_problem(read, job.family).tflops)) == [name == wino.name for name in read.kernel]
