"""The field corpus (issue 32 §5): every readings file under tests/field is judged again by the real CLI and must
give the verdicts recorded beside it; each is shareable; the manual's "Validated on" (docs/inventory.md) lists the versions the
files were taken on; the files built from ../shared/corpus are what tests/field/make_readings.py builds now."""
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.field.make_readings import CORPUS, HERE, ROOT, judged, taken_on

FILES = sorted(HERE.glob("*.readings.json"))


def recorded(path: Path) -> dict:
    return json.loads(path.with_name(path.name.replace(".readings.json", ".verdicts.json")).read_text())


def test_the_corpus_holds_real_outputs_and_rig_recordings():
    names = [f.name for f in FILES]
    assert len(names) >= 6 and {"rig-healthy.readings.json", "rig-demo.readings.json"} <= set(names), names


@pytest.mark.parametrize("path", FILES, ids=[f.name.removesuffix(".readings.json") for f in FILES])
def test_a_replay_gives_the_recorded_verdicts(path):
    want = recorded(path)
    # the checks it was recorded with: one added since has no readings in the file, so it is not judged here
    got = judged(path, want["only"] or sorted({check for check, *_ in want["results"]}))
    assert got["results"] == want["results"], f"{path.name}: a verdict changed (check, node, gpu, status, code)"
    assert got["exit_code"] == want["exit_code"]


@pytest.mark.parametrize("path", FILES, ids=[f.name.removesuffix(".readings.json") for f in FILES])
def test_every_corpus_file_is_shareable(path):
    doc = json.loads(path.read_text())
    assert isinstance(doc["identifiers"], dict), f"{path.name} keeps its identifiers: save it without " \
                                                 "--keep-identifiers (or `k3doctor readings redact`)"
    assert set(doc["nodes"]) <= {f"node{i}" for i in range(1, 65)}
    text = path.read_text()
    assert not re.search(r"\bct\d+\b|\b127\.0\.(?!0\.1\b|1\.1\b|0\.0\b)\d+\.\d+", text)  # the rig's
    said = set(re.findall(r"@host (\w[\w.-]*)", text))  # the name a node's container gives of its host
    assert said <= {f"{p}{i}" for p in ("node", "host") for i in range(1, 65)}, said


def validated_on_rows() -> list:
    """The manual table's rows, one per corpus file: its versions as recorded beside it."""
    rows = []
    for path in FILES:
        taken = recorded(path)["taken_on"]
        cells = [taken.get(k) or "-" for k in ("ROCm", "amd-smi", "amdgpu driver", "ATOM")]
        rows.append(f"| `{path.name.removesuffix('.readings.json')}` | " + " | ".join(cells) + " |")
    return rows


def test_the_readme_lists_the_versions_every_corpus_file_was_taken_on():
    readme = (ROOT / "docs" / "inventory.md").read_text()
    section = readme.split("### Validated on", 1)[-1].split("\n## ", 1)[0]
    missing = [row for row in validated_on_rows() if row not in section]
    assert missing == [], "docs/inventory.md's `Validated on` lacks (or has other versions for):\n" + "\n".join(missing)
    listed = re.findall(r"^\| `([\w.-]+)` \|", section, re.M)
    assert sorted(listed) == sorted(f.name.removesuffix(".readings.json") for f in FILES)


@pytest.mark.parametrize("path", [f for f in FILES if f.name.startswith("rig-")], ids=lambda p: p.name)
def test_a_recorded_file_states_the_versions_its_own_readings_hold(path):
    assert recorded(path)["taken_on"] == taken_on(json.loads(path.read_text()))


@pytest.mark.skipif(not CORPUS.is_dir(), reason=f"no corpus at {CORPUS}")
def test_the_files_built_from_the_corpus_are_what_the_corpus_gives_now():
    run = subprocess.run([sys.executable, str(HERE / "make_readings.py"), "--check"], capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr
