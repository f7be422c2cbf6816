"""Data from outside is checked, never trusted: a benchmark command's output (times, bytes,
its processes), the rows a tuning database answers with, MIOpenDriver lines, and an overwrite
import that a kill cannot empty."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import ROOT

SHIPPED = "models/grouped_conv_fwd_bf16_gfx950"
P0 = {"N": 1, "C": 128, "K": 256, "Hi": 32, "Wi": 32, "Y": 2, "X": 2, "stride_h": 2, "stride_w": 2}
# A stand-in benchmark: prints what its first argument names (as raw bytes), or misbehaves.
FAKE_BENCHMARK = r'''
import os, subprocess, sys, time
mode = sys.argv[1]
if mode == "spawn":  # a hang that started a child of its own, detached from the output pipes
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with open(sys.argv[2], "w") as f:
        f.write(str(child.pid))
    time.sleep(120)
sys.stdout.buffer.write(bytes.fromhex(mode))
'''


@pytest.fixture
def fake_bench(tmp_path):
    """backend=command for the grouped-conv forward op on gfx950, running FAKE_BENCHMARK, and one
    (problem, kernel) pair: ``run(output_bytes, **settings) -> Results``."""
    from ckheur.backends import make_backend
    from ckheur.config import load_option

    script = tmp_path / "fake_benchmark.py"
    script.write_text(FAKE_BENCHMARK)
    op, arch = load_option("op/grouped_conv/fwd"), load_option("arch/gfx950")
    pair = make_pair()
    base = {**load_option("backend/command"), "regex": r"time=(\S+)", "workspace_regex": None,
            "template": f"{shlex.quote(sys.executable)} -S {shlex.quote(str(script))} {{mode}}"}

    class Run:
        cfg = base

        def make(self, **settings):
            return make_backend({**base, **settings}, op, arch)

        def __call__(self, output: bytes, **settings):
            cfg = {**base, **settings}
            cfg["template"] = cfg["template"].replace("{mode}", output.hex())
            return make_backend(cfg, op, arch).measure([pair])

    return Run()


# ---------------------------------------------------------------- benchmark output
@pytest.mark.parametrize("value,needle", [
    ("1e-9", "above the gfx950 peak"), ("nan", "positive number"), ("inf", "positive number"),
    ("-1", "positive number"), ("0", "positive number"),
])
def test_impossible_times_are_failures_with_the_reason(fake_bench, value, needle):
    got = fake_bench(f"time={value}\n".encode())
    assert got.status == ["failed"] and needle in got.error[0], got.error
    assert fake_bench(b"time=0.5\n").status == ["ok"]  # a real time stays a measurement


def test_output_that_is_not_utf8_is_read_with_replacement(fake_bench):
    got = fake_bench(b"\xff\xfe garbage \xc3( time=0.5\n")
    assert got.status == ["ok"] and got.latency_ms == [0.5]
    failed = fake_bench(b"\xff no time here\n")
    assert failed.status == ["failed"] and "\ufffd" in failed.error[0]


@pytest.mark.parametrize("output", [b"ws=\xef\xbc\x91\xef\xbc\x96", b"ws=\xc2\xb2", b"ws=1_6", b"ws=" + b"9" * 30])
def test_workspace_values_are_ascii_integers_within_bounds(fake_bench, output):
    """Full-width digits, a superscript two, an underscore and 10^30 bytes are not workspaces."""
    got = fake_bench(b"time=0.5 " + output + b"\n", workspace_regex=r"ws=(\S+)")
    assert got.status == ["failed"] and "workspace" in got.error[0]
    ok = fake_bench(b"time=0.5 ws=4096\n", workspace_regex=r"ws=(\S+)")
    assert ok.status == ["ok"] and ok.workspace_bytes == [4096]


def _alive(pid: int) -> bool:
    """Whether a process still runs (a zombie waiting for its reaper has ended)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


