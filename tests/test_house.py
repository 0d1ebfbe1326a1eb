"""The house's shape (scripts/house_shape.py, docs/architecture.md): no import cycle, imports
pointing down between sub-packages, no file over 600 lines, no function over 70, no regular
expression over text outside analysis/ and text/."""

from __future__ import annotations

import subprocess
import sys

from tests.helpers import ROOT


def test_the_house_has_its_shape():
    out = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "house_shape.py")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0 and out.stdout == "", out.stdout + out.stderr


def test_the_shape_check_finds_a_cycle_a_long_function_and_a_stray_pattern(tmp_path, monkeypatch):
    """It can fail: a cycle, a function over 70 lines and a ranking module reading text with a
    regular expression, in a house made for it."""
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import house_shape
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    pkg = tmp_path / "retrieval"
    (pkg / "a").mkdir(parents=True)
    (pkg / "b").mkdir()
    (tmp_path / "db").mkdir()
    for p in (pkg, pkg / "a", pkg / "b", tmp_path / "db"):
        (p / "__init__.py").write_text("")
    (pkg / "a" / "x.py").write_text("from retrieval.b import y\n")
    (pkg / "analysis").mkdir()
    (pkg / "analysis" / "__init__.py").write_text("")
    (pkg / "analysis" / "ok.py").write_text("import re\n")
    (pkg / "a" / "stray.py").write_text("from re import compile\n")
    body = "\n".join(f"    v{i} = {i}" for i in range(71))
    (pkg / "b" / "y.py").write_text(f"from retrieval.a import x\n\n\ndef f():\n{body}\n")
    monkeypatch.setattr(house_shape, "ROOT", tmp_path)
    found = house_shape.problems()
    assert "import cycle: retrieval.a.x <-> retrieval.b.y" in found
    assert "sub-package cycle: retrieval.a <-> retrieval.b" in found
    assert any(f.startswith("long function: retrieval/b/y.py:4 f (72 lines)") for f in found)
    assert "a regular expression outside analysis/ and text/: retrieval/a/stray.py" in found
    assert not any("retrieval/analysis/ok.py" in f for f in found)
