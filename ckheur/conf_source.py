"""Hydra reads ckheur's packaged configs (``pkg://ckheur.conf``) with PyYAML's C parser.

OmegaConf parses YAML with PyYAML's pure-Python parser; a command composes about ten of our
files (twice where Hydra composes once more to learn the run mode: ckheur.cli), and parsing them was
about a tenth of each composition (20-40 ms of ~250). This config source reads the same files
from the same package with libyaml's parser and OmegaConf's own rules (its float spellings, no
timestamps, duplicate keys refused), so the composed config is the same; whatever that parser
refuses, or a file that is not a mapping or a list, is read again the usual way, so every error
is Hydra's own. Without libyaml (a PyYAML built without it) nothing changes. It is a Hydra
plugin, registered through Hydra's plugin API, that serves only ckheur's own config package.
"""

from __future__ import annotations

import contextlib
import copy
from typing import Any, Callable, Iterator

from hydra._internal.core_plugins.importlib_resources_config_source import ImportlibResourcesConfigSource
from hydra.core.config_search_path import ConfigSearchPath
from hydra.plugins.config_source import ConfigResult, ConfigSource
from hydra.plugins.search_path_plugin import SearchPathPlugin
from omegaconf import OmegaConf

from ckheur.yaml_rules import parsed_yaml, yaml_loader

PACKAGE = "pkg://ckheur.conf"
SCHEME = "ckheur-yaml"


# Files read before in this process (each composition reads about ten, again in every one: a
# multirun's jobs, a library composing many times): (package, file, text) -> [its parsed object,
# its config made at the second read or None]. A copy of a config is about half the cost of making
# one; the first read pays nothing more. A file whose text changed is another entry.
_READ: dict[tuple, list] = {}


class PackagedConfigSource(ImportlibResourcesConfigSource):
    """``pkg://ckheur.conf`` read with libyaml's parser (see the module's docstring)."""

    @staticmethod
    def scheme() -> str:
        return SCHEME

    def _read_config(self, res: Any) -> ConfigResult:
        try:
            text = res.read_text(encoding="utf-8")
            seen = _READ.get((self.path, str(res), text))
            obj = parsed_yaml(text) if seen is None else seen[0]
        except (UnicodeDecodeError, OSError):
            obj = None
        if not isinstance(obj, (dict, list)):  # an error, an empty file or a scalar: read the usual way
            return super()._read_config(res)
        if seen is None:
            config = OmegaConf.create(obj)
            _READ[(self.path, str(res), text)] = [obj, None]
        else:  # read before in this process: a copy of one made once (Hydra may change what it gets)
            if seen[1] is None:
                seen[1] = OmegaConf.create(obj)
            config = copy.deepcopy(seen[1])
        return ConfigResult(config=config, path=f"{self.scheme()}://{self.path}",
                            provider=self.provider, header=ConfigSource._get_header_dict(text[:512]))


class PackagedConfigSearchPath(SearchPathPlugin):
    """Hydra's search path entry of ckheur's config package is served by PackagedConfigSource."""

    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        for element in search_path.get_path():
            if element.path == PACKAGE:
                element.path = f"{SCHEME}://ckheur.conf"


def register() -> None:
    """Register the config source with Hydra (idempotent; nothing without libyaml)."""
    from hydra.core.plugins import Plugins

    if yaml_loader() is not None:
        plugins = Plugins.instance()
        plugins.register(PackagedConfigSource)
        plugins.register(PackagedConfigSearchPath)


def store_shared() -> contextlib.AbstractContextManager:
    """Compositions read Hydra's ConfigStore in place instead of a deep copy of it.

    Every composition makes a CachingConfigRepository, which deep-copies its sources so that it can
    re-initialize them; the structured-config source holds the whole ConfigStore (every registered
    schema: ~20 ms of a ~200 ms composition). Nothing changes the store while a composition runs, and
    the store hands out deep copies of its entries (ConfigStore.load), so the copy only costs. While
    this runs, a deep copy of the store is the store itself; afterwards, as before."""
    from hydra.core.config_store import ConfigStore

    return replaced(ConfigStore, "__deepcopy__", lambda _: lambda self, memo: self)


_ABSENT = object()  # an attribute the owner does not define itself


