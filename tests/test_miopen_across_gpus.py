"""One model across GPUs: a row's device is the one its find-db file names (MI50 and MI60 apart,
both gfx906), and the shipped model across GPUs (models/miopen_<dir>_<dtype>_gpus) serves a GPU
without a bundle of its own in predict, evaluate and export, labelled with whether that device was
ever measured. Real data: the slices of tests/data/miopen_fdb."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import ROOT, run_cli

SLICES = ROOT / "tests" / "data" / "miopen_fdb"
GPUS = ROOT / "models" / "miopen_fwd_fp32_gpus"
PROBLEM = "problem=conv -n 32 -c 256 -H 56 -W 56 -k 256 -y 3 -x 3 -p 1 -q 1 -F 1"


@pytest.fixture(scope="module")
def gfx906_data(tmp_path_factory):
    """The forward FP32 rows of the MI50 and MI60 slices (both gfx906) as stage=import writes them
    (its ``dataset_rows``: the file name in each row), one dataset each."""
    from ckheur.data.dataset import write_part
    from ckheur.families.miopen.solvers import solver_tables
    from ckheur.integrations.miopen.find_db import dataset_rows, read_find_db

    folder = tmp_path_factory.mktemp("gfx906") / "miopen_fwd_fp32_gfx906"
    table = solver_tables("fwd")["solvers"]["gfx906"]
    for stem in ("gfx906_60", "gfx906_64"):
        src = SLICES / f"{stem}.HIP.fdb.txt.bz2"
        rows, _ = dataset_rows(read_find_db(src, "gfx906"), "fwd", "fp32", "gfx906", table, src.name,
                               "2026-01-01T00:00:00+00:00")
        write_part(folder / f"{stem}.parquet", rows)
    return folder


def test_mi50_and_mi60_rows_get_their_own_device_descriptors(gfx906_data):
    """A table across GPUs of the two gfx906 files: two devices, each of its own rows, whose
    descriptors are its own (60 vs 64 CUs, MI60's clock and peak); a dataset's rows that do not name
    a device are the arch's own (MI50). The feature engine keys its cache by device, not arch name."""
    from ckheur.config import load_arch, resolve_device
    from ckheur.data.dataset import read_dataset
    from ckheur.families.engines import get_engine
    from ckheur.families.hardware import DESCRIPTORS, WithHardware, descriptors, row_devices
    from ckheur.learn.training import build_table_across_archs
    from ckheur.learn.trainer import union_pool
    from ckheur.stages import compose_config, plain

    df = read_dataset([gfx906_data / "gfx906_60.parquet", gfx906_data / "gfx906_64.parquet"])
    assert set(row_devices(df)) == {60, 64}
    assert set(row_devices(df.assign(host="somehost"))) == {60}  # rows naming no device: the arch's own (MI50)
    assert set(row_devices(df.assign(host="somehost", device_cus=64))) == {64}  # a sweep's on MI60: recorded
    op = plain(compose_config(["op=miopen/fwd", "op.dtype=fp32", "arch=gfx908"]).op)
    mi100 = resolve_device(load_arch("gfx908"))
    engine = WithHardware(get_engine("miopen"), "fp32")
    tb = build_table_across_archs(df, op, mi100, union_pool(df, op, mi100), engine, None, own_pools=True)
    devices = tb.report["archs"]
    assert set(devices) == {"MI50 (gfx906, 60 CUs)", "MI60 (gfx906, 64 CUs)"}
    hw = tb.X[:, [tb.feature_names.index(d) for d in DESCRIPTORS]]
    mi50, mi60 = resolve_device(load_arch("gfx906")), resolve_device(load_arch("gfx906"), 64)
    for label, cfg in (("MI50 (gfx906, 60 CUs)", mi50), ("MI60 (gfx906, 64 CUs)", mi60)):
        lo, hi = devices[label]["row_span"]
        assert hi > lo and np.allclose(hw[lo:hi], descriptors(cfg, "fp32"))
    assert not np.allclose(descriptors(mi50, "fp32"), descriptors(mi60, "fp32"))
    assert {k.name for k in tb.kernels} >= {k.name for k in union_pool(df, op, load_arch("gfx906"))}


@pytest.mark.skipif(not GPUS.is_dir(), reason="no shipped model across GPUs")
def test_a_gpu_never_measured_is_served_by_the_nearest_bundle_or_the_model_across_gpus():
    """gfx908 (MI100) has no bundle and no data, and shares gfx90a's matrix cores and wave size:
    predict serves gfx90a's bundle (the nearest), saying why and that MI100 was never measured, once.
    The model across GPUs named as predict.model_dir ranks for MI100 with its descriptors. MI50 and
    MI60 (gfx906, no matrix cores: 60 and 64 CUs; no bundle of their own, their files among its
    training data, which it says) are served the model across GPUs, ranking with each device's
    descriptors and its table's solvers: other scores; so does a sweep's ranker."""
    r = run_cli("stage=predict", "op=miopen/fwd", "op.dtype=fp32", "arch=gfx908", PROBLEM)
    assert r.returncode == 0, r.stderr
    label = next(line for line in r.stdout.splitlines() if line.startswith("ranked by:"))
    assert "models/miopen_fwd_fp32_gfx90a" in label and "MODEL ACROSS GPUS" not in label
    assert ("NEAREST GPU'S MODEL: gfx908 has none, gfx90a is the nearest GPU with one (by hardware descriptors); "
            "gfx90a shares gfx908's matrix cores and wave size; the leave-one-GPU-out bench favours") in label
    assert label.count("NEVER MEASURED") == 1 and "unmeasured" not in label and "MI100 (gfx908, 120 CUs) was NEVER" in label
    from ckheur.job import Job
    from ckheur.selection.predicting import selector_for
    from ckheur.selection.selector import as_problem
    from ckheur.stages import compose_config

    def served(*overrides, model_dir=None):
        job = Job.from_config(compose_config(["op=miopen/fwd", "op.dtype=fp32", *overrides]))
        return job, selector_for(job, models=ROOT / "models", sim_models=ROOT / "outputs" / "sim_models",
                                 model_dir=model_dir)[0]

    from ckheur.config import load_arch
    from ckheur.selection.predicting import arch_traits, traits_apart

    # a config that does not write matrix_cores has them (the schema's default), as the CDNA ones
    assert arch_traits({"name": "gfx9xx", "wavefront_size": 64}) == {"matrix_cores": True, "wavefront_size": 64}
    assert traits_apart(load_arch("gfx1030"), load_arch("gfx90a")) == [
        "matrix cores (gfx1030: no matrix cores)", "wave 64 (gfx1030: wave 32)"]
    j908, named = served("arch=gfx908", model_dir=GPUS)
    from ckheur.selection.predicting import serving

    got = serving(j908, ROOT / "models")  # ``serving``: what predict, evaluate and export are given (one decision)
    assert got.nearest == "gfx90a" and got.path.name == "miopen_fwd_fp32_gfx90a"
    assert "MODEL ACROSS GPUS, ranking for MI100 (gfx908, 120 CUs): MI100 (gfx908, 120 CUs) was NEVER MEASURED" \
        in named.label and "unmeasured" not in named.label and named.arch["name"] == "gfx908"
    (j50, s50), (j60, s60) = served("arch=gfx906"), served("arch=gfx906", "arch.num_cus=64")
    assert (s50.arch["num_cus"], s60.arch["num_cus"]) == (60, 64)
    assert ("MODEL ACROSS GPUS: gfx906 has no bundle of its own; gfx90a, the nearest GPU with a bundle, has matrix "
            "cores (gfx906: no matrix cores); the leave-one-GPU-out bench favours the model across GPUs") in s50.label
    assert "MI60 (gfx906, 64 CUs)'s data was among its training data" in s60.label and "NEVER" not in s60.label
    assert {k.name for k in s60.kernels} <= {k.name for k in j60.pool.kernels}
    p = as_problem(PROBLEM.split("=", 1)[1], j50.family, "fwd", "fp32")
    assert not np.allclose(s50.scores(p)[1], s60.scores(p)[1])
    from ckheur.sweeping.rounds import _load_ranker

    assert _load_ranker(str(GPUS), j60).arch["num_cus"] == 64  # a bring-up sweep's ranker: the device's too


@pytest.mark.skipif(not GPUS.is_dir(), reason="no shipped model across GPUs")
def test_a_bring_up_sweep_ranks_with_what_predict_serves(tmp_path):
    """sweep.active.ranker=served: the bundle stage=predict serves the sweep's device (``serving``),
    with serving's reason: gfx908 (matrix cores, wave 64 as gfx90a) gfx90a's bundle, the RDNA2
    Radeon (gfx1030: neither) the model across GPUs (a GPU with a bundle its own: test_miopen's
    bring-up sweep); nothing to serve is refused naming the option."""
    from ckheur.job import Job
    from ckheur.stages import compose_config
    from ckheur.sweeping import SweepError
    from ckheur.sweeping.rounds import served_ranker

    j908, j1030 = (Job.from_config(compose_config(["op=miopen/fwd", "op.dtype=fp16", f"arch={arch}"]))
                   for arch in ("gfx908", "gfx1030"))
    path, why = served_ranker(j908, ROOT / "models", tmp_path / "sim")
    assert path == str(ROOT / "models" / "miopen_fwd_fp16_gfx90a")
    assert "gfx908 has no bundle of its own; gfx90a shares gfx908's matrix cores and wave size" in why
    path, why = served_ranker(j1030, ROOT / "models", tmp_path / "sim")
    assert path == str(ROOT / "models" / "miopen_fwd_fp16_gpus")
    assert "the model across GPUs; gfx1030 has no bundle of its own; gfx90a, the nearest GPU with a bundle, has " \
           "matrix cores (gfx1030: no matrix cores) and wave 64 (gfx1030: wave 32)" in why
    with pytest.raises(SweepError, match="sweep.active.ranker=served: nothing serves miopen_fwd_fp16_gfx908"):
        served_ranker(j908, tmp_path, tmp_path / "sim")


@pytest.mark.skipif(not GPUS.is_dir(), reason="no shipped model across GPUs")
def test_evaluate_and_export_serve_a_gpu_without_a_bundle_as_predict_does(gfx906_data, tmp_path):
    """MI60 has no bundle: stage=evaluate scores the model across GPUs as predict serves it, instead
    of "not found"; stage=export writes the C package of that model for MI60 (its descriptors baked
    in, only its table's solvers). A GPU that shares the nearest bundle's matrix cores and wave size
    (gfx908) is exported that bundle, as predict serves it (``serving``: one decision for both;
    checked in the test above, on the gfx908 job it composes)."""
    import json

    r = run_cli("stage=evaluate", "op=miopen/fwd", "op.dtype=fp32", "arch=gfx906", "arch.num_cus=64",
                "evaluate.plots=false", "evaluate.nearest_gpu=false", f"data.eval_paths=[{gfx906_data / 'gfx906_64.parquet'}]",
                f"hydra.run.dir={tmp_path / 'e'}")
    assert r.returncode == 0, r.stderr
    assert "gfx906 has no bundle of its own: evaluating what stage=predict serves it" in r.stdout
    assert "MI60 (gfx906, 64 CUs)'s data was among its training data" in r.stdout and "not found" not in r.stdout + r.stderr
    metrics = json.loads(next((tmp_path / "e").rglob("metrics.json")).read_text())
    assert metrics["model_dir"].endswith("miopen_fwd_fp32_gpus")
    # without data.eval_paths: no simulator times MIOpen's solvers, so the default set is not swept
    # through backend=sim (it has no MIOpen problems); the error says what to give instead
    r = run_cli("stage=evaluate", "op=miopen/fwd", "arch=gfx908", f"paths.data={tmp_path / 'data'}",
                f"hydra.run.dir={tmp_path / 'e2'}")
    assert r.returncode == 2 and "miopen ops evaluate on measurements" in r.stderr and "data.eval_paths=" in r.stderr
    assert "measuring it through backend=sim" not in r.stdout and not (tmp_path / "data").exists()
    # the package's sources only (building and checking C against Python: tests/test_export.py)
    r = run_cli("stage=export", "op=miopen/fwd", "op.dtype=fp32", "arch=gfx906", "arch.num_cus=64",
                f"export.output={tmp_path / 'c'}", "export.build=false", f"hydra.run.dir={tmp_path / 'x'}")
    assert r.returncode == 0, r.stderr
    assert "exporting the model across GPUs" in r.stdout and "MI60 (gfx906, 64 CUs)" in r.stdout
    source = (tmp_path / "c" / "miopen_fwd_fp32_gfx906.c").read_text()
    assert "gfx906" in source and "ConvBinWinogradRxSf2x3" in source
    from ckheur.families.miopen.solvers import table_names

    assert not any(f'"{name}"' in source for name in set(table_names("fwd", "gfx942")) - set(table_names("fwd", "gfx906")))
    # named by path, as predict takes it: for the job's device too (MI50 here), not the arch it was trained with
    r = run_cli("stage=export", "op=miopen/fwd", "op.dtype=fp32", "arch=gfx906", "arch.num_cus=60",
                f"export.model_dir={GPUS}", f"export.output={tmp_path / 'c60'}", "export.build=false",
                f"hydra.run.dir={tmp_path / 'x60'}")
    assert r.returncode == 0 and "is a model across GPUs: exporting it for MI50 (gfx906, 60 CUs)" in r.stdout, r.stderr
    source = (tmp_path / "c60" / "miopen_fwd_fp32_gfx906.c").read_text()
    cus = [line.split()[-1] for line in source.splitlines() if "define CKH_NUM_CUS" in line]
    assert cus == [float.hex(60.0)] and not any(f'"{name}"' in source for name in
                                                set(table_names("fwd", "gfx942")) - set(table_names("fwd", "gfx906")))
    # gfx908's ``serving`` (gfx90a's bundle, what export is given): checked in the test above, on its composed job


def test_an_arch_of_the_users_own_is_served_miopens_registry_without_a_clone(tmp_path):
    """An arch config of the user's own (a Hydra search path) is all a MIOpen op needs: its table is
    MIOpen's registry cut by IsApplicable's device rules, said in one line; the model across GPUs
    ranks it as never measured, ``op.available`` narrows it, and an arch named as RDNA3 gets neither
    GCN assembly nor matrix-core solvers, only the CK grouped GEMMs MIOpen's CK list lets run there.
    (The user's configs here are gfx942's and gfx1030's figures under new names: the rules go by name.)"""
    (tmp_path / "conf" / "arch").mkdir(parents=True)
    for new, old in (("gfx943", "gfx942"), ("gfx1100", "gfx1030")):
        text = (ROOT / "conf" / "arch" / f"{old}.yaml").read_text().replace(f"name: {old}", f"name: {new}")
        (tmp_path / "conf" / "arch" / f"{new}.yaml").write_text(text)
    search = f"hydra.searchpath=[file://{tmp_path / 'conf'}]"
    r = run_cli("stage=predict", "op=miopen/fwd", "op.dtype=fp32", "arch=gfx943", search,
                "problem=conv -n 8 -c 64 -H 56 -W 56 -k 64 -y 3 -x 3")
    assert r.returncode == 0, r.stderr
    assert "op=miopen/fwd on gfx943: no solver table measured for it; MIOpen's registry gives" in r.stdout
    assert "MODEL ACROSS GPUS" in r.stdout and "(gfx943, 304 CUs) was NEVER MEASURED" in r.stdout
    r = run_cli("stage=predict", "op=miopen/fwd", "op.dtype=fp32", "arch=gfx943", search,
                "op.available=[GemmFwdRest,ConvHipImplicitGemmFwdXdlops]", "problem=conv -n 8 -c 64 -H 56 -W 56 -k 64 -y 3 -x 3")
    assert r.returncode == 0 and "op.available: keeps 2 of the" in r.stdout, r.stderr
    picked = next(line for line in r.stdout.splitlines() if line.startswith("selected: ")).split()[1]
    assert picked in {"GemmFwdRest", "ConvHipImplicitGemmFwdXdlops"}
    for direction in ("fwd", "bwd_data", "bwd_weight"):
        r = run_cli("stage=list", f"op=miopen/{direction}", "op.dtype=fp16", "arch=gfx1100", search)
        assert r.returncode == 0 and f"op=miopen/{direction} on gfx1100: no solver table measured" in r.stdout, r.stderr
        names = {line.split()[0] for line in r.stdout.splitlines() if line.startswith(("Conv", "Gemm", "fft"))}
        assert names & {"GemmFwdRest", "GemmBwdRest", "GemmWrwUniversal"} and not any(n.startswith("ConvAsm") for n in names)
        assert {n for n in names if "xdlops" in n.lower()} <= {"ConvHipImplicitGemmGroupFwdXdlops",
                                                               "ConvHipImplicitGemm3DGroupFwdXdlops",
                                                               "ConvHipImplicitGemmGroupBwdXdlops"}
    # its find-db imports (RDNA2's slice, under the name its renamed config takes): what the file lists
    # is kept, a solver the registry's device rules leave out too (CK's dlops GEMM: gfx900, gfx906, gfx1030)
    src = tmp_path / "gfx1100_36.HIP.fdb.txt.bz2"
    src.write_bytes((ROOT / "tests" / "data" / "miopen_fdb" / "gfx1030_36.HIP.fdb.txt.bz2").read_bytes())
    r = run_cli("stage=import", f"import.path={src}", "arch=gfx1100", search, f"paths.data={tmp_path / 'data'}")
    assert r.returncode == 0 and "(gfx1100, 72 CUs: arch=gfx1100)" in r.stdout, r.stderr
    import pandas as pd

    parts = sorted((tmp_path / "data" / "miopen_fwd_fp32_gfx1100" / "gfx1100_36.parquet").glob("*.parquet"))
    rows = pd.concat(map(pd.read_parquet, parts))
    assert set(rows.arch) == {"gfx1100"} and (rows[rows.status == "ok"].kernel == "ConvCkIgemmFwdV6r1DlopsNchw").any()


def test_the_shipped_models_across_gpus_name_the_find_dbs_they_were_trained_on():
    """Each shipped model across GPUs' train_manifest.json names, per dataset, the find-db file it was
    imported from and that file's sha256 (the shared file's, where ../shared is here), and no
    temporary folder of the machine that trained it (tools/train_gpus_bundles.py --record-sources)."""
    import hashlib
    import json

    shared = ROOT.parent / "shared" / "data" / "miopen_fdb"
    bundles = sorted((ROOT / "models").glob("miopen_*_gpus"))
    assert len(bundles) == 6
    for bundle in bundles:
        text = (bundle / "train_manifest.json").read_text()
        assert "/tmp/" not in text, bundle
        datasets = json.loads(text)["datasets"]
        assert sorted(d["find_db"] for d in datasets) == sorted(
            f"{stem}.HIP.fdb.txt.bz2" for stem in ("gfx942130", "gfx90a68", "gfx906_60", "gfx906_64", "gfx900_56", "gfx1030_36"))
        for d in datasets:
            assert d["path"].endswith(f"/{d['find_db'].split('.')[0]}.parquet") and len(d["sha256"]) == 64
            if (shared / d["find_db"]).is_file():
                assert hashlib.sha256((shared / d["find_db"]).read_bytes()).hexdigest() == d["find_db_sha256"]
