"""data/tag_families.json is the one owner of the tag families: C++, Python and the web UI
read it, and no other file spells a family's prefix as a literal."""

import json
import pathlib
import re

from trainscope import _core, _tags

REPO = pathlib.Path(__file__).resolve().parents[2]
TABLE = json.loads((REPO / "data" / "tag_families.json").read_text())


def test_core_serves_the_table_python_builds_from():
    served = [(f["name"], f["prefix"], f["scope"], f["kind"]) for f in _core.tag_families()]
    assert served == [(f["name"], f["prefix"], f["scope"], f["kind"]) for f in TABLE["families"]]
    assert _tags.family_tag("time", "step") == "time/step"
    assert _tags.PROCESS_FAMILIES == {"time", "mem", "sys", "perf", "census"}
    assert all(f["prefix"] == f["name"] + "/" for f in TABLE["families"])
    for known in TABLE["tags"]:
        family = known["tag"].split("/", 1)[0]
        assert family in _tags.PREFIXES or family == "train", known


def prefix_literals(path, quotes):
    """(line number, literal) of each string literal that starts with a family's prefix, in
    code (not comments or docstring prose: a literal with a space is a sentence)."""
    prefixes = "|".join(re.escape(f["prefix"]) for f in TABLE["families"])
    literal = re.compile(r"[%s]((?:%s)[^%s\s]*)[%s]" % (quotes, prefixes, quotes, quotes))
    found = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        code = line.split("//")[0] if path.suffix in (".cc", ".h", ".ts") else line.split("#")[0]
        for m in literal.finditer(code):
            if not m.group(1).endswith(".json") and not m.group(1).endswith(".h"):
                found.append((number, m.group(1)))
    return found


def test_no_prefix_literal_outside_the_table():
    sources = [(p, "\"") for p in (REPO / "src").rglob("*.cc")] + [(p, "\"") for p in (REPO / "src").rglob("*.h")]
    sources += [(p, "\"'") for p in (REPO / "python" / "trainscope").rglob("*.py")]
    sources += [(p, "\"'`") for p in (REPO / "web" / "src").rglob("*.ts")]
    # Tests say what is written in the words a user reads: they keep their literals.
    production = [(p, q) for p, q in sources if not p.name.endswith(("_test.cc", "test_util.h"))]
    assert len(production) > 100
    found = {f"{p.relative_to(REPO)}:{n}": lit for p, q in production for n, lit in prefix_literals(p, q)}
    assert found == {}
