"""Build the field corpus's readings files from the real tool outputs of ``../shared/corpus/`` (issue 32 §5).

Each seed is one node as one public capture shows it: every reading its checks declare is filled from a corpus
file, verbatim (its provenance header dropped, nothing else), and saved as ``check --save-readings`` saves it,
pseudonyms included (k3doctor/gather/shareable.py). A reading the capture does not hold is *Unavailable, naming
why*, never invented: the checks that need it say ERROR, and the seed's ``only`` leaves such checks out. The few
values a capture implies but does not print are built from it and said so in ``built`` (the card a dmesg names,
an uptime after its last line).

Run ``python3 tests/field/make_readings.py`` to write the files; ``--record`` also writes each seed's verdicts
from `k3doctor judge` (review them: they are what the replay test holds k3doctor to). ``--check`` exits 1 when a
committed file differs from what the corpus gives (tests/field/test_field_corpus.py runs it).
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT))

from k3doctor import readings as rd  # noqa: E402
from k3doctor.gather import snapshot  # noqa: E402
from k3doctor.inventory.load import parse_inventory  # noqa: E402
from k3doctor.judging.runner import select_checks, specs_of  # noqa: E402
from k3doctor.registry import REGISTRY  # noqa: E402

CORPUS = Path(os.environ.get("K3DOCTOR_CORPUS", ROOT.parent / "shared" / "corpus"))
NOT_CAPTURED = "not in the capture this file was built from (tests/field/make_readings.py)"


def body(name: str) -> str:
    """A corpus file without its provenance header (INDEX.md: the leading run of `#` lines)."""
    lines = (CORPUS / name).read_text().splitlines(keepends=True)
    while lines and lines[0].startswith("#"):
        lines.pop(0)
    return "".join(lines)


def header(name: str) -> str:
    return "".join(line for line in (CORPUS / name).read_text().splitlines(keepends=True)
                   if line.startswith("#"))


def sections(name: str) -> dict:
    """``$ command`` -> its output, for a corpus file that holds several commands' outputs."""
    out, current = {}, None
    for line in body(name).splitlines(keepends=True):
        if line.startswith("$ "):
            current = line[2:].strip()
            out[current] = ""
        elif current is not None:
            out[current] += line
    return out


def command(spec, stdout: str, rc: int = 0, stderr: str = "") -> rd.CommandReading:
    return rd.CommandReading(" ".join(spec.argv), rc, stdout, stderr)


def kfd_nodes(name: str, pattern: str) -> dict:
    """``cat nodes/*/properties`` with the author's ``-----`` separators -> the glob's {path: reading}."""
    chunks = [c.lstrip("\n") for c in re.split(r"(?m)^-{10,}\n", body(name)) if c.strip()]
    return {pattern.replace("*", str(i)): rd.FileReading(pattern.replace("*", str(i)), chunk)
            for i, chunk in enumerate(chunks)}


def versions(name: str) -> dict:
    """ROCm, amd-smi and driver versions as `amd-smi version` printed them."""
    line = next(ln for ln in body(name).splitlines() if ln.startswith("AMDSMI Tool:"))
    fields = dict(part.split(": ", 1) for part in line.split(" | "))
    kernel = re.search(r"Linuxversion(\S+?)\(", fields["amdgpu version"])
    return {"ROCm": fields["ROCm version"], "amd-smi": fields["AMDSMI Tool"],
            "amdgpu driver": f"in-tree (kernel {kernel[1]})" if kernel else fields["amdgpu version"], "ATOM": None}


def taken_on(doc: dict) -> dict:
    """The versions a saved readings file was taken with, read out of its own readings: the container's
    ``rocm=``/``atom=``/``amdsmi=`` lines (env-versions' reading) and /sys/module/amdgpu/version (None: not read)."""
    found = {"ROCm": None, "amd-smi": None, "amdgpu driver": None, "ATOM": None}
    for entries in doc["nodes"].values():
        for e in entries:
            text = e["reading"].get("stdout") or ""
            for key, field in (("rocm", "ROCm"), ("atom", "ATOM"), ("amdsmi", "amd-smi")):
                match = re.search(rf"(?m)^{key}=(.+)$", text)
                if match and found[field] is None:
                    value = match[1].strip()
                    found[field] = value.split("AMDSMI Tool:")[-1].split("|")[0].strip() if key == "amdsmi" else value
            if e["spec"].get("path") == "/sys/module/amdgpu/version" and found["amdgpu driver"] is None:
                content = e["reading"].get("content")
                found["amdgpu driver"] = content.strip() if content else None
    return found


# --- the seeds: node name (pseudonymized on save), the checks judged, and each reading by (check, name) ---------

def kernel_log(source: str, card: int, bdf: str):
    """A node whose kernel log is the paste ``source``, with the card at ``bdf`` it names."""
    def fill(spec, check, name):
        dmesg = body(source)
        last = float(re.findall(r"^\[\s*([\d.]+)\]", dmesg, re.M)[-1])
        uevent = f"/sys/class/drm/card{card}/device/uevent"
        made = {
            "kfd": lambda: True, "ifoe": lambda: False,
            "dmesg": lambda: command(spec, dmesg),
            "errors": lambda: command(spec, dmesg),
            "boot_id": lambda: rd.FileReading(spec.path, "6d1f0c2e-3b7a-4c55-9e1d-2a4b6c8d0e1f\n"),
            "uptime": lambda: rd.FileReading(spec.path, f"{last + 60:.2f} 0.00\n"),
            "uevents": lambda: {uevent: rd.FileReading(uevent, f"DRIVER=amdgpu\nPCI_SLOT_NAME={bdf}\n")},
            "ualink": lambda: {},
        }.get(name)
        return made() if made else absent(spec)
    return fill


KERNEL_LOG_BUILT = ["uptime: 60 s after the paste's last line", "dmesg --level=err+: every line of the paste (it "
                    "has no levels)", "boot id: any (the paste has none; saved as a pseudonym)"]


def absent(spec):
    """A sysfs/proc file the capture shows no trace of reads as absent; any other reading as not captured."""
    return rd.FileReading(spec.path, None) if isinstance(spec, rd.File) and spec.path.startswith("/sys/") else None


def kfd_topology(spec, check, name):
    if name == "kfd":
        return True
    if name in ("topology", "kfd_nodes"):
        return kfd_nodes("kfd-topology-properties-mi300a-4gpu.txt", spec.pattern)
    return absent(spec)


def inbox_driver(spec, check, name):
    if name == "kfd":
        return True
    if name == "version":  # `cat /sys/module/amdgpu/version`: No such file or directory
        assert "No such file or directory" in body("amd-smi-version-and-sys-module-amdgpu-inbox-mi300x.txt")
        return rd.FileReading(spec.path, None)
    return absent(spec)


def xgmi_blog(spec, check, name):
    if name == "kfd":
        return True
    if name == "xgmi":
        return command(spec, sections("amd-smi-xgmi-topology-mi300x-blog.txt")["amd-smi xgmi"])
    return absent(spec)


SEEDS = {
    "ring-timeout-gfx11": {
        "node": "lrb-6273", "only": ["amdgpu-driver", "kernel-health"],
        "fill": kernel_log("dmesg-amdgpu-ring-timeout-gpu-reset.txt", 1, "0000:c5:00.0"),
        "sources": ["dmesg-amdgpu-ring-timeout-gpu-reset.txt"],
        "built": KERNEL_LOG_BUILT + ["uevent of card1 at 0000:c5:00.0: the card the dmesg names (devcoredump path "
                                     "and BDF)"],
        "taken_on": {"ROCm": None, "amd-smi": None, "amdgpu driver": "2025/26 amdgpu (gfx_v11_0)", "ATOM": None}},
    "page-fault-gfxhub": {
        "node": "amdgpu-172", "only": ["amdgpu-driver", "kernel-health"],
        "fill": kernel_log("dmesg-amdgpu-pagefault-noretry.txt", 0, "0000:c6:00.0"),
        "sources": ["dmesg-amdgpu-pagefault-noretry.txt"],
        "built": KERNEL_LOG_BUILT + ["uevent of card0 at 0000:c6:00.0: the BDF the dmesg names"],
        "taken_on": {"ROCm": None, "amd-smi": None, "amdgpu driver": "gfx9.4.x amdgpu (gfxhub0 wording)",
                     "ATOM": None}},
    "mi300a-kfd-topology": {
        "node": "mi300a-4gpu", "only": ["amdgpu-driver", "gpu-platform"], "fill": kfd_topology,
        "sources": ["kfd-topology-properties-mi300a-4gpu.txt"], "built": [],
        "taken_on": {"ROCm": None, "amd-smi": None, "amdgpu driver": None, "ATOM": None}},
    "mi300x-inbox-driver": {
        "node": "k8s-dp-157", "only": ["amdgpu-driver"], "fill": inbox_driver,
        "sources": ["amd-smi-version-and-sys-module-amdgpu-inbox-mi300x.txt"], "built": [],
        "taken_on": lambda: versions("amd-smi-version-and-sys-module-amdgpu-inbox-mi300x.txt")},
    "mi300x-xgmi-blog": {
        "node": "mi300x-blog", "only": ["amdgpu-driver", "xgmi-links"], "fill": xgmi_blog,
        "sources": ["amd-smi-xgmi-topology-mi300x-blog.txt"], "built": [],
        "taken_on": {"ROCm": "6.2 (the blog's era)", "amd-smi": None, "amdgpu driver": None, "ATOM": None}},
}
INVENTORY = "cluster: {{platform: mi355x}}\nnodes:\n  - {{name: {node}, host: {node}}}\n"


def build(seed: dict) -> str:
    """The seed's readings file, as `check --save-readings` writes it (pseudonyms included)."""
    inventory = INVENTORY.format(node=seed["node"])
    inv = parse_inventory(inventory, "<seed>", REGISTRY)
    checks = select_checks(REGISTRY, only=tuple(seed["only"]))
    got = {}
    for check, specs in specs_of(checks, inv.nodes[0].settings).items():
        for name, spec in specs.items():
            reading = seed["fill"](spec, check, name)
            got[spec] = rd.Unavailable(NOT_CAPTURED) if reading is None else reading
    doc = {"schema": snapshot.SCHEMA, "inventory": inventory, "overrides": [], "unreachable": {},
           "nodes": {seed["node"]: snapshot.encode_readings(got)}}
    return json.dumps(snapshot.identifiers(doc, keep=False), indent=1, sort_keys=True) + "\n"


def sidecar(name: str, seed: dict) -> dict:
    taken_on = seed["taken_on"]() if callable(seed["taken_on"]) else seed["taken_on"]
    return {"source": [f"../shared/corpus/{s}: {header(s).splitlines()[0].lstrip('# ')}" for s in seed["sources"]],
            "built": seed["built"], "only": seed["only"], "taken_on": taken_on}


def judged(path: Path, only: list) -> dict:
    """What `k3doctor judge` says of a readings file: exit code and every (check, node, gpu, status, code)."""
    run = subprocess.run([sys.executable, "-m", "k3doctor.cli", "judge", str(path), "--format", "json",
                          *(["--only", ",".join(only)] if only else [])],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    doc = json.loads(run.stdout)
    return {"exit_code": run.returncode,
            "results": [[r["check"], r["node"], r["gpu"], r["status"], r["remediation"]] for r in doc["results"]]}


def main(argv: list) -> int:
    from k3doctor.cli.options import load_plugins

    load_plugins()
    stale = []
    for name, seed in SEEDS.items():
        readings, verdicts = HERE / f"{name}.readings.json", HERE / f"{name}.verdicts.json"
        text, meta = build(seed), sidecar(name, seed)
        if "--check" in argv:
            old = json.loads(verdicts.read_text()) if verdicts.exists() else {}
            if not readings.exists() or readings.read_text() != text or {k: old.get(k) for k in meta} != meta:
                stale.append(name)
            continue
        readings.write_text(text)
        if "--record" in argv or not verdicts.exists():
            meta |= judged(readings, seed["only"])
        else:
            meta |= {k: v for k, v in json.loads(verdicts.read_text()).items() if k not in meta}
        verdicts.write_text(json.dumps(meta, indent=1) + "\n")
    if stale:
        print(f"stale (run tests/field/make_readings.py): {', '.join(stale)}", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
