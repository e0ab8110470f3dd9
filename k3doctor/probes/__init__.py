"""k3doctor.probes"""
