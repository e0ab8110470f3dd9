"""What runs on a node: the reader that takes a node's readings and the all_reduce probe's worker (both
shipped as source and run under the node's python3, so they import nothing of k3doctor), and the shell
scripts the ualoe probe runs there."""
