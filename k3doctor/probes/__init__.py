"""Layer 8, probes: active checks that orchestrate nodes (deep tier) and the sanity gate of a model server."""
