from k3doctor import testing

def test_ifoe_missing_fails_with_its_remediation():
    [v] = testing.judge("ifoe-loaded", {"ifoe": None, "kfd": True, "states": {}})
    assert (v.status.value, v.remediation) == ("FAIL", "IFOE-MISSING")
