"""Trust, round four (issue 48): every path Hydra writes is checked, readers give one line on any
bad input, benchmarks are bounded, report values are escaped, locks and multiruns cannot hang or
collide."""

from __future__ import annotations

import contextlib
import json
import lzma
import os
import re
import shutil
import signal
import time
from pathlib import Path

import pytest

from conftest import ROOT, run_cli
from test_trust import one_error, tree


@contextlib.contextmanager
def hang_guard(seconds: int = 30):
    """Fail instead of hanging forever (a FIFO opened for reading waits for a writer)."""
    def fail(*_):
        raise TimeoutError(f"still waiting after {seconds}s")

    old = signal.signal(signal.SIGALRM, fail)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _sticky(tmp_path: Path) -> Path:
    """A folder every user can write, with the sticky bit (as /tmp)."""
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    sticky.chmod(0o1777)
    return sticky


def _plant_link(at: Path, target: Path) -> None:
    """A link another user planted (as root: owned by uid 65534, as such a user would leave it)."""
    at.parent.mkdir(parents=True, exist_ok=True)
    at.symlink_to(target)
    if os.geteuid() == 0:
        os.lchown(at, 65534, 65534)


# ---------------------------------------------------------------- 2. every file Hydra writes
def test_hydra_never_writes_in_a_sticky_shared_folder_or_through_planted_links(tmp_path):
    """A run or sweep folder every user can write (sticky or not) is refused: another user can create
    .hydra, multirun.yaml or a job folder there first. Nothing is written through their links."""
    sticky = _sticky(tmp_path)
    victim = tmp_path / "victim"
    victim.write_text("root only\n")
    _plant_link(sticky / ".hydra" / "config.yaml", victim)
    _plant_link(sticky / "multirun.yaml", victim)
    _plant_link(sticky / "0" / ".hydra" / "overrides.yaml", victim)
    one_error(run_cli("stage=list", "list.count_only=true", f"hydra.run.dir={sticky}"),
              "run folder", f"{sticky} is writable by other users")
    one_error(run_cli("-m", "stage=list", "list.count_only=true", f"hydra.sweep.dir={sticky}"),
              "multirun folder", f"{sticky} is writable by other users")
    assert victim.read_text() == "root only\n"


def test_each_file_hydra_writes_is_checked_not_only_its_folder(tmp_path):
    """A link left inside the user's own run or sweep folder (a job folder's .hydra/overrides.yaml,
    multirun.yaml, .hydra/hydra.yaml) is refused, never written through."""
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    for key, rel in (("hydra.run.dir", ".hydra/hydra.yaml"), ("hydra.sweep.dir", "1/.hydra/overrides.yaml"),
                     ("hydra.sweep.dir", "multirun.yaml"), ("submitit", ".submitit")):
        folder = tmp_path / rel.replace("/", "_")
        _plant_link(folder / rel, victim)
        # job 1's folder needs two jobs; multirun.yaml and the launcher's folder are the multirun's own: one job
        extra = [] if key == "hydra.run.dir" else ["-m", "op=fwd,bwd_data" if rel.startswith("1/") else "op=fwd"]
        if key == "submitit":  # the launcher's own folder, in the multirun folder by default
            key, extra = "hydra.sweep.dir", [*extra, "hydra/launcher=submitit_local"]
        one_error(run_cli(*extra, "stage=list", "list.count_only=true", f"{key}={folder}"),
                  f"{folder / rel} is a symbolic link")
    assert victim.read_text() == "keep\n"
    if os.geteuid() == 0:  # a file another user left there (as root: made theirs)
        run = tmp_path / "theirs"
        (run / ".hydra").mkdir(parents=True)
        (run / ".hydra" / "overrides.yaml").write_text("theirs\n")
        os.chown(run / ".hydra" / "overrides.yaml", 65534, 65534)
        one_error(run_cli("stage=list", "list.count_only=true", f"hydra.run.dir={run}"),
                  f"{run / '.hydra' / 'overrides.yaml'} is owned by uid 65534")
        assert (run / ".hydra" / "overrides.yaml").read_text() == "theirs\n"


