"""What ckheur promises a careless or hostile user: imports are transactions, bad lines and files
are refused with one line, names stay names, nothing is written through a link or into a folder
another user can change, databases have one owner, and a failed multirun job is reported."""

from __future__ import annotations

import bz2
import json
import os
import re
from pathlib import Path

import pytest

from conftest import ROOT, import_as_stage, run_cli

MI300X = ROOT / "tests" / "data" / "miopen_fdb" / "gfx942130.HIP.fdb.txt.bz2"
FWD_LINE = ("256-56-56-3x3-256-56-56-32-1x1-1x1-1x1-0-NCHW-FP16-F_g32=ConvBinWinogradRxSf2x3:0.22021,0,"
            "miopenConvolutionFwdAlgoWinograd;ConvHipImplicitGemmGroupFwdXdlops:0.877855,102797312,"
            "miopenConvolutionFwdAlgoImplicitGEMM")
BWD_LINE = ("64-28-28-3x3-32-56-56-8-1x1-2x2-1x1-0-NCHW-FP16-B=GemmBwdRest:0.5,100,miopenConvolutionBwdDataAlgoGEMM;"
            "ConvDirectNaiveConvBwd:0.25,0,miopenConvolutionBwdDataAlgoDirect")


def one_error(r, *needles, code=2):
    """Exit 2, one error line naming what is wrong, no traceback."""
    assert r.returncode == code, (r.returncode, r.stdout[-500:], r.stderr[-2000:])
    assert "Traceback" not in r.stderr and "HYDRA_FULL_ERROR" not in r.stderr, r.stderr
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1, r.stderr
    for n in needles:
        assert n in errors[0], (n, errors[0])


def import_fdb(tmp_path, path, *extra, run="r"):
    return run_cli("stage=import", f"import.path={path}", f"paths.data={tmp_path / 'data'}",
                   f"hydra.run.dir={tmp_path / run}", *extra)


def tree(folder: Path) -> list[str]:
    """Every file and folder below ``folder``, relative, sorted."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")) if folder.exists() else []


# ---------------------------------------------------------------- imports are transactions
def test_find_db_import_is_all_or_nothing(tmp_path):
    """A refused import writes no direction; overwrite replaces every dataset the old file wrote,
    keeps them aside, and carries over what other files contributed; two overwrites in one second.
    The refusal through the command line (one line, exit 2), the rest through the function it calls."""
    from ckheur.errors import UserError

    src = tmp_path / "gfx942130.HIP.fdb.txt"
    src.write_text(FWD_LINE + "\n" + BWD_LINE + "\n")
    import_as_stage(src, tmp_path / "data")
    data = tmp_path / "data"
    fwd, bwd = data / "miopen_fwd_fp16_gfx942" / "gfx942130.parquet", data / "miopen_bwd_data_fp16_gfx942" / "gfx942130.parquet"
    assert fwd.is_dir() and bwd.is_dir()
    # Another file of that name: the same forward line, and a new backward-weights one. Refused before
    # anything is written: neither the new bwd_weight dataset nor a part in fwd appears.
    before = tree(data)
    wrw = "16-8-8-3x3-8-8-8-2-1x1-1x1-1x1-0-NCHW-FP16-W=ConvDirectNaiveConvWrw:0.5,0,miopenConvolutionBwdWeightsAlgoDirect"
    src.write_text(FWD_LINE + "\n" + wrw + "\n")
    one_error(import_fdb(tmp_path, src, run="r2"), "another file named gfx942130.HIP.fdb.txt", "nothing was written")
    assert tree(data) == before
    # A second source in the fwd dataset (import.dataset names it), to be carried over.
    other = tmp_path / "other" / "gfx942130.HIP.fdb.txt"
    other.parent.mkdir()
    other.write_text(FWD_LINE.replace("-32-1x1-1x1", "-16-1x1-1x1") + "\n")
    with pytest.raises(UserError):  # same name: refused
        import_as_stage(other, tmp_path / "data", dataset="gfx942130")
    other2 = tmp_path / "other" / "extra.HIP.fdb.txt"
    other2.write_text(FWD_LINE.replace("-32-1x1-1x1", "-16-1x1-1x1") + "\n")
    import_as_stage(other2, tmp_path / "data", dataset="gfx942130", find_db_arch="gfx942")
    # Overwrite: the old file's bwd_data dataset goes aside entirely (the new file has none), fwd is
    # rebuilt with the other file's part and the new one; twice within the same second.
    from ckheur.data.dataset import read_dataset

    for time in ("0.5", "0.6"):  # two versions, replaced within the same second
        src.write_text(FWD_LINE + "\n" + wrw.replace(":0.5,", f":{time},") + "\n")
        import_as_stage(src, tmp_path / "data", overwrite=True)
        assert not bwd.exists() and (data / "miopen_bwd_weight_fp16_gfx942" / "gfx942130.parquet").is_dir()
        df = read_dataset(fwd)
        assert sorted(set(df.N)) == [16, 32]  # the other file's problem (N=16) and this file's (N=32)
        record = json.loads((fwd / "imports.json").read_text())
        assert sorted(v["source"] for v in record.values()) == ["extra.HIP.fdb.txt", "gfx942130.HIP.fdb.txt"]
    assert len(list(bwd.parent.glob("gfx942130.parquet.replaced-*"))) == 1
    assert len(list(fwd.parent.glob("gfx942130.parquet.replaced-*"))) == 2
    assert len(list(fwd.parent.parent.glob("miopen_bwd_weight_fp16_gfx942/gfx942130.parquet.replaced-*"))) == 1


def test_import_failure_midway_leaves_nothing(tmp_path, monkeypatch):
    """A write failing on the second dataset undoes the first and the overwrite's moves."""
    from ckheur.data import dataset
    from ckheur.stages import compose_config, run_stage

    src = tmp_path / "gfx942130.HIP.fdb.txt"
    src.write_text(FWD_LINE + "\n" + BWD_LINE + "\n")
    import_as_stage(src, tmp_path / "data")
    data = tmp_path / "data"
    before = tree(data)
    src.write_text(FWD_LINE.replace("0.22021", "0.2") + "\n" + BWD_LINE + "\n")
    real, calls = dataset.write_part, []

    def failing(*args, **kw):
        calls.append(args[0])
        if len(calls) == 2:
            raise OSError(28, "No space left on device", str(args[0]))
        return real(*args, **kw)

    monkeypatch.setattr(dataset, "write_part", failing)
    cfg = compose_config(["stage=import", f"import.path={src}", f"paths.data={data}", "import.overwrite=true"])
    with pytest.raises(SystemExit) as e:
        run_stage(cfg, tmp_path / "run")
    assert e.value.code == 2 and len(calls) == 2
    assert tree(data) == before


