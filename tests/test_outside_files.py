"""Trust, round three (items 2, 4, 5 of issue 33): the user find-db writer holds a lock and writes
its backup aside; find-db lines, remembered answers, solver names, leaf sums and TunaNet
statistics from outside files are checked before use; every compressed input is read with a cap
on its decompressed size."""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import multiprocessing
import os
import stat
from pathlib import Path

import pytest

from conftest import ROOT, import_as_stage, run_cli

MI300X = ROOT / "tests" / "data" / "miopen_fdb" / "gfx942130.HIP.fdb.txt.bz2"
FWD_KEY = "256-56-56-3x3-256-56-56-32-1x1-1x1-1x1-0-NCHW-FP16-F_g32"
FWD_LINE = (f"{FWD_KEY}=ConvBinWinogradRxSf2x3:0.22021,0,miopenConvolutionFwdAlgoWinograd;"
            "ConvHipImplicitGemmGroupFwdXdlops:0.877855,102797312,miopenConvolutionFwdAlgoImplicitGEMM")
USER_FDB = "gfx942130.HIP.3_2_0_abc.ufdb.txt"


def _lines(n: int = 40) -> list[str]:
    return [ln for ln in bz2.decompress(MI300X.read_bytes()).decode().splitlines() if ln.strip()][:n]


def _new_line(n: int, solver: str = "GemmBwdRest", time_ms: float = 0.5):
    """A find-db line of a problem the MI300X slice does not hold (batch ``n``)."""
    from ckheur.integrations.miopen.find_db import FindDbEntry, FindDbLine, algorithm_name, problem_key
    from ckheur.families.miopen.problems import problem_from_dict

    p = problem_from_dict({"N": n, "C": 24, "K": 40, "Hi": 17, "Wi": 19, "Y": 3, "X": 3, "pad_h": 1, "pad_w": 1})
    return FindDbLine(problem_key(p, "bwd_data", "bf16"),
                      (FindDbEntry(solver, time_ms, 0, algorithm_name("bwd_data", "gemm")),))


# ------------------------------------------------------------------ 2. the user find-db writer

def _merge_reading_slowly(target: Path, line, read_done, other_done) -> None:
    """Merge, pausing between reading the file and writing it until the other merge is done (or 2 s
    passed): without a lock the other merge runs in that pause; with one it waits for this one."""
    import ckheur.integrations.miopen.find_db as fdb

    real = fdb._text

    def read_then_pause(path):
        text = real(path)
        read_done.set()
        other_done.wait(2)
        return text

    fdb._text = read_then_pause
    fdb.merge_find_db(target, [line], merge=True)


def _merge_after(target: Path, line, read_done, other_done) -> None:
    from ckheur.integrations.miopen.find_db import merge_find_db

    read_done.wait(30)
    merge_find_db(target, [line], merge=True)
    other_done.set()


def test_two_merges_at_once_both_keep_their_entries(tmp_path):
    """The second merge starts while the first holds the file's old text: both merges' keys end
    up in the file (the second waits for the first's lock)."""
    target = tmp_path / USER_FDB
    target.write_text("\n".join(_lines()) + "\n")
    ctx = multiprocessing.get_context("fork")
    a, b = _new_line(100), _new_line(200)
    read_done, other_done = ctx.Event(), ctx.Event()
    procs = [ctx.Process(target=_merge_reading_slowly, args=(target, a, read_done, other_done)),
             ctx.Process(target=_merge_after, args=(target, b, read_done, other_done))]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0]
    keys = {ln.partition("=")[0] for ln in target.read_text().splitlines()}
    assert {a.key.text(), b.key.text()} <= keys


