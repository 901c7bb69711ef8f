#!/usr/bin/env python3
"""Counts for issue 29's review of the code's rooms: production files over 600 lines and
functions over 100 lines (C++ under src/ and include/, Python under python/trainscope, the
web UI's TypeScript under web/src; tests, fuzzers and generated files left out).

    python3 scripts/code-counts.py [--list]

C++ functions are found by their braces: a line that opens a body at nesting depth 0 or
inside a namespace or class (a definition's `{` after `)`, `const`, `override`, ...) and the
brace that closes it. Python functions by the AST (a method counts on its own, a nested
function inside its parent). TypeScript `function`s and arrow functions assigned at the top
level by their braces. Approximate by design: it reports what a reviewer would open.
"""

import ast
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FILE_LIMIT, FUNCTION_LIMIT = 600, 100


def production_files():
    for top, exts in (("src", (".cc", ".h")), ("include", (".h",)), ("python/trainscope", (".py",)),
                      ("web/src", (".ts",))):
        for folder, _, names in os.walk(os.path.join(ROOT, top)):
            for name in sorted(names):
                if not name.endswith(exts) or "_test" in name or name.startswith("test_") or ".test." in name:
                    continue
                yield os.path.join(folder, name)


def cxx_functions(lines):
    """(name, first line, length) of each function body in C++ source."""
    text = "\n".join(lines)
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    text = re.sub(r'R"(\w*)\((.*?)\)\1"', lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    text = re.sub(r'"(\\.|[^"\\\n])*"', '""', text)
    text = re.sub(r"'(\\.|[^'\\\n])*'", "''", text)
    found, stack, line = [], [], 1
    head = ""
    for ch in text:
        if ch == "\n":
            line += 1
        if ch == "{":
            kind = "block"
            h = head.strip()
            if re.search(r"\b(namespace|class|struct|union|enum)\b[^;()]*$", h) or h.endswith("extern \"C\""):
                kind = "scope"
            elif re.search(r"\)\s*(const|override|final|noexcept|mutable|->\s*[\w:<>&*, ]+|\s)*$", h) and \
                    all(k == "scope" for k, _, _ in stack):
                m = re.search(r"([~\w:]+)\s*\([^()]*(\([^()]*\)[^()]*)*\)[^()]*$", h)
                kind = ("function", m.group(1) if m else "?")
            stack.append((kind if isinstance(kind, str) else "function", line, kind[1] if isinstance(kind, tuple) else ""))
            head = ""
        elif ch == "}":
            if stack:
                kind, start, name = stack.pop()
                if kind == "function":
                    found.append((name, start, line - start + 1))
            head = ""
        elif ch == ";":
            head = ""
        else:
            head += ch
    return found


def python_functions(source):
    tree = ast.parse(source)
    return [(node.name, node.lineno, node.end_lineno - node.lineno + 1) for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]


def ts_functions(lines):
    found = []
    for i, l in enumerate(lines):
        m = re.match(r"\s*(export\s+)?(async\s+)?function\s+(\w+)", l) or \
            re.match(r"\s*(export\s+)?const\s+(\w+)\s*=\s*(async\s*)?\([^)]*\)\s*(:\s*[^=]+)?=>\s*\{", l)
        if not m:
            continue
        depth, started = 0, False
        for j in range(i, len(lines)):
            depth += lines[j].count("{") - lines[j].count("}")
            started = started or "{" in lines[j]
            if started and depth <= 0:
                found.append((m.groups()[-1] if m.re.pattern.startswith(r"\s*(export\s+)?const") else m.group(3),
                              i + 1, j - i + 1))
                break
    return found


def main():
    show = "--list" in sys.argv
    big_files, long_functions = [], []
    for path in production_files():
        with open(path, encoding="utf-8") as f:
            source = f.read()
        lines = source.split("\n")
        rel = os.path.relpath(path, ROOT)
        if rel.startswith("src/") and "/generated/" in rel:
            continue
        if len(lines) - 1 > FILE_LIMIT:
            big_files.append((rel, len(lines) - 1))
        if path.endswith(".py"):
            functions = python_functions(source)
        elif path.endswith(".ts"):
            functions = ts_functions(lines)
        else:
            functions = cxx_functions(lines)
        long_functions += [(rel, name, start, n) for name, start, n in functions if n > FUNCTION_LIMIT]
    print(f"production files over {FILE_LIMIT} lines: {len(big_files)}")
    if show:
        for rel, n in sorted(big_files, key=lambda x: -x[1]):
            print(f"  {n:5d} {rel}")
    print(f"functions over {FUNCTION_LIMIT} lines: {len(long_functions)}")
    if show:
        for rel, name, start, n in sorted(long_functions, key=lambda x: -x[3]):
            print(f"  {n:5d} {rel}:{start} {name}")


if __name__ == "__main__":
    main()
