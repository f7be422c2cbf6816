"""A model bundle is data, never code: every kernel trait of every family is checked on load
(type, allowed values, ranges, the bundle's op and direction, no duplicates), the generated C
embeds no text of the bundle unchecked, and no name or trait reaches an argument list unchecked."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import ROOT, run_cli
from test_trust import one_error

CONV = ROOT / "models" / "grouped_conv_fwd_bf16_gfx950"
MIOPEN = ROOT / "models" / "miopen_fwd_fp32_gfx942"
# C- and shell-significant text: quotes, backslashes, the ??/ trigraph, newlines, comment ends,
# spaces and an option.
HOSTILE = ['a"b', "a\\b", '??/"', "intra\nwave", "*/", "intrawave -o FILE x", "-o", "'x'", "compv3 x", "", "$(id)"]
GEMM_NAME = ("gemm_universal_fp16_rcr_compv3_cshuffle_intrawave_False_False_False_False_"
             "256x128x64_2x2x1_32x32x16")


def _base(family: str) -> tuple:
    """(kernels module, a real kernel's traits, the op it serves) of a family."""
    from ckheur.families import get_family

    mod = get_family(family).kernels
    if family == "gemm":
        return mod, mod.parse_name(GEMM_NAME).traits(), {"family": "gemm", "direction": "fwd", "dtype": "fp16"}
    folder = CONV if family == "grouped_conv" else MIOPEN
    spec = json.loads((folder / "feature_spec.json").read_text())
    return mod, json.loads((folder / "kernels.json").read_text())[0], spec["op"]


def _resized(traits: dict, tile_m: int) -> dict:
    """A kernel's traits with another tile_m (and without the values computed from it)."""
    return {k: v for k, v in traits.items() if k not in ("name", "lds_bytes")} | {"tile_m": tile_m}


def _bad_values(kind: str) -> list:
    if kind == "int":
        return [0, -16, 2**40, "16", 16.5, True, None]
    if kind == "bool":
        return ["yes", 1, None, "true"]
    return HOSTILE + [16, None, ["intrawave"]]


@pytest.mark.parametrize("family", ["grouped_conv", "gemm", "miopen"])
def test_every_trait_of_every_family_is_checked(family):
    """Each trait given a wrong type, a value outside its range or allowed values, or C- and
    shell-significant text is one KernelError naming the trait; the real traits load as they are."""
    import dataclasses

    from ckheur.families.kernel_base import KernelError

    mod, traits, op = _base(family)
    k = mod.from_traits(traits, op)
    assert k.traits() == traits
    for f in dataclasses.fields(type(k)):
        for bad in _bad_values(f.type):
            if f.name == "solver_id" and bad == 0:
                continue  # 0 is a solver's code
            with pytest.raises(KernelError) as e:
                mod.from_traits({**traits, f.name: bad}, op)
            msg = str(e.value)
            assert "\n" not in msg.replace("\\n", "") and f"{f.name}=" in msg, msg
    with pytest.raises(KernelError, match="unknown trait 'extra'"):
        mod.from_traits({**traits, "extra": 1}, op)


def test_direction_dtype_and_duplicates_are_the_bundle_s():
    """A backward kernel cannot serve a forward bundle, nor a kernel of another dtype; a stored name
    that the traits do not give, and a kernel listed twice, are refused."""
    from ckheur.families.kernel_base import KernelError, check_distinct

    mod, traits, op = _base("grouped_conv")
    with pytest.raises(KernelError, match="direction='bwd_data': the bundle's op is 'fwd'"):
        mod.from_traits({**traits, "direction": "bwd_data"}, op)
    with pytest.raises(KernelError, match="dtype='fp16': the bundle's op is 'bf16'"):
        mod.from_traits({**traits, "dtype": "fp16"}, op)
    with pytest.raises(KernelError, match="name=.* disagrees with the kernel's traits"):
        mod.from_traits({**traits, "name": traits["name"] + "_si"}, op)
    k = mod.from_traits(traits, op)
    other = mod.from_traits(_resized(traits, 32), op)
    check_distinct([k, other])
    with pytest.raises(KernelError, match=r"kernel 2 \(.*\) repeats kernel 0: duplicate kernels"):
        check_distinct([k, other, k])


def _gemm_bundle(folder: Path) -> Path:
    """A small real GEMM bundle (no GEMM bundle ships): a two-tree LightGBM model on the GEMM
    engine's features, two kernels."""
    import numpy as np

    from ckheur.config import load_option
    from ckheur.families.engines import get_engine
    from ckheur.learn.bundle import save_bundle
    from ckheur.threads import lightgbm

    lgb, engine = lightgbm(), get_engine("gemm")
    names = list(engine.feature_names(False))
    X = np.random.default_rng(0).random((50, len(names)))
    booster = lgb.train({"objective": "regression", "num_leaves": 4, "verbose": -1, "min_data_in_leaf": 5},
                        lgb.Dataset(X, X[:, 0], feature_name=names), num_boost_round=2)
    mod, traits, op = _base("gemm")
    kernels = [mod.from_traits(traits, op), mod.from_traits(_resized(traits, 128), op)]
    spec = {"engine": "gemm", "encoding_version": engine.ENCODING_VERSION, "feature_names": names, "categorical": [],
            "analytic": False, "objective": "regression_log", "arch": load_option("arch/gfx950"), "op": op}
    return save_bundle(folder, booster, None, spec, kernels, {}, {}, {"data_kind": "sim"})


def _hostile_bundle(tmp_path: Path, source: Path | None, index: int, edit: dict | None,
                    duplicate: bool = False) -> Path:
    if source is None:
        source = _gemm_bundle(tmp_path / "gemm")
    folder = Path(shutil.copytree(source, tmp_path / "bundle"))
    kernels = json.loads((folder / "kernels.json").read_text())
    if edit is not None:
        kernels[index] = {**kernels[index], **edit}
    if duplicate:
        kernels.append(dict(kernels[index]))
    (folder / "kernels.json").write_text(json.dumps(kernels))
    return folder


CASES = [  # (every trait's every kind of fault is checked above, on the family's from_traits)
    (CONV, {"scheduler": '??/" x'}, "scheduler="),
    (CONV, {"direction": "bwd_data", "name": "grouped_conv_bwd_data_bf16_2d_16x64x64_compv3_intrawave"},
     "direction='bwd_data'"),
    (CONV, {"tile_k": 2**40}, "tile_k=1099511627776"),
    (CONV, None, "duplicate kernels"),
    (MIOPEN, {"solver_id": "3"}, "solver_id='3'"),
    (None, {"epilogue": "cshuffle -o x"}, "epilogue='cshuffle -o x'"),  # None: a GEMM bundle
    (None, {"layout": "rcr*/"}, "layout='rcr*/'"),
]


@pytest.mark.parametrize("source,edit,needle", CASES)
def test_hostile_kernels_json_is_refused_on_load(tmp_path, source, edit, needle):
    """Every hostile kernels.json is one BundleError naming the file and the field; the
    compiled selector refuses it the same way, before anything is generated or built."""
    from ckheur.learn.bundle import BundleError, load_bundle
    from ckheur.selection.selector import Selector

    folder = _hostile_bundle(tmp_path, source, 1 if source is None else 3, edit, duplicate=edit is None)
    for load in (load_bundle, lambda f: Selector.load(f, compiled=True)):
        with pytest.raises(BundleError) as e:
            load(folder)
        msg = str(e.value)
        assert len(msg.splitlines()) == 1 and str(folder / "kernels.json") in msg and needle in msg, msg


def test_hostile_bundle_runs_nothing_in_any_stage(tmp_path):
    """predict, tune (a command backend that would leave a file for every run), export (with its
    build) each refuse the bundle in one line, exit 2: nothing is written, built or run."""
    folder = _hostile_bundle(tmp_path, CONV, 3, {"scheduler": '??/");}\nint x = 1; /* */ -o FILE x'})
    ran = tmp_path / "ran"
    ran.mkdir()
    line = "problem=convbfp16 -n 16 -c 256 -H 28 -W 28 -k 128 -y 3 -x 3 -p 1 -q 1"
    one_error(run_cli("stage=predict", line, f"predict.model_dir={folder}", f"hydra.run.dir={tmp_path / 'p'}"),
              "kernels.json", "scheduler=")
    one_error(run_cli("stage=tune", "op=fwd", line, f"tune.model_dir={folder}", f"tune.db={tmp_path / 'db'}",
                      "backend=command", f"backend.template=touch {ran}/{{scheduler}}", "backend.regex='(1)'",
                      f"hydra.run.dir={tmp_path / 't'}"), "kernels.json", "scheduler=")
    one_error(run_cli("stage=export", f"export.model_dir={folder}", f"export.output={tmp_path / 'out'}",
                      f"hydra.run.dir={tmp_path / 'e'}"), "kernels.json", "scheduler=")
    assert not list(ran.iterdir()) and not (tmp_path / "out").exists()


def test_no_hostile_name_or_trait_reaches_an_argument_list(tmp_path):
    """A kernel built past the load check (a name holding spaces and an option) is never run by
    backend=command: its pair fails with the reason, the other pair of the batch runs."""
    import dataclasses

    from ckheur.backends import make_backend
    from ckheur.config import load_option
    from ckheur.families.grouped_conv.problems import problem_from_dict

    op, arch = load_option("op/grouped_conv/fwd"), load_option("arch/gfx950")
    mod, traits, _ = _base("grouped_conv")
    good = mod.from_traits(traits)
    bad = dataclasses.replace(good, scheduler=f"intrawave -o {tmp_path}/FILE x")
    cmd = {**load_option("backend/command"), "template": f"touch {tmp_path}/ran_{{scheduler}}_{{tile_m}}",
           "regex": "(.*)"}
    p = problem_from_dict({"N": 1, "C": 64, "K": 64, "Hi": 8, "Wi": 8, "Y": 3, "X": 3})
    got = make_backend(cmd, op, arch).measure([(p, bad), (p, good)])
    assert got.status[0] == "failed" and "not run" in got.error[0] and "scheduler" in got.error[0]
    assert sorted(x.name for x in tmp_path.iterdir()) == ["ran_intrawave_16"]  # the good pair's file alone


def test_generated_c_embeds_no_bundle_text(tmp_path):
    """The C package's comments carry no text of the bundle as it is (a data kind closing the
    comment, a trigraph), and its kernel-name table holds only the checked names."""
    import re

    from ckheur.c_export.generate import export_bundle
    from ckheur.learn.bundle import BundleError, load_bundle

    folder = Path(shutil.copytree(CONV, tmp_path / "bundle"))
    manifest = json.loads((folder / "train_manifest.json").read_text())
    manifest["data_kind"] = 'sim */ __attribute__((constructor)) static void f(void) { } /* ??/'
    (folder / "train_manifest.json").write_text(json.dumps(manifest))
    res = export_bundle(folder, tmp_path / "out")
    for f in res.files:
        if f.suffix in (".c", ".h"):
            text = f.read_text()
            assert "__attribute__((constructor))" not in text and "??/" not in text, f
    source = (tmp_path / "out" / f"{res.name}.c").read_text()
    table = re.search(r"ckh_kernel_names\[\] = \{\n(.*?)\n\};", source, re.S).group(1)
    names = [n.strip().rstrip(",") for n in table.splitlines()]
    expected = [k["name"] for k in json.loads((CONV / "kernels.json").read_text())]
    assert names == [f'"{n}"' for n in expected]
    assert all(re.fullmatch(r'"[A-Za-z0-9_<>.-]+"', n) for n in names)
    # The arch's name, which the comments and the benchmark command name, is checked on load.
    spec = json.loads((folder / "feature_spec.json").read_text())
    spec["arch"]["name"] = "gfx950 */ int x; /*"
    (folder / "feature_spec.json").write_text(json.dumps(spec))
    with pytest.raises(BundleError, match=r"feature_spec.json: arch must be an object whose name is letters"):
        load_bundle(folder)


def test_a_spec_field_that_passed_once_is_checked_again_when_it_changes(tmp_path):
    """load_bundle checks each key of a spec's arch and op_config against its schema once per value
    in a process (bundles of a family share their solver tables): after the shipped MIOpen bundle
    passed, a copy whose solver registry or arch holds a value of the wrong type is refused, with
    the message of OmegaConf's merge of the whole object."""
    from omegaconf import OmegaConf

    from ckheur.config import ArchSchema
    from ckheur.families.miopen.schema import MIOpenOpSchema
    from ckheur.learn.bundle import BundleError, load_bundle

    load_bundle(MIOPEN)
    folder = Path(shutil.copytree(MIOPEN, tmp_path / "bundle"))
    for field, schema, path, bad in (("op_config", MIOpenOpSchema, ("registry", 3, "id"), "three"),
                                     ("arch", ArchSchema, ("num_cus",), "many")):
        spec = json.loads((MIOPEN / "feature_spec.json").read_text())
        node = spec[field]
        for step in path[:-1]:
            node = node[step]
        node[path[-1]] = bad
        (folder / "feature_spec.json").write_text(json.dumps(spec))
        with pytest.raises(Exception) as whole:  # what OmegaConf says of the whole object
            OmegaConf.merge(OmegaConf.structured(schema), spec[field])
        expected = f"{field}.{whole.value.full_key}: {str(whole.value).splitlines()[0]}"
        with pytest.raises(BundleError) as e:
            load_bundle(folder)
        assert str(e.value) == f"{folder / 'feature_spec.json'}: {expected}"
    (folder / "feature_spec.json").write_text((MIOPEN / "feature_spec.json").read_text())
    assert load_bundle(folder).spec == load_bundle(MIOPEN).spec  # the copy as shipped loads again