@contextlib.contextmanager
def replaced(owner: Any, name: str, make: Callable[[Any], Any]) -> Iterator[None]:
    """``owner.name`` (a function of Hydra's or OmegaConf's, or a method a class lacks) is
    ``make(current)`` while this runs (``current``: the attribute it reads now, None where it has
    none), then what the owner itself had again (removed where it had none); inside another such
    call (it is a replacement already), as it is."""
    current = getattr(owner, name, None)
    if getattr(current, "_ckheur_replaces", False):
        yield
        return
    own = vars(owner).get(name, _ABSENT)
    replacement = make(current)
    replacement._ckheur_replaces = True
    setattr(owner, name, replacement)
    try:
        yield
    finally:
        if own is _ABSENT:
            delattr(owner, name)
        else:
            setattr(owner, name, own)


def choices_map_when_interpolated() -> contextlib.AbstractContextManager:
    """Hydra builds the map of the choices known so far (a config) for every config with a defaults
    list, to resolve interpolated defaults (``- db: ${op}``), whether or not one of its defaults is
    interpolated: ~15% of a composition, and none of the packaged configs' defaults is. While this
    runs, the map is built only for a defaults list with ``${`` in one of its entries (an
    interpolation needs it: OmegaConf's test); Hydra reads the map only to resolve those."""
    from hydra._internal import defaults_list as hydra_defaults

    def when_interpolated(build: Callable) -> Callable:
        def create_map(overrides: Any, defaults: list, self_added: bool) -> Any:
            if any(_holds_interpolation(vars(d)) for d in defaults):
                return build(overrides, defaults, self_added)
            return None  # no default of this list is interpolated: Hydra never reads the map
        return create_map

    return replaced(hydra_defaults, "_create_interpolation_map", when_interpolated)


def _holds_interpolation(value: Any) -> bool:
    """Whether ``${`` is in a string of value (a default's fields, lists and mappings within)."""
    if isinstance(value, str):
        return "${" in value
    if isinstance(value, dict):
        return any(_holds_interpolation(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_holds_interpolation(v) for v in value)
    return False


# Values that copy.deepcopy gives back as they are (its _deepcopy_atomic types).
_ATOMIC = (type(None), int, float, bool, complex, bytes, str, type)


@contextlib.contextmanager
def nodes_copied_directly() -> Iterator[None]:
    """Deep copies of configs copy each node's metadata field by field, and make a value node's copy
    without running its constructor, as deep copies of them otherwise do.

    Composing a job deep-copies configs many times (each read of a packaged file, each schema, each
    config placed under its package; Hydra's run copies the job's config again). OmegaConf copies a
    value node by constructing an empty one (new metadata, a validated None) and then setting its
    metadata, value and parent; each node's Metadata goes through copy's generic reduce and
    reconstruct. Together about a third of copying a config. While this runs, Metadata copies
    itself (the same fields, each deep-copied with the same memo; atomic values, which deepcopy
    returns as they are, taken directly) and the plain value nodes are made with the attributes
    that construction leaves (no flags cached), then set as OmegaConf sets them; afterwards, as before."""
    from omegaconf import nodes
    from omegaconf.base import Metadata

    def copy_metadata(self: Any, memo: dict) -> Any:
        res = object.__new__(type(self))
        memo[id(self)] = res
        fields = res.__dict__
        for key, value in self.__dict__.items():
            fields[key] = value if type(value) in _ATOMIC else copy.deepcopy(value, memo)
        return res

    def copy_value_node(self: Any, memo: dict) -> Any:
        res = object.__new__(type(self))
        res.__dict__.update(_metadata=None, _parent=None, _flags_cache=None)  # what construction leaves
        self._deepcopy_impl(res, memo)
        return res

    # the value nodes whose own copy is "construct an empty one, then _deepcopy_impl" (EnumNode's
    # construction takes its enum: it is left as it is)
    plain = [nodes.AnyNode, nodes.StringNode, nodes.PathNode, nodes.IntegerNode, nodes.BytesNode, nodes.FloatNode,
             nodes.BooleanNode]
    with contextlib.ExitStack() as stack:
        for owner, method in ((Metadata, copy_metadata), *((cls, copy_value_node) for cls in plain)):
            stack.enter_context(replaced(owner, "__deepcopy__", lambda _, method=method: method))
        yield
