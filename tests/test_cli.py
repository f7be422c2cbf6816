"""The command line end to end, writing to temporary folders (in this process, and one real process)."""

from __future__ import annotations

import csv
import re

from conftest import ROOT, run_cli


def test_list_stage_prints_pool_and_problems(tmp_path):
    r = run_cli("stage=list", "op=grouped_conv/fwd", "arch=gfx950", "problems=smoke",
                "list.max_rows=-1", f"hydra.run.dir={tmp_path}", in_process=False)  # the real process
    assert r.returncode == 0, r.stderr
    assert "Kernel pool: 60 legal (2d: 30, 3d: 30)" in r.stdout
    assert "grouped_conv_forward_bf16_2d_128x64x128_compv5_intrawave" in r.stdout
    assert "Problem set smoke: 20 problems (2d: 16, 3d: 4)" in r.stdout
    with open(tmp_path / "kernels.csv") as f:
        assert len(list(csv.DictReader(f))) == 60
    with open(tmp_path / "problems.csv") as f:
        assert len(list(csv.DictReader(f))) == 20


def test_list_with_filter_as_written_in_the_issue(tmp_path):
    r = run_cli("stage=list", "kernels.filter=tile_n >= 128 and pipeline == 'compv5'", "problems=smoke",
                "list.count_only=true", f"hydra.run.dir={tmp_path}")
    assert r.returncode == 0, r.stderr
    assert "Kernel pool: 6 legal (2d: 3, 3d: 3)" in r.stdout
    assert "54 removed by kernels.filter" in r.stdout


def test_explain_on_gfx942(tmp_path):
    r = run_cli("arch=gfx942", "kernels.explain=true", "problems=smoke", "list.count_only=true",
                f"hydra.run.dir={tmp_path}")
    assert r.returncode == 0, r.stderr
    assert "LDS 49152 B > compv4 budget 32768 B on gfx942" in r.stdout


def test_bad_filter_is_a_clear_error(tmp_path):
    r = run_cli("kernels.filter=__import__('os')", "problems=smoke", f"hydra.run.dir={tmp_path}")
    assert r.returncode == 2
    assert "error: kernels.filter" in r.stderr and "Call not allowed" in r.stderr
    assert "Traceback" not in r.stderr


def test_typo_fails_at_composition(tmp_path):
    r = run_cli("arch.num_cu=3", f"hydra.run.dir={tmp_path}")
    assert r.returncode != 0
    assert "Key 'num_cu' not in 'ArchSchema'" in r.stderr


def test_multirun_over_ops_composes_each_job_once_as_hydra_does_twice(tmp_path, monkeypatch):
    """A multirun over the ops; each job composed once (Hydra's sweeper checks every job by composing
    it, then its launcher composed it again: ckheur.cli hands the checked composition to the launcher),
    reading the ConfigStore in place (conf_source.store_shared), building Hydra's map of known choices only
    for an interpolated default (conf_source.choices_map_when_interpolated), copying nodes' metadata directly
    (conf_source.nodes_copied_directly), writing the records with libyaml
    (cli._records_written_by_libyaml): every job's config, Hydra's config and
    overrides written, and the printed output, are what Hydra's own twice-composing run gives."""
    import contextlib
    import copy

    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra.core import utils as hydra_utils
    from hydra.core.config_store import ConfigStore

    from ckheur import cli, conf_source
    from ckheur.cli import HYDRA_FILES

    compositions, hydra_wrote = [], []
    compose = ConfigLoaderImpl.load_configuration
    monkeypatch.setattr(ConfigLoaderImpl, "load_configuration",
                        lambda self, *a, **kw: compositions.append(1) or compose(self, *a, **kw))
    save = hydra_utils._save_config
    monkeypatch.setattr(hydra_utils, "_save_config", lambda cfg, name, folder: hydra_wrote.append(name) or
                        save(cfg, name, folder))
    runs = {}
    for name in ("once", "hydra"):
        if name == "hydra":  # Hydra's own composition, without ckheur's shortcuts
            monkeypatch.setattr(cli, "_jobs_composed_once", contextlib.nullcontext)
            monkeypatch.setattr(conf_source, "store_shared", contextlib.nullcontext)
            monkeypatch.setattr(conf_source, "choices_map_when_interpolated", contextlib.nullcontext)
            monkeypatch.setattr(conf_source, "nodes_copied_directly", contextlib.nullcontext)
            monkeypatch.setattr(cli, "_records_written_by_libyaml", contextlib.nullcontext)
        compositions.clear()
        hydra_wrote.clear()
        folder = tmp_path / name
        r = run_cli("-m", "op=fwd,bwd_data,bwd_weight", "problems=smoke", "list.count_only=true",
                    f"hydra.sweep.dir={folder}")
        assert r.returncode == 0, r.stderr
        assert sorted(p.name for p in folder.iterdir() if p.is_dir()) == ["0", "1", "2"]
        assert r.stdout.count("Kernel pool: 40 legal") == 2 and r.stdout.count("Kernel pool: 60 legal") == 1
        assert len(compositions) == {"once": 1 + 3, "hydra": 1 + 2 * 3}[name]  # the master config, then the jobs
        # with libyaml: every record but hydra.yaml (Hydra's help texts have newlines: Hydra writes those)
        assert sorted(hydra_wrote) == {"once": ["hydra.yaml"] * 3, "hydra": sorted(HYDRA_FILES * 3)}[name]
        printed = re.sub(r"^\[[-0-9 :,]+\]", "", r.stdout, flags=re.M)  # Hydra's log lines' times
        runs[name] = [printed.replace(str(folder), "<sweep>")] + [
            (folder / job / ".hydra" / f).read_text().replace(str(folder), "<sweep>")
            for job in ("0", "1", "2") for f in ("config.yaml", "hydra.yaml", "overrides.yaml")]
    assert runs["once"] == runs["hydra"]
    assert "__deepcopy__" not in vars(ConfigStore)  # store_shared ended with the command
    assert copy.deepcopy(ConfigStore.instance()) is not ConfigStore.instance()


