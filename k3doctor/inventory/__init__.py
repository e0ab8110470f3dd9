"""Layer 5, inventory: which nodes, how to reach them and each check's settings (YAML, Ansible, node sets, --set)."""
