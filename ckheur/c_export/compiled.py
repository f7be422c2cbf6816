"""Rank through an exported C package from Python: built once with the system C compiler
(cached by the bundle's hash), called through ctypes.

    model = load_compiled("models/grouped_conv_fwd_bf16_gfx950")   # None (with a warning) without a compiler
    idx, scores, tflops = model.predict(problem)
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import operator
import os
import shutil
import subprocess
import tempfile
import threading
import warnings
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from ckheur.backends.abi import DIRECTION_CODES, DTYPE_CODES
from ckheur.errors import UserError
from ckheur.files import entry_risk, private_cache, write_file
from ckheur.c_export.generate import c_family
from ckheur.families.problem_base import ProblemError


def find_compiler() -> str | None:
    """The C compiler: $CC, else cc, gcc or clang on PATH (None when there is none)."""
    cc = os.environ.get("CC")
    if cc:
        return cc if shutil.which(cc.split()[0]) else None
    for name in ("cc", "gcc", "clang"):
        if shutil.which(name):
            return name
    return None


def cache_dir() -> Path:
    """Where built libraries are kept: $CKHEUR_CACHE_DIR, else ~/.cache/ckheur/compiled."""
    env = os.environ.get("CKHEUR_CACHE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "ckheur" / "compiled"


def trusted_cache_dir() -> Path:
    """The cache folder, created private (0700); one that another user owns or others can write, or
    that sits in a folder another user can change, is refused with a warning and a private folder
    of this process used instead (removed when the process exits)."""
    return private_cache(cache_dir(), "compiled-selector cache", "ckheur-compiled-")


def _verified_entry(target: Path) -> tuple[dict, Path] | str:
    """A cache entry's export info and library when it is this user's and the library is the one
    built (its sha256 recorded at build time); else why not."""
    from ckheur.parts import sha256_of

    try:
        for path in (target, target / "cache.json"):
            why = entry_risk(path)
            if why:
                return f"{path.name} {why}"
        meta = json.loads((target / "cache.json").read_text())
        info = json.loads((target / "export.json").read_text())
        lib = target / f"lib{info['name']}.so"
        why = entry_risk(lib)
        if why:
            return f"{lib.name} {why}"
        if sha256_of(lib) != meta["lib_sha256"]:
            return f"{lib.name} is not the library that was built (sha256 differs)"
        return info, lib
    except (OSError, ValueError, KeyError, TypeError, RecursionError) as e:
        return f"is damaged ({type(e).__name__}: {e})"


def _discard(target: Path) -> None:
    """Remove a damaged entry of this user's cache (moved aside first: a reader never sees half of it)."""
    aside = target.with_name(f".discard-{target.name}-{os.getpid()}")
    try:
        os.replace(target, aside)
    except OSError:
        return
    shutil.rmtree(aside, ignore_errors=True)


def _build_entry(model_dir: Path, files: Mapping[str, bytes], target: Path, cc: str,
                 op: Mapping[str, Any]) -> str | None:
    """Export the bundle's files as read for the key (``files``: written into a private copy of the
    folder, so the build is of exactly the bytes hashed; with the op settings ``op`` replacing the
    bundle's) and build into a fresh private folder, record the library's sha256, move it into place
    (a concurrent build that finished first wins); why it failed, or None."""
    from ckheur.c_export.generate import export_bundle
    from ckheur.parts import sha256_of

    tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=target.parent))
    src = Path(tempfile.mkdtemp(prefix=".src-", dir=target.parent)) / model_dir.name
    try:
        src.mkdir()
        for name, data in files.items():
            write_file(src / name, data)
        res = export_bundle(src, tmp, **op)
        lib = build(tmp, res.name, cc)
        write_file(tmp / "cache.json", json.dumps({"lib_sha256": sha256_of(lib)}))
        try:
            os.replace(tmp, target)
        except OSError:
            if not (target / "cache.json").exists():
                raise
    except (RuntimeError, OSError, UserError) as e:
        return str(e).splitlines()[0]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(src.parent, ignore_errors=True)
    return None


