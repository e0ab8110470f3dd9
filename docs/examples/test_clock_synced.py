from k3doctor import testing


def test_an_unsynchronized_clock_warns_with_its_remediation():
    [v] = testing.judge("clock-synced", {"synced": False})
    assert (v.status.value, v.remediation) == ("WARN", "CLOCK-UNSYNCED")  # the check's first code, attached


def test_a_synchronized_clock_passes():
    [v] = testing.judge("clock-synced", {"synced": True})
    assert v.status.value == "PASS"