def test_a_merge_keeps_the_mode_backs_up_aside_and_only_when_something_changes(tmp_path):
    """A 600 user find-db stays 600 and so is its backup; merging what it already holds writes
    nothing (no backup, the file untouched); the backup is a whole copy of the old text."""
    from ckheur.integrations.miopen.find_db import merge_find_db, parse_line

    target = tmp_path / USER_FDB
    before = "\n".join(_lines()) + "\n"
    target.write_text(before)
    os.chmod(target, 0o600)
    got = merge_find_db(target, [_new_line(7)], merge=True)
    backup = Path(got["backup"])
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert backup.read_text() == before and stat.S_IMODE(backup.stat().st_mode) == 0o600
    assert got["changed"] and got["added"] == 1
    after, inode = target.read_text(), target.stat().st_ino
    held = parse_line(after.splitlines()[3])
    again = merge_find_db(target, [held, _new_line(7)], merge=True)
    assert not again["changed"] and again["backup"] is None and again["updated"] == 2
    assert target.read_text() == after and target.stat().st_ino == inode
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([USER_FDB, backup.name, f"{USER_FDB}.lock"])
    from ckheur.integrations.miopen.find_db import FindDbError

    with pytest.raises(FindDbError, match="solver name '--help' is not one"):  # what the next merge would refuse
        merge_find_db(target, [_new_line(9, solver="--help")], merge=True)
    assert target.read_text() == after


# ------------------------------------------------------------------ 5. bounded decompression

def _bomb(path: Path, size: int, head: bytes = b"") -> Path:
    """A small compressed file (by its suffix) that expands to ``size`` bytes: ``head``, then zeros
    or newlines."""
    import lzma

    data = head + (b"\n" if path.suffix == ".bz2" else b"0") * (size - len(head))
    codec = {".gz": lambda d: gzip.compress(d, compresslevel=1), ".bz2": bz2.compress, ".xz": lzma.compress}
    path.write_bytes(codec[path.suffix](data))
    return path


@pytest.fixture
def low_caps(monkeypatch):
    """Decompression caps of 1 MiB for data and 8 MiB for bundles (the shipped model texts are
    below 5 MiB), so that small files are bombs (no test allocates more than a few of them)."""
    import ckheur.files

    monkeypatch.setattr(ckheur.files, "DATA_LIMIT_BYTES", 1 << 20, raising=False)
    monkeypatch.setattr(ckheur.files, "BUNDLE_LIMIT_BYTES", 8 << 20, raising=False)
    return "decompresses to more than"


@pytest.mark.parametrize("suffix", [".gz", ".bz2", ".xz"])
def test_decompression_stops_at_the_cap(tmp_path, suffix):
    from ckheur.files import TooLargeError, read_compressed

    path = _bomb(tmp_path / f"f{suffix}", 3 << 20)
    assert path.stat().st_size < 64 << 10
    with pytest.raises(TooLargeError, match=rf"f\{suffix}: decompresses to more than 1,048,576 bytes"):
        read_compressed(path, 1 << 20)
    assert len(read_compressed(path, 3 << 20)) == 3 << 20  # exactly at the cap: read whole
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises((OSError, EOFError)):  # corrupt: what every reader reports in one line
        read_compressed(path, 3 << 20)


def test_a_compressed_file_is_decompressed_once_per_content(tmp_path, monkeypatch):
    """Reading the same compressed bytes again (a bundle's model at every load) gives the content
    decompressed the first time, refused past a lower cap as a first read is; other bytes under the
    same name are decompressed anew; a file over KEPT_COMPRESSED_BYTES is streamed every time."""
    import lzma

    from ckheur import files

    decompressed = []
    real = files._decompressed
    monkeypatch.setattr(files, "_decompressed", lambda raw, path, cap: decompressed.append(path.name) or
                        real(raw, path, cap))
    path = tmp_path / "model.txt.xz"
    text = b"tree\n" * 100_000
    path.write_bytes(lzma.compress(text))
    assert files.read_compressed(path) == files.read_compressed(path) == text and decompressed == ["model.txt.xz"]
    with pytest.raises(files.TooLargeError, match=r"model.txt.xz: decompresses to more than 1,000 bytes"):
        files.read_compressed(path, 1000)
    path.write_bytes(lzma.compress(text + b"end\n"))
    assert files.read_compressed(path) == text + b"end\n" and len(decompressed) == 3
    monkeypatch.setattr(files, "KEPT_COMPRESSED_BYTES", 100)
    assert files.read_compressed(path) == files.read_compressed(path) and len(decompressed) == 5


def test_compressed_find_dbs_and_csvs_are_refused_beyond_the_cap_in_one_line(tmp_path, low_caps):
    """stage=import of a bz2 find-db and of a gzipped CK CSV that expand past the cap: one line
    naming the file and the cap, nothing written; the find-db tier reads through the same cap."""
    from ckheur.errors import UserError
    from ckheur.integrations.miopen.find_db import read_find_db

    fdb = _bomb(tmp_path / "gfx942130.HIP.fdb.txt.bz2", 2 << 20, (FWD_LINE + "\n").encode())
    header = b"kernel,problem_idx,N,C,K,G,Hi,Wi,Y,X,stride_h,stride_w,pad_h,pad_w,latency_ms,tflops,non_zero\n"
    csv = _bomb(tmp_path / "sweep.csv.gz", 2 << 20, header)
    r = run_cli("stage=import", f"import.path={fdb}", f"paths.data={tmp_path / 'data'}",
                f"hydra.run.dir={tmp_path / 'r'}")
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert len(errors) == 1 and fdb.name in errors[0] and low_caps in errors[0], r.stderr[-2000:]
    # The CSV as stage=import imports it (its one-line exit 2 is the command line's for any UserError).
    with pytest.raises(UserError) as e:
        import_as_stage(csv, tmp_path / "data")
    assert "\n" not in str(e.value) and csv.name in str(e.value) and low_caps in str(e.value)
    assert not (tmp_path / "data").exists() or not any((tmp_path / "data").rglob("*.parquet"))
    with pytest.raises(ValueError, match=low_caps):
        read_find_db(fdb)


def test_bundle_and_ck_model_files_are_refused_beyond_the_cap(tmp_path, low_caps):
    """A bundle whose model text or remembered answers, or a CK model folder whose gzipped model,
    expands past the cap: BundleError / CKFormatError naming the file and the cap."""
    import shutil

    from ckheur.learn.bundle import BundleError, load_bundle
    from ckheur.integrations.ck.model_folder import CKFormatError, CKModel

    src = ROOT / "models" / "miopen_fwd_fp16_gfx942"
    for name in ("model.txt.xz", "answers.json.xz"):
        bundle = tmp_path / name.split(".")[0]
        shutil.copytree(src, bundle)
        _bomb(bundle / name, 9 << 20, b"tree\n" if name.startswith("model") else b"{")
        with pytest.raises(BundleError, match=rf"{name}: {low_caps} 8,388,608 bytes"):
            load_bundle(bundle)
    ck = tmp_path / "ck_model"
    ck.mkdir()
    (ck / "feature_spec.json").write_text(json.dumps({"feature_names": ["N"]}))
    _bomb(ck / "model_tflops.lgbm.gz", 2 << 20, b"tree\n")
    with pytest.raises((CKFormatError, ValueError), match=rf"model_tflops.lgbm.gz.*{low_caps}"):
        CKModel.load(ck, {"name": "gfx950"})


# ------------------------------------------------------------------ 4. outside files checked

def _fdb(tmp_path: Path, *lines: str, name: str = "gfx942130.HIP.fdb.txt") -> Path:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return path


def test_find_db_tier_serves_only_the_pools_solvers_of_the_direction(tmp_path):
    """A forward line whose fastest entry is a backward-data solver, or a solver no table knows,
    is answered with its fastest forward solver of the pool; the others are counted, never selected."""
    from ckheur import Selector

    other = FWD_LINE.replace("-32-1x1-1x1-1x1-0-", "-16-1x1-1x1-1x1-0-")
    fdb = _fdb(tmp_path,
               FWD_LINE.replace("=", "=ConvDirectNaiveConvBwd:0.01,0,miopenConvolutionBwdDataAlgoDirect;", 1),
               other.replace("=", "=NoSuchSolver:0.01,0,miopenConvolutionFwdAlgoDirect;", 1))
    sel = Selector.load(ROOT / "models" / "miopen_fwd_fp16_gfx942", find_db=fdb)
    driver = "convfp16 -n {} -c 256 -H 56 -W 56 -k 256 -y 3 -x 3 -p 1 -q 1 -g 32 -F 1"
    for n in (32, 16):
        got = sel.select(driver.format(n))
        assert (got.kernel, got.source, got.latency_ms) == ("ConvBinWinogradRxSf2x3", "find_db", 0.22021), n
    assert sel.find_db.refused == {"ConvDirectNaiveConvBwd": 1, "NoSuchSolver": 1}
    r = run_cli("stage=predict", "op=miopen/fwd", "arch=gfx942", f"predict.find_db={fdb}",
                f"problem={driver.format(16)}", f"hydra.run.dir={tmp_path / 'p'}")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "selected: ConvBinWinogradRxSf2x3 (tier: find_db, measured 0.2202 ms" in r.stdout
    assert "predict.find_db: 2 entries of solvers outside this model's pool are never answered" in r.stdout


