"""Built-in checks, installed as ``k3doctor.checks``.

Every module here is imported by the registry at start-up; a module registers its checks
with :func:`k3doctor.registry.check`.
"""
