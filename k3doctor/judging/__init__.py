"""Stage 5, judging: checks judged on the readings (node, GPU, cluster), prerequisites first, then the probes."""