def test_find_db_times_beyond_the_peak_are_never_answered_nor_imported(tmp_path):
    """An entry whose time implies more than the GPU's peak (the imports' rule) is no measurement:
    the find-db tier answers the next solver, stage=import skips and counts it, naming its line."""
    from ckheur import Selector
    from ckheur.data.dataset import read_dataset

    fast = "ConvHipImplicitGemmGroupFwdXdlops:1e-09,0,miopenConvolutionFwdAlgoImplicitGEMM;"
    fdb = _fdb(tmp_path, FWD_LINE.replace("-32-1x1", "-8-1x1"), FWD_LINE.replace("=", "=" + fast, 1))
    sel = Selector.load(ROOT / "models" / "miopen_fwd_fp16_gfx942", find_db=fdb)
    got = sel.select("convfp16 -n 32 -c 256 -H 56 -W 56 -k 256 -y 3 -x 3 -p 1 -q 1 -g 32 -F 1")
    assert (got.kernel, got.source, got.latency_ms) == ("ConvBinWinogradRxSf2x3", "find_db", 0.22021)
    r = run_cli("stage=import", f"import.path={fdb}", f"paths.data={tmp_path / 'data'}",
                f"hydra.run.dir={tmp_path / 'r'}")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "import: skipped 1: time beyond the gfx942 peak (not a measurement; the first: " in r.stdout
    assert "line 2, ConvHipImplicitGemmGroupFwdXdlops: latency_ms=1e-09 implies" in r.stdout
    rows = read_dataset(tmp_path / "data" / "miopen_fwd_fp16_gfx942" / "gfx942130.parquet")
    ok = rows[rows["status"] == "ok"]
    assert len(ok) == 4 and ok["latency_ms"].min() > 0.2  # two entries of each line


def test_a_user_find_db_imports_like_a_system_one(tmp_path):
    """stage=import of MIOpen's user find-db (<arch><CUs>.HIP.<version>.ufdb.txt): one dataset per
    direction and dtype, its rows the file's times."""
    from ckheur.data.dataset import read_dataset

    lines = _lines(200)
    fdb = _fdb(tmp_path, *lines, name=USER_FDB)
    import_as_stage(fdb, tmp_path / "data")
    got = read_dataset(tmp_path / "data" / "miopen_fwd_fp16_gfx942" / "gfx942130.parquet")
    assert len(got) and set(got["status"]) == {"ok", "censored"} and (got["host"] == f"import:{USER_FDB}").all()


def _copy_bundle(tmp_path: Path, name: str = "miopen_fwd_fp16_gfx942") -> Path:
    import shutil

    return Path(shutil.copytree(ROOT / "models" / name, tmp_path / name))


def _answers(bundle: Path) -> dict:
    return json.loads(lzma.decompress((bundle / "answers.json.xz").read_bytes()))


def _write_answers(bundle: Path, doc: dict) -> None:
    (bundle / "answers.json.xz").write_bytes(lzma.compress(json.dumps(doc).encode()))


def test_conflicting_remembered_answers_are_refused_even_after_the_file_loaded_once(tmp_path):
    """One problem remembered with two kernels: neither can be trusted, the bundle is refused. The
    answers a process read and checked once are not read again (ckheur.learn.bundle._ANSWERS, by the
    file's digest), so this bundle loads as shipped first: the changed file is still read anew."""
    from ckheur.learn.bundle import BundleError, load_bundle

    bundle = _copy_bundle(tmp_path)
    doc = _answers(bundle)
    assert load_bundle(bundle).answers == {tuple(k): n for k, n in zip(doc["keys"], doc["kernels"])}
    other = next(k for k in doc["kernels"] if k != doc["kernels"][0])
    doc["keys"].append(doc["keys"][0])
    doc["kernels"].append(other)
    _write_answers(bundle, doc)
    with pytest.raises(BundleError, match=rf"answers.json.xz: the problem .* is remembered with two kernels "
                                          rf"\({doc['kernels'][0]}, {other}\): conflicting"):
        load_bundle(bundle)
    doc["kernels"][-1] = doc["kernels"][0]  # the same answer twice agrees with itself
    _write_answers(bundle, doc)
    assert len(load_bundle(bundle).answers) == len(doc["keys"]) - 1


