"""A site's own check (docs/writing-a-check.md): the node's clock is synchronized, so that the nodes' kernel-log
stamps and a triage's timeline line up. systemd-timesyncd creates /run/systemd/timesync/synchronized once it
has synchronized the clock."""
from k3doctor.api import Exists, check, passed, remediation, warn

UNSYNCED = remediation("CLOCK-UNSYNCED", "the node's clock is not synchronized", """
The nodes' kernel-log stamps and a triage's timeline are compared across nodes: start the time daemon
(`timedatectl set-ntp true`) and wait until `timedatectl` says `System clock synchronized: yes`.""")


@check("clock-synced", title="the node's clock is synchronized", scope="node", remediation=(UNSYNCED,),
       reads={"synced": Exists("/run/systemd/timesync/synchronized")})
def clock_synced(r, ctx):
    """One timeline across nodes needs their clocks synchronized."""
    if r["synced"]:
        return passed("systemd-timesyncd has synchronized the clock")
    return warn("the clock is not synchronized (no /run/systemd/timesync/synchronized)")
