"""Composition: every YAML option composes; typos and bad values fail naming the key."""

from __future__ import annotations

import pytest
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf
from omegaconf.errors import ConfigKeyError, ValidationError

from ckheur.problems import shipped_sets
from ckheur.config import CONF_DIR
from ckheur.stages import STAGES, plain

ARCHS = sorted(p.stem for p in (CONF_DIR / "arch").glob("*.yaml"))
OPS = sorted(str(p.relative_to(CONF_DIR / "op").with_suffix("")) for p in (CONF_DIR / "op").rglob("*.yaml"))
BACKENDS = sorted(p.stem for p in (CONF_DIR / "backend").glob("*.yaml"))
MANDATORY: dict = {}  # values a user must give for a stage
STAGE_FILES = sorted(p.stem for p in (CONF_DIR / "stage").glob("*.yaml"))


def test_every_group_has_options():
    assert ARCHS == ["gfx1030", "gfx900", "gfx906", "gfx908", "gfx90a", "gfx942", "gfx950"]
    assert set(OPS) >= {"fwd", "bwd_data", "bwd_weight", "grouped_conv/fwd",
                        "grouped_conv/bwd_data", "grouped_conv/bwd_weight", "gemm", "gemm/universal"}
    assert set(STAGE_FILES) == set(STAGES)


# The aliases (op=fwd is op=grouped_conv/fwd, ...): each composes to the whole config of the option
# it names (test_alias_equals_nested_option), so the product below takes the nested options.
ALIASES = {"fwd": "grouped_conv/fwd", "bwd_data": "grouped_conv/bwd_data", "bwd_weight": "grouped_conv/bwd_weight",
           "gemm": "gemm/universal"}
# Every arch and every op once (paired in turn), and every stage once (with the op families' first
# ops in turn): an arch file sets only the arch node and a stage file only its own, and an op file
# meets the arch only in ${arch.name} (its model_name, checked for each op and each arch), so the
# products add compositions, not coverage.
_OPS = [op for op in OPS if op not in ALIASES]
CASES = [(ARCHS[i % len(ARCHS)], _OPS[i % len(_OPS)], "list") for i in range(max(len(ARCHS), len(_OPS)))] + \
    [("gfx950", ("fwd", "gemm", "miopen/fwd")[i % 3], stage)
     for i, stage in enumerate(s for s in STAGE_FILES if s != "list")]


@pytest.mark.parametrize("arch,op,stage", CASES)
def test_compose_arch_op_stage(compose, arch, op, stage):
    cfg = compose([f"arch={arch}", f"op={op}", f"stage={stage}"])
    assert OmegaConf.missing_keys(cfg) == MANDATORY.get(stage, set())
    resolved = plain(cfg)
    assert resolved["arch"]["name"] == arch
    cg = resolved["arch"]["codegen"]
    if cg["warp_tiles"]:  # LDS budget fractions of the arch (gfx908 has no CK Tile code generation)
        assert cg["lds_budget_fraction"] == {"compv4": 0.5, "compv6": 0.5, "comp_async": 0.5}
        assert cg["default_lds_budget_fraction"] == 1.0
    # Each op selects its own default problem set.
    assert resolved["problems"]["name"] == resolved["op"]["default_problems"]
    # each family's default recipe: an analytic prior and small trees where a simulator exists, room for
    # MIOpen's large tables (conf/model/relative_wide.yaml)
    assert (resolved["model"]["prior"], resolved["model"]["num_leaves"], resolved["model"]["max_trees"]) == \
        (("none", 63, 2000) if op.startswith("miopen") else ("analytic", 7, 1000))
    if op.startswith("gemm"):
        assert resolved["op"]["model_name"] == f"gemm_universal_fp16_{arch}"
        assert resolved["problems"]["name"] == "gemm_train"
        return
    direction = op.split("/")[-1]
    assert resolved["op"]["direction"] == direction
    if op.startswith("miopen"):  # solvers per arch; problems come from an imported find-db
        assert resolved["op"]["model_name"] == f"miopen_{direction}_fp16_{arch}"
        assert resolved["op"]["solvers"] == {}  # the shipped tables: outside the composed config (it is large)
        from ckheur.families.miopen.solvers import solver_tables

        assert set(solver_tables(direction)["solvers"]) == {"gfx1030", "gfx900", "gfx906", "gfx908", "gfx90a", "gfx942"}
        assert resolved["problems"]["name"] == "smoke"
        return
    assert resolved["op"]["model_name"] == f"grouped_conv_{direction}_bf16_{arch}"
    assert resolved["problems"]["name"] == f"train_{direction}"
    # backward ops allow only compv3 and mem
    assert resolved["op"]["pipelines"] == (["compv3", "compv4", "compv5"] if direction == "fwd" else ["compv3", "mem"])


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_backend_composes(compose, backend):
    cfg = compose([f"backend={backend}"])
    assert cfg.backend.name == backend and not OmegaConf.missing_keys(cfg)


