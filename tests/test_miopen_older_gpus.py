"""The four older GPUs (MI50, MI60, Vega 56, an RDNA2 Radeon): their find-dbs in MIOpen's older
entry format and solver names import whole into their arch's solver tables (and, with MI210/250's
and MI300X's, into the pools of each data type); a device is an arch plus its CU count (MI60 is
gfx906 with 64). Real data: slices of the shared files (tests/data/miopen_fdb, a few hundred lines
each)."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import ROOT, run_cli

SLICES = ROOT / "tests" / "data" / "miopen_fdb"
OLDER = {"gfx906_60": ("gfx906", 60), "gfx906_64": ("gfx906", 64), "gfx900_56": ("gfx900", 56),
         "gfx1030_36": ("gfx1030", 36)}
NEWER = {"gfx90a68": ("gfx90a", 104), "gfx942130": ("gfx942", 304)}  # MI210/250, MI300X: the newer format
RXS = {"ConvBinWinogradRxSf2x3", "ConvBinWinogradRxSf3x2", "ConvBinWinogradRxSf2x3g1"}


@pytest.mark.parametrize("stem", sorted({**OLDER, **NEWER}))
def test_slices_parse_whole_into_their_arch_tables_and_pools(stem):
    """Every line of the slice is read (older entries: algo first, solver, time, workspace, library);
    every listed solver of every direction is in the arch's table: nothing is left out. Every one
    listed for a data type is in the arch's pool for it: the data types MIOpen takes per arch
    (DTYPE_ARCHS, gfx90a's backward FP16: FP16_ALT_REJECTS) never leave out one the file lists for
    that type. They do leave out solvers the file lists for another: the RxS Winograds in BF16 on
    every arch and in FP16 on gfx900; on gfx90a, in backward FP16, the Winograds and xdlops GEMMs
    its FP32 problems list (forward FP16 keeps the Winograds)."""
    from ckheur.config import known_archs, load_arch
    from ckheur.families.miopen.solvers import table_names
    from ckheur.kernels import enumerate_pool
    from ckheur.integrations.miopen.find_db import arch_from_name, read_find_db

    path = SLICES / f"{stem}.HIP.fdb.txt.bz2"
    arch, cus = arch_from_name(path, known_archs())
    assert (arch, cus) == {**OLDER, **NEWER}[stem]
    fdb = read_find_db(path, arch)
    r = fdb.report
    assert r["problems"] > 0.9 * r["lines"] and not r["skipped_entries"].get("entry not in either find-db format")
    assert not any("peak" in reason for reason in r["skipped_entries"])  # the arch's peaks admit every time
    p = fdb.problems
    assert set(p.direction) == {"fwd", "bwd_data", "bwd_weight"} and set(p.dtype) == {"fp32", "fp16", "bf16"}
    direction = p.direction.to_numpy()[fdb.entries.problem.to_numpy()]
    dtype = p.dtype.to_numpy()[fdb.entries.problem.to_numpy()]
    left_out: dict = {}
    pools: dict = {}
    for d in ("fwd", "bwd_data", "bwd_weight"):
        listed = set(fdb.entries.solver[direction == d])
        assert listed and listed <= set(table_names(d, arch)), (d, listed - set(table_names(d, arch)))
        for t in ("fp32", "fp16", "bf16"):
            pool = enumerate_pool({"family": "miopen", "direction": d, "dtype": t}, load_arch(arch))
            of_dtype = set(fdb.entries.solver[(direction == d) & (dtype == t)])
            assert of_dtype <= {k.name for k in pool.kernels}, (d, t, of_dtype - {k.name for k in pool.kernels})
            left_out[d, t] = {name for name, _ in pool.rejected} & listed
            pools[d, t] = {k.name for k in pool.kernels}
    assert left_out["fwd", "bf16"] >= RXS & set(fdb.entries.solver[(direction == "fwd") & (dtype == "fp32")])
    assert left_out["fwd", "bf16"] & RXS
    assert bool(left_out["fwd", "fp16"] & RXS) == (arch == "gfx900")
    if arch == "gfx90a":
        assert left_out["bwd_weight", "fp16"] >= {"ConvBinWinogradRxSf2x3", "ConvAsmBwdWrW1x1", "ConvHipImplicitGemmV4R1WrW",
                                                  "ConvHipImplicitGemmWrwV4R4Xdlops", "ConvWinograd3x3MultipassWrW<3-2>"}
        assert left_out["bwd_data", "fp16"] >= {"ConvAsm1x1U", "ConvBinWinogradRxSf3x2"}
    elif "ConvAsmBwdWrW1x1" in table_names("bwd_weight", arch):  # the FP16-alt rule is gfx90a's alone
        assert "ConvAsmBwdWrW1x1" in pools["bwd_weight", "fp16"]
    if arch in ("gfx900", "gfx906"):  # FP32 only: the dynamic assembly GEMMs
        assert left_out["bwd_weight", "fp16"] >= {"ConvAsmImplicitGemmV4R1DynamicWrw"}


def test_an_older_solver_name_is_mapped_and_a_gpu_without_a_bundle_is_evaluated_as_predict_serves_it(tmp_path):
    """gfx1030's ConvOclDirectFwdFused (ConvOclDirectFwd's subclass: its kernel without the bias
    macro) is imported as ConvOclDirectFwd on bias-free problems, with a line saying so; the
    device is named from the file's CU count. gfx1030 has no bundle and BF16 no model across GPUs:
    stage=evaluate scores the nearest GPU's bundle as stage=predict serves it (its solvers that run there, no remembered
    answers), saying so, instead of stopping with "model bundle ... not found"."""
    from ckheur.data.dataset import read_dataset

    src = SLICES / "gfx1030_36.HIP.fdb.txt.bz2"
    data = tmp_path / "data"
    r = run_cli("stage=import", f"import.path={src}", f"paths.data={data}", f"hydra.run.dir={tmp_path / 'r'}")
    assert r.returncode == 0, r.stderr
    assert "mapped 4 entries of an older solver name to today's: ConvOclDirectFwdFused -> ConvOclDirectFwd" in r.stdout
    assert "left out" not in r.stdout and "(gfx1030, 72 CUs: arch=gfx1030)" in r.stdout
    df = read_dataset(data / "miopen_fwd_fp32_gfx1030" / "gfx1030_36.parquet")
    ok = df[(df.status == "ok") & (df.kernel == "ConvOclDirectFwd")]
    assert "ConvOclDirectFwdFused" not in set(df.kernel.astype(str))
    assert ((ok.C == 128) & (ok.K == 256) & (ok.Hi == 3)).sum() >= 4  # the four lines that listed only the old name
    # the problems whose entry lists one solver alone, counted in what was written
    from ckheur.families.miopen.problems import FIELDS

    alone = sum(int((read_dataset(f).query("status == 'ok'").groupby(list(FIELDS), dropna=False).size() == 1).sum())
                for f in data.glob("miopen_*_gfx1030/gfx1030_36.parquet"))
    assert alone and f"import: {alone} of the " in r.stdout and "problems list one solver alone (" in r.stdout
    r = run_cli("stage=evaluate", "op=miopen/fwd", "op.dtype=bf16", "arch=gfx1030", "evaluate.plots=false",
                f"data.eval_paths=[{data / 'miopen_fwd_bf16_gfx1030' / 'gfx1030_36.parquet'}]",
                f"hydra.run.dir={tmp_path / 'e'}")
    assert r.returncode == 0, r.stderr
    assert "gfx1030 has no bundle of its own: evaluating what stage=predict serves it" in r.stdout
    assert "NEAREST GPU'S MODEL: gfx1030 has none, gfx90a is the nearest GPU with one" in r.stdout
    assert "model models/miopen_fwd_bf16_gfx90a" in r.stdout and "not found" not in r.stdout + r.stderr


def test_a_device_is_an_arch_and_its_cu_count():
    """arch=gfx906 is MI50; arch.num_cus=64 makes it MI60 with MI60's clocks and peaks (so its
    hardware descriptors differ from MI50's); a count no device has keeps the arch's figures, not
    its product's name;
    RDNA2 runs waves of 32 and none of the three has matrix cores."""
    from ckheur.config import find_db_device, load_arch, load_option
    from ckheur.families.hardware import descriptors
    from ckheur.job import Job
    from ckheur.stages import compose_config

    mi50 = Job.from_config(compose_config(["op=miopen/fwd", "arch=gfx906"])).arch
    mi60 = Job.from_config(compose_config(["op=miopen/fwd", "arch=gfx906", "arch.num_cus=64"])).arch
    assert (mi50["product"], mi50["num_cus"], mi50["max_clock_mhz"]) == ("MI50", 60, 1725)
    assert (mi60["product"], mi60["num_cus"], mi60["max_clock_mhz"], mi60["peak_tflops"]["fp16"]) == \
        ("MI60", 64, 1800, 29.5)
    assert "devices" not in mi60 and not np.allclose(descriptors(mi50, "fp16"), descriptors(mi60, "fp16"))
    odd = Job.from_config(compose_config(["op=miopen/fwd", "arch=gfx906", "arch.num_cus=62"])).arch
    assert (odd["product"], odd["num_cus"], odd["max_clock_mhz"]) == ("gfx906", 62, 1725)
    assert find_db_device(load_option("arch/gfx90a"), 104)["product"] == "MI210"
    assert find_db_device(load_option("arch/gfx1030"), 36)["num_cus"] == 72  # HIP counts RDNA's WGPs
    assert find_db_device(load_option("arch/gfx906"), 56) is None
    for name in ("gfx900", "gfx906", "gfx1030"):
        cfg = load_arch(name)
        assert cfg["matrix_cores"] is False and cfg["wavefront_size"] == (32 if name == "gfx1030" else 64)
    assert load_arch("gfx90a")["matrix_cores"] is True

