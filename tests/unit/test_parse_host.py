"""Parsers of the host-resources readings on real output: /proc/meminfo, `stat -f`, `find -printf`.

The meminfo sample is a capture of a real 6.18 kernel; stat and find run here, on real files.
"""
import os
import subprocess

import pytest

from k3doctor.parsers import ParseError
from k3doctor.parsers.fsinfo import FIND_FORMAT, STATFS_FORMAT, parse_find_listing, parse_statfs_line
from k3doctor.parsers.meminfo import parse_meminfo

# /proc/meminfo of a 24 GiB VM (kernel 6.18), verbatim
MEMINFO = """\
MemTotal:       24683584 kB
MemFree:        22794528 kB
MemAvailable:   24037268 kB
Buffers:           36296 kB
Cached:          1338168 kB
SwapCached:            0 kB
Active:           737732 kB
Inactive:         836244 kB
Active(anon):       1652 kB
Inactive(anon):   207216 kB
Active(file):     736080 kB
Inactive(file):   629028 kB
Unevictable:       16840 kB
Mlocked:           15148 kB
SwapTotal:             0 kB
SwapFree:              0 kB
Zswap:                 0 kB
Zswapped:              0 kB
Dirty:             12428 kB
Writeback:             0 kB
AnonPages:        216468 kB
Mapped:           128652 kB
Shmem:              9356 kB
KReclaimable:     180224 kB
Slab:             216260 kB
SReclaimable:     180224 kB
SUnreclaim:        36036 kB
KernelStack:        3664 kB
PageTables:         6132 kB
SecPageTables:         0 kB
NFS_Unstable:          0 kB
Bounce:                0 kB
WritebackTmp:          0 kB
CommitLimit:    12341792 kB
Committed_AS:    1838528 kB
VmallocTotal:   34359738367 kB
VmallocUsed:        7892 kB
VmallocChunk:          0 kB
Percpu:              960 kB
AnonHugePages:         0 kB
ShmemHugePages:        0 kB
ShmemPmdMapped:        0 kB
FileHugePages:         0 kB
FilePmdMapped:         0 kB
Balloon:               0 kB
HugePages_Total:       0
HugePages_Free:        0
HugePages_Rsvd:        0
HugePages_Surp:        0
Hugepagesize:       2048 kB
Hugetlb:               0 kB
DirectMap4k:       20480 kB
DirectMap2M:     2076672 kB
DirectMap1G:    25165824 kB
"""
KIB = 1024


def test_meminfo_gives_bytes_for_kb_fields_and_counts_for_the_rest():
    values = parse_meminfo(MEMINFO)
    assert values["MemTotal"] == 24683584 * KIB and values["SwapTotal"] == 0 and values["SwapFree"] == 0
    assert values["HugePages_Total"] == 0 and values["Hugepagesize"] == 2048 * KIB
    assert values["Active(anon)"] > 0 and len(values) == MEMINFO.count("\n")


@pytest.mark.parametrize("text, reason", [
    (MEMINFO[: MEMINFO.index("SwapTotal")], "no SwapTotal"),  # cut off before the swap lines
    (MEMINFO[: MEMINFO.index("kB") - 3], "no SwapTotal"),  # cut inside the first line: MemTotal: 246835
    (MEMINFO.replace("MemTotal:       24683584 kB", "MemTotal:       24683584 kB\x00\x1b"), "unexpected line"),
    ("cat: /proc/meminfo: Permission denied\n", "unexpected line"),
    ("", "empty output"),
    (MEMINFO + "MemTotal:       1 kB\n", "appears twice"),
    (MEMINFO.replace("MemTotal:       24683584 kB", "MemTotal:              0 kB"), "MemTotal is 0"),
])
def test_meminfo_that_is_cut_off_garbled_or_not_meminfo_raises(text, reason):
    with pytest.raises(ParseError, match=reason):
        parse_meminfo(text)


def real(argv):
    return subprocess.run(argv, capture_output=True, text=True, check=True).stdout


def test_statfs_line_of_real_stat(tmp_path):
    odd = tmp_path / "logs with space"
    odd.mkdir()
    out = real(["stat", "-f", "-c", STATFS_FORMAT, "--", str(tmp_path), str(odd)])
    first, second = (parse_statfs_line(line) for line in out.splitlines())
    vfs = os.statvfs(tmp_path)
    assert (first.path, second.path) == (str(tmp_path), str(odd))
    assert first.block_size == vfs.f_frsize and first.blocks == vfs.f_blocks
    assert first.fsid == second.fsid and 0 < first.available_bytes <= first.total_bytes


@pytest.mark.parametrize("line", [
    "21b566e2853da9e6 4096 66053021 20364564 /",  # a field short
    "21b566e2853da9e6 4096 66053021 20364564 59819857",  # cut before the path
    "stat: cannot read file system information for '/x': No such file or directory",
    "21b566e2853da9e6 0 66053021 20364564 59819857 /",  # block size 0
    "21b566e2853da9e6 4096 10 20 5 /",  # more available than exists
])
def test_statfs_garbled_or_absurd_raises(line):
    with pytest.raises(ParseError):
        parse_statfs_line(line)


def test_find_listing_of_real_find_with_sparse_files_and_a_broken_link(tmp_path):
    with open(tmp_path / "model-00001-of-00002.safetensors", "wb") as f:
        f.truncate(16_405_433_791)
    (tmp_path / "model-00002-of-00002.safetensors").symlink_to("../blobs/gone")
    (tmp_path / "model\nodd.safetensors").write_bytes(b"x" * 7)
    out = real(["find", "-L", str(tmp_path), "-mindepth", "1", "-maxdepth", "1", "-name", "*.safetensors",
                "-printf", FIND_FORMAT])
    listed = {f.name: (f.type, f.size) for f in parse_find_listing(out)}
    assert listed == {"model-00001-of-00002.safetensors": ("f", 16_405_433_791),
                      "model-00002-of-00002.safetensors": ("l", len("../blobs/gone")),
                      "model\nodd.safetensors": ("f", 7)}


@pytest.mark.parametrize("text", [
    "f 16405433791 model-00001-of-00096.safetensors\0f 1640",  # cut mid-record
    "f 16405433791 model-00001-of-00096.safetensors",  # no terminating NUL
    "16405433791 model-00001-of-00096.safetensors\0",  # no type
    "f -1 model.safetensors\0",
    "f 12 /mnt/k3/model.safetensors\0",  # a path, not a name
])
def test_find_listing_cut_off_or_garbled_raises(text):
    with pytest.raises(ParseError):
        parse_find_listing(text)


def test_empty_find_listing_is_no_files():
    assert parse_find_listing("") == []