def test_a_timeout_kills_the_benchmarks_whole_process_group(fake_bench, tmp_path):
    pid_file = tmp_path / "grandchild.pid"
    measurer = fake_bench.make(template=fake_bench.cfg["template"].replace("{mode}", f"spawn {pid_file}"), timeout_s=5)
    got = measurer.measure([make_pair()])
    assert got.status == ["timeout"]
    grandchild = int(pid_file.read_text())
    try:
        for _ in range(200):  # generous: the kill is immediate, reaping by init may take a moment
            if not _alive(grandchild):
                break
            time.sleep(0.05)
        assert not _alive(grandchild), "the benchmark's child outlived the timeout"
    finally:
        if _alive(grandchild):
            os.kill(grandchild, signal.SIGKILL)


def make_pair():
    """One (problem, kernel) pair of the grouped-conv forward op on gfx950."""
    from ckheur.config import load_option
    from ckheur.job import Job

    job = Job(load_option("op/grouped_conv/fwd"), load_option("arch/gfx950"))
    return job.family.problems.problem_from_dict(P0), job.pool.kernels[0]


@pytest.mark.parametrize("settings,needles", [
    ({"template": "bench {N"}, ("backend.template",)),
    ({"template": "bench }"}, ("backend.template",)),
    ({"template": "bench {N.x}"}, ("backend.template",)),
    ({"template": "bench {N[0]}"}, ("backend.template",)),
    ({"template": "bench 'unbalanced {N}"}, ("backend.template", "cannot be split like a shell line")),
    ({"template": "   "}, ("backend.template",)),
    ({"timeout_s": "abc"}, ("backend.timeout_s='abc'", "a number > 0")),
    ({"timeout_s": -1}, ("backend.timeout_s=-1",)),
    ({"timeout_s": 0}, ("backend.timeout_s=0",)),
    ({"timeout_s": float("nan")}, ("backend.timeout_s=nan",)),
    ({"timeout_s": 1e300}, ("at most",)),
    ({"batch_pairs": 0}, ("backend.batch_pairs=0", "an integer > 0")),
    ({"batch_pairs": "x"}, ("backend.batch_pairs='x'",)),
    ({"batch_pairs": 1.5}, ("backend.batch_pairs=1.5",)),
])
def test_bad_settings_are_one_backend_error(fake_bench, settings, needles):
    from ckheur.backends import BackendError

    with pytest.raises(BackendError) as e:
        fake_bench.make(**settings).measure([make_pair()])
    assert "\n" not in str(e.value)
    for n in needles:
        assert n in str(e.value), (n, str(e.value))


def test_tune_records_impossible_times_as_failures_and_never_serves_them(fake_bench, tmp_path):
    """Through stage=tune's code path: every attempt is recorded, failed with the reason, and the
    tuning database answers nothing for the problem."""
    from ckheur import Selector
    from ckheur.data.dataset import read_dataset
    from ckheur.job import Job
    from ckheur.config import load_option
    from ckheur.sweeping.tuning import tune

    cmd = {**fake_bench.cfg, "template": fake_bench.cfg["template"].replace("{mode}", b"time=1e-9".hex())}
    sel = Selector.load(SHIPPED)
    job = Job(load_option("op/grouped_conv/fwd"), load_option("arch/gfx950"))
    p = job.family.problems.problem_from_dict(P0)
    summary = tune(sel, [p], tmp_path / "db", job, backend=cmd, top_k=2, progress="none", log=lambda _: None)
    rows = read_dataset(tmp_path / "db")
    assert len(rows) >= 2 and (rows.status == "failed").all()
    assert rows.error.str.contains("not a real measurement").all()
    assert summary["problems_tuned"] == 0
    assert Selector.load(SHIPPED, tuning_db=tmp_path / "db").select(P0).source == "model"


