"""A measurement records its device (``device_cus``): two devices of one arch (MI250X and MI210,
both gfx90a) sweeping one problem set into one data folder keep both devices' rows and resume each
its own; a model across GPUs gives each row its device, a job for one device reads only its own; a
tuning database of one device is refused for the other (folder, SQLite, PostgreSQL); datasets and
databases of earlier versions read as the arch's own device, as they did."""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest

from conftest import run_cli, tiny_overrides

MI250X, MI210 = "MI250X (gfx90a, 110 CUs)", "MI210 (gfx90a, 104 CUs)"  # gfx90a's own device, its devices entry


def _sweep(tmp_path, *device, run="r"):
    r = run_cli("stage=sweep", *tiny_overrides(), "arch=gfx90a", *device,
                f"paths.data={tmp_path / 'data'}", f"hydra.run.dir={tmp_path / run}")
    assert r.returncode == 0, r.stderr
    return json.loads((tmp_path / run / "sweep_summary.json").read_text())


OP = {"family": "grouped_conv", "direction": "fwd", "dtype": "bf16"}


def _device(cus: int | None = None) -> dict:
    """gfx90a's device of ``cus`` CUs (None: its own) as a job resolves it."""
    from ckheur.config import load_arch, resolve_device

    return resolve_device(load_arch("gfx90a"), cus)


def _job(*device):
    from ckheur.job import Job
    from ckheur.stages import compose_config

    return Job.from_config(compose_config(["arch=gfx90a", *device]))


def test_two_devices_of_one_arch_sweep_into_one_folder_and_stay_apart(tmp_path):
    """MI250X, then MI210, sweep the same problems into one paths.data: the second measures every
    pair (not "already measured" by the other), reading keeps both devices' rows, a sweep resumes
    its own; trained across GPUs each device's rows are its own, a model of one device reads its own."""
    from ckheur.data.dataset import read_dataset
    from ckheur.families.engines import get_engine
    from ckheur.families.hardware import row_devices
    from ckheur.learn.training import build_table, build_table_across_archs

    first = _sweep(tmp_path, run="a")
    second = _sweep(tmp_path, "arch.num_cus=104", run="b")
    n = first["attempts"]
    assert n > 0 and second["attempts"] == n and second["pairs_skipped_existing"] == 0
    df = read_dataset(tmp_path / "data" / "grouped_conv_fwd_bf16_gfx90a" / "tiny.parquet")
    assert Counter(row_devices(df).tolist()) == {110: n, 104: n} == Counter(df.device_cus.tolist())
    assert _sweep(tmp_path, "arch.num_cus=104", run="c")["attempts"] == 0  # resumes its own rows

    mi250x, mi210 = _job(), _job("arch.num_cus=104")
    engine = get_engine("grouped_conv")
    tb = build_table_across_archs(df, mi250x.op, mi250x.arch, mi250x.pool.kernels, engine, None)
    devices = tb.report["archs"]
    assert set(devices) == {MI250X, MI210} and devices[MI250X].get("target") and not devices[MI210].get("target")
    spans = {label: d["row_span"][1] - d["row_span"][0] for label, d in devices.items()}
    assert spans[MI250X] == spans[MI210] == tb.report["rows_used"] // 2 > 0
    own = build_table(df, mi210.op, mi210.arch, mi210.pool.kernels, engine, None)
    assert own.report["rows_other_device"] == n and own.report["rows_used"] == spans[MI210]
    assert MI250X in own.report["device"] and "left out" in own.report["device"]
    theirs = df[(df.device_cus == 104) & (df.status == "ok")]
    assert sorted(own.tflops) == pytest.approx(sorted(theirs.tflops))


def test_a_job_reads_its_own_device_or_says_which_stands_in(tmp_path):
    """One device's job (train without across_gpus, evaluate, replay): its own rows when the data has
    them; the arch's one other device standing in, said; several others and none of its own: refused."""
    import pandas as pd

    from ckheur.errors import UserError
    from ckheur.families.hardware import one_device

    df = pd.DataFrame({"arch": ["gfx90a"] * 3 + ["gfx942"], "host": "node1", "device_cus": [104, 110, 0, 0]})
    mask, note = one_device(df, _device())
    assert mask.tolist() == [False, True, True, False] and "1 rows of " + MI210 in note  # 0: the arch's own
    mask, note = one_device(df[df.device_cus == 104], _device())
    assert mask.tolist() == [True] and f"measured on {MI210}, not {MI250X}: they stand in" in note
    with pytest.raises(UserError, match=re.escape(f"rows of {MI210}, {MI250X} and none of ") + ".*100 CUs.*"
                       "arch.num_cus=104 or 110"):
        one_device(df, _device(100))


