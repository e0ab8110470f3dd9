"""Other ways of running the same judging across a fleet: one node on its own (`node`), results joined
(`merge`), Slurm's HealthCheckProgram."""