def test_a_benchmark_not_installed_stops_the_run_and_spends_no_attempt(fake_bench, tmp_path):
    """backend.template's program does not exist (MIOpenDriver not installed): one BackendError naming
    it at the first pair, never a failed row per pair; through stage=tune's job queue the jobs go back
    unspent, so the run with the program installed measures them. A program per kernel
    (benchmark_{kernel}) that is missing is that pair's failure, as before."""
    from ckheur import Selector
    from ckheur.backends import BackendError
    from ckheur.config import load_option
    from ckheur.job import Job
    from ckheur.sweeping.tuning import tune

    absent = tmp_path / "not_installed"
    with pytest.raises(BackendError, match=f"backend.template: cannot run {absent} \\(No such file"):
        fake_bench.make(template=f"{absent} {{N}}").measure([make_pair()])
    res = fake_bench.make(template=f"{absent}_{{kernel}} {{N}}").measure([make_pair()])
    assert res.status == ["failed"] and res.error[0].startswith(f"cannot run {absent}_")
    sel = Selector.load(SHIPPED)
    job = Job(load_option("op/grouped_conv/fwd"), load_option("arch/gfx950"))
    p, db = job.family.problems.problem_from_dict(P0), f"sqlite:///{tmp_path / 'tune.db'}"
    with pytest.raises(BackendError, match="cannot run"):
        tune(sel, [p], db, job, backend={**fake_bench.cfg, "template": f"{absent} {{N}}"}, top_k=2,
             progress="none", log=lambda _: None)
    installed = {**fake_bench.cfg, "template": fake_bench.cfg["template"].replace("{mode}", b"time=1".hex())}
    summary = tune(sel, [p], db, job, backend=installed, top_k=2, progress="none", log=lambda _: None)
    assert summary["problems_tuned"] == 1


# ---------------------------------------------------------------- the tuning database tier
def test_the_tuning_database_answers_only_valid_rows_of_the_pool(tmp_path):
    """Rows another tool (or an older version) wrote: an impossible time and a kernel outside the
    pool are never the answer; the fastest valid measurement of the pool is."""
    from ckheur import Selector
    from ckheur.backends import Results
    from ckheur.data.dataset import read_dataset, write_part

    sel = Selector.load(SHIPPED, tuning_db=tmp_path / "db", create_tuning_db=True)
    p = sel.family.problems.problem_from_dict(P0)
    a, b = sel.rank(P0, k=2)
    res = Results()
    res.add(0.05)
    res.add(0.06)
    kernels = {k.name: k for k in sel.kernels}
    sel.tuning_db.record(p, [kernels[a.kernel], kernels[b.kernel]], res)
    rows = read_dataset(tmp_path / "db")
    assert sorted(rows.status) == ["ok", "ok"]
    later = "9999-01-01T00:00:00.000000+00:00"  # newer than every real row: the planted ones win by age
    planted = rows[rows.kernel == a.kernel].assign(latency_ms=1e-9, tflops=1e6, timestamp=later)
    outside = rows[rows.kernel == b.kernel].assign(kernel="not_a_kernel_of_the_pool", latency_ms=0.01,
                                                   timestamp=later)
    write_part(tmp_path / "db", planted)
    write_part(tmp_path / "db", outside)
    fresh = Selector.load(SHIPPED, tuning_db=tmp_path / "db")
    got = fresh.select(P0)
    assert (got.source, got.kernel, got.latency_ms) == ("tuning_db", b.kernel, pytest.approx(0.06))


def test_rows_stored_as_ok_beyond_the_peak_are_not_measurements():
    """What training, evaluation and the find-db export count as measured: never a row an older
    version or another tool stored as ok with an impossible time."""
    import pandas as pd

    from ckheur.data.dataset import usable

    rows = pd.DataFrame({"arch": "gfx942", "dtype": ["fp16", "fp16", "fp16", "fp32", "fp16"],
                         "status": ["ok", "ok", "ok", "ok", "failed"],
                         "tflops": [1000.0, 1e6, float("inf"), 1000.0, 100.0]})
    # fp16 peak 1307.4, fp32 163.4 TFLOPS on gfx942: 1000 is possible in fp16 only.
    assert usable(rows).tolist() == [True, False, False, False, False]