@pytest.mark.parametrize("name", ["--help", "ConvDirectNaiveConvBwd"])
def test_a_miopen_bundles_solver_names_must_be_the_tables(tmp_path, name):
    """A kernel name no forward table of the arch declares (a command-line flag, a backward-data
    solver in a forward bundle) is refused at load, named."""
    from ckheur.learn.bundle import BundleError, load_bundle

    bundle = _copy_bundle(tmp_path)
    kernels = json.loads((bundle / "kernels.json").read_text())
    kernels[3]["name"] = name
    (bundle / "kernels.json").write_text(json.dumps(kernels))
    with pytest.raises(BundleError, match=f"kernels.json: (solver '{name}' .* not a fwd solver of the gfx942 table|"
                                          f"kernel 3: name='{name}': give letters, digits)"):
        load_bundle(bundle)


def test_leaves_whose_sum_can_overflow_are_refused(tmp_path):
    """Every leaf finite (1e308) but their sum over the trees infinite: refused at load."""
    import re

    from ckheur.learn.bundle import BundleError, load_bundle

    bundle = _copy_bundle(tmp_path, "grouped_conv_fwd_bf16_gfx950")
    text = lzma.decompress((bundle / "model.txt.xz").read_bytes()).decode()
    head, _, body = text.partition("\nTree=")
    trees, _, tail = ("Tree=" + body).partition("end of trees")
    blocks = [re.sub(r"(?m)^leaf_value=(.*)$", lambda m: "leaf_value=" + " ".join(["1e308"] * len(m[1].split())), b)
              for b in re.split(r"(?m)^(?=Tree=)", trees)[1:]]
    text = head + "\n" + "".join(blocks) + "end of trees" + tail  # a compact text: no tree_sizes to fix
    (bundle / "model.txt.xz").write_bytes(lzma.compress(text.encode()))
    with pytest.raises(BundleError, match=r"model.txt.xz: the trees' leaves can sum to 1e\+308 by tree 0, beyond"):
        load_bundle(bundle)


def test_compiled_cache_key_covers_the_remembered_answers(tmp_path):
    """The compiled selector's key (bundle_hash) changes with every file of the bundle, the
    remembered answers included, so a build for the old answers is never reused."""
    from ckheur.c_export.compiled import bundle_hash

    bundle = _copy_bundle(tmp_path)
    before = bundle_hash(bundle)
    doc = _answers(bundle)
    doc["kernels"][0] = next(k for k in doc["kernels"] if k != doc["kernels"][0])
    _write_answers(bundle, doc)
    assert bundle_hash(bundle) != before


def test_tunanet_statistics_and_layer_graph_are_checked(tmp_path):
    """A zero or non-finite standard deviation (inputs divide by it), or a layer graph that names a
    layer never computed, is one TunaNetError naming the file, never NaN scores or a traceback."""
    from test_tunanet import _write_net

    from ckheur.integrations.miopen.tunanet import TunaNetError, load_tunanet

    for value, field in ((0.0, "std"), (float("inf"), "std"), (float("nan"), "mean")):
        folder = _write_net(tmp_path / f"{field}{value}")
        meta_file = folder / "gfx942_metadata.tn.model"
        meta = json.loads(meta_file.read_text())
        meta["stats"]["overall"]["features"][field]["Pad_1"] = value
        meta_file.write_text(json.dumps(meta))
        with pytest.raises(TunaNetError, match=r"gfx942_metadata.tn.model: the statistics of input Pad_1 .* must be "
                                               "finite numbers, the std not zero"):
            load_tunanet(folder, "gfx942")
    for broken in ("inbound", "unknown"):
        folder = _write_net(tmp_path / broken)
        model_file = folder / "gfx942.tn.model"
        model = json.loads(model_file.read_text())
        layers = model["architecture"]["config"]["layers"]
        if broken == "inbound":
            layers[1]["inbound_nodes"] = 7  # not a list of nodes
        else:
            layers[4]["inbound_nodes"] = [[["nowhere", 0, 0, {}], ["dense_1", 0, 0, {}]]]
        model_file.write_text(json.dumps(model))
        with pytest.raises(TunaNetError, match=r"gfx942.tn.model: (not a layer graph|its layer graph cannot)"):
            load_tunanet(folder, "gfx942")


