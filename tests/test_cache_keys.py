"""Caches are keyed by what they parsed: the find-db parse cache and the compiled-selector cache
read a file once, hash those bytes and parse (or export) that same buffer, so a file swapped
between the hash and the parse cannot put one file's answers under another's key."""

from __future__ import annotations

import bz2
import hashlib
import json
import os
import re
import shutil
import warnings
from pathlib import Path

from conftest import ROOT

MI300X = ROOT / "tests" / "data" / "miopen_fdb" / "gfx942130.HIP.fdb.txt.bz2"
CONV = ROOT / "models" / "grouped_conv_fwd_bf16_gfx950"


def _swap_after_hashing(monkeypatch, watched: bytes, swap) -> None:
    """hashlib.sha256 that, when it hashes ``watched``, first runs ``swap()`` (another user
    replacing the file right after the read that was hashed)."""
    real = hashlib.sha256
    done = []

    def sha256(data=b"", *a, **k):
        if not done and data == watched:
            done.append(1)
            swap()
        return real(data, *a, **k)

    monkeypatch.setattr(hashlib, "sha256", sha256)


def test_find_db_cache_holds_the_parse_of_the_bytes_it_hashed(tmp_path, monkeypatch):
    """The file is swapped for another of the same size and time after it is hashed: the cache
    entry under that hash holds the parse of the hashed bytes, and the file read again later is
    answered with its own problems, never the swapped-in file's."""
    from ckheur.integrations.miopen import find_db as miopen_fdb

    monkeypatch.setenv("CKHEUR_FIND_DB_CACHE", str(tmp_path / "cache"))
    lines = bz2.decompress(MI300X.read_bytes()).decode().splitlines()
    a = ("\n".join(lines[:40]) + "\n").encode()
    b = ("\n".join(lines[40:80]) + "\n").encode()
    b = b[:len(a)] if len(b) >= len(a) else b + b" " * (len(a) - len(b))  # same size
    src = tmp_path / "gfx942130.HIP.fdb.txt"
    src.write_bytes(a)
    st = os.stat(src)
    own = miopen_fdb._parse_find_db(src, "gfx942", a)

    def swap():
        src.write_bytes(b)
        os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns))  # same size, same time

    _swap_after_hashing(monkeypatch, a, swap)
    miopen_fdb._read_once.cache_clear()
    got = miopen_fdb.read_find_db(src, "gfx942")
    assert got.problems.equals(own.problems) and got.entries.equals(own.entries)
    [entry] = [p for p in (tmp_path / "cache").iterdir() if not p.name.startswith(".")]
    assert json.loads((entry / "meta.json").read_text())["sha256"] == hashlib.sha256(a).hexdigest()
    # The original back in place: its own parse, from the cache, not the swapped-in file's.
    src.write_bytes(a)
    os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns))
    miopen_fdb._read_once.cache_clear()
    again = miopen_fdb.read_find_db(src, "gfx942")
    assert again.problems.equals(own.problems) and again.entries.equals(own.entries)


def test_compiled_selector_cache_builds_the_bytes_it_hashed(tmp_path, monkeypatch):
    """kernels.json is reordered right after the bundle is hashed: the cache entry under that hash
    is built from the hashed bytes (its kernel-name table in their order), and its record of the
    kernels is what the selector checks its indices against."""
    from ckheur.c_export import compiled

    monkeypatch.setenv("CKHEUR_CACHE_DIR", str(tmp_path / "cache"))
    folder = Path(shutil.copytree(CONV, tmp_path / "bundle"))
    original = (folder / "kernels.json").read_bytes()
    kernels = json.loads(original)

    def swap():
        (folder / "kernels.json").write_text(json.dumps(kernels[::-1]))

    _swap_after_hashing(monkeypatch, original, swap)  # bundle_hash hashes each file's bytes in turn

    def fake_build(package, name, cc, shared=True, out=None):  # the build itself is not what is tested
        lib = package / f"lib{name}.so"
        lib.write_bytes(b"not a library")
        return lib

    monkeypatch.setattr(compiled, "build", fake_build)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert compiled.load_compiled(folder, cc="cc") is None  # the fake library does not load
    [entry] = [p for p in (tmp_path / "cache").iterdir() if not p.name.startswith(".")]
    info = json.loads((entry / "export.json").read_text())
    source = (entry / f"{info['name']}.c").read_text()
    table = re.search(r"ckh_kernel_names\[\] = \{\n(.*?)\n\};", source, re.S).group(1)
    assert [n.strip().rstrip(",").strip('"') for n in table.splitlines()] == [k["name"] for k in kernels]
    assert info["kernel_names"] == [k["name"] for k in kernels]


def test_a_compiled_selector_of_other_kernels_is_not_used(monkeypatch):
    """A build whose kernel table is not the bundle's the selector loaded (the bundle changed
    between the two reads) is never used: its indices would name other kernels."""
    import pytest

    from ckheur.c_export import compiled
    from ckheur.selection.selector import Selector

    names = [k["name"] for k in json.loads((CONV / "kernels.json").read_text())]

    class Built:
        info = {"kernel_names": names[::-1]}

    monkeypatch.setattr(compiled, "load_compiled", lambda *a, **k: Built())
    with pytest.warns(UserWarning, match="ranks other kernels than the bundle loaded"):
        sel = Selector.load(CONV, compiled=True)
    assert sel.compiled is None
    Built.info = {"kernel_names": names}
    assert isinstance(Selector.load(CONV, compiled=True).compiled, Built)


def test_an_import_records_the_hash_of_the_bytes_it_imported(tmp_path, monkeypatch, ck_fwd_csv):
    """An import's record (its sha256, which makes a later import of the same file a no-op) and its
    rows come from one read: a CSV swapped for another right after the hash is imported as the
    file that was hashed."""
    from ckheur import parts
    from ckheur.config import load_option
    from ckheur.data.dataset import read_dataset
    from ckheur.data.importing import import_file
    from ckheur.integrations.ck.tile_engine_csv import import_ck_csv

    lines = ck_fwd_csv.read_text().splitlines(keepends=True)
    a, b = "".join(lines[:60]), "".join(lines[:1] + lines[60:200])
    src = tmp_path / "fwd.csv"
    src.write_text(a)
    want = len(import_ck_csv(src)[0])
    real = parts.sha256_of

    def sha256_of(path, *args):
        got = real(path, *args)
        if Path(path) == src:
            src.write_text(b)  # another user's file in its place, right after the hash
        return got

    monkeypatch.setattr(parts, "sha256_of", sha256_of)
    data = tmp_path / "data"
    import_file(src, data_root=data, op=load_option("op/grouped_conv/fwd"), arch=load_option("arch/gfx950"),
                dataset=None, find_db_arch=None, overwrite=False, log=lambda s: None)
    [dataset] = [p for p in data.glob("*/*") if p.is_dir()]
    assert len(read_dataset(dataset)) == want
