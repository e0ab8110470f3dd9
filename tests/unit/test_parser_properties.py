"""Property tests over every parser (dmesg has its own): random text and mutated real-format
outputs (truncation, deleted/duplicated lines, absurd numbers, NUL, CRLF, non-UTF-8 bytes) give
a result or ParseError, never another exception, never a nan/inf/negative number, and never a
plausible value from a truncated capture: a cut answer either raises or reads exactly as the
whole one (or, for formats without an end marker, as a consistent part of it).

Examples are few and derandomized so the file runs in seconds and the same way in CI.
"""
import dataclasses
import json
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from k3doctor.checks.shm import stale_entries

from k3doctor.parsers import ParseError
from k3doctor.parsers.amdsmi import parse_fabric, parse_static_vram
from k3doctor.parsers.common import embedded_json, to_float, to_int, to_percent, to_u32
from k3doctor.parsers.docker_events import container_from_api, event_from_dict
from k3doctor.parsers.nccl_tests import busbw, parse_perf
from k3doctor.parsers.rocmsmi import parse_showmemuse, parse_showpids
from k3doctor.parsers.torch_errors import classify
from tests.corpus import commands, load
from tests.unit.test_parse_amdsmi import FABRIC_TEXT

PROPERTY = settings(max_examples=25, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
SIGNED_FIELDS = {"root", "last_enqueued", "last_completed"}  # the only values a tool prints as -1

_END = "=" * 90 + "\n" + "=" * 34 + " End of ROCm SMI Log " + "=" * 35 + "\n"
_BANNER = "=" * 28 + " ROCm System Management Interface " + "=" * 28 + "\n"
MEMUSE = (_BANNER + "=" * 29 + " Current Memory Use " + "=" * 29 + "\n"
          + "".join(f"GPU[{g}]\t\t: GPU Memory Allocated (VRAM%): {p}\n"
                    f"GPU[{g}]\t\t: GPU Memory Read/Write Activity (%): 0\n" for g, p in enumerate((0, 3, 95, 0)))
          + _END)
NO_PIDS = _BANNER + "=" * 37 + " KFD Processes " + "=" * 38 + "\nNo KFD PIDs currently running\n" + _END
STATIC_HUMAN = ("GPU: 0\n    ASIC:\n        MARKET_NAME: AMD Instinct MI455X\n    VRAM:\n        TYPE: HBM\n"
                "        SIZE: 442368 MB\nGPU: 1\n    VRAM:\n        TYPE: HBM\n        SIZE: 442368 MB\n")
SHM = "4096\tpsm_shm.1c9e42b7\0" "8192\tnccl-shm-a8f3c2d1\0" "4096\tnccl-a\tb\0" "1\tsem.keep\0"


def _static_json():
    _, vram = commands("amd-smi-static-mi300x-blog.txt")
    return json.dumps({"gpu_data": [{"gpu": g, "vram": json.loads(vram)} for g in range(4)]}, indent=2) + "\n"


# name -> (parser, sample loader, how a truncated reading must relate to the whole one)
PARSERS = {
    "showmemuse": (lambda t: parse_showmemuse(t, 4), lambda: MEMUSE, "exact"),
    "showpids": (parse_showpids, lambda: load("rocm-smi-showpids-spaces.txt"), "exact"),
    "showpids-none": (parse_showpids, lambda: NO_PIDS, "exact"),
    "static-human": (parse_static_vram, lambda: STATIC_HUMAN, "part"),
    "static-mi350x": (parse_static_vram, lambda: load("amd-smi-static-mi350x.txt"), "part"),
    "static-json": (parse_static_vram, _static_json, "exact"),
    "fabric-json": (parse_fabric, lambda: load("amd-smi-fabric-json-nodescraper-fixture.json"), "exact"),
    "fabric-human": (parse_fabric, lambda: FABRIC_TEXT, "part"),
    "rccl-tests": (parse_perf, lambda: load("rccl-tests-allreduce-mi300x-1node.txt"), "exact"),
    "nccl-tests": (parse_perf, lambda: load("nccl-tests-allreduce-h100-2node.txt"), "exact"),
    "torch-pt25": (classify, lambda: load("torch-nccl-watchdog-timeout-pt25.txt"), "scan"),
    "torch-legacy": (classify, lambda: load("torch-nccl-watchdog-timeout-legacy.txt"), "scan"),
    "torch-remote": (classify, lambda: load("torch-nccl-remote-error.txt"), "scan"),
    "shm-listing": (stale_entries, lambda: SHM, "part"),
}
NAMES = sorted(PARSERS)
# the characters the formats are made of, plus the odd ones captures bring (a fixed alphabet is much
# cheaper for hypothesis than all of Unicode)
ALPHABET = st.sampled_from(sorted(set("GPU[]: =#{}\",.-_0123456789abcdefxABCDEFNX/\t\n\r\0 °\ufffd\u2028\x1b")
                                  | set("VRAMSIZEBTYPKFDOCHLgun")))
ABSURD = ["9" * 5000, "9" * 25, "1e999", "nan", "inf", "-95", "-1", "0x1f", "1_000", "", "\0"]


def outcome(parse, text, sane=True):
    """The parser's result, or None for ParseError; any other exception fails the test."""
    try:
        result = parse(text)
    except ParseError:
        return None
    if sane:
        _assert_sane_numbers(result)
    return result


def _assert_sane_numbers(value, field=""):
    """Every number in a result is finite and (but for the fields tools print as -1) not negative."""
    if dataclasses.is_dataclass(value):
        for f in dataclasses.fields(value):
            _assert_sane_numbers(getattr(value, f.name), f.name)
    elif isinstance(value, dict):
        for key, item in value.items():
            _assert_sane_numbers(key, field)
            _assert_sane_numbers(item, field)
    elif isinstance(value, (list, tuple, set)):
        for item in value:
            _assert_sane_numbers(item, field)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        assert math.isfinite(value), f"{field}: {value}"
        assert value >= (-1 if field in SIGNED_FIELDS else 0), f"{field}: {value}"


def _lines(text):
    return text.splitlines(keepends=True)


@st.composite
def mutated(draw, text):
    """``text`` after one to three real-world corruptions."""
    for _ in range(draw(st.integers(1, 3))):
        lines = _lines(text) or [""]
        kind = draw(st.sampled_from(["delete", "duplicate", "number", "nul", "crlf", "bytes", "cut"]))
        at = draw(st.integers(0, len(lines) - 1))
        if kind == "delete":
            text = "".join(lines[:at] + lines[at + 1:])
        elif kind == "duplicate":
            text = "".join(lines[:at + 1] + lines[at:])
        elif kind == "number":
            digits = [i for i, c in enumerate(text) if c.isdigit()]
            if digits:
                i = draw(st.sampled_from(digits))
                j = i
                while j < len(text) and text[j].isdigit():
                    j += 1
                text = text[:i] + draw(st.sampled_from(ABSURD)) + text[j:]
        elif kind == "nul":
            i = draw(st.integers(0, len(text)))
            text = text[:i] + "\0" + text[i:]
        elif kind == "crlf":
            text = text.replace("\n", "\r\n")
        elif kind == "bytes":  # what gather hands a parser from a non-UTF-8 capture
            raw = text.encode()
            i = draw(st.integers(0, len(raw)))
            text = (raw[:i] + draw(st.binary(min_size=1, max_size=8)) + raw[i:]).decode("utf-8", "replace")
        else:
            text = text[: draw(st.integers(0, len(text)))]
    return text


@pytest.mark.parametrize("name", NAMES)
@PROPERTY
@given(data=st.data())
def test_mutated_real_output_gives_a_result_or_parse_error(name, data):
    parse, sample, _ = PARSERS[name]
    outcome(parse, data.draw(mutated(sample())))


@pytest.mark.parametrize("name", NAMES)
@PROPERTY
@given(text=st.text(alphabet=ALPHABET, max_size=400)
       | st.binary(max_size=400).map(lambda b: b.decode("utf-8", "replace")))
def test_random_text_gives_a_result_or_parse_error(name, text):
    outcome(PARSERS[name][0], text)


@pytest.mark.parametrize("name", NAMES)
@PROPERTY
@given(data=st.data())
def test_a_truncated_capture_never_reads_as_a_different_answer(name, data):
    parse, sample, relation = PARSERS[name]
    full_text = sample()
    full = parse(full_text)
    # a cut at a line boundary leaves no torn last line: the harder case, so half the draws are one
    boundaries = [i + 1 for i, c in enumerate(full_text[:-1]) if c in "\n\0"] or [0]
    at = data.draw(st.sampled_from(boundaries) | st.integers(0, len(full_text) - 1))
    cut = outcome(parse, full_text[:at])
    if cut is None:
        return
    if relation == "exact":  # the format has an end marker: a cut answer raises or is all of it
        assert cut == full
    elif relation == "part":  # no end marker: fewer items, each as in the whole answer (or unknown)
        _assert_part_of(cut, full)
    else:  # a log scanner: what it read from the cut log, it read as in the whole log
        for timeout in cut.watchdog:
            whole = next(t for t in full.watchdog if (t.rank, t.seq) == (timeout.rank, timeout.seq))
            for f in dataclasses.fields(timeout):
                assert getattr(timeout, f.name) in (getattr(whole, f.name), None)


def _assert_part_of(cut, full):
    if isinstance(full, dict):  # amd-smi static: {gpu: MiB or None}
        assert set(cut) <= set(full) and all(cut[g] in (full[g], None) for g in cut)
    elif full and dataclasses.is_dataclass(full[0]):  # amd-smi fabric: FabricInfo per GPU
        whole = {info.gpu: info for info in full}
        for info in cut:
            for f in dataclasses.fields(info):
                assert getattr(info, f.name) in (getattr(whole[info.gpu], f.name), None, False), f.name
    else:  # shm listing: only names that exist, whole
        assert set(cut) <= set(full)


JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(ALPHABET, max_size=8),
                           lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.text(ALPHABET, max_size=6), inner, max_size=3), max_leaves=8)