# ---------------------------------------------------------------- driver lines
BASE = "convbfp16 -n 16 -c 64 -k 64 -H 14 -W 14 -y 3 -x 3 -p 1 -q 1"


@pytest.mark.parametrize("line,needles", [
    (BASE.replace("-n 16", "-n 1_6"), ("-n (N) must be an integer", "'1_6'", "ASCII digits")),
    (BASE.replace("-n 16", "-n １６"), ("-n (N) must be an integer", "ASCII digits")),
    (BASE.replace("-c 64", "-c ٦٤"), ("-c (C) must be an integer",)),
    (BASE + " -I NHWC -O NCHW", ("mixed tensor layouts", "-I (--in_layout) NHWC", "-O (--out_layout) NCHW")),
    (BASE + " -I NHWC -O NHWC -f NCHW", ("mixed tensor layouts", "-f (--fil_layout) NCHW")),
])
def test_driver_line_numbers_and_layouts_are_strict(line, needles):
    from ckheur.families.problem_base import ProblemError
    from ckheur.families.grouped_conv.problems import from_text
    from ckheur.families.miopen.problems import from_text as miopen_from_text

    for parse, text in ((from_text, line), (miopen_from_text, line.replace("convbfp16", "convfp16"))):
        with pytest.raises(ProblemError) as e:
            parse(text, "fwd", "bf16" if parse is from_text else "fp16")
        for n in needles:
            assert n in str(e.value), (n, str(e.value))
    same = miopen_from_text(BASE.replace("convbfp16", "convfp16") + " -I NHWC -O NHWC -f NHWC", "fwd", "fp16")
    assert same.layout == "NHWC"


def test_problem_fields_given_as_text_are_ascii_integers():
    from ckheur.problems import problem_from_dict
    from ckheur.families.problem_base import ProblemError

    assert problem_from_dict({**P0, "N": "4"}).N == 4
    for text in ("１６", "1_6", "٤"):
        with pytest.raises(ProblemError, match="must be an integer"):
            problem_from_dict({**P0, "N": text})


# ---------------------------------------------------------------- imports under a kill
FWD_LINE = ("256-56-56-3x3-256-56-56-32-1x1-1x1-1x1-0-NCHW-FP16-F_g32=ConvBinWinogradRxSf2x3:0.22021,0,"
            "miopenConvolutionFwdAlgoWinograd;ConvHipImplicitGemmGroupFwdXdlops:0.877855,102797312,"
            "miopenConvolutionFwdAlgoImplicitGEMM")
BWD_LINE = ("64-28-28-3x3-32-56-56-8-1x1-2x2-1x1-0-NCHW-FP16-B=GemmBwdRest:0.5,100,miopenConvolutionBwdDataAlgoGEMM;"
            "ConvDirectNaiveConvBwd:0.25,0,miopenConvolutionBwdDataAlgoDirect")
# Imports a find-db with overwrite in a child process that SIGKILLs itself at a point: "staging"
# (as the first new part is written), "exchange" (right after the first dataset traded places with
# its staged replacement), "aside" (right after the first replaced dataset is renamed aside) or
# "renames" (the same where folders cannot trade places atomically).
KILLED_IMPORT = '''
import os, signal, sys
from ckheur.data import dataset, importing
from ckheur.config import load_option
src, data, point = sys.argv[1:4]
def die():
    os.kill(os.getpid(), signal.SIGKILL)
if point == "staging":
    dataset.write_part = lambda *a, **k: die()
elif point == "exchange":
    exchange = importing._exchange
    importing._exchange = lambda a, b: exchange(a, b) and die()
else:
    if point == "renames":  # a system without an atomic exchange: two renames
        importing._exchange = lambda a, b: False
    rename = os.rename
    def rename_then_die(a, b, *rest, **kw):
        rename(a, b, *rest, **kw)
        if ".replaced-" in str(b):
            die()
    os.rename = rename_then_die
importing.import_file(src, data_root=data, op={}, arch=load_option("arch/gfx942"), overwrite=True, log=print)
'''


