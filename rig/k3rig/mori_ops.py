"""Where a rank hung in a wide-EP all-to-all is found by py-spy: a mori dispatch (reference §20). Its own
file because triage knows the frame by its file (``dispatch (mori_ops.py:N)``); used by model_runner.py."""
import time


def dispatch(still_waiting) -> None:
    """Wait for the peers' tokens as long as ``still_waiting()`` says so (a hung peer: for ever)."""
    while still_waiting():
        time.sleep(0.1)