def test_multirun_jobs_that_would_share_a_folder_are_refused_before_any_runs(tmp_path):
    sweep = tmp_path / "sweep"
    one_error(run_cli("-m", "stage=list", "list.count_only=true", "op=fwd,bwd_data", f"hydra.sweep.dir={sweep}",
                      "hydra.sweep.subdir=same"), "hydra.sweep.subdir='same' for jobs 0 and 1")
    assert not sweep.exists()
    one_error(run_cli("-m", "stage=list", "list.count_only=true", "op=fwd,bwd_data", f"hydra.sweep.dir={sweep}",
                      "hydra.sweep.subdir=../out${hydra.job.num}"), "../out0 leads out of")
    assert not sweep.exists()


# ---------------------------------------------------------------- 6. one line on any bad input
BIG = "7" * 5000  # beyond Python's 4,300-digit limit on int() of a string


def test_numbers_of_any_length_are_one_line(tmp_path):
    from ckheur.families.grouped_conv import problems as conv
    from ckheur.problems import ProblemError
    from ckheur.problems.networks import read_miopen_log

    with pytest.raises(ProblemError, match=r"-n \(N\): the number 777777777777\.\.\. has 5,000 digits") as e:
        conv.from_text(f"convbfp16 -n {BIG} -c 64 -k 64 -H 14 -W 14 -y 3 -x 3")
    assert len(str(e.value)) < 400  # the line is quoted cut, not repeated whole
    with pytest.raises(ProblemError, match=r"\.\.\. \(5,052 characters\): unknown flag -Q") as e:
        conv.from_text(f"convbfp16 -Q {BIG} -n 2 -c 64 -k 64 -H 14 -W 14 -y 3 -x 3")
    log = tmp_path / "big.log"
    log.write_text("MIOpen(HIP): Command [LogCmdConvolution] ./bin/MIOpenDriver conv -n 2 -c "
                   f"{BIG} -H 9 -W 9 -k 8 -y 3 -x 3 -F 1\n")
    with pytest.raises(ProblemError, match=r"big.log line 1: .*-c \(C\): the number .* has 5,000 digits"):
        read_miopen_log(log, conv.from_text)


def _onnx_model(tmp_path: Path, node_kwargs: dict, name: str) -> Path:
    onnx = pytest.importorskip("onnx", reason="the ONNX importer needs the onnx package (the test extra installs it)")
    from onnx import helper

    f = onnx.TensorProto.FLOAT
    node = helper.make_node(**node_kwargs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", f, [1, 8, 9, 9]),
                                            helper.make_tensor_value_info("w", f, [16, 8, 3, 3])],
                              [helper.make_tensor_value_info("y", f, None)])
    path = tmp_path / f"{name}.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


@pytest.mark.parametrize("name,node,needle", [
    ("one_input", dict(op_type="Conv", inputs=["x"], outputs=["y"]), "1 input(s) and 1 output(s)"),
    ("no_output", dict(op_type="ConvTranspose", inputs=["x", "w"], outputs=[]), "2 input(s) and 0 output(s)"),
    ("float_kernel", dict(op_type="Conv", inputs=["x", "w"], outputs=["y"], kernel_shape=[3.0, 3.0]),
     "attribute kernel_shape is FLOATS; ONNX defines it as INTS"),
    ("string_group", dict(op_type="Conv", inputs=["x", "w"], outputs=["y"], group="x"),
     "attribute group is STRING; ONNX defines it as INT"),
    ("numeric_string_group", dict(op_type="Conv", inputs=["x", "w"], outputs=["y"], group="2"),
     "attribute group is STRING"),
    ("bad_auto_pad", dict(op_type="Conv", inputs=["x", "w"], outputs=["y"], auto_pad="SAME_MIDDLE"),
     "auto_pad='SAME_MIDDLE'; allowed"),
])
def test_malformed_onnx_is_one_line(tmp_path, name, node, needle):
    from ckheur.problems import ProblemError
    from ckheur.problems.networks import onnx_layers

    path = _onnx_model(tmp_path, node, name)
    with pytest.raises(ProblemError, match=r"node 0 \(Conv(Transpose)?\)") as e:
        onnx_layers(path)
    assert needle in str(e.value)


