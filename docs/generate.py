"""The manual's reference pages (reference/*.md), made from the code and the data files when the manual is built,
so that its tables cannot drift and nothing is committed that a new check, rule or platform would have to edit
(issue 34: adding one is one file): the checks (the registry), the rule rows and remediation codes, the platforms
(k3doctor/platforms/*.yaml), the shipped recipes (k3doctor/recipes/*.yaml) and the exit codes
(k3doctor.results.LaunchVerdict and the CLI's usage status).

mkdocs runs this module as a hook (mkdocs.yml ``hooks:``): ``on_files`` adds the pages to the build, so
``mkdocs serve`` / ``mkdocs build --strict`` (tests/unit/test_docs.py) show them and check their links.

    python3 docs/generate.py OUT_DIR    # the pages as files, to read them without mkdocs
"""
from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE.parent) not in sys.path:  # the checkout's k3doctor, when mkdocs loads this file as its hook
    sys.path.insert(0, str(HERE.parent))
HEADER = "<!-- made by docs/generate.py from the code when the manual is built -->\n\n"


def _cell(text) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _table(headers: list, rows: list) -> str:
    out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    out += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(out) + "\n"


def checks_page(registry, platforms) -> str:
    rows = [(f"`{c.name}`", c.scope, c.tier, c.title, ", ".join(f"`{r}`" for r in c.remediations) or "-",
             ", ".join(platforms.not_for(c.name)) or "-") for c in registry.ordered()]
    return (HEADER + "# Checks\n\nEvery registered check in report order (`k3doctor list -v` shows their parameters;"
            " `k3doctor explain CODE` a remediation).\n\n"
            + _table(["check", "scope", "tier", "what", "remediation codes", "not run on"], rows))


def rules_page(registry, rule_table_rows) -> str:
    rows = [(f"`{row}`", f"`{code}`" if code else "-") for row, code in rule_table_rows()]
    codes = [(f"`{r.code}`", r.title) for r in sorted(registry.remediations.values(), key=lambda r: r.code)]
    return (HEADER + "# Rules and remediation codes\n\n## Rule rows besides the checks\n\n"
            + _table(["rule row", "remediation code"], rows)
            + "\n## Remediation codes\n\n`k3doctor explain CODE` prints the text of each.\n\n"
            + _table(["code", "what it means"], codes))


def platforms_page(platforms) -> str:
    rows = []
    for name in platforms.names():
        p = platforms.get(name)
        rows.append((f"`{name}`", p.gfx, p.gfx_target_version, ", ".join(f"{d:#06x}" for d in sorted(p.device_ids))
                     or "-", p.gpus_per_node, p.hbm_gib_per_gpu or "inventory", p.fabric,
                     " ".join(f"{k}={v}" for k, v in p.amdgpu_load_params) or "-",
                     "/".join(p.tp_partition) if p.tp_partition else "uniform",
                     ", ".join(sorted(p.not_for_platform)) or "-"))
    keys = [(f"`{k}`", "yes" if k in platforms.REQUIRED else "no") for k in platforms.KEYS]
    return (HEADER + "# Platforms\n\nOne file each in `k3doctor/platforms/` ([adding a platform](../adding-a-platform.md))."
            "\n\n" + _table(["platform", "gfx", "KFD gfx_target_version", "device ids", "GPUs/node", "HBM GiB/GPU",
                            "fabric", "amdgpu load parameters", "partitions", "checks not run"], rows)
            + "\n## Keys of a platform file\n\n" + _table(["key", "required"], keys))


def recipes_page(recipes) -> str:
    files = sorted(set(recipes.builtin_names().values()))
    rows = []
    for f in files:
        r = recipes.builtin(f.stem)
        rows.append((f"`{r.name}`", ", ".join(r.aliases) or "-", r.platform, " / ".join(r.gfx),
                     ", ".join(map(str, r.concurrencies)) or "one point", r.image or "-"))
    return (HEADER + "# Recipes\n\nThe shipped recipes (`k3doctor/recipes/*.yaml`); `cluster.recipe` names one.\n\n"
            + _table(["recipe", "aliases", "platform", "gfx targets", "concurrency points", "image"], rows))


def exit_codes_page(results, usage: int) -> str:
    rows = [(v.exit_code, f"`{v.text}`") for v in results.LaunchVerdict] + [(usage, "usage or input error (a bad "
                                                                              "inventory, recipe or platform file): "
                                                                              "nothing was run")]
    return HEADER + "# Exit codes\n\n" + _table(["code", "meaning"], rows)


def pages() -> dict:
    from k3doctor import platforms, recipes, results
    from k3doctor.cli import EXIT_USAGE
    from k3doctor.registry import REGISTRY, load_checks, load_rule_tables, rule_table_rows

    load_checks()
    load_rule_tables()
    return {"checks.md": checks_page(REGISTRY, platforms), "rules.md": rules_page(REGISTRY, rule_table_rows),
            "platforms.md": platforms_page(platforms), "recipes.md": recipes_page(recipes),
            "exit-codes.md": exit_codes_page(results, EXIT_USAGE)}


def on_files(files, config):
    """mkdocs hook: the reference pages, made now, join the build (never files in docs/)."""
    from mkdocs.structure.files import File

    for name, text in pages().items():
        files.append(File.generated(config, f"reference/{name}", content=text))
    return files


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for name, text in pages().items():
        (out / name).write_text(text)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python3 docs/generate.py OUT_DIR (mkdocs makes the pages itself: mkdocs serve)")
    main(Path(sys.argv[1]))
