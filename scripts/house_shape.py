"""The house's shape, checked (docs/architecture.md): no import cycle between modules or between
the sub-packages of retrieval/, a top level of retrieval/ that shows the stages (at most 12
modules beside them), no file over 600 lines, no function over 70 lines (outside scripts/ and
tests/), and no regular expression over a question's or a memory's text outside the packages
that read text (READERS: retrieval/analysis/, retrieval/text/) and the edges that check input
(a request, a setting, an import line). Prints each thing that stands against it and exits 1;
prints nothing and exits 0 when the house is clean. Imports under `if TYPE_CHECKING:` are not edges. The suite runs it
(tests/test_house.py).

    python3 scripts/house_shape.py           (from the project's root)
"""

from __future__ import annotations

import ast
import collections
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("retrieval", "db")
MAX_FILE_LINES = 600
MAX_FUNCTION_LINES = 70
MAX_TOP_MODULES = 12
# Where `re` may be imported: the packages that read text, the input checks at the edges, the
# embedder's tokenizer, and db/ (setting names, migration file names).
READERS = ("retrieval/analysis/", "retrieval/text/")
INPUT_EDGES = (
    "retrieval/api/", "retrieval/cli/", "retrieval/validation.py", "retrieval/settings.py",
    "retrieval/ingest/memory_in.py", "retrieval/embedding/e5_weights.py", "db/",
)  # fmt: skip


def _uses_re(tree: ast.Module) -> bool:
    return any(
        (isinstance(n, ast.Import) and any(a.name == "re" for a in n.names))
        or (isinstance(n, ast.ImportFrom) and n.module == "re")
        for n in ast.walk(tree)
    )


def _modname(p: Path) -> str:
    parts = list(p.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking_lines(tree: ast.Module) -> set[int]:
    return {
        line
        for n in ast.walk(tree)
        if isinstance(n, ast.If) and "TYPE_CHECKING" in ast.unparse(n.test)
        for b in n.body
        for line in range(b.lineno, (b.end_lineno or b.lineno) + 1)
    }


def _imported(n: ast.AST, pkg: str) -> list[str]:
    if isinstance(n, ast.Import):
        return [a.name for a in n.names]
    if isinstance(n, ast.ImportFrom):
        base = n.module or ""
        if n.level:
            up = pkg.split(".")[: len(pkg.split(".")) - (n.level - 1)]
            base = ".".join(up + ([base] if base else []))
        return [base] + [f"{base}.{a.name}" for a in n.names]
    return []


def read(files: list[Path]) -> tuple[dict[str, Path], dict[str, set[str]], list[str]]:
    """The modules, their import edges (module -> module), and the functions too long."""
    mods = {_modname(p): p for p in files}

    def resolve(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    edges: dict[str, set[str]] = collections.defaultdict(set)
    long_fns: list[str] = []
    for m, p in mods.items():
        tree = ast.parse(p.read_text())
        skip = _type_checking_lines(tree)
        pkg = m if p.name == "__init__.py" else m.rpartition(".")[0]
        for n in ast.walk(tree):
            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef):
                size = (n.end_lineno or n.lineno) - n.lineno + 1
                if size > MAX_FUNCTION_LINES:
                    long_fns.append(f"{p.relative_to(ROOT)}:{n.lineno} {n.name} ({size} lines)")
            if getattr(n, "lineno", None) in skip:
                continue
            for t in _imported(n, pkg):
                r = resolve(t)
                if r and r != m and not m.startswith(r + "."):
                    edges[m].add(r)
    return mods, edges, long_fns


def cycles(nodes: list[str], edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]
    sys.setrecursionlimit(10000)

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in nodes:
        if v not in index:
            visit(v)
    return out


def problems() -> list[str]:
    files = [p for top in PACKAGES for p in sorted((ROOT / top).rglob("*.py"))]
    mods, edges, long_fns = read(files)

    def group(m: str) -> str:
        parts = m.split(".")
        sub = len(parts) > 2 or (mods[m].name == "__init__.py" and len(parts) == 2)
        return ".".join(parts[:2]) if sub else m

    gedges: dict[str, set[str]] = collections.defaultdict(set)
    for a, bs in edges.items():
        for b in bs:
            ga, gb = group(a), group(b)
            if ga != gb and "retrieval" not in (ga, gb):
                gedges[ga].add(gb)
    out = ["import cycle: " + " <-> ".join(c) for c in cycles(list(mods), edges)]
    groups = sorted(set(map(group, mods)))
    out += ["sub-package cycle: " + " <-> ".join(c) for c in cycles(groups, gedges)]
    top = [p.name for p in (ROOT / "retrieval").glob("*.py") if p.name != "__init__.py"]
    if len(top) > MAX_TOP_MODULES:
        out.append(f"retrieval/ top level: {len(top)} modules (a stage folder each would show it)")
    for p in files:
        n = len(p.read_text().splitlines())
        if n > MAX_FILE_LINES:
            out.append(f"{p.relative_to(ROOT)}: {n} lines")
    out += ["long function: " + f for f in long_fns]
    for p in files:
        rel = p.relative_to(ROOT).as_posix()
        if not rel.startswith(READERS + INPUT_EDGES) and _uses_re(ast.parse(p.read_text())):
            out.append(f"a regular expression outside analysis/ and text/: {rel}")
    return out


if __name__ == "__main__":
    found = problems()
    for line in found:
        print(line)
    sys.exit(1 if found else 0)
