"""What every stand-up of the rig shares: ``with X(...) as x`` starts it and stops it afterwards."""
from __future__ import annotations

from typing import TypeVar

_S = TypeVar("_S", bound="Started")


class Started:
    """``start()`` checks (``_check``), then starts (``_start``) and stops again what it half started;
    as a context manager ``stop()`` runs whatever happened inside."""

    def _check(self) -> None:
        raise NotImplementedError

    def _start(self) -> None:
        raise NotImplementedError

    def start(self) -> None:
        self._check()
        try:
            self._start()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self: _S) -> _S:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