def test_fifos_and_devices_given_as_files_are_refused_without_waiting(tmp_path):
    from ckheur.families import get_family
    from ckheur.files import NotRegularFileError
    from ckheur.problems.sources import load_source

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with hang_guard():
        one_error(run_cli("stage=list", "list.count_only=true", "op=miopen/fwd", "op.dtype=fp32", "arch=gfx942",
                          "problems=miopen_log", f"problems.sources.0.path={fifo}"),
                  f"problem source kind=miopen_log path {fifo} is a FIFO, not a regular file")
        for kind in ("csv", "onnx", "miopen_log"):
            for path, what in ((fifo, "a FIFO"), ("/dev/zero", "a character device"), (tmp_path, "a folder")):
                with pytest.raises(NotRegularFileError, match=f"kind={kind} path {path} is {what}, not a regular"):
                    load_source({"kind": kind, "path": str(path)}, None, get_family("miopen"), "fwd", "fp32")


def test_compressed_and_plain_readers_refuse_a_fifo(tmp_path):
    from ckheur.files import NotRegularFileError, read_compressed
    from ckheur.integrations.miopen.find_db import FindDbError, read_find_db

    for name in ("f.csv", "f.csv.gz", "f.find.db.xz"):
        os.mkfifo(tmp_path / name)
        with hang_guard(), pytest.raises(NotRegularFileError, match="is a FIFO, not a regular file"):
            read_compressed(tmp_path / name)
    os.mkfifo(tmp_path / "gfx90a68.HIP.fdb.txt")
    for name, what in (("gfx90a68.HIP.fdb.txt", "is a FIFO, not a regular file"), ("", "is a folder"),
                       ("gfx942130.HIP.fdb.txt", "not found")):
        with hang_guard(), pytest.raises(FindDbError, match=f"^find-db {tmp_path / name} {what}"):
            read_find_db(tmp_path / name)


def test_nan_in_an_integer_column_names_its_line(tmp_path):
    from ckheur.families import get_family
    from ckheur.problems import ProblemError
    from ckheur.problems.sources import read_csv

    path = tmp_path / "p.csv"
    path.write_text("N,C,K,Hi,Wi,Y,X\n2,8,8,9,9,3,3\n2,8,nan,9,9,3,3\n")
    with pytest.raises(ProblemError, match="p.csv line 3: column K is empty or NaN"):
        read_csv(path, get_family("grouped_conv"))


@pytest.mark.parametrize("index,value,needle", [(-2, "NCWH", "layout='NCWH' (allowed: NCHW"), (2, float("nan"), "K=nan")])
def test_a_remembered_key_that_is_no_problem_is_refused_at_load(tmp_path, index, value, needle):
    """A bundle's remembered answers hold problem keys: an unknown layout crashed the export."""
    from ckheur.learn.bundle import BundleError, load_bundle

    bundle = tmp_path / "b"
    shutil.copytree(ROOT / "models" / "miopen_bwd_weight_bf16_gfx942", bundle)
    path = bundle / "answers.json.xz"
    doc = json.loads(lzma.decompress(path.read_bytes()))
    doc["keys"][0][index] = value
    path.write_bytes(lzma.compress(json.dumps(doc).encode()))
    with pytest.raises(BundleError, match="answers.json.xz: a remembered problem has") as e:
        load_bundle(bundle)
    assert needle in str(e.value)


# ---------------------------------------------------------------- 5. bounded benchmarks
def _shell_bench(tmp_path: Path, script: str, **settings):
    """backend=command running ``sh script {N}`` (the problem's batch size picks the behaviour) for
    the grouped-conv forward op on gfx950, and two pairs (N=1, N=2)."""
    from ckheur.backends import make_backend
    from ckheur.config import load_option
    from test_untrusted_data import P0, make_pair

    path = tmp_path / "bench.sh"
    path.write_text(script)
    problem, kernel = make_pair()
    pairs = [(problem, kernel), (type(problem)(**{**problem.to_dict(), "N": 2}), kernel)]
    cfg = {**load_option("backend/command"), "regex": r"time=(\S+)", "workspace_regex": None,
           "template": f"sh {path} {{N}}", **settings}
    assert pairs[0][0].N == P0["N"] == 1
    return make_backend(cfg, load_option("op/grouped_conv/fwd"), load_option("arch/gfx950")), pairs


