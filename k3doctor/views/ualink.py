"""The UALink sysfs view checks share: every card's ``ualink/`` files, both sysfs layouts merged (§6, §28).

Every card's ``ualink/`` directory is read with three globs (newer flat layout plus the two
older-layout subdirectories), so all cards cost three specs however many files they hold; a
check that declares :data:`UALINK_READS` shares those readings with every other check that does.
Card number -> GPU index comes from the path; accel ids only from each card's ``accel_id``
file (never card index = accel_id mod 4, §6).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from k3doctor.views.gpu import UALINK_DIR, UALINK_GLOB, card_file
from k3doctor.parsers import ParseError
from k3doctor.parsers.common import to_int, to_u32
from k3doctor.readings import Glob

UALINK_READS = {
    "ualink": Glob(UALINK_GLOB),
    "ualink_stations": Glob(f"{UALINK_DIR}/stations/lane_en_bitmap"),  # older layout (§6)
    "ualink_setup": Glob(f"{UALINK_DIR}/setup/local_accels"),  # older layout (§6)
}
OLD_LAYOUT = {"stations/lane_en_bitmap": "station_lane_en_bitmap", "setup/local_accels": "local_accels"}
STATIONS = 18  # nibbles in station_lane_en_bitmap (§28)


@dataclass
class Card:
    """One card's ualink files by (newer-layout) name."""

    index: int
    files: dict

    def get(self, name: str):
        """Stripped text, or None when the file does not exist; unreadable -> ReadingUnavailable."""
        reading = self.files.get(name)
        return None if reading is None or not reading.exists else reading.text()

    def state_or_none(self):
        """Lower-case accel_state, None when absent or unreadable (never raises)."""
        reading = self.files.get("accel_state")
        return reading.content.strip().lower() if reading is not None and reading.content is not None else None

    def accel_id(self):
        """The card's global accel id; None when unset (4294967295) or absent."""
        return to_u32(self.get("accel_id"), f"card{self.index} accel_id")

    def local_accels(self):
        raw = self.get("local_accels")
        return None if raw is None else [to_int(x, f"card{self.index} local_accels") for x in raw.split()]

    def evidence(self) -> dict:
        out = {}
        for name, reading in sorted(self.files.items()):
            if reading.exists:
                out[f"card{self.index}/ualink/{name}"] = reading.error or (reading.content or "").strip()
        return out


def ualink_cards(r) -> dict:
    """card number -> :class:`Card`, from the three ualink globs (both sysfs layouts merged)."""
    cards: dict = {}
    for key in UALINK_READS:
        for path, reading in r[key].items():
            located = card_file(path)
            if located is None or not located[1].startswith("ualink/") or reading.error == "is a directory":
                continue
            card, name = located[0], located[1].removeprefix("ualink/")
            cards.setdefault(card, Card(card, {})).files[OLD_LAYOUT.get(name, name)] = reading
    return dict(sorted(cards.items()))


def nibbles(text: str, what: str) -> str:
    """The lane bitmap's station nibbles, station 0 first (leftmost); a 0x prefix is dropped.

    One nibble per station (§28); amd-smi trims trailing zero stations (§27 item 3), so a
    shorter reading is padded with disabled stations before comparing.
    """
    digits = text.strip().lower().removeprefix("0x")
    if not digits or not re.fullmatch(r"[0-9a-f]+", digits):
        raise ParseError(f"{what}: not a hex lane bitmap: {text!r}")
    return digits.ljust(STATIONS, "0")