def test_a_bundle_names_the_devices_it_learned_from_and_a_sibling_it_serves_is_labelled_unmeasured(tmp_path):
    """A bundle records the devices its rows were measured on (rows that record none: the arch's own);
    MI210's shipped gfx90a bundle serving arch=gfx90a (MI250X) says MI250X was never measured and
    whose answers it remembers; serving MI210 itself, it says nothing of the kind."""
    import pandas as pd

    from ckheur.families.hardware import devices_of
    from ckheur.job import Job
    from ckheur.selection.predicting import selector_for
    from ckheur.stages import compose_config

    from conftest import ROOT

    df = pd.DataFrame({"arch": ["gfx90a"] * 3, "host": "node1", "device_cus": [104, 110, 0]})
    assert devices_of(df, _device()) == [MI210, MI250X] and devices_of(df[df.device_cus == 104], _device(104)) == [MI210]
    labels = {}
    for device in ((), ("arch.num_cus=104",)):
        job = Job.from_config(compose_config(["op=miopen/fwd", "arch=gfx90a", *device]))
        labels[device] = selector_for(job, models=ROOT / "models", sim_models=tmp_path)[1]
    assert f"{MI250X} was NEVER MEASURED: learned from its sibling {MI210}, whose fastest solvers are its " \
        "remembered answers" in labels[()]
    assert "NEVER MEASURED" not in labels[("arch.num_cus=104",)] and "miopen_fwd_fp16_gfx90a" in labels[("arch.num_cus=104",)]
    r = run_cli("stage=export", "op=miopen/fwd", "arch=gfx90a", "export.build=false", f"export.output={tmp_path / 'pkg'}",
                f"hydra.run.dir={tmp_path / 'run'}")  # the C package of that bundle says it too
    assert r.returncode == 0 and f"{MI250X} was NEVER MEASURED: learned from its sibling {MI210}" in r.stdout, r.stderr


def test_a_cu_count_its_arch_names_no_product_for_is_not_that_product_and_figures_are_checked():
    """arch.num_cus of a count the arch's config names no device for keeps the arch's figures but not
    its product's name (a 100-CU gfx90a is no MI250X); the named ones keep theirs. A figure that is
    not positive is refused at once, naming it (exit 2 from the command line), never a log2 warning."""
    from ckheur.errors import UserError
    from ckheur.families.hardware import device_label

    assert [device_label(_job(*d).arch) for d in ((), ("arch.num_cus=104",), ("arch.num_cus=100",))] == \
        [MI250X, MI210, "gfx90a (100 CUs)"]
    assert _job("arch.num_cus=100").arch["max_clock_mhz"] == _device()["max_clock_mhz"]
    for bad, said in (("arch.num_cus=0", "arch.num_cus=0: must be a positive number"),
                      ("arch.peak_tflops.fp16=-1", "arch.peak_tflops.fp16=-1.0: must be a positive number"),
                      ("arch.l3_bytes=-1", "arch.l3_bytes=-1: must be a non-negative number")):
        with pytest.raises(UserError, match=re.escape(said)):
            _job(bad)
    r = run_cli("stage=predict", "op=miopen/fwd", "arch=gfx906", "arch.num_cus=-3",
                "problem=conv -n 8 -c 64 -H 56 -W 56 -k 64 -y 3 -x 3 -p 1 -q 1")
    assert r.returncode == 2 and "arch.num_cus=-3: must be a positive number" in r.stderr
    assert "Traceback" not in r.stderr and "RuntimeWarning" not in r.stderr


def test_a_tuning_db_of_one_device_is_refused_for_another(tmp_path):
    """stage=tune of MI210 into MI250X's tune.db folder: exit 2 naming tune.db and both devices,
    nothing measured or written; MI250X's own tune resumes it; stage=predict of MI210 never serves it."""
    db = tmp_path / "db"
    args = ("stage=tune", "arch=gfx90a", "problem.N=2", "problem.C=16", "problem.K=8", "problem.Hi=4",
            "problem.Wi=6", "tune.top_k=1", f"tune.db={db}")
    r = run_cli(*args)
    assert r.returncode == 0, r.stderr
    assert json.loads((db / "tuning_db.json").read_text())["device_cus"] == 110
    parts = sorted(p.name for p in db.glob("part-*"))
    r = run_cli(*args, "arch.num_cus=104")
    assert r.returncode == 2
    assert f"tuning database {db} was recorded on {MI250X}, not {MI210}" in r.stderr and "tune.db=" in r.stderr
    assert sorted(p.name for p in db.glob("part-*")) == parts
    assert run_cli(*args).returncode == 0
    r = run_cli("stage=predict", *args[1:-2], "arch.num_cus=104", f"predict.tuning_db={db}")
    assert r.returncode == 2 and f"was recorded on {MI250X}, not {MI210}" in r.stderr


