"""``k3doctor watch``: the on-call doctor that is already looking when a serving cluster stalls (reference §31.2).

sources.py reads each node (one connection, one bounded script an interval); hardware.py and engine.py judge the
readings (kernel-log rows, RAS counters, engine processes; forward progress and KV pressure per DP rank);
node_conditions.py keeps each node's state; events.py turns conditions into start/clear events; render.py says them
(live, jsonl, prom, NPD's one line); actions.py, webhook.py and evidence.py act on events (silences, the
webhook, Slurm drains, a triage bundle of evidence on a stall); loop.py runs it all until stopped.
"""
