"""Typed views the checks share: GPUs/sysfs, kernel log, containers, host. Checks never import each other."""