def test_the_choices_map_is_built_only_for_an_interpolated_default(tmp_path, monkeypatch, compose):
    """Hydra builds its map of the choices known so far for every defaults list; ckheur builds it only
    for a list with an interpolated default (conf_source.choices_map_when_interpolated): never for the
    packaged config, and a config with one (``- pair: ${a}_${b}``) composes as Hydra composes it."""
    import contextlib

    from hydra import compose as hydra_compose, initialize_config_dir
    from hydra._internal import defaults_list
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    from ckheur import conf_source

    built = []
    build = defaults_list._create_interpolation_map
    monkeypatch.setattr(defaults_list, "_create_interpolation_map", lambda *a: built.append(1) or build(*a))
    compose(["stage=train", "op=bwd_data"])
    assert built == []  # no packaged defaults list is interpolated
    for group, option, text in (("a", "x", "va: 1"), ("b", "y", "vb: 2"), ("pair", "x_y", "both: 3")):
        (tmp_path / group).mkdir()
        (tmp_path / group / f"{option}.yaml").write_text(text + "\n")
    (tmp_path / "top.yaml").write_text("defaults:\n  - a: x\n  - b: y\n  - pair: ${a}_${b}\n  - _self_\n")
    composed = {}
    for name in ("ckheur", "hydra"):
        shortcut = conf_source.choices_map_when_interpolated() if name == "ckheur" else contextlib.nullcontext()
        built.clear()
        with initialize_config_dir(str(tmp_path), version_base="1.3"), shortcut:
            composed[name] = OmegaConf.to_yaml(hydra_compose("top", return_hydra_config=True))
        GlobalHydra.instance().clear()
        assert built and (name == "hydra" or len(built) == 1), name  # ckheur: for top.yaml's list alone
    assert composed["ckheur"] == composed["hydra"]
    assert "both: 3" in composed["ckheur"] and "pair: x_y" in composed["ckheur"]
    assert defaults_list._create_interpolation_map.__name__ == "<lambda>"  # restored when the composition ended


