"""Layer 3, transport: a bounded command on a node (SSH or locally), its Docker engine through the same
connection, and a model server's HTTP endpoint."""
