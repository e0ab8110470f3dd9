from k3doctor.rules.triage import RULES


def test_the_row_fires_on_its_sample_and_names_its_remediation():
    [row] = [r for r in RULES if r.name == "hip-out-of-memory"]
    assert (row.severity, row.remediation, row.step) == ("fail", "TRIAGE-KV-COLLISION", "triage-fatal")
    assert "HIP error: out of memory" in row.sample