def test_mandatory_value_missing_is_reported(tmp_path):
    from conftest import run_cli

    r = run_cli("stage=import", f"hydra.run.dir={tmp_path}")
    assert r.returncode != 0 and "import.path" in r.stderr


def test_model_on_the_command_line_replaces_the_ops_recipe(compose):
    """An op picks its default model recipe; model= (and model.*) on the command line still win."""
    assert compose(["op=miopen/fwd", "model=relative"]).model.num_leaves == 15
    assert compose(["op=miopen/bwd_data", "model.num_leaves=31"]).model.num_leaves == 31
    assert compose(["op=gemm", "model=relative_wide"]).model.num_leaves == 63


def test_alias_equals_nested_option(compose):
    """An alias composes to the whole config of the option it names (not only its op node)."""
    assert set(ALIASES) < set(OPS) and set(ALIASES.values()) < set(OPS)
    for alias, nested in ALIASES.items():
        assert plain(compose([f"op={alias}"])) == plain(compose([f"op={nested}"]))


@pytest.mark.parametrize("name", shipped_sets())
def test_every_problem_set_composes(compose, name):
    cfg = compose([f"problems={name}"])
    assert cfg.problems.name == name


@pytest.mark.parametrize("override, needle", [
    ("arch.num_cu=3", "num_cu"),
    ("op.tile_sizes=[1]", "tile_sizes"),
    ("kernels.filtr=x", "filtr"),
    ("problems.shard.idx=1", "idx"),
    ("list.max_row=3", "max_row"),
])
def test_typo_in_key_fails_at_composition(compose, override, needle):
    with pytest.raises((ConfigCompositionException, ConfigKeyError)) as e:
        compose([override])
    assert needle in str(e.value) + str(e.value.__cause__)


@pytest.mark.parametrize("override, allowed", [
    ("op.direction=fwdx", "fwd, bwd_data, bwd_weight"),
    ("op.pipelines=[compv3,compv9]", "compv3"),
    ("op.schedulers=[sometimes]", "intrawave"),
])
def test_bad_enum_value_lists_allowed_values(compose, override, allowed):
    with pytest.raises((ConfigCompositionException, ValidationError)) as e:
        compose([override])
    assert allowed in str(e.value) + str(e.value.__cause__)


def test_unknown_option_fails(compose):
    with pytest.raises(Exception) as e:
        compose(["arch=gfx9999"])
    assert "gfx9999" in str(e.value) and "gfx950" in str(e.value)


def test_wrong_type_fails(compose):
    with pytest.raises((ConfigCompositionException, ValidationError)) as e:
        compose(["arch.num_cus=many"])
    assert "num_cus" in str(e.value) + str(e.value.__cause__)


def test_gpu_without_ck_tile_kernels_serves_miopen_ops_and_refuses_ck_ops(tmp_path):
    """gfx908 (MI100) declares no MFMA warp tiles: CK ops stop with one line naming the arch and
    what serves it (exit 2); MIOpen ops list its solver table."""
    from conftest import run_cli

    for op in ("fwd", "gemm"):
        r = run_cli(f"op={op}", "arch=gfx908", "stage=list", f"hydra.run.dir={tmp_path / op}")
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
        assert "arch=gfx908: no CK Tile code generation" in r.stderr and "op=miopen/<direction>" in r.stderr
    r = run_cli("op=miopen/fwd", "arch=gfx908", "stage=list", f"hydra.run.dir={tmp_path / 'miopen'}")
    assert r.returncode == 0, r.stderr
    assert "ConvAsmImplicitGemmGTCDynamicFwdXdlops" in r.stdout + r.stderr


def test_packaged_yaml_reads_as_omegaconf_reads_it(tmp_path):
    """Hydra reads the packaged configs with libyaml's parser (ckheur/conf_source.py): every shipped
    file gives the very config (values, types, header) OmegaConf's own reader gives, when read the
    first time and again (a process's later reads copy a config made once: conf_source._READ; each
    read gets its own); a file that parser or OmegaConf refuses fails with OmegaConf's own error."""
    from hydra._internal.core_plugins.importlib_resources_config_source import ImportlibResourcesConfigSource
    from omegaconf import open_dict

    from ckheur import conf_source
    from ckheur.conf_source import PackagedConfigSource
    from ckheur.yaml_rules import config_yaml

    fast, usual = PackagedConfigSource("main", "ckheur-yaml://ckheur.conf"), \
        ImportlibResourcesConfigSource("main", "pkg://ckheur.conf")
    files = sorted(CONF_DIR.rglob("*.yaml"))
    assert len(files) > 50
    conf_source._READ.clear()
    for path in files:
        b = usual._read_config(path)
        for _ in range(3):  # read, parsed again; read again, a copy
            a = fast._read_config(path)
            assert OmegaConf.to_yaml(a.config) == OmegaConf.to_yaml(b.config) and a.header == b.header, path
            assert config_yaml(a.config) in (None, OmegaConf.to_yaml(a.config)), path  # as Hydra writes it
            assert repr(OmegaConf.to_container(a.config)) == repr(OmegaConf.to_container(b.config)), path
            with open_dict(a.config):
                a.config["_changed_by_its_reader"] = 1  # never seen by the next read
    # load_yaml (config options, MIOpen's solver tables) and read_config (problem sets) read them with
    # that parser too: as OmegaConf does
    from ckheur.config import _parsed_option, load_yaml, read_config
    from ckheur.families.miopen.solvers import TABLES_DIR

    _parsed_option.cache_clear()
    for path in [*files, *sorted(TABLES_DIR.glob("*.yaml"))]:
        loaded, fast_loaded = OmegaConf.load(path), read_config(path)
        assert OmegaConf.to_yaml(fast_loaded) == OmegaConf.to_yaml(loaded), path
        expected = OmegaConf.to_container(loaded)
        assert repr(OmegaConf.to_container(fast_loaded)) == repr(expected), path
        expected.pop("defaults", None)
        assert repr(load_yaml(path)) == repr(expected), path
    for i, text in enumerate(("a: ${b}\nb: [1, x]\n", "a: ${b\n", "1: x\n", "a: [1, 2\n")):  # ${ parsed, more keys
        odd = tmp_path / f"odd{i}.yaml"
        odd.write_text(text)
        got = []
        for read in (load_yaml, lambda f: OmegaConf.to_container(read_config(f)),
                     lambda f: OmegaConf.to_container(OmegaConf.load(f))):
            try:
                got.append(repr(read(odd)))
            except Exception as e:  # noqa: BLE001 (the very error, whatever it is)
                got.append(f"{type(e).__name__}: {e}")
        assert got[0] == got[1] == got[2], text
    again = tmp_path / "again.yaml"  # a file that changes between reads is read anew
    for value in (1, 2):
        again.write_text(f"a: {value}\n")
        assert OmegaConf.to_container(fast._read_config(again).config) == {"a": value}
    for i, text in enumerate(("name: a\nname: b\n", "a: [1, 2\n", "a: {b: 1\n", "- 1\n- [2\n", "plain text\n", "")):
        bad = tmp_path / f"{i}.yaml"
        bad.write_text(text)
        got = []
        for source in (fast, usual):
            try:
                got.append(OmegaConf.to_yaml(source._read_config(bad).config))
            except Exception as e:  # noqa: BLE001 (the very error, whatever it is)
                got.append(f"{type(e).__name__}: {e}")
        assert got[0] == got[1], text


def test_run_records_are_written_by_libyaml_as_omegaconf_writes_them(compose):
    """Each run's .hydra/config.yaml is written by libyaml's emitter (yaml_rules.config_yaml) when its
    text is OmegaConf.to_yaml's (PyYAML's pure-Python emitter): the job configs of a CK and a MIOpen op are, and
    on fuzzed documents it is that text or None (then Hydra writes it), never another text."""
    import random

    from ckheur.yaml_rules import config_yaml

    for op in ("grouped_conv/fwd", "miopen/bwd_weight"):
        cfg = compose(["stage=train", f"op={op}"])
        assert config_yaml(cfg) == OmegaConf.to_yaml(cfg), op  # the fast path is taken, and writes the same
    rng = random.Random(0)
    parts = [*"ab :#-'\"\\{}[],&*!|>%@`?~=/.", "  ", "null", "true", "1.5", "0x1f", "1e3", "${a.b}", "???",
             "yes", "~", "x" * 30, "\t", "\n", "\r", "é", "中", "\x85", "\u2028", "\ufeff", "\x07"]
    written = 0
    for _ in range(300):
        s = "".join(rng.choice(parts) for _ in range(rng.choice((0, 3, 10, 40))))
        key = s[:rng.choice((1, 99, 150))] or "k"
        doc = OmegaConf.create({"k": s, "l": [s, {"x": {"y": s}}, 1.5e20, float("inf"), -3, None, True, []],
                                key: {}, "n": {key: s}})
        text = config_yaml(doc)
        assert text in (None, OmegaConf.to_yaml(doc)), repr(s)
        written += text is not None
    assert 50 < written < 300  # both ways were taken


def test_hydra_reads_the_packaged_configs_through_that_source():
    from hydra import initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    from ckheur.conf_source import SCHEME
    from ckheur.config import register_configs

    register_configs()
    GlobalHydra.instance().clear()
    with initialize_config_module("ckheur.conf", version_base="1.3"):
        sources = GlobalHydra.instance().config_loader().get_sources()
    assert [s.scheme() for s in sources if s.provider == "main"] == [SCHEME]