def test_a_flood_of_output_is_a_failure_record_and_the_batch_is_kept(tmp_path, monkeypatch):
    from ckheur.backends import command

    monkeypatch.setattr(command, "OUTPUT_LIMIT_BYTES", 1 << 20)
    measurer, pairs = _shell_bench(tmp_path, 'if [ "$1" = 1 ]; then head -c 5000000 /dev/zero | tr "\\0" x; fi\n'
                                             'echo time=0.5\n')
    got = measurer.measure(pairs)
    assert got.status == ["failed", "ok"] and got.latency_ms[1] == 0.5, (got.status, got.error)
    assert "printed more than 1,048,576 bytes" in got.error[0]


def _gone(pid: int) -> bool:
    from test_untrusted_data import _alive

    for _ in range(100):  # generous: the kill is immediate, reaping by init may take a moment
        if not _alive(pid):
            return True
        time.sleep(0.02)
    os.kill(pid, signal.SIGKILL)
    return False


@pytest.mark.skipif(shutil.which("setsid") is None, reason="needs the setsid program")
def test_setsid_grandchildren_do_not_outlive_the_benchmark(tmp_path):
    """A child in a session of its own leaves the process group: it is still found and killed, at
    the timeout (it hangs) and when the benchmark exits leaving it holding the output pipe."""
    pid_file = tmp_path / "grandchild.pid"
    measurer, pairs = _shell_bench(tmp_path, f"""
if [ "$1" = 1 ]; then setsid sleep 30 >/dev/null 2>&1 </dev/null & echo $! > {pid_file}.1; sleep 30; fi
setsid sleep 30 </dev/null & echo $! > {pid_file}.2
echo time=0.5
""", timeout_s=2)
    got = measurer.measure(pairs)
    assert got.status == ["timeout", "ok"], (got.status, got.error)
    assert _gone(int(Path(f"{pid_file}.1").read_text())), "a setsid grandchild outlived the timeout"
    assert _gone(int(Path(f"{pid_file}.2").read_text())), "a setsid grandchild outlived its benchmark"


# ---------------------------------------------------------------- 8. reports
HOSTILE = "=HYPERLINK(\"http://x\")|<img src=x>`[a](b)`\n# h"


def test_layer_names_are_escaped_in_markdown_and_neutralised_in_csv(tmp_path):
    import csv

    onnx = pytest.importorskip("onnx", reason="the ONNX importer needs the onnx package (the test extra installs it)")
    path = _onnx_model(tmp_path, dict(op_type="Conv", inputs=["x", "w"], outputs=["y"], name=HOSTILE,
                                      pads=[1, 1, 1, 1]), "hostile")
    assert onnx.load(str(path)).graph.node[0].name == HOSTILE
    out = tmp_path / "run"
    r = run_cli("stage=report", "op=miopen/fwd", "op.dtype=fp32", "arch=gfx942", "problems=onnx",
                f"problems.sources.0.path={path}", f"hydra.run.dir={out}")
    assert r.returncode == 0, r.stderr
    md = (out / "network_report.md").read_text()
    row = next(ln for ln in md.splitlines() if "HYPERLINK" in ln)
    assert row.count(" | ") == 11 and "\\|\\<img" in row and "\\`\\[a\\](b)\\`" in row, row
    assert not re.search(r"(?<!\\)[<>|\[]", row.split(" | ")[3]), row  # nothing unescaped in the names cell
    assert not any(ln.startswith("# h") for ln in md.splitlines())
    with open(out / "network_layers.csv", newline="") as f:
        layer = next(csv.DictReader(f))
    names = json.loads((out / "network_report.json").read_text())["layers"][0]["names"]
    assert names.startswith("=HYPERLINK") and layer["names"] == "'" + names  # a spreadsheet shows it, never runs it


