"""`k3doctor triage` reads every line of every log, rank marker or not (issue 32 item 3), end to end: the real CLI on
files copied off the cluster, and live over real SSH from each node's real dockerd (`docker logs`), where a line with
no rank marker (aiperf, the launcher, uvicorn) is the node's."""
import pytest
from k3rig import server_log as L

from tests.e2e.cli import k3json
from tests.e2e.test_triage import findings, fresh, triage, write_logs  # noqa: F401 (fresh: a fixture)

pytestmark = pytest.mark.e2e
AIPERF = ("aiperf.common.exceptions.ProfileMetricCoverageError: /tmp/aiperf/server_metrics.json contains no metric "
          "with required prefix 'atom:'")
GPUCORE = "gpucore files exist. not good"


def test_a_node_named_log_file_with_rankless_faults_is_not_ready(tmp_path):
    """Before: READY TO LAUNCH, exit 0, for node1.log; DO NOT LAUNCH for the same lines in rank0.log."""
    (tmp_path / "node1.log").write_text("\n".join(L.node_logs(n_nodes=2)[1] + [AIPERF, GPUCORE]) + "\n")
    rc, doc = k3json("triage", "--logs", tmp_path)
    assert (rc, doc["verdict"]) == (1, "DO NOT LAUNCH"), doc
    assert findings(doc) == [("triage-fatal", "node1", None, "FAIL", "TRIAGE-AIPERF-NO-ATOM-METRICS"),
                             ("triage-fatal", "node1", None, "FAIL", "TRIAGE-GPUCORE")]


def test_live_a_line_without_a_rank_is_put_on_the_node_whose_log_it_is(fresh):
    logs = L.node_logs()
    logs[1] = logs[1] + [AIPERF]  # ct14's container printed it (no EngineCore_DP marker)
    logs[3] = logs[3] + ["RuntimeError: Timed out waiting for LMCache server healthcheck",
                         "INFO:     Application startup complete."]  # ct17: timed out, then came up after all
    write_logs(fresh, logs)
    rc, doc = triage(fresh)
    assert rc == 1 and findings(doc) == [("triage-fatal", "ct14", None, "FAIL", "TRIAGE-AIPERF-NO-ATOM-METRICS")]
    [fault] = [r for r in doc["results"] if r["status"] == "FAIL"]
    assert fault["evidence"]["log"] == "ct14" and "required prefix 'atom:'" in fault["message"]