def bundle_files(model_dir: Path) -> dict[str, bytes]:
    """Every file of a bundle folder, each read once: what the cache key hashes and the build exports."""
    return {p.name: p.read_bytes() for p in sorted(Path(model_dir).iterdir())
            if p.is_file() and not p.name.startswith(".")}


def bundle_hash(model_dir: Path, sim_params: Any = None, op: Mapping[str, Any] | None = None,
                files: Mapping[str, bytes] | None = None) -> str:
    """Hash of what the generated C depends on: every file of the bundle (``files``: as
    ``bundle_files`` read them; None: read here), its remembered answers included (a file left out
    would let a changed bundle reuse a stale build), the exporter's C code, the latency-model
    parameters (the cascade uses them), the default remember margin and the op settings given in
    place of the bundle's (``op``: applicability, listed)."""
    from ckheur.c_export.package import C_DIR
    from ckheur.families import C_SOURCES
    from ckheur.learn.bundle import REMEMBERED_NOISE
    from ckheur.sim import load_params

    h = hashlib.sha256()
    for name, data in sorted((bundle_files(model_dir) if files is None else files).items()):
        h.update(f"{name}\0{len(data)}\0".encode() + data)
    for path in sorted(C_DIR.glob("*.c")) + sorted(C_SOURCES.rglob("*.c")) + [Path(__file__).with_name("generate.py")]:
        h.update(path.read_bytes())
    h.update(json.dumps(sim_params or load_params(), sort_keys=True, default=str).encode())
    h.update(f"remember margin {REMEMBERED_NOISE!r}".encode())
    if op:
        h.update(json.dumps(op, sort_keys=True, default=str).encode())
    return h.hexdigest()[:20]


def compile_command(cc: str, sources: list[Path], out: Path, shared: bool) -> list[str]:
    """The build command: plain C99 with libm, as the package README gives it."""
    # -O3, as CMake's Release build: it vectorizes the trees' per-candidate tests (-O2 is 1.2x slower).
    flags = ["-O3", "-std=c99"] + (["-shared", "-fPIC"] if shared else [])
    return [*cc.split(), *flags, "-o", str(out), *map(str, sources), "-lm"]


def build(package: Path, name: str, cc: str, shared: bool = True, out: Path | None = None) -> Path:
    """Compile an exported package: the shared library (default) or the ckheur_select program."""
    srcs = [package / f"{name}.c"] + ([] if shared else [package / "ckheur_select.c"])
    out = out or package / (f"lib{name}.so" if shared else "ckheur_select")
    r = subprocess.run(compile_command(cc, srcs, out, shared), capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"building {out.name} failed:\n{r.stderr[-2000:]}")
    return out


