"""The package layout: wings import one way, every re-exported name resolves, modules stay
short, and shipped files carry no machine's absolute paths."""

from __future__ import annotations

import ast
import importlib
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "residualsim"
WINGS = ("data", "evaluation", "parallel", "sim", "sysid", "residual", "belief", "baselines",
         "experiments", "cli")
#: A module longer than this says why in its docstring (the phrase "600 lines").
MAX_LINES = 600
#: The command-line modules only parse and print.
MAX_CLI_LINES = 220


def _lint_imports() -> str | None:
    beside = Path(sys.executable).with_name("lint-imports")
    return str(beside) if beside.exists() else shutil.which("lint-imports")


def test_import_contracts_are_kept():
    command = _lint_imports()
    if command is None:
        pytest.skip("lint-imports is not installed (pip install -e '.[test]')")
    result = subprocess.run([command], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 kept, 0 broken" in result.stdout


@pytest.mark.parametrize("package", ["residualsim", *(f"residualsim.{w}" for w in WINGS)])
def test_every_exported_name_resolves(package):
    module = importlib.import_module(package)
    names = getattr(module, "__all__", [])
    if package != "residualsim.cli":
        assert names, f"{package} exports nothing"
    for name in names:
        assert getattr(module, name) is not None, f"{package}.{name}"


def test_wings_hold_every_module():
    loose = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert loose == ["__init__.py", "__main__.py", "_lazy.py", "atomic.py", "errors.py"]
    assert sorted(p.name for p in PACKAGE.iterdir()
                  if p.is_dir() and p.name != "__pycache__") == sorted(WINGS)


def test_long_modules_say_why():
    for path in PACKAGE.rglob("*.py"):
        n_lines = len(path.read_text().splitlines())
        docstring = ast.get_docstring(ast.parse(path.read_text())) or ""
        if n_lines > MAX_LINES:
            assert "600 lines" in docstring, f"{path}: {n_lines} lines and no reason given"
        if path.parent.name == "cli":
            assert n_lines <= MAX_CLI_LINES, f"{path}: {n_lines} lines for a thin wrapper"


def test_shipped_files_hold_no_absolute_paths():
    pattern = re.compile(r"(?<![\w$])/(work|home|tmp|root|Users)/")
    shipped = [ROOT / "README.md", *(ROOT / "train").glob("*.md"),
               *(p for p in (ROOT / "data").rglob("*") if p.suffix in (".json", ".md", ".txt"))]
    offenders = [str(p.relative_to(ROOT)) for p in shipped
                 if p.is_file() and pattern.search(p.read_text(errors="replace"))]
    assert offenders == []
