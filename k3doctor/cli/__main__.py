"""``python -m k3doctor.cli``: the command line, as the ``k3doctor`` entry point runs it."""
from k3doctor.cli import main

main()