@pytest.mark.parametrize("case,needles", [
    ("empty", ("empty",)),
    ("big_n", ("line 2", "beyond the validity rule", "N=1000000000000")),
    ("workspace", ("line 2", "workspace=10000000000000000000000000", "larger than any real size")),
    ("negative", ("line 2", "time -1.0 ms", "finite number >= 0")),
    ("text_time", ("line 2", "time='1.2.3'", "not a number")),
])
def test_find_db_bad_lines_are_refused_with_the_line(tmp_path, case, needles):
    entry = "ConvDirectNaiveConvFwd:{t},{w},miopenConvolutionFwdAlgoDirect"
    key = "16-8-8-3x3-8-8-8-{n}-1x1-1x1-1x1-0-NCHW-FP16-F"
    line = {"empty": None, "big_n": key.format(n=10**12) + "=" + entry.format(t=0.5, w=0),
            "workspace": key.format(n=2) + "=" + entry.format(t=0.5, w=10**25),
            "negative": key.format(n=2) + "=" + entry.format(t=-1, w=0),
            "text_time": key.format(n=2) + "=" + entry.format(t="1.2.3", w=0)}[case]
    src = tmp_path / "gfx942130.HIP.fdb.txt"
    src.write_text("" if line is None else FWD_LINE + "\n" + line + "\n")
    if case == "big_n":  # the command line once: one line, exit 2
        one_error(import_fdb(tmp_path, src), *needles)
    else:  # the others through the function stage=import calls: the error it prints
        from ckheur.errors import UserError

        with pytest.raises(UserError) as e:
            import_as_stage(src, tmp_path / "data")
        assert all(n in str(e.value) for n in needles) and "\n" not in str(e.value), str(e.value)
    assert tree(tmp_path / "data") == []


# ---------------------------------------------------------------- bundles are validated on load
SHIPPED_FWD = ROOT / "models" / "grouped_conv_fwd_bf16_gfx950"
PREDICT = ("stage=predict", "problem=convbfp16 -n 16 -c 256 -H 28 -W 28 -k 128 -y 3 -x 3 -p 1 -q 1")


def _rewrite_trees(text: str, edit) -> str:
    """A model text with ``edit(tree block) -> tree block`` applied to its first tree and the
    header's tree_sizes recomputed where it has them (a bundle's compact text has none), so only
    the edit is wrong."""
    import re

    head, rest = text.split("\nTree=", 1)
    trees, tail = ("Tree=" + rest).split("end of trees", 1)
    starts = [m.start() for m in re.finditer(r"^Tree=", trees, re.M)]
    blocks = [trees[a:b] for a, b in zip(starts, starts[1:] + [len(trees)])]
    blocks[0] = edit(blocks[0])
    head = re.sub(r"tree_sizes=.*", "tree_sizes=" + " ".join(str(len(b)) for b in blocks), head)
    return head + "\n" + "".join(blocks) + "end of trees" + tail


def _field(block: str, key: str, values) -> str:
    import re

    return re.sub(rf"^{key}=.*$", f"{key}=" + " ".join(map(str, values)), block, count=1, flags=re.M)


