"""Layer 6, gather: the readings checks declare, one round trip per node, redacted, saved and replayed."""
