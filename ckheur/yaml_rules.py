"""YAML read with OmegaConf's rules on libyaml's C parser: the same objects OmegaConf's own
(pure-Python) reader makes, several times faster. Used by Hydra's config source for the packaged
configs (``ckheur.conf_source``) and by ``ckheur.config``'s readers (the MIOpen solver tables);
a module of its own so that reading a solver table, in every MIOpen selector, never imports Hydra."""

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
