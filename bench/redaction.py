"""Time to redact one 64 kB hostile line with the shared secret table (issue: 32 kB of `-` took 141 s).

Usage: python3 bench/redaction.py   (prints seconds per line shape; run from a checkout)
"""
from __future__ import annotations

import time

from k3doctor.redaction import redact_text

SIZE = 64 << 10
SHAPES = {"dashes": "-", "a.": "a.", "--token": "--token", "token_": "token_", "-password ": "-password ",
          "HF_TOKEN=": "HF_TOKEN=", "hf-": "hf-", "Bearer ": "Bearer "}


def main() -> None:
    for name, unit in SHAPES.items():
        line = unit * (SIZE // len(unit))
        started = time.monotonic()
        redact_text(line)
        one = time.monotonic() - started
        started = time.monotonic()
        redact_text((line + "\n") * 16)
        print(f"{name:>12}: one 64 kB line {one * 1000:7.1f} ms; 16 such lines (1 MiB) "
              f"{(time.monotonic() - started) * 1000:7.1f} ms")


if __name__ == "__main__":
    main()
