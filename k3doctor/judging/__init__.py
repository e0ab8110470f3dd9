"""Layer 10, judging: checks judged on the readings (node, GPU, cluster), prerequisites first, then the probes."""
