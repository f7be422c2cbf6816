"""Trust, round three (items 2, 4, 5 of issue 33): the user find-db writer holds a lock and writes
its backup aside; find-db lines, remembered answers, solver names, leaf sums and TunaNet
statistics from outside files are checked before use; every compressed input is read with a cap
on its decompressed size."""

from __future__ import annotations

import bz2
import gzip
import json
import multiprocessing
import os
import stat
from pathlib import Path

import pytest

from conftest import ROOT, run_cli

MI300X = ROOT / "tests" / "data" / "miopen_fdb" / "gfx942130.HIP.fdb.txt.bz2"
FWD_KEY = "256-56-56-3x3-256-56-56-32-1x1-1x1-1x1-0-NCHW-FP16-F_g32"
FWD_LINE = (f"{FWD_KEY}=ConvBinWinogradRxSf2x3:0.22021,0,miopenConvolutionFwdAlgoWinograd;"
            "ConvHipImplicitGemmGroupFwdXdlops:0.877855,102797312,miopenConvolutionFwdAlgoImplicitGEMM")
USER_FDB = "gfx942130.HIP.3_2_0_abc.ufdb.txt"


def _lines(n: int = 40) -> list[str]:
    return [ln for ln in bz2.decompress(MI300X.read_bytes()).decode().splitlines() if ln.strip()][:n]


def _new_line(n: int, solver: str = "GemmBwdRest", time_ms: float = 0.5):
    """A find-db line of a problem the MI300X slice does not hold (batch ``n``)."""
    from ckheur.miopen_fdb import FindDbEntry, FindDbLine, algorithm_name, problem_key
    from ckheur.problems.miopen_conv import problem_from_dict

    p = problem_from_dict({"N": n, "C": 24, "K": 40, "Hi": 17, "Wi": 19, "Y": 3, "X": 3, "pad_h": 1, "pad_w": 1})
    return FindDbLine(problem_key(p, "bwd_data", "bf16"),
                      (FindDbEntry(solver, time_ms, 0, algorithm_name("bwd_data", "gemm")),))


# ------------------------------------------------------------------ 2. the user find-db writer

def _merge_reading_slowly(target: Path, line, read_done, other_done) -> None:
    """Merge, pausing between reading the file and writing it until the other merge is done (or 3 s
    passed): without a lock the other merge runs in that pause; with one it waits for this one."""
    import ckheur.miopen_fdb as fdb

    real = fdb._text

    def read_then_pause(path):
        text = real(path)
        read_done.set()
        other_done.wait(3)
        return text

    fdb._text = read_then_pause
    fdb.merge_find_db(target, [line], merge=True)


def _merge_after(target: Path, line, read_done, other_done) -> None:
    from ckheur.miopen_fdb import merge_find_db

    read_done.wait(30)
    merge_find_db(target, [line], merge=True)
    other_done.set()


def test_two_merges_at_once_both_keep_their_entries(tmp_path):
    """The second merge starts while the first holds the file's old text: both merges' keys end
    up in the file (the second waits for the first's lock)."""
    target = tmp_path / USER_FDB
    target.write_text("\n".join(_lines()) + "\n")
    ctx = multiprocessing.get_context("fork")
    for round_ in range(2):
        a, b = _new_line(100 + round_), _new_line(200 + round_)
        read_done, other_done = ctx.Event(), ctx.Event()
        procs = [ctx.Process(target=_merge_reading_slowly, args=(target, a, read_done, other_done)),
                 ctx.Process(target=_merge_after, args=(target, b, read_done, other_done))]
        for p in procs:
            p.start()
        for p in procs:
            p.join(60)
        assert [p.exitcode for p in procs] == [0, 0]
        keys = {ln.partition("=")[0] for ln in target.read_text().splitlines()}
        assert {a.key.text(), b.key.text()} <= keys, round_


def test_a_merge_keeps_the_mode_backs_up_aside_and_only_when_something_changes(tmp_path):
    """A 600 user find-db stays 600 and so is its backup; merging what it already holds writes
    nothing (no backup, the file untouched); the backup is a whole copy of the old text."""
    from ckheur.miopen_fdb import merge_find_db, parse_line

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


def test_compressed_find_dbs_and_csvs_are_refused_beyond_the_cap_in_one_line(tmp_path, low_caps):
    """stage=import of a bz2 find-db and of a gzipped CK CSV that expand past the cap: one line
    naming the file and the cap, nothing written; the find-db tier reads through the same cap."""
    from ckheur.miopen_fdb import read_find_db

    fdb = _bomb(tmp_path / "gfx942130.HIP.fdb.txt.bz2", 2 << 20, (FWD_LINE + "\n").encode())
    header = b"kernel,problem_idx,N,C,K,G,Hi,Wi,Y,X,stride_h,stride_w,pad_h,pad_w,latency_ms,tflops,non_zero\n"
    csv = _bomb(tmp_path / "sweep.csv.gz", 2 << 20, header)
    for src in (fdb, csv):
        r = run_cli("stage=import", f"import.path={src}", f"paths.data={tmp_path / 'data'}",
                    f"hydra.run.dir={tmp_path / ('r' + src.name)}")
        errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
        assert len(errors) == 1 and src.name in errors[0] and low_caps in errors[0], r.stderr[-2000:]
    assert not (tmp_path / "data").exists() or not any((tmp_path / "data").rglob("*.parquet"))
    with pytest.raises(ValueError, match=low_caps):
        read_find_db(fdb)


def test_bundle_and_ck_model_files_are_refused_beyond_the_cap(tmp_path, low_caps):
    """A bundle whose model text or remembered answers, or a CK model folder whose gzipped model,
    expands past the cap: BundleError / CKFormatError naming the file and the cap."""
    import shutil

    from ckheur.models.bundle import BundleError, load_bundle
    from ckheur.models.ck_format import CKFormatError, CKModel

    src = ROOT / "bundles" / "miopen_fwd_fp16_gfx942"
    for name in ("model.txt.gz", "answers.json.gz"):
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
