"""k3rig: a simulated 4-node gfx1250 rack (real sshd + dockerd per node, faked GPU hardware).

    from k3rig import Rig
    with Rig(workdir) as rig:          # or rig.start() ... rig.stop()
        rig.apply("ppod-mismatch")     # reset to healthy, then apply a scenario (scenario_names())
        rig.inventory_path             # k3doctor inventory YAML for the rack
"""

from .host import missing_requirements
from .rack import Rig, RigNode
from .scenario import scenario_names

__all__ = ["Rig", "RigNode", "missing_requirements", "scenario_names"]
