"""xgmi-links (reference §30) and its parser, on amd-smi xgmi's real layouts: a real capture of a host without
XGMI, the real (truncated) 8 × MI300X capture of an older amd-smi, and a healthy MI355X node in the same
layout with each fault shape made by changing its cells (tests/unit/samples/xgmi/)."""
import re
from pathlib import Path

import pytest

from k3doctor import testing
from k3doctor.inventory.load import parse_inventory
from k3doctor.parsers import ParseError
from k3doctor.parsers.xgmi import parse_xgmi
from k3doctor.results import Status

SAMPLES = Path(__file__).with_name("samples") / "xgmi"


def sample(name: str) -> str:
    """The capture without its provenance header (the leading run of `#` lines)."""
    lines = (SAMPLES / name).read_text().splitlines(keepends=True)
    while lines and lines[0].startswith("#"):
        lines.pop(0)
    return "".join(lines)


HEALTHY = sample("amd-smi-xgmi-mi355x-healthy.txt")


def with_cell(text: str, src: int, dst: int, cell: str) -> str:
    """The XGMI LINK STATUS cell GPU ``src`` prints for GPU ``dst`` set to ``cell`` (columns kept), and GPU
    ``src``'s GPU LINK PORT STATUS row made to match, as amd-smi prints both from one status array: one port per
    link of the pair row (``U/D`` is two; N/A none), the unused ports X (rig/k3rig/mi355x.py does the same)."""
    head, table = text.split("XGMI LINK STATUS:\n")
    lines = table.split("\n")
    for i, line in enumerate(lines):
        if line.startswith(f"GPU{src} "):
            prefix, cells = line[:21], re.findall(r"\S+\s*", line[21:])
            cells[dst] = cell.ljust(14)
            lines[i] = (prefix + "".join(cells)).rstrip()
            links = [x for c in cells for x in c.strip().split("/") if x in ("U", "D", "X")]
            ports = "  ".join(links + ["X"] * (8 - len(links)))
            head = re.sub(rf"(?m)^(GPU{src}   \S+  )[UDX](?:  [UDX]){{7}}$", lambda m: m.group(1) + ports, head)
    return head + "XGMI LINK STATUS:\n" + "\n".join(lines)


def with_metric(text: str, gpu: int, rate: str, link_type: str = "XGMI") -> str:
    return re.sub(rf"^(GPU{gpu}   \S+  )\S+ Gb/s +\S+ Gb/s +XGMI", lambda m: m.group(1) + f"{rate} Gb/s".ljust(10) +
                  "512 Gb/s".ljust(15) + link_type, text, flags=re.MULTILINE)


def judge(text, **params):
    checks = "".join(f", {k}: {v}" for k, v in params.items())
    inv = parse_inventory("cluster: {platform: mi355x" + (f", checks: {{xgmi-links: {{{checks[2:]}}}}}" if params
                                                          else "") + "}\nnodes:\n  - {name: n0, transport: local}\n",
                          "inv.yaml")
    return testing.judge("xgmi-links", {"xgmi": text}, settings=inv.cluster)


def test_the_real_capture_of_a_host_without_xgmi_parses_to_what_it_says():
    report = parse_xgmi(sample("amd-smi-xgmi-no-xgmi-two-gpus.txt"))
    assert [(g.gpu, g.bdf, g.bit_rate_gbps, g.max_bandwidth_gbps, g.link_type) for g in report.gpus.values()] == \
        [(0, "0000:03:00.0", 65535.0, 4294967295.0, "N/A"), (1, "0000:0c:00.0", 65535.0, 4294967295.0, "N/A")]
    assert report.links == {(0, 1): "N/A", (1, 0): "N/A"}


def test_an_older_amd_smi_without_the_pair_table_is_an_error_not_a_pass():
    with pytest.raises(ParseError, match="unexpected line in the metric table: '\\[output truncated\\]'"):
        parse_xgmi(sample("amd-smi-xgmi-topology-mi300x-blog.txt").split("$ amd-smi bad-pages")[0]
                   .replace("$ amd-smi xgmi\n", ""))
    metric_only = HEALTHY.split("\nGPU LINK PORT STATUS:")[0] + "\n"
    with pytest.raises(ParseError, match="no XGMI LINK STATUS table"):
        parse_xgmi(metric_only)


