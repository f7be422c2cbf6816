"""YAML read with OmegaConf's rules on libyaml's C parser: the same objects OmegaConf's own
(pure-Python) reader makes, several times faster. Used by Hydra's config source for the packaged
configs (``ckheur.conf_source``) and by ``ckheur.config``'s readers (the MIOpen solver tables);
a module of its own so that reading a solver table, in every MIOpen selector, never imports Hydra.
Written, likewise: ``config_yaml`` is OmegaConf.to_yaml's text from libyaml's emitter (the record
of the config Hydra writes into every run folder: ``ckheur.cli``)."""

from __future__ import annotations

import functools
from typing import Any


@functools.lru_cache(maxsize=1)
def yaml_loader() -> type | None:
    """OmegaConf's YAML loader rules on libyaml's parser; None without libyaml."""
    import yaml

    if not getattr(yaml, "__with_libyaml__", False):
        return None
    from omegaconf._utils import get_yaml_loader

    rules = get_yaml_loader()

    class Loader(yaml.CSafeLoader):  # type: ignore[misc,name-defined]
        yaml_implicit_resolvers = rules.yaml_implicit_resolvers  # OmegaConf's floats, no timestamps

        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            keys = [k.value for k, _ in node.value if k.tag == yaml.resolver.BaseResolver.DEFAULT_SCALAR_TAG]
            if len(keys) != len(set(keys)):  # OmegaConf refuses a key given twice: read again, it says which
                raise yaml.constructor.ConstructorError(None, None, "a key given twice", node.start_mark)
            return super().construct_mapping(node, deep=deep)

    return Loader


def parsed_yaml(text: str) -> Any:
    """YAML ``text`` read with OmegaConf's rules on libyaml's parser: what OmegaConf's own reader
    makes of it before it builds a config; None where that parser refuses it or there is no libyaml
    (then read it the usual way, so that every error is OmegaConf's own)."""
    import yaml

    loader = yaml_loader()
    if loader is None:
        return None
    try:
        return yaml.load(text, Loader=loader)
    except yaml.YAMLError:
        return None


# libyaml's emitter writes what PyYAML's pure-Python one writes for a document whose every string
# is printable ASCII and whose keys are shorter than this (tests/test_cli.py compares the two on
# fuzzed documents): the Python emitter writes a longer key as an explicit "? key", and the two
# quote, escape and fold other characters' strings (tabs, newlines, non-ASCII) differently.
SAME_TEXT_KEY_CHARS = 100


@functools.lru_cache(maxsize=1)
def _config_dumper() -> type | None:
    """OmegaConf's YAML dumper (its quoting of strings that read back as other types) on libyaml's
    emitter; None without libyaml."""
    import yaml

    if not getattr(yaml, "__with_libyaml__", False):
        return None
    from omegaconf._utils import get_omega_conf_dumper

    class Dumper(yaml.CDumper):  # type: ignore[misc,name-defined]
        yaml_representers = dict(get_omega_conf_dumper().yaml_representers)

    return Dumper


def config_yaml(cfg: Any) -> str | None:
    """``OmegaConf.to_yaml(cfg)``'s text (interpolations kept), written by libyaml's emitter; None
    where that text could differ from the pure-Python emitter's (see SAME_TEXT_KEY_CHARS) or there
    is no libyaml: then write it with OmegaConf.to_yaml."""
    import yaml
    from omegaconf import OmegaConf

    dumper = _config_dumper()
    if dumper is None:
        return None
    container = OmegaConf.to_container(cfg, resolve=False, enum_to_str=True)
    if not _same_text(container):
        return None
    return yaml.dump(container, default_flow_style=False, allow_unicode=True, sort_keys=False, Dumper=dumper)


def _same_text(value: Any, key: bool = False) -> bool:
    """Whether both emitters write ``value`` alike: plain numbers, booleans and None, and printable
    ASCII strings (keys shorter than SAME_TEXT_KEY_CHARS), in mappings and lists of them."""
    if isinstance(value, str):
        return value.isascii() and value.isprintable() and (not key or len(value) < SAME_TEXT_KEY_CHARS)
    if isinstance(value, dict):
        return all(_same_text(k, key=True) and _same_text(v) for k, v in value.items())
    if isinstance(value, list):
        return all(_same_text(v) for v in value)
    return value is None or type(value) in (bool, int, float)
