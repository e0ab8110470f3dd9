from click.testing import CliRunner

from k3doctor import platforms
from k3doctor.cli.info import list_cmd


def test_the_platform_file_is_read_and_listed():
    p = platforms.get("mi300a")
    assert (p.gfx, p.gfx_target_version, p.gpus_per_node, p.device_ids) == ("gfx942", 90402, 4, {0x74A0})
    shown = CliRunner().invoke(list_cmd, ["--platform", "mi300a"])
    listed = [line.split()[0] for line in shown.output.splitlines() if line.strip()]
    assert shown.exit_code == 0 and "gpu-platform" in listed and "ualink-state" not in listed  # not run there