EVENT = {"status": "create", "id": "abc", "from": "img", "Type": "container", "Action": "create",
         "Actor": {"ID": "abc", "Attributes": {"name": "intruder", "image": "img"}},
         "time": 1760000000, "timeNano": 1760000000123456789}
CONTAINER = {"Id": "abc", "Names": ["/intruder"], "Image": "img", "State": "created", "Status": "Created",
             "Created": 1760000000, "Labels": {"a": "b"}}


@st.composite
def garbled_dict(draw, base):
    """``base`` with keys dropped and values (also nested Actor ones) replaced by arbitrary JSON values."""
    d = json.loads(json.dumps(base))
    for key in draw(st.lists(st.sampled_from(sorted(base)), max_size=3, unique=True)):
        if draw(st.booleans()):
            d.pop(key)
        else:
            d[key] = draw(JSON_VALUES | st.sampled_from([10 ** 400, -1, float("nan"), float("inf"), "9" * 5000]))
    return d


@PROPERTY
@given(d=garbled_dict(EVENT) | JSON_VALUES)
def test_garbled_docker_event_dicts_give_an_event_or_parse_error(d):
    event = outcome(event_from_dict, d)
    if event is not None:  # what a judge compares is what Docker sends: strings and a real time
        assert all(isinstance(v, str) and v for v in (event.type, event.action, event.id))
        assert math.isfinite(event.time)


