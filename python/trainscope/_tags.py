"""The tag families of data/tag_families.json (compiled into _core): each family's prefix,
and which belong to the process rather than to one watched model. Free of torch, so the
reader and the checks use it too."""

from trainscope import _core

_FAMILIES = _core.tag_families()
PREFIXES = {f["name"]: f["prefix"] for f in _FAMILIES}
# Series of the process (time/, mem/ ...): one per run, never under a model's namespace.
PROCESS_FAMILIES = frozenset(f["name"] for f in _FAMILIES if f["scope"] == "process")


def family_tag(family, name):
    """family's tag for name, outside any model's namespace: family_tag("perf", "flops")."""
    return PREFIXES[family] + name
