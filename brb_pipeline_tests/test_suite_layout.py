"""The test suite's own layout: test modules share code through ``helpers/`` and ``conftest.py``
fixtures, never by importing one another (one test file importing another runs, collects and
couples both)."""

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def _test_module_imports(path: Path) -> list[str]:
    """The test modules and conftest a file imports, by absolute or relative import."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            mods = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = "." * node.level + (node.module or "")
            mods = [base] + [f"{base}.{a.name}".replace("..", ".") for a in node.names if not node.module]
        else:
            continue
        for mod in mods:
            last = mod.removeprefix("brb_pipeline_tests").lstrip(".").split(".")[0]
            if (mod.startswith("brb_pipeline_tests") or mod.startswith(".")) and (
                    last.startswith("test_") or last == "conftest"):
                found.append(mod)
    return found


def test_no_test_module_imports_another():
    offenders = {str(p.relative_to(TESTS)): mods for p in sorted(TESTS.rglob("*.py"))
                 if (mods := _test_module_imports(p))}
    assert offenders == {}


def test_the_check_sees_each_form_of_import(tmp_path):
    p = tmp_path / "x.py"
    p.write_text("from brb_pipeline_tests.test_cli import brb\nfrom .conftest import T0\nfrom . import test_store\n"
                 "import brb_pipeline_tests.test_search\nfrom brb_pipeline_tests.helpers.cli import brb\n")
    assert _test_module_imports(p) == ["brb_pipeline_tests.test_cli", ".conftest", ".test_store",
                                       "brb_pipeline_tests.test_search"]