def test_deeply_nested_json_is_one_error(tmp_path):
    """JSON nested past Python's recursion limit, in a bundle file, its answers or a TunaNet
    file: one error naming the file (never a RecursionError)."""
    from test_tunanet import _write_net

    from ckheur.learn.bundle import BundleError, load_bundle
    from ckheur.integrations.miopen.tunanet import TunaNetError, load_tunanet

    deep = "[" * 100_000 + "]" * 100_000
    bundle = _copy_bundle(tmp_path)
    (bundle / "cv_metrics.json").write_text(deep)
    with pytest.raises(BundleError, match="cv_metrics.json: corrupted JSON"):
        load_bundle(bundle)
    bundle = _copy_bundle(tmp_path / "answers")
    (bundle / "answers.json.xz").write_bytes(lzma.compress(deep.encode()))
    with pytest.raises(BundleError, match="answers.json.xz: not a bundle's answers"):
        load_bundle(bundle)
    folder = _write_net(tmp_path / "net")
    (folder / "gfx942.tn.model").write_text(deep)
    with pytest.raises(TunaNetError, match="gfx942.tn.model: not a TunaNet JSON file"):
        load_tunanet(folder, "gfx942")


def test_a_find_db_is_parsed_once_and_its_cache_trusted_only_for_that_file(tmp_path, monkeypatch):
    """The parse is kept in a private cache and used again by a new process (the same frames), but
    never for a changed file, never from an entry recorded for another file, and never from a
    cache folder others can write (then the file is parsed, with a warning)."""
    import shutil
    import subprocess
    import sys
    import warnings

    from ckheur.integrations.miopen import find_db as miopen_fdb

    cache = tmp_path / "cache"
    monkeypatch.setenv("CKHEUR_FIND_DB_CACHE", str(cache))
    src = tmp_path / "gfx942130.HIP.fdb.txt.bz2"
    shutil.copy(MI300X, src)
    fresh = miopen_fdb._parse_find_db(src, "gfx942")
    miopen_fdb._read_once.cache_clear()
    first = miopen_fdb.read_find_db(src, "gfx942")
    assert first.problems.equals(fresh.problems) and first.entries.equals(fresh.entries)
    assert miopen_fdb.read_find_db(src, "gfx942") is first  # once per process
    [entry] = list(cache.iterdir())
    assert oct(cache.stat().st_mode & 0o777) == "0o700"
    # A new process reads the cache: prove it by swapping the cached frames for marked ones.
    marked = first.problems.copy()
    marked.loc[0, "N"] = 987654321
    marked.to_parquet(entry / "problems.parquet")
    code = ("import sys; from ckheur.integrations.miopen.find_db import read_find_db; "
            "print(int(read_find_db(sys.argv[1], 'gfx942').problems['N'].iloc[0]))")
    out = subprocess.run([sys.executable, "-c", code, str(src)], capture_output=True, text=True, timeout=300)
    assert out.stdout.strip() == "987654321", out.stderr[-2000:]
    # Another file at the same path (new content and time): parsed again, never the old entry.
    with bz2.open(MI300X, "rt") as f:
        lines = f.read().splitlines()
    src.write_bytes(bz2.compress(("\n".join(lines[: len(lines) // 2]) + "\n").encode()))
    miopen_fdb._read_once.cache_clear()
    half = miopen_fdb.read_find_db(src, "gfx942")
    assert len(half.problems) < len(first.problems) and 987654321 not in half.problems["N"].tolist()
    # A cache folder every user can write is never used.
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    monkeypatch.setenv("CKHEUR_FIND_DB_CACHE", str(shared / "cache"))
    miopen_fdb._read_once.cache_clear()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        again = miopen_fdb.read_find_db(src, "gfx942")
    assert any("find-db cache" in str(x.message) and "not cached" in str(x.message) for x in w)
    assert again.problems.equals(half.problems) and not any((shared / "cache").iterdir())
