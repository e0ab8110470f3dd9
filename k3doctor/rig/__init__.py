"""k3doctor.rig"""