def _splits(block: str) -> int:
    """The number of splits of a tree block (its leaves less one)."""
    return int(re.search(r"^num_leaves=(\d+)$", block, re.M)[1]) - 1


def _chain_tree(leaves: int) -> callable:
    """An edit replacing a tree by a chain of ``leaves`` leaves (depth leaves - 1)."""
    def edit(block: str) -> str:
        n = leaves - 1
        first = block.splitlines()[0]
        fields = {"num_leaves": leaves, "num_cat": 0, "split_feature": [0] * n, "split_gain": [1] * n,
                  "threshold": list(range(n)), "decision_type": [2] * n,
                  "left_child": [~i for i in range(n)], "right_child": [i + 1 for i in range(n - 1)] + [~n],
                  "leaf_value": [0.01] * leaves, "leaf_weight": [1] * leaves, "leaf_count": [1] * leaves,
                  "internal_value": [0] * n, "internal_weight": [1] * n, "internal_count": [1] * n,
                  "is_linear": 0, "shrinkage": 1}
        return first + "\n" + "\n".join(f"{k}=" + (" ".join(map(str, v)) if isinstance(v, list) else str(v))
                                        for k, v in fields.items()) + "\n\n\n"
    return edit


@pytest.fixture
def bundle_copy(tmp_path):
    """A writable copy of the shipped forward bundle and a function that rewrites one of its files."""
    import lzma
    import shutil

    dst = tmp_path / "bundle"
    shutil.copytree(SHIPPED_FWD, dst)

    def rewrite(name: str, edit) -> Path:
        path = dst / name
        if name.endswith(".xz"):
            path.write_bytes(lzma.compress(edit(lzma.decompress(path.read_bytes()).decode()).encode()))
        else:
            path.write_text(edit(path.read_text()))
        return dst

    return dst, rewrite


