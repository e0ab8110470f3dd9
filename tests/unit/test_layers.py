"""The package's imports against the layer table of docs/architecture.md: no arrow back up, checks
through the author API only, output formats on results only."""
import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TABLE = ROOT / "docs" / "architecture.md"


def layers() -> dict:
    """module prefix -> layer number, from the table's rows."""
    out = {}
    for line in TABLE.read_text(encoding="utf-8").splitlines():
        row = re.match(r"\|\s*(\d+)\s*\|([^|]*)\|", line)
        if row:
            for name in re.findall(r"`([\w.]+)`", row.group(2)):
                out[name] = int(row.group(1))
    return out


def module_files() -> dict:
    """dotted module name -> file, for the package and the built-in checks (installed as k3doctor.checks)."""
    found = {}
    for path in (ROOT / "k3doctor").rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    for path in (ROOT / "checks").glob("*.py"):
        found["k3doctor.checks" + ("" if path.stem == "__init__" else f".{path.stem}")] = path
    return found


def imports(path: Path, module: str) -> list:
    """(line, imported module) of every import of the k3doctor package in ``path``, lazy ones included."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            # `from pkg import sub` imports the submodule where one exists
            out += [(node.lineno, f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base) for a in node.names]
    return [(line, name) for line, name in out if name == "k3doctor" or name.startswith("k3doctor.")]


def layer_of(module: str, table: dict) -> int | None:
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        if ".".join(parts[:n]) in table:
            return table[".".join(parts[:n])]
    return None


MODULES = module_files()
TABLE_LAYERS = layers()


def test_the_table_is_read_and_names_every_stage():
    assert len(set(TABLE_LAYERS.values())) >= 12
    for stage in ("inventory", "transport", "gather", "views", "parsers", "judging", "outputs", "checks"):
        assert f"k3doctor.{stage}" in TABLE_LAYERS


@pytest.mark.parametrize("module", sorted(MODULES))
def test_every_module_has_a_layer(module):
    assert layer_of(module, TABLE_LAYERS) is not None, f"{module}: add it to a row of docs/architecture.md"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_import_goes_up_a_layer(module):
    mine = layer_of(module, TABLE_LAYERS)
    up = [(line, name, layer_of(name, TABLE_LAYERS)) for line, name in imports(MODULES[module], module)
          if (layer_of(name, TABLE_LAYERS) or 0) > mine]
    assert up == [], f"{module} (layer {mine}) imports from above: {up}"


CHECK_MAY_IMPORT = ("k3doctor.api", "k3doctor.views", "k3doctor.parsers", "k3doctor.probes", "k3doctor.recipes",
                    "k3doctor.platforms", "k3doctor.rules")


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.startswith("k3doctor.checks.")))
def test_a_check_uses_the_author_api_only(module):
    bad = [(line, name) for line, name in imports(MODULES[module], module)
           if not name.startswith(CHECK_MAY_IMPORT)]
    assert bad == [], f"{module} reaches past the author API: {bad}"


OUTPUT_MAY_IMPORT = ("k3doctor.outputs", "k3doctor.results", "k3doctor.registry")


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.startswith("k3doctor.outputs")))
def test_an_output_format_sees_results_only(module):
    bad = [(line, name) for line, name in imports(MODULES[module], module)
           if name != "k3doctor" and not name.startswith(OUTPUT_MAY_IMPORT)]
    assert bad == [], f"{module} reads more than results: {bad}"


def test_the_rules_see_a_lazy_import_and_a_relative_one(tmp_path):
    source = tmp_path / "probe.py"
    source.write_text("def late():\n    from k3doctor.judging import runner\n\nfrom ..readings import File\n")
    found = [name for _, name in imports(source, "k3doctor.views.probe")]
    assert found == ["k3doctor.judging.runner", "k3doctor.readings"] or \
        sorted(found) == ["k3doctor.judging.runner", "k3doctor.readings"]
    assert layer_of("k3doctor.judging.runner", TABLE_LAYERS) > layer_of("k3doctor.views.probe", TABLE_LAYERS)


def test_root_holds_at_most_twelve_modules_and_none_is_over_500_lines():
    root = sorted(p.name for p in (ROOT / "k3doctor").glob("*.py"))
    assert len(root) <= 12, root
    # no exception: the two files shipped whole to a node (remote/) hold to it too
    long = {str(p.relative_to(ROOT)): n for p in [*(ROOT / "k3doctor").rglob("*.py"), *(ROOT / "checks").glob("*.py")]
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > 500}
    assert long == {}, f"split these by job: {long}"