def test_config_copies_copy_nodes_directly_and_alike(compose, monkeypatch):
    """While ckheur composes, a config node's metadata is deep-copied field by field and a value
    node's copy is made without constructing an empty one (conf_source.nodes_copied_directly): a
    composed job config copied so equals its copy made OmegaConf's way node for node (attributes,
    values, metadata, parents within the copy) and changes to either copy reach neither the other
    nor the original."""
    import copy

    from omegaconf import DictConfig, ListConfig, OmegaConf
    from omegaconf.base import Metadata
    from omegaconf.nodes import EnumNode, ValueNode

    from ckheur import conf_source

    compose(["stage=list"])  # the schemas registered (made once per process, outside compositions)
    generic, built = [], []
    reconstruct, construct = copy._reconstruct, ValueNode.__init__
    monkeypatch.setattr(copy, "_reconstruct", lambda x, memo, *a, **kw: generic.append(isinstance(x, Metadata))
                        or reconstruct(x, memo, *a, **kw))
    monkeypatch.setattr(ValueNode, "__init__", lambda self, *a, **kw: built.append(type(self)) or
                        construct(self, *a, **kw))
    cfg = compose(["stage=train", "op=miopen/fwd", "arch=gfx90a"])
    assert generic and not any(generic)  # the composition copied nodes; no metadata the generic way
    built.clear()
    expected = copy.deepcopy(cfg)
    assert any(generic) and len(built) > 500  # outside a composition: OmegaConf's way
    built.clear()
    with conf_source.nodes_copied_directly():
        got = copy.deepcopy(cfg)
    assert set(built) == {EnumNode}  # only the enum nodes are constructed
    assert "__deepcopy__" not in vars(Metadata)

    def nodes(c, root, path=""):
        yield path, c
        for k in range(len(c)) if isinstance(c, ListConfig) else c.keys():
            child = c._get_node(k)
            assert child._get_parent() is c and child._get_root() is root, path
            yield from nodes(child, root, f"{path}.{k}") if isinstance(child, (DictConfig, ListConfig)) \
                else [(f"{path}.{k}", child)]

    pairs = list(zip(nodes(got, got), nodes(expected, expected), strict=True))
    assert len(pairs) > 500
    for (p, a), (q, b) in pairs:
        assert p == q and type(a) is type(b) and a is not b and a._metadata is not b._metadata, p
        assert vars(a._metadata) == vars(b._metadata) and a._metadata.flags is not b._metadata.flags, p
        assert list(vars(a)) == list(vars(b)) and a._flags_cache == b._flags_cache, p
        if isinstance(a, ValueNode):
            assert a._val is b._val or a._val == b._val, p
    assert OmegaConf.to_yaml(got) == OmegaConf.to_yaml(expected) == OmegaConf.to_yaml(cfg)
    OmegaConf.set_readonly(got.op, True)
    assert not OmegaConf.is_readonly(cfg.op) and not OmegaConf.is_readonly(expected.op)


def test_a_problem_set_in_the_users_own_config_folder(tmp_path, confdir):
    """--config-dir adds a user's config folder: its problems/tiny.yaml (on the packaged schema) is
    a problem set like the shipped ones (and the run mode is Hydra's own reading there)."""
    r = run_cli(f"--config-dir={confdir}", "problems=tiny", "list.count_only=true", f"hydra.run.dir={tmp_path / 'r'}")
    assert r.returncode == 0, r.stderr
    assert "Problem set tiny: 3 problems (2d: 3)" in r.stdout


def test_hydra_mode_is_read_without_composing_where_nothing_can_set_it_and_multiruns_nested_ops(tmp_path):
    """cli.main skips Hydra's composition that only reads hydra.mode unless an argument can set it:
    no packaged config sets it, Hydra's own reading agrees, and hydra.mode=MULTIRUN still multiruns
    (here over nested op names)."""
    import yaml
    from hydra import initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    from ckheur.cli import mode_is_hydras_default

    for f in (ROOT / "conf").rglob("*.yaml"):
        assert "mode" not in ((yaml.safe_load(f.read_text()) or {}).get("hydra") or {}), f
    with initialize_config_module("ckheur.conf", version_base="1.3"):
        hydra = GlobalHydra.instance().hydra
        for args in (["stage=train", "op=bwd_data"], ["op=fwd,bwd_data"], ["hydra.mode=MULTIRUN", "op=fwd"]):
            unset = hydra.get_mode(config_name="config", overrides=args) is None
            assert unset == mode_is_hydras_default(args), args
    GlobalHydra.instance().clear()
    # ... over the nested names of the ops (op=fwd,... are their aliases: test_multirun_over_ops)
    r = run_cli("hydra.mode=MULTIRUN", "op=grouped_conv/fwd,grouped_conv/bwd_data", "problems=smoke",
                "list.count_only=true", f"hydra.sweep.dir={tmp_path}")
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == ["0", "1"]


def test_cfg_job_and_info_defaults():
    r = run_cli("--cfg", "job", "op=bwd_data")
    assert r.returncode == 0, r.stderr
    assert "direction: bwd_data" in r.stdout and "name: train_bwd_data" in r.stdout
    r = run_cli("--info", "defaults")
    assert r.returncode == 0 and "op/grouped_conv/fwd" in r.stdout