@PROPERTY
@given(d=garbled_dict(CONTAINER) | JSON_VALUES)
def test_garbled_container_dicts_give_a_container_or_parse_error(d):
    container = outcome(container_from_api, d)
    if container is not None:
        assert isinstance(container.name, str) and isinstance(container.status, str)


@PROPERTY
@given(algbw=st.floats() | st.integers() | st.text(ALPHABET, max_size=6), nranks=st.integers(-3, 64) | st.floats())
def test_busbw_gives_a_number_or_parse_error(algbw, nranks):
    outcome(lambda _: busbw(algbw, nranks), None)


NUMBERISH = st.text(alphabet=st.sampled_from(sorted(set("0123456789.-+eExX_ nainfNAI/\t"))), max_size=30)


@PROPERTY
@given(value=NUMBERISH | st.integers() | st.floats() | JSON_VALUES)
def test_number_helpers_give_a_sane_number_or_parse_error(value):
    for helper in (to_int, to_u32, to_float, to_percent):
        number = outcome(lambda v, helper=helper: helper(v, "x"), value)
        if helper is to_percent and number is not None:
            assert 0 <= number <= 100


@PROPERTY
@given(text=st.text(alphabet=st.sampled_from(sorted(set('[]{}",:0123456789.eE-NaInfity \n'))), max_size=200))
def test_embedded_json_gives_a_document_or_parse_error(text):
    outcome(lambda t: embedded_json(t, "x"), text, sane=False)  # any JSON document, negative numbers too