@pytest.mark.parametrize("cut, why", [
    (lambda t: t.split("\nLegend:")[0] + "\n", "legend .* is missing"),
    (lambda t: re.sub(r"^GPU5   0000:95:00.0  U {13}.*\n", "", t, flags=re.MULTILINE), "tables disagree on the GPUs"),
    (lambda t: t[: len(t) // 2], "ends mid-line|no XGMI LINK STATUS"),
    (lambda t: with_cell(t, 3, 4, "up"), "GPU3 -> GPU4 link status 'up'"),
    (lambda t: with_cell(t, 3, 3, "U"), "SELF belongs on the diagonal"),
    (lambda t: t.replace("SELF          U             U             U             U             U             U"
                         "             U\n", "SELF          U\n", 1), "2 cell\\(s\\) for 8 GPU column"),
    (lambda t: "", "empty output"),
])
def test_partial_or_garbled_output_is_an_error_for_the_node(cut, why):
    with pytest.raises(ParseError, match=why):
        parse_xgmi(cut(HEALTHY))
    [v] = judge(cut(HEALTHY))
    assert v.status is Status.ERROR and "unparseable output" in v.message


def test_a_healthy_mi355x_node_passes_with_every_pair_counted():
    [v] = judge(HEALTHY)
    assert v.status is Status.PASS, v.message
    assert v.message == "all 28 GPU pairs of 8 GPUs linked by XGMI, every link U, 32 Gb/s on every GPU"


@pytest.mark.parametrize("ab, ba, state, remediation", [
    ("D", "D", "down", "XGMI-LINK-DOWN"),
    ("D", "U", "down", "XGMI-LINK-DOWN"),
    ("X", "X", "down", "XGMI-LINK-DOWN"),
    ("N/A", "N/A", "down", "XGMI-LINK-DOWN"),
    ("D/D", "D/D", "down", "XGMI-LINK-DOWN"),
    ("U/D", "U/D", "down", "XGMI-LINK-DOWN"),  # §30: a D in either status table is a BLOCK
    ("U", "D", "down", "XGMI-LINK-DOWN"),
    ("U", "N/A", "degraded", "XGMI-LINK-DEGRADED"),
])
def test_each_fault_shape_is_named_once_per_pair_with_both_gpus(ab, ba, state, remediation):
    verdicts = judge(with_cell(with_cell(HEALTHY, 2, 5, ab), 5, 2, ba))
    [v] = verdicts
    status = Status.FAIL if state == "down" else Status.WARN  # degraded still carries traffic
    assert v.status is status and v.remediation == remediation and v.gpu == 2
    assert v.message == (f"gpu2<->gpu5 XGMI link {state}: GPU2 (0000:65:00.0) reads {ab}, GPU5 (0000:95:00.0) "
                         f"reads {ba} (amd-smi xgmi, XGMI LINK STATUS)")


def test_a_gpu_trained_slower_or_not_on_xgmi_is_named():
    [slow] = judge(with_metric(HEALTHY, 6, "16"))
    assert slow.status is Status.WARN and slow.gpu == 6 and slow.remediation == "XGMI-LINK-DEGRADED"
    assert slow.message == ("GPU6 (0000:e5:00.0) XGMI links trained at 16 Gb/s (max_bandwidth 512 Gb/s), below "
                            "32 Gb/s on the node's fastest GPUs: degraded")
    [pcie] = judge(with_metric(HEALTHY, 1, "32", "PCIE"))
    assert pcie.status is Status.FAIL and pcie.gpu == 1 and "link_type PCIE" in pcie.message
    floor = judge(HEALTHY, min_bit_rate_gbps=36)
    assert [v.gpu for v in floor] == list(range(8))
    assert all(v.status is Status.WARN and "below the configured minimum 36 Gb/s" in v.message for v in floor)


def test_no_readable_link_state_is_an_error_and_no_xgmi_at_all_a_fail():
    all_na = HEALTHY
    for a in range(8):
        for b in range(8):
            if a != b:
                all_na = with_cell(all_na, a, b, "N/A")
    [v] = judge(all_na)
    assert v.status is Status.ERROR and "N/A for every GPU pair" in v.message
    no_xgmi = all_na
    for g in range(8):
        no_xgmi = with_metric(no_xgmi, g, "65535", "N/A")
    verdicts = judge(no_xgmi)
    assert [(v.status, v.gpu, v.remediation) for v in verdicts] == [(Status.FAIL, g, "XGMI-LINK-DOWN")
                                                                    for g in range(8)]


def test_fewer_gpus_than_the_node_has_is_an_error():
    [v] = judge(sample("amd-smi-xgmi-no-xgmi-two-gpus.txt"))
    assert v.status is Status.ERROR and v.message.startswith("amd-smi xgmi lists 2 GPU(s), the node has 8")


def test_xgmi_links_runs_on_mi355x_only():
    from k3doctor import platforms
    assert platforms.not_for("xgmi-links") == ["gfx1250"]