def test_an_overwrite_import_killed_at_any_point_leaves_complete_datasets(tmp_path):
    from ckheur.config import load_option
    from ckheur.data.dataset import read_dataset
    from ckheur.data.importing import import_file

    arch = load_option("arch/gfx942")
    src, data = tmp_path / "gfx942130.HIP.fdb.txt", tmp_path / "data"
    fwd = data / "miopen_fwd_fp16_gfx942" / "gfx942130.parquet"
    bwd = data / "miopen_bwd_data_fp16_gfx942" / "gfx942130.parquet"
    src.write_text(FWD_LINE + "\n" + BWD_LINE + "\n")
    import_file(src, data_root=data, op={}, arch=arch, log=lambda _: None)
    old = {d: read_dataset(d).sort_values(["kernel", "N"]).reset_index(drop=True) for d in (fwd, bwd)}
    src.write_text(FWD_LINE.replace("0.22021", "0.29") + "\n" + BWD_LINE.replace(":0.25,", ":0.34,") + "\n")

    def killed_at(point: str) -> str:
        r = subprocess.run([sys.executable, "-c", textwrap.dedent(KILLED_IMPORT), str(src), str(data), point],
                           cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert r.returncode == -signal.SIGKILL, r.stderr[-2000:]
        return r.stdout

    # Killed while writing: the old datasets are in place, whole; the unfinished staging folder is
    # never read as data, and the next import removes it.
    killed_at("staging")
    for d, frame in old.items():
        assert read_dataset(d).sort_values(["kernel", "N"]).reset_index(drop=True).equals(frame)
    assert list(fwd.parent.glob(".gfx942130.parquet.staging-*"))
    # Killed in the swap, at its worst points: every dataset reads back whole, old or new, and the
    # next import removes a stale staging folder, completes the commit and keeps the old ones aside.
    before = (0.22021, 0.25)
    for n, (point, times) in enumerate((("exchange", (0.3, 0.35)), ("aside", (0.31, 0.36)),
                                        ("renames", (0.32, 0.37)))):
        src.write_text(FWD_LINE.replace("0.22021", str(times[0])) + "\n" +
                       BWD_LINE.replace(":0.25,", f":{times[1]},") + "\n")
        assert "removed" in killed_at(point) or n > 0
        for d in (fwd, bwd):  # (with two renames, the first dataset is absent until the next import)
            if point != "renames" or d.exists():
                now = read_dataset(d)
                assert len(now) == len(old[d]) and (now.status == "ok").sum() == (old[d].status == "ok").sum()
        said = []
        import_file(src, data_root=data, op={}, arch=arch, overwrite=True, log=said.append)
        assert any("completed an overwrite" in s for s in said), said
        assert not list(data.glob("*/.gfx942130.parquet.staging-*"))
        assert not list(data.glob("*/gfx942130.parquet/.staged"))
        for d in (fwd, bwd):
            new = read_dataset(d)
            assert len(new) == len(old[d]) and (new.status == "ok").sum() == (old[d].status == "ok").sum()
            assert not new.latency_ms.isin(before).any() and new.latency_ms.isin(times).any()
        kept = [read_dataset(p) for p in fwd.parent.glob("gfx942130.parquet.replaced-*")]
        assert len(kept) == n + 1 and any(k.latency_ms.isin([before[0]]).any() for k in kept)
        before = times


@pytest.mark.parametrize("key", ["256-56-56-3x3-256-56-56-32-1x1-1x1-1x1-\u0660-NCHW-FP16-F_g32",
                                 "256-56-56-3x3-256-56-56-32-1x1-1x1-1x1-0-NCHW-FP16-F_g\uff13\uff12"])
def test_find_db_keys_take_ascii_digits_only(key):
    """A bias or group count written in other scripts' digits is not a number of this key."""
    from ckheur.integrations.miopen.find_db import FindDbError, parse_line

    with pytest.raises(FindDbError, match="find-db key"):
        parse_line(key + "=ConvBinWinogradRxSf2x3:0.22021,0,miopenConvolutionFwdAlgoWinograd")
