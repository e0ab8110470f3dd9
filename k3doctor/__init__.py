"""k3doctor: pre-launch doctor for gfx1250 Kimi-K3 wide-EP clusters."""

__version__ = "0.1.0"
