"""Built-in checks, installed as ``k3doctor.checks``.

Every module here is imported by the registry at start-up; a module registers its checks
with :func:`k3doctor.registry.check`. ``ORDER`` lists the modules in the order of the
reference's pre-launch checklist (§0.3), which is the order reports show them in; a module it does not
name is still found and run, reported after the listed ones in name order (a new check needs no edit
here; list it only to place it in the checklist).
"""

ORDER = ("rack", "amdgpu", "ifoe_bind", "platform", "iommu", "numa", "pcie_link", "pcie_acs", "xgmi", "kernel", "cper",
         "bad_pages", "ras_counts", "partitions", "ualink", "fabric", "peers", "host", "shm", "container", "launch",
         "env_versions", "aiter_locks", "lmcache", "ualoe", "allreduce")
