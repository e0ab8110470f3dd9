"""Stage 3, gather: the readings checks declare, taken in one round trip per node, redacted, saved and replayed."""