def _measurements(rows):
    import pandas as pd

    base = {"N": 1, "C": 128, "K": 256, "G": 1, "Di": 1, "Hi": 32, "Wi": 32, "Z": 1, "Y": 2, "X": 2, "stride_d": 1,
            "stride_h": 2, "stride_w": 2, "pad_d": 0, "pad_h": 0, "pad_w": 0, "dilation_d": 1, "dilation_h": 1,
            "dilation_w": 1, "arch": "gfx950", "dtype": "bf16"}
    return pd.DataFrame([{**base, "kernel": k, "status": s, "tflops": t} for k, s, t in rows])


def test_evaluation_data_with_nan_or_conflicting_repeats_is_refused_and_repeats_follow_a_stated_rule():
    from ckheur.evaluation.scoring import REPEATS_RULE, EvaluationError, group_by_problem
    from ckheur.families import get_family

    family = get_family("grouped_conv")
    got = group_by_problem(_measurements([("a", "ok", 10.0), ("b", "failed", float("nan")), ("a", "ok", 12.0),
                                          ("b", "ok", 20.0), ("c", "ok", 5.0)]), family)
    assert got.repeated == 2 and len(got.keys) == 1
    assert dict(zip(got.kernels, got.tflops)) == {"a": 11.0, "b": 20.0, "c": 5.0}  # median; a failure beside a time
    assert "median" in REPEATS_RULE
    with pytest.raises(EvaluationError, match=r"kernel a .* measured 2 times, 10 to 30 TFLOPS \(more than 2x apart"):
        group_by_problem(_measurements([("a", "ok", 10.0), ("a", "ok", 30.0)]), family)
    with pytest.raises(EvaluationError, match=r"1 row\(s\) .* status ok but tflops nan .* kernel b"):
        group_by_problem(_measurements([("a", "ok", 10.0), ("b", "ok", float("nan"))]), family)


# ---------------------------------------------------------------- 7. locks are not waited on forever
def test_a_held_find_db_lock_is_waited_on_for_a_bounded_time(tmp_path, monkeypatch):
    import fcntl

    from ckheur import files
    from ckheur.integrations.miopen.find_db import merge_find_db, parse_line
    from test_trust import FWD_LINE

    monkeypatch.setattr(files, "LOCK_WAIT_S", 0.3)
    path = tmp_path / "gfx942130.HIP.fdb.txt"
    lock = tmp_path / f"{path.name}.lock"
    lock.touch(mode=0o644)
    if os.geteuid() == 0:
        os.chown(lock, 65534, 65534)  # planted by another user, who holds it
    held = os.open(lock, os.O_RDONLY)
    fcntl.flock(held, fcntl.LOCK_EX)
    try:
        with hang_guard(), pytest.raises(files.LockTimeoutError, match=f"lock file {lock} .* held by another process; "
                                                                         r"waited 0.3s"):
            merge_find_db(path, [parse_line(FWD_LINE)])
        assert not path.exists()
    finally:
        os.close(held)
    assert merge_find_db(path, [parse_line(FWD_LINE)])["added"] == 1  # released: the merge goes on


def test_imports_of_one_name_take_turns(tmp_path, monkeypatch):
    """Two imports of one dataset name at once both planned against the same empty folder and mixed
    two files' rows under one record: an import holds its name's lock from planning to commit."""
    import fcntl

    from ckheur import files
    from ckheur.config import load_option
    from ckheur.data.importing import import_file
    from test_trust import FWD_LINE

    monkeypatch.setattr(files, "LOCK_WAIT_S", 0.3)
    src, data = tmp_path / "gfx942130.HIP.fdb.txt", tmp_path / "data"
    src.write_text(FWD_LINE + "\n")
    data.mkdir()
    lock = data / ".gfx942130.import.lock"
    held = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)  # another import of the name, mid-way
    fcntl.flock(held, fcntl.LOCK_EX)
    args = dict(data_root=data, op=load_option("op/miopen/fwd"), arch=load_option("arch/gfx942"), log=lambda _: None)
    try:
        with hang_guard(), pytest.raises(files.LockTimeoutError, match="import of gfx942130: the lock file"):
            import_file(src, **args)
        assert tree(data) == [lock.name]
    finally:
        os.close(held)
    import_file(src, **args)
    assert not lock.exists() and (data / "miopen_fwd_fp16_gfx942" / "gfx942130.parquet").is_dir()