@pytest.mark.parametrize("name,edit,needles", [
    ("model.txt.xz", lambda t: _rewrite_trees(t, lambda b: _field(b, "threshold", ["nan"] * _splits(b))),
     ("tree 0", "threshold holds NaN")),
    ("tflops_model.txt.xz", lambda t: _rewrite_trees(t, lambda b: b.replace("leaf_value=", "leaf_value=nan ", 1)
                                                     .replace("leaf_value=nan ", "leaf_value=nan ", 1)),
     ("leaf_value",)),
    ("model.txt.xz", lambda t: t[: len(t) // 2], ("not a whole LightGBM model",)),
    ("model.txt.xz", lambda t: _rewrite_trees(t, _chain_tree(400)), ("tree 0", "deeper than 256")),
    ("model.txt.xz", lambda t: _rewrite_trees(t, lambda b: _field(b, "right_child", [1] * _splits(b))),  # node 1 twice
     ("do not form a tree",)),
    ("feature_spec.json", lambda t: re.sub(r'"analytic": (true|false)', '"analytic": "yes"', t),
     ("analytic must be true or false",)),
    ("feature_spec.json", lambda t: t.replace('"num_cus": 256', '"num_cus": "many"'), ("arch.num_cus", "could not be converted")),
    ("feature_spec.json", lambda t: json.dumps({**json.loads(t), "prior": {"kind": "analytic", "scale": float("nan"),
                                                                            "params": {}}}), ("prior must be",)),
    ("kernels.json", lambda t: "{}", ("non-empty list of kernel objects",)),
    ("train_manifest.json", lambda t: "[1]", ("not an object",)),
])
def test_hostile_bundles_are_refused_in_one_line(bundle_copy, tmp_path, name, edit, needles):
    """NaN thresholds once segfaulted predict, NaN leaves 'selected' the first kernel, a model cut
    short aborted the process, wrongly typed JSON gave tracebacks: each is now a BundleError naming
    the bundle and what is wrong, which the stages print as one line, exit 2 (the first case runs
    the command line below)."""
    from ckheur.learn.bundle import BundleError
    from ckheur.selection.selector import Selector

    folder, rewrite = bundle_copy
    rewrite(name, edit)
    with pytest.raises(BundleError) as e:  # as stage=predict loads it
        Selector.load(folder)
    for n in (str(folder), *needles):
        assert n in str(e.value) and "\n" not in str(e.value), (n, str(e.value))
    with pytest.raises(BundleError):  # the compiled path refuses it the same way, before building anything
        Selector.load(folder, compiled=True)


def test_a_hostile_bundle_is_one_line_and_exit_2_in_predict(bundle_copy, tmp_path):
    """NaN thresholds, the case that once segfaulted predict, through the command line."""
    folder, rewrite = bundle_copy
    rewrite("model.txt.xz", lambda t: _rewrite_trees(t, lambda b: _field(b, "threshold", ["nan"] * _splits(b))))
    r = run_cli(*PREDICT, f"predict.model_dir={folder}", f"hydra.run.dir={tmp_path / 'r'}")
    one_error(r, str(folder), "tree 0", "threshold holds NaN")


def test_export_refuses_trees_wider_than_it_supports(bundle_copy, tmp_path):
    """A 100-leaf tree loads (Python evaluates it) but the C export refuses it with its reason."""
    folder, rewrite = bundle_copy
    rewrite("model.txt.xz", lambda t: _rewrite_trees(t, _chain_tree(100)))
    r = run_cli("stage=export", f"export.model_dir={folder}", f"export.output={tmp_path / 'out'}",
                f"hydra.run.dir={tmp_path / 'r'}")
    one_error(r, "tree 0 has 100 leaves", "at most 64")


# ---------------------------------------------------------------- driver lines are parsed strictly
BASE = "convbfp16 -n 16 -c 64 -k 64 -H 14 -W 14 -y 3 -x 3 -p 1 -q 1"


@pytest.mark.parametrize("line,needles", [
    (BASE + " --batch_size 8", ("unknown flag --batch_size", "did you mean --batchsize")),
    (BASE + " -Q 3", ("unknown flag -Q",)),
    (BASE + " -n 8", ("-n (--batchsize) is given twice, as 16 and 8",)),
    (BASE + " --batchsize=8", ("-n (--batchsize) is given twice",)),
    (BASE + " -F 2", ("-F 2 runs bwd_data, not fwd",)),
    (BASE + " -F 9", ("-F (--forw) 9: allowed values are",)),
    (BASE + " --spatial_dim 5", ("--spatial_dim 5: allowed values are 2, 3",)),
    (BASE + " --spatial_dim abc", ("--spatial_dim", "must be an integer, got 'abc'")),
    (BASE + " --spatial_dim 2 -! 4", ("--spatial_dim 2 with the depth flag(s) -! (--in_d)",)),
    (BASE.replace("convbfp16", "convfp16"), ("the command is fp16, the op is bf16",)),
    (BASE + " -m trans", ("-m (--mode) trans",)),
    (BASE + " -z same", ("-z (--pad_mode) same",)),
    (BASE + " -u two", ("-u (stride_h) must be an integer",)),
    (BASE + " -t", ("-t (--time) has no value", "the line is cut short")),
    (BASE.replace("-q 1", "-q"), ("-q (--pad_w, pad_w) has no value", "cut short")),
    ("convbfp16 -n 16 -c 64 -k -H 14", ("-k (--out_channels, K) has no value (followed by the flag -H)",)),
    (BASE + " --in_d=", ("--in_d (-!, Di) has no value",)),
])
def test_driver_lines_are_refused_naming_the_flag(line, needles):
    from ckheur.families.problem_base import ProblemError
    from ckheur.families.grouped_conv.problems import from_text

    with pytest.raises(ProblemError) as e:
        from_text(line, "fwd", "bf16")
    for n in needles:
        assert n in str(e.value), (n, str(e.value))


def test_driver_lines_that_mean_the_op_still_parse():
    from ckheur.families.grouped_conv.problems import from_text
    from ckheur.families.miopen.problems import from_text as miopen_from_text

    p = from_text(BASE + " -n 16 -F 1 -t 1 -V 0 -i 5 -m conv --in_layout NHWC -s 0", "fwd", "bf16")  # same value twice
    assert (p.N, p.C, p.pad_h) == (16, 64, 1)
    # A field left out takes MIOpenDriver's own default (its conv_driver.hpp AddCmdLineArgs): K 32, H and W
    # 32, filter 3x3, pads 0, strides and dilations 1, N 100, C 3, as MIOpenDriver would run the line.
    d = from_text("convbfp16 -n 16 -c 64 -H 14", "fwd", "bf16")
    assert (d.N, d.C, d.K, d.Hi, d.Wi, d.Y, d.X, d.pad_h, d.stride_w, d.dilation_h) == (16, 64, 32, 14, 32, 3, 3, 0, 1, 1)
    assert from_text(BASE + " -F 0", "bwd_weight", "bf16") == from_text(BASE + " -F 6", "bwd_weight", "bf16")
    q = miopen_from_text(BASE.replace("convbfp16", "convfp16") + " -F 4 -b 1 -I NHWC", "bwd_weight", "fp16")
    assert q.layout == "NHWC" and q.bias == 1


def test_predict_refuses_a_line_of_another_direction_and_a_bad_k(tmp_path):
    one_error(run_cli("stage=predict", f"problem={BASE} -F 4", f"hydra.run.dir={tmp_path / 'a'}"),
              "-F 4 runs bwd_weight, not fwd")
    one_error(run_cli("stage=predict", f"problem={BASE}", "predict.k=-1", f"hydra.run.dir={tmp_path / 'b'}"),
              "predict.k=-1", ">= 1")
    from ckheur.selection.selector import Selector

    sel = Selector.load(SHIPPED_FWD)
    with pytest.raises(ValueError, match="k=-1"):
        sel.rank(BASE, k=-1)
    assert len(sel.rank(BASE, k=None)) == len(sel.rank(BASE, k=100)) == 20


# ---------------------------------------------------------------- shared folders and names
FWD_OP = {"family": "grouped_conv", "direction": "fwd", "dtype": "bf16"}


def test_a_planted_claim_link_is_never_followed_and_locks_are_removed(tmp_path):
    import hashlib

    from ckheur.errors import UserError
    from ckheur.data.tuning_db import CLAIMS, TuningDB

    db = TuningDB.open(tmp_path / "db", FWD_OP, "gfx950", create=True)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    key = (1, 2, 3)
    lock = tmp_path / "db" / CLAIMS / f"{hashlib.sha256(repr(key).encode()).hexdigest()[:24]}.lock"
    lock.parent.mkdir()
    lock.symlink_to(victim)
    with pytest.raises(UserError, match="a link is never followed"):
        db.claim(key)
    assert victim.read_text() == "precious\n"
    lock.unlink()
    claim = db.claim(key)
    assert claim is not None and lock.exists() and db.claim(key) is None
    claim.release()
    assert not lock.exists()


def test_first_writer_owns_a_new_tuning_database(tmp_path):
    """Processes creating one database at once for different arches: exactly one identity wins,
    and every process of another identity is refused before it writes a row."""
    import multiprocessing as mp

    from ckheur.data.tuning_db import TuningDB

    ctx = mp.get_context("fork")
    start = ctx.Barrier(8)

    def create(arch: str, out: "mp.Queue") -> None:
        start.wait()
        try:
            TuningDB.open(tmp_path / "db", FWD_OP, arch, create=True, writable=True)
            out.put((arch, "opened"))
        except Exception as e:  # noqa: BLE001 - reported to the parent
            out.put((arch, type(e).__name__))

    q = ctx.Queue()
    procs = [ctx.Process(target=create, args=(arch, q)) for arch in ["gfx950", "gfx942"] * 4]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)  # a hang guard
    results = [q.get(timeout=10) for _ in procs]
    owner = json.loads((tmp_path / "db" / "tuning_db.json").read_text())["arch"]
    assert sorted(r for a, r in results if a == owner) == ["opened"] * 4
    assert sorted(r for a, r in results if a != owner) == ["TuningDBError"] * 4
    assert sorted(p.name for p in (tmp_path / "db").iterdir()) == ["tuning_db.json"]


def test_reexport_replaces_a_planted_link_instead_of_writing_through_it(tmp_path, monkeypatch):
    """The self-check runs a binary built in a private folder; a README.md turned into a link to
    another file is replaced, the file it pointed to is untouched."""
    from ckheur.c_export import checked as export

    seen = []
    real = export.compare_with_python

    def spy(selector, problems, binary, fields):
        seen.append(Path(binary))
        return real(selector, problems, binary, fields)

    monkeypatch.setattr(export, "compare_with_python", spy)
    out = tmp_path / "pkg"
    common = ["stage=export", "export.check_problems=20", f"export.output={out}"]
    assert run_cli(*common, f"hydra.run.dir={tmp_path / 'r1'}").returncode == 0
    victim = tmp_path / "victim.md"
    victim.write_text("precious\n")
    (out / "README.md").unlink()
    (out / "README.md").symlink_to(victim)
    r = run_cli(*common, f"hydra.run.dir={tmp_path / 'r2'}")
    assert r.returncode == 0, r.stderr
    assert victim.read_text() == "precious\n" and not (out / "README.md").is_symlink()
    assert len(seen) == 2 and all(out not in b.parents for b in seen) and not any(b.exists() for b in seen)
    assert os.access(out / "ckheur_select", os.X_OK)


def test_folders_other_users_can_change_are_refused(tmp_path, monkeypatch):
    """A data folder inside a folder every user can write (no sticky bit) or another user owns is
    refused before anything is measured; CKHEUR_TRUSTED_DIRS trusts it anyway."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    args = ["stage=sweep", "problems=smoke", f"paths.data={shared / 'data'}", "sweep.progress=none"]
    one_error(run_cli(*args, f"hydra.run.dir={tmp_path / 'r1'}"), str(shared), "writable by every user",
              "CKHEUR_TRUSTED_DIRS")
    assert list(shared.iterdir()) == []
    if os.geteuid() == 0:  # root can hand the folder to another user
        shared.chmod(0o755)
        os.chown(shared, 65534, 65534)
        one_error(run_cli(*args, f"hydra.run.dir={tmp_path / 'r2'}"), "owned by uid 65534")
    monkeypatch.setenv("CKHEUR_TRUSTED_DIRS", str(shared))
    assert run_cli(*args, f"hydra.run.dir={tmp_path / 'r3'}").returncode == 0


@pytest.fixture
def shared_and_private(tmp_path):
    """A folder every user can write (no sticky bit) and a private one a planted link points to."""
    shared, private = tmp_path / "shared", tmp_path / "private"
    shared.mkdir()
    shared.chmod(0o777)
    private.mkdir(mode=0o700)
    (private / "precious").write_text("mine\n")
    return shared, private


def test_run_folders_are_checked_before_hydra_writes_anything(tmp_path, shared_and_private):
    """Hydra writes .hydra/*.yaml, the log and multirun.yaml into the run or sweep folder: a planted
    link or a folder others can write is refused before that, and nothing is created."""
    shared, private = shared_and_private
    (shared / "run").symlink_to(private)
    for mode, key in (("run", "hydra.run.dir"), ("multirun", "hydra.sweep.dir")):
        extra = ["-m"] if mode == "multirun" else []
        one_error(run_cli(*extra, "stage=list", "list.count_only=true", f"{key}={shared / 'run'}"),
                  f"{mode} folder", f"{shared / 'run'} is a symbolic link", "writable by every user")
        one_error(run_cli(*extra, "stage=list", "list.count_only=true", f"{key}={shared / 'new'}"),
                  f"{mode} folder", f"{shared} is writable by every user")
    assert tree(private) == ["precious"] and sorted(p.name for p in shared.iterdir()) == ["run"]


def test_links_along_a_path_are_judged_where_they_lie(tmp_path, shared_and_private):
    """A link planted in a shared folder must not send a write into this user's private folder
    (the resolved target alone looks safe); a link this user made in a safe folder is followed."""
    shared, private = shared_and_private
    (shared / "data").symlink_to(private)
    one_error(run_cli("stage=sweep", "problems=smoke", f"paths.data={shared / 'data' / 'd'}", "sweep.progress=none"),
              f"{shared / 'data'} is a symbolic link in a folder another user can change")
    mine = tmp_path / "mine"
    mine.symlink_to(private)
    assert run_cli("stage=list", "list.count_only=true", f"hydra.run.dir={mine / 'run'}").returncode == 0
    assert (private / "run" / ".hydra" / "config.yaml").is_file()
    if os.geteuid() == 0:  # root can make a link another user's, in a sticky folder like /tmp
        sticky = tmp_path / "sticky"
        sticky.mkdir()
        sticky.chmod(0o1777)
        (sticky / "theirs").symlink_to(private)
        os.lchown(sticky / "theirs", 65534, 65534)
        one_error(run_cli("stage=list", "list.count_only=true", f"hydra.run.dir={sticky / 'theirs' / 'r'}"),
                  f"{sticky / 'theirs'} is a symbolic link owned by uid 65534")
        # ... and a link of this user's pointing on into it is walked to the planted one
        (tmp_path / "hop").symlink_to(sticky / "theirs")
        one_error(run_cli("stage=list", "list.count_only=true", f"hydra.run.dir={tmp_path / 'hop' / 'r'}"),
                  "owned by uid 65534")
    assert sorted(p.name for p in private.iterdir()) == ["precious", "run"]


def test_cache_inside_a_folder_others_can_change_is_not_used(tmp_path, monkeypatch):
    from ckheur.c_export.compiled import trusted_cache_dir

    shared = tmp_path / "shared"
    (shared / "cache").mkdir(parents=True, mode=0o700)
    shared.chmod(0o777)
    monkeypatch.setenv("CKHEUR_CACHE_DIR", str(shared / "cache"))
    with pytest.warns(UserWarning, match="inside a folder another user can change"):
        used = trusted_cache_dir()
    assert shared not in used.parents


def test_private_folders_are_removed_when_the_process_exits(tmp_path):
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-c", "from ckheur.files import process_folder; print(process_folder())"],
                       capture_output=True, text=True, timeout=120)
    folder = Path(r.stdout.strip())
    assert r.returncode == 0 and folder.name.startswith("ckheur-") and not folder.exists()


@pytest.mark.parametrize("override,field", [
    ("problems.name=../../escaped", "problems.name"),
    ("import.dataset=../x", "import.dataset"),
    ("import.dataset=/tmp/abs", "import.dataset"),
    ("op.model_name=../../m", "op.model_name"),
    ("arch.name=a/b", "arch.name"),
])
def test_names_are_single_path_components(tmp_path, override, field):
    """Refused before anything is written: through the command line once, the other fields through
    the check every stage runs first (the error it prints)."""
    from ckheur.errors import UserError
    from ckheur.stages import check_names, compose_config

    stage = "stage=import" if override.startswith("import.") else "stage=sweep"
    args = (stage, override, f"import.path={MI300X}", f"paths.data={tmp_path / 'a' / 'b' / 'data'}")
    if field == "problems.name":
        one_error(run_cli(*args, f"hydra.run.dir={tmp_path / 'a' / 'b' / 'run'}"), f"{field}=", "one path component")
    else:
        with pytest.raises(UserError, match=rf"{re.escape(field)}=.*one path component"):
            check_names(compose_config(args))
    assert not (tmp_path / "a" / "b" / "data").exists() and not (tmp_path / "a" / "escaped").exists()


# ---------------------------------------------------------------- one line, exit 2, for every bad input
@pytest.mark.parametrize("override,needles", [
    ("op.direction=fwdx", ("op.direction=fwdx", "expected one of [fwd, bwd_data, bwd_weight]")),
    ("arch.num_cu=3", ("arch.num_cu", "Key 'num_cu' not in 'ArchSchema'")),
    ("op=nope", ("Could not find 'op/nope'", "allowed:", "bwd_data")),
    ("train.folds=abc", ("train.folds=abc", "could not be converted to Integer")),
    ("op.direction=[", ("cannot parse the override 'op.direction=['",)),
])
def test_config_errors_are_one_line(tmp_path, override, needles):
    one_error(run_cli("stage=list", "list.count_only=true", override, f"hydra.run.dir={tmp_path}"), *needles)


def test_run_folders_that_cannot_be_written_are_one_line(tmp_path):
    (tmp_path / "file").write_text("x")
    one_error(run_cli("stage=list", "list.count_only=true", f"hydra.run.dir={tmp_path / 'file'}"),
              "is a file, not a folder")
    one_error(run_cli("stage=sweep", "problems=smoke", "paths.data=/proc/self/data", "sweep.progress=none",
                      f"hydra.run.dir={tmp_path / 'r'}"), "/proc/self")
    if os.geteuid() != 0:  # root writes into read-only folders; the /proc case above covers refusal there
        ro = tmp_path / "ro"
        ro.mkdir(mode=0o555)
        one_error(run_cli("stage=sweep", "problems=smoke", f"paths.data={ro}", f"hydra.run.dir={tmp_path / 'r2'}"),
                  str(ro))


def test_stages_replace_only_their_own_outputs_in_a_run_folder(tmp_path):
    """A file of a stage's output names that the user put in the run folder, or changed after a
    stage wrote it, is refused (exit 2, nothing written, the file as it was), through the command
    line before Hydra writes its record too; an earlier run's own outputs are replaced, saying so.
    (The README tour's test checks that each stage writes only its OUTPUTS there.)"""
    import contextlib
    import io

    from ckheur.stages import OUTPUTS_RECORD, folder_files, run_overrides

    run_overrides(["stage=list"], tmp_path / "list", quiet=True)
    assert set(folder_files(tmp_path / "list")) == {"kernels.csv", "problems.csv"}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        run_overrides(["stage=list"], tmp_path / "list")  # its own earlier outputs: replaced
    assert "an earlier run's kernels.csv, problems.csv replaced" in out.getvalue()
    edited = tmp_path / "list" / "problems.csv"
    edited.write_text(edited.read_text() + "my note\n")  # the user's result now
    with pytest.raises(SystemExit) as e:
        run_overrides(["stage=list"], tmp_path / "list", quiet=True)
    assert e.value.code == 2 and "problems.csv" in e.value.message and "kernels.csv" not in e.value.message
    assert edited.read_text().endswith("my note\n")

    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "network_report.md").write_text("my report\n")
    one_error(run_cli("stage=report", "problems=smoke", f"hydra.run.dir={mine}"), "network_report.md",
              "ckheur did not write")
    assert tree(mine) == ["network_report.md"] and (mine / "network_report.md").read_text() == "my report\n"
    (mine / OUTPUTS_RECORD).write_text("{}")  # a record ckheur did not write is not trusted either
    one_error(run_cli("stage=report", "problems=smoke", f"hydra.run.dir={mine}"), OUTPUTS_RECORD)


def test_ctrl_c_during_evaluate_is_one_line_and_exit_130(tmp_path, monkeypatch, ck_fwd_csv):
    from ckheur.evaluation import scoring as evaluation

    def interrupted(*args, **kw):
        raise KeyboardInterrupt

    monkeypatch.setattr(evaluation, "score_problems", interrupted)
    r = run_cli("stage=evaluate", f"data.eval_paths=[{ck_fwd_csv}]", "evaluate.model_dir=models/grouped_conv_fwd_bf16_gfx950",
                f"hydra.run.dir={tmp_path}")
    assert r.returncode == 130 and "Traceback" not in r.stderr and "interrupted" in r.stderr, r.stderr


def test_a_failed_multirun_job_is_reported_and_the_others_run(tmp_path):
    """Job 1 fails (bad problem): jobs 0 and 2 still run, the end names job 1, exit 2; a second
    multirun into the same folder is not blamed for the first one's failure."""
    args = ["-m", "stage=predict", "problem.N=16,-1,8", "problem.C=64", "problem.K=64", "problem.Hi=8", "problem.Wi=8",
            f"hydra.sweep.dir={tmp_path / 'm'}"]
    r = run_cli(*args)
    assert r.returncode == 2, r.stderr
    assert r.stdout.count("selected:") == 2 and "Traceback" not in r.stderr
    assert "multirun: 1 job(s) failed" in r.stderr and "job 1 (" in r.stderr and "problem field N=-1" in r.stderr
    assert json.loads((tmp_path / "m" / "1" / "job_failed.json").read_text())["exit_code"] == 2
    ok = run_cli("-m", "stage=predict", "problem.N=16,8", "problem.C=64", "problem.K=64", "problem.Hi=8",
                 "problem.Wi=8", f"hydra.sweep.dir={tmp_path / 'm'}")
    assert ok.returncode == 0, ok.stderr
    # On the submitit launcher (each job its own process) the report is checked in test_database's
    # multirun of two stage=tune workers and a failing third job.


def test_slurm_s_launcher_on_a_machine_without_slurm_is_one_line(tmp_path, monkeypatch):
    """hydra/launcher=submitit_slurm where srun is not found: exit 2 saying so and what runs the jobs
    here, before Hydra writes anything (submitit raised from inside the launch)."""
    monkeypatch.setenv("PATH", str(tmp_path))  # no srun on it, whatever this machine has
    r = run_cli("-m", "hydra/launcher=submitit_slurm", "stage=list", "list.count_only=true", "op=fwd,bwd_data",
                f"hydra.sweep.dir={tmp_path / 'm'}")
    assert r.returncode == 2 and "no SLURM on this machine (srun not found)" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "m").exists()


# ---------------------------------------------------------------- big jobs: progress and early checks
def test_evaluate_checks_the_model_before_reading_data_and_shows_progress(tmp_path, monkeypatch, ck_fwd_csv):
    from ckheur.data import dataset

    calls = []
    real = dataset.read_dataset

    def watched(paths, *a, **kw):
        calls.append(kw.get("columns"))
        return real(paths, *a, **kw)

    monkeypatch.setattr(dataset, "read_dataset", watched)
    one_error(run_cli("stage=evaluate", f"data.eval_paths=[{ck_fwd_csv}]", f"evaluate.model_dir={tmp_path / 'none'}",
                      f"hydra.run.dir={tmp_path / 'r1'}"), "not found")
    assert calls == []  # the missing model was reported before any data was read
    r = run_cli("stage=evaluate", f"data.eval_paths=[{ck_fwd_csv}]", f"evaluate.model_dir={SHIPPED_FWD}",
                "evaluate.progress=log", "evaluate.plots=false", f"hydra.run.dir={tmp_path / 'r2'}")
    assert r.returncode == 0, r.stderr
    assert "evaluate: 370/370 problems (100%)" in r.stderr  # the model's 185 problems, then the analytic baseline's
    assert calls and all(c is not None and "error" not in c for c in calls)  # only the columns evaluation reads


def test_predict_streams_a_problem_set_with_progress(tmp_path):
    import csv

    out = tmp_path / "p.csv"
    r = run_cli("stage=predict", "problems=nets", "predict.k=2", "predict.progress=log", f"predict.output={out}",
                f"hydra.run.dir={tmp_path / 'r'}")
    assert r.returncode == 0, r.stderr
    assert "predict: 417/417 problems (100%)" in r.stderr
    rows = list(csv.DictReader(out.open()))
    assert len([x for x in rows if x["rank"] == "1"]) == 315 and len([x for x in rows if x["note"]]) == 102  # 3D: no kernel
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp-")]
    one_error(run_cli("stage=predict", "problems=nets", f"predict.output={tmp_path / 'p.txt'}",
                      f"hydra.run.dir={tmp_path / 'r2'}"), "give a .csv or .json file")


def test_hip_backend_never_loads_a_planted_library(tmp_path):
    """A kernel library cached in backend.lib_dir is code the worker runs: a link or another's file
    there is not loaded, and a lib_dir other users can change is refused."""
    from ckheur.backends.hip import build_library
    from ckheur.files import UnsafePathError
    from ckheur.kernels import enumerate_pool
    from ckheur.stages import compose_config, plain

    cfg = compose_config(["backend=hip", f"backend.lib_dir={tmp_path / 'libs'}", "backend.build_command=false"])
    kernel = enumerate_pool(plain(cfg.op), plain(cfg.arch)).kernels[0]
    libs = tmp_path / "libs"
    libs.mkdir()
    (tmp_path / "evil.so").write_bytes(b"\x7fELF")
    (libs / f"{kernel.name}.so").symlink_to(tmp_path / "evil.so")
    path, why = build_library(plain(cfg.backend), kernel, "gfx950")
    assert path is None and "is a symbolic link" in why and "not loaded" in why
    (libs / f"{kernel.name}.so").unlink()
    (libs / f"{kernel.name}.so").write_bytes(b"\x7fELF")
    (libs / f"{kernel.name}.so").chmod(0o666)
    assert "writable by others" in build_library(plain(cfg.backend), kernel, "gfx950")[1]
    libs.chmod(0o777)
    with pytest.raises(UnsafePathError, match="writable by every user"):
        build_library(plain(cfg.backend), kernel, "gfx950")