def test_a_user_find_db_named_for_another_device_of_the_arch_is_refused(tmp_path):
    """export.format=miopen_find_db of MI60's tuning database (gfx906, 64 CUs) into a user find-db
    named for MI50 (gfx906_60...): exit 2 naming both devices, nothing written (MIOpen on an MI50
    would serve MI60's times); named for MI60, it is written."""
    from ckheur.backends import Results
    from ckheur.data.tuning_db import TuningDB
    from ckheur.families.miopen.problems import problem_from_dict
    from ckheur.integrations.miopen.find_db import parse_line, write_user_find_db
    from ckheur.job import Job
    from ckheur.stages import compose_config

    op = ["op=miopen/fwd", "op.dtype=fp32", "arch=gfx906", "arch.num_cus=64"]
    job = Job.from_config(compose_config(op))
    res = Results()
    res.add(0.5, workspace_bytes=0)
    db = TuningDB.open(tmp_path / "db", job.op, job.arch, create=True)
    solver = job.pool.kernels[0]
    db.record(problem_from_dict({"N": 8, "C": 64, "K": 64, "Hi": 14, "Wi": 14, "Y": 3, "X": 3, "pad_h": 1,
                                 "pad_w": 1}), [solver], res)
    mi50 = tmp_path / "gfx906_60.HIP.2_20_0.ufdb.txt"
    r = run_cli("stage=export", "export.format=miopen_find_db", *op, f"export.tuning_db={tmp_path / 'db'}",
                f"export.output={mi50}")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "gfx906_60.HIP.2_20_0.ufdb.txt: refused, nothing written: the file is MI50 (gfx906, 60 CUs)'s user " \
           "find-db, but tuning database" in r.stderr and "was measured on MI60 (gfx906, 64 CUs)" in r.stderr
    assert not list(tmp_path.glob("gfx906_60*"))
    mi60 = tmp_path / "gfx906_64.HIP.2_20_0.ufdb.txt"
    assert write_user_find_db(tmp_path / "db", mi60, job)["cus"] == 64
    [line] = mi60.read_text().splitlines()
    assert [(e.solver, e.time_ms) for e in parse_line(line).entries] == [(solver.name, 0.5)]


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_a_database_campaign_of_one_device_is_refused_for_another(tmp_path, kind):
    """A database URL: each device's default campaign is its own (MI210's named with its CUs); one
    named for the other device's is refused; a campaign of an earlier version (no device) is the
    arch's own device's."""
    import contextlib

    from ckheur.data.database import Store
    from ckheur.data.tuning_db import TuningDB, TuningDBError

    with contextlib.ExitStack() as stack:
        if kind == "sqlite":
            url = f"sqlite:///{tmp_path / 'tuning.db'}"
        else:
            from test_database import _pg_schema

            url = stack.enter_context(_pg_schema())
        for device in (_device(), _device(104)):
            TuningDB.open(url, OP, device, create=True, writable=True).close()
        with Store(url) as s:
            got = {c["name"]: c["device_cus"] for c in s.campaigns()}
            old = s.campaign("old", {**OP, "arch": "gfx90a"}, create=True)  # as earlier versions did: no device
        assert got == {"grouped_conv_fwd_bf16_gfx90a": 110, "grouped_conv_fwd_bf16_gfx90a_104cu": 104}
        sep = "&" if "?" in url else "?"
        with pytest.raises(TuningDBError, match=re.escape(f"the device {MI250X} (wanted {MI210})") + ".*tune.db="):
            TuningDB.open(f"{url}{sep}campaign=grouped_conv_fwd_bf16_gfx90a", OP, _device(104))
        db = TuningDB.open(f"{url}{sep}campaign=old", OP, _device())
        assert db.campaign_id == old and db.device_cus == 110
        db.close()
        with pytest.raises(TuningDBError, match=re.escape(f"the device {MI250X} (wanted {MI210})")):
            TuningDB.open(f"{url}{sep}campaign=old", OP, _device(104))


def test_datasets_and_tuning_dbs_of_earlier_versions_read_as_the_arch_own_device(tmp_path):
    """A dataset of schema version 2 (no device_cus) reads as gfx90a's own device, MI250X: its sweep
    resumes it, MI210's measures everything beside it; a tuning_db.json without device_cus opens for
    MI250X and is refused for MI210."""
    import pyarrow.parquet as pq

    from ckheur.data.dataset import read_dataset
    from ckheur.data.tuning_db import TuningDB, TuningDBError
    from ckheur.families.hardware import row_devices

    n = _sweep(tmp_path, run="a")["attempts"]
    folder = tmp_path / "data" / "grouped_conv_fwd_bf16_gfx90a" / "tiny.parquet"
    for part in folder.glob("part-*.parquet"):  # as version 2 wrote it
        table = pq.read_table(part).drop(["device_cus"])
        pq.write_table(table.replace_schema_metadata({**table.schema.metadata, b"ckheur_schema_version": b"2"}), part)
    old = read_dataset(folder)
    assert len(old) == n and set(old.device_cus) == {0} and set(row_devices(old)) == {110}
    assert _sweep(tmp_path, run="b")["attempts"] == 0
    assert _sweep(tmp_path, "arch.num_cus=104", run="c")["attempts"] == n
    assert Counter(row_devices(read_dataset(folder)).tolist()) == {110: n, 104: n}

    TuningDB.open(tmp_path / "db", OP, _device(), create=True)
    meta = tmp_path / "db" / "tuning_db.json"
    meta.write_text(json.dumps({k: v for k, v in json.loads(meta.read_text()).items() if k != "device_cus"}))
    assert TuningDB.open(tmp_path / "db", OP, "gfx90a").device_cus == 110
    with pytest.raises(TuningDBError, match=re.escape(f"recorded on {MI250X}, not {MI210}")):
        TuningDB.open(tmp_path / "db", OP, _device(104))