class CompiledModel:
    """An exported model's shared library, called through ctypes."""

    def __init__(self, lib_path: Path, info: dict) -> None:
        self.path, self.info = lib_path, info
        self.family = info["family"]
        self._lib = ctypes.CDLL(str(lib_path))
        p = info["prefix"]
        self._predict = getattr(self._lib, f"{p}_predict")
        self._predict.restype = ctypes.c_int
        self._error = getattr(self._lib, f"{p}_error")
        self._error.restype = ctypes.c_char_p
        self.num_kernels = int(getattr(self._lib, f"{p}_num_kernels")())
        self._outputs = threading.local()
        self._dtype = DTYPE_CODES[info["dtype"]]
        self._direction = DIRECTION_CODES[info["direction"]]
        from ckheur.families import get_family

        cf = c_family(get_family(self.family))  # the library records its family by name
        self._struct, self._enums = cf.ctype, cf.enums
        # Per call: the problem's fields read at once, enums as indices, the op's codes last.
        codes = {"direction": self._direction, "dtype": self._dtype}
        names = [f for f, _ in self._struct._fields_]
        read = [f for f in names if f not in codes]
        if names[len(read):] != [f for f in names if f in codes] or len(read) < 2:
            raise AttributeError(f"{self._struct.__name__}: the op's codes are not its last fields")
        self._read, self._codes = operator.attrgetter(*read), [codes[f] for f in names[len(read):]]
        self._enum_at = [(i, {v: j for j, v in enumerate(self._enums[f])}) for i, f in enumerate(read)
                         if f in self._enums]

    def problem_struct(self, p: Any) -> ctypes.Structure:
        """The C struct of a problem object (its fields by name; enums as indices)."""
        values = self._read(p)
        if self._enum_at:
            values = list(values)
            for i, index in self._enum_at:
                values[i] = index[values[i]]
        return self._struct(*values, *self._codes)

    def predict(self, p: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(kernel indices, scores, predicted TFLOPS) of the problem's candidates, in candidate order."""
        s = self.problem_struct(p)
        out = getattr(self._outputs, "arrays", None)  # each thread writes its own (threads may share a model)
        if out is None:
            n = self.num_kernels
            arrays = (np.empty(n, np.int32), np.empty(n), np.empty(n))
            out = self._outputs.arrays = (arrays, [ctypes.c_void_p(a.ctypes.data) for a in arrays])
        (idx, score, tflops), ptrs = out
        n = self._predict(ctypes.byref(s), self.num_kernels, *ptrs)
        if n < 0:
            raise ProblemError(f"{p.describe()}: {self._error(n).decode()}")
        return idx[:n].copy(), score[:n].copy(), tflops[:n].copy()


def op_settings(applicability: Any = None, listed: Mapping[str, Any] | None = None, screen: bool = True,
                available: Any = None) -> dict:
    """The op settings given in place of the bundle's, as plain values (config nodes and enums
    too), and ``screen=False`` where the bundle's screen is not used: what the build receives and
    the cache key hashes."""
    out: dict = {} if screen else {"screen": False}
    if applicability is not None:
        out["applicability"] = str(applicability)
    if listed is not None:
        out["listed"] = {str(k): v if isinstance(v, (str, bytes)) or not hasattr(v, "__iter__") else [str(x) for x in v]
                         for k, v in listed.items()}
    if available is not None:  # (MIOpen: op.available, names or a path: the export reads a path once)
        out["available"] = str(available) if isinstance(available, (str, Path)) else sorted(map(str, available))
    return out


def load_compiled(model_dir: str | Path, cc: str | None = None, *, applicability: str | None = None,
                  listed: Mapping[str, Any] | None = None, screen: bool = True,
                  available: Any = None) -> CompiledModel | None:
    """The bundle's compiled selector, exported and built on first use; None (with a warning) when
    there is no C compiler or the build fails, so callers fall back to the Python path.
    ``applicability`` and ``listed`` replace the bundle's ``op.applicability`` / ``op.listed``
    (MIOpen: which solvers are ranked per problem), ``available`` the bundle's ``op.available`` (the
    solvers compiled), and ``screen=False`` disables the bundle's screen, as ``Selector.load`` takes them."""
    from ckheur.learn.bundle import resolve_model_dir

    op = op_settings(applicability, listed, screen, available)
    model_dir = resolve_model_dir(model_dir)
    cc = cc or find_compiler()
    if cc is None:
        warnings.warn("no C compiler found ($CC, cc, gcc or clang): ranking with the Python path", stacklevel=2)
        return None
    files = bundle_files(model_dir)  # read once: the key hashes these bytes and the build exports them
    target = trusted_cache_dir() / bundle_hash(model_dir, op=op, files=files)
    got = _verified_entry(target) if os.path.lexists(target) else None
    if isinstance(got, str):
        warnings.warn(f"compiled-selector cache entry {target} {got}: rebuilding it", stacklevel=2)
        _discard(target)
        got = None
    if got is None:
        failed = _build_entry(model_dir, files, target, cc, op)
        got = f"could not be built ({failed})" if failed else _verified_entry(target)
    if isinstance(got, str):
        warnings.warn(f"compiled-selector cache entry {target} {got}: ranking with the Python path", stacklevel=2)
        return None
    info, lib = got
    try:
        return CompiledModel(lib, info)
    except (OSError, AttributeError) as e:
        warnings.warn(f"loading {lib} failed ({e}): ranking with the Python path", stacklevel=2)
        return None
