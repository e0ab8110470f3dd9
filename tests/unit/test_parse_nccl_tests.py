import pytest

from k3doctor.parsers import ParseError
from k3doctor.parsers.nccl_tests import busbw, parse_perf
from tests.corpus import load

RCCL = "rccl-tests-allreduce-mi300x-1node.txt"
NCCL = "nccl-tests-allreduce-h100-2node.txt"


def test_rccl_mi300x_single_node():
    result = parse_perf(load(RCCL))
    assert result.nranks == 8
    assert len(result.rows) == 31
    assert (result.rows[0].size, result.rows[-1].size) == (8, 8589934592)
    top = result.row(8589934592)
    assert (top.count, top.type, top.redop, top.root) == (2147483648, "float", "sum", -1)
    assert (top.out_of_place.busbw, top.in_place.busbw) == (315.69, 315.91)
    assert (top.out_of_place.algbw, top.in_place.algbw) == (180.40, 180.52)
    assert result.row(1073741824).out_of_place.busbw == 313.66
    assert result.row(2147483648).out_of_place.time_us == 11940  # time column lost its decimals
    assert all(r.out_of_place.wrong == 0 and r.in_place.wrong == 0 for r in result.rows)
    assert result.out_of_bounds == 0
    assert result.avg_busbw == 110.464


def test_nccl_h100_two_node_with_prompt_and_trailing_spaces():
    result = parse_perf(load(NCCL))
    assert result.nranks == 4
    top = result.row(8589934592)
    assert (top.out_of_place.busbw, top.in_place.busbw) == (147.98, 147.94)
    assert result.row(16384).out_of_place.time_us == 291.4  # real outlier, kept as is
    assert result.avg_busbw == 48.0299
    assert busbw(top.out_of_place.algbw, result.nranks) == pytest.approx(147.98, abs=0.01)


def test_busbw_formula():
    assert busbw(100.0, 4) == 150.0
    assert busbw(180.40, 8) == pytest.approx(315.7)
    assert busbw(10.0, 1) == 0.0


def test_layout_without_root_column_and_na_wrong():
    text = (
        "#       size         count      type   redop     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n"
        "        1024           256     float     sum    13.67    0.07    0.13    N/A    14.87    0.07    0.12    N/A\n"
        "# Avg bus bandwidth    : 0.125\n"
    )
    (row,) = parse_perf(text).rows
    assert row.root is None and row.out_of_place.wrong is None and row.in_place.time_us == 14.87


def _without(text, needle):
    return "".join(line for line in text.splitlines(keepends=True) if needle not in line)


def test_truncated_and_garbled_raise():
    text = load(RCCL)
    cut_mid_row = text[: text.index("  8589934592") + 40]
    for bad in ("", "mpirun: command not found\n", cut_mid_row, _without(text, "Avg bus bandwidth"),
                _without(text, "  size  ")):
        with pytest.raises(ParseError):
            parse_perf(bad)


def test_two_runs_concatenated_are_not_merged():
    text = load(RCCL)
    with pytest.raises(ParseError, match="second result table"):
        parse_perf(text + text)
    body = text[text.index("           8             2"):]  # a second run's rows and summary, no header
    with pytest.raises(ParseError, match="after the 'Avg bus bandwidth' summary"):
        parse_perf(text + body)
    rows_only = body[: body.index("# Errors")]
    with pytest.raises(ParseError, match="size 8 after 8589934592"):
        parse_perf(text.replace("# Errors", rows_only + "# Errors", 1))


def test_a_repeated_row_is_garbled_output():
    text = load(RCCL)
    row = next(line for line in text.splitlines(keepends=True) if line.strip().startswith("1073741824 "))
    with pytest.raises(ParseError, match="repeated"):
        parse_perf(text.replace(row, row * 2))


def test_summary_cut_mid_number_is_not_a_plausible_average():
    text = load(NCCL)
    cut = text[: text.index("Avg bus bandwidth") + len("Avg bus bandwidth    : 48.0")]
    with pytest.raises(ParseError, match="mid-line"):
        parse_perf(cut)


@pytest.mark.parametrize("garble", [
    lambda t: t.replace("#  Rank  0", "#  Rank  " + "9" * 5000, 1),  # past int()'s digit limit
    lambda t: t.replace("315.69", "1e999", 1),
    lambda t: t.replace("315.69", "nan", 1),
    lambda t: t.replace("315.69", "-315.69", 1),
    lambda t: t.replace("110.464", "0x6e", 1),
    lambda t: t.replace("  8589934592", "  1_000", 1),
])
def test_absurd_numbers_raise(garble):
    with pytest.raises(ParseError):
        parse_perf(garble(load(RCCL)))


@pytest.mark.parametrize("algbw, nranks", [(1.0, 0), (1.0, -2), (1.0, True), (float("nan"), 4),
                                           (float("inf"), 4), (-1.0, 4), ("x", 4), (1.0, 2.5)])
def test_busbw_of_absurd_inputs_is_a_parse_error(algbw, nranks):
    with pytest.raises(ParseError):
        busbw(algbw, nranks)
