"""Memory sizes: parse what people write ("512MiB", "15.5GiB", "2GB", 1048576) and format bytes; shares of a limit
as percents that stay on their side of it."""
from __future__ import annotations

import math
import re

_UNITS = {
    "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


class SizeError(ValueError):
    """A size that cannot be read."""


def parse_size(value: object) -> int:
    """Bytes from an integer or a string with a unit (KiB/MiB/GiB/TiB binary, KB/MB/GB/TB decimal)."""
    if isinstance(value, bool):
        raise SizeError(f"expected a size like 512MiB or 15.5GiB, got {value!r}")
    if isinstance(value, int):
        if value <= 0:
            raise SizeError(f"must be a positive size, got {value}")
        return value
    if isinstance(value, float):
        raise SizeError(f"a size needs a unit (e.g. {value}GiB) or whole bytes, got {value!r}")
    if not isinstance(value, str):
        raise SizeError(f"expected a size like 512MiB or 15.5GiB, got {type(value).__name__}")
    match = _SIZE.match(value)
    if not match:
        raise SizeError(f"expected a size like 512MiB or 15.5GiB, got {value!r}")
    number, unit = match.groups()
    if not unit and float(number) < _UNITS["mib"]:  # `--budget 40` meant GiB, not 40 bytes
        raise SizeError(f"{value!r} has no unit, so it is bytes, too few for any model: write {number}GiB or "
                        f"{number}MiB ({number}B if bytes are meant)")
    factor = _UNITS.get(unit.lower() or "b")
    if factor is None:
        raise SizeError(f"unknown unit {unit!r} in {value!r} (use B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)")
    size = int(float(number) * factor)
    if size <= 0:
        raise SizeError(f"must be a positive size, got {value!r}")
    return size


def is_unit(text: str) -> bool:
    """Whether `text` is a size's unit alone ("MiB", "GB"), as a size split by a space leaves it."""
    return text.strip().lower() in _UNITS


def format_bytes(size: int | float | None, up: bool = False) -> str:
    """Human size in binary units, e.g. 1536 -> '1.5 KiB'; `up`: rounded up to the figure shown, never less than
    `size` (a budget that must suffice)."""
    if size is None:
        return "-"
    value = float(size)
    for unit, digits in (("B", 0), ("KiB", 1), ("MiB", 1), ("GiB", 1)):
        if abs(value) < 1024:
            return f"{_shown(value, digits, up):.{digits}f} {unit}"
        value /= 1024
    return f"{_shown(value, 2, up):.2f} TiB"


def _shown(value: float, digits: int, up: bool) -> float:
    return math.ceil(value * 10**digits) / 10**digits if up else value


def format_percent(value: float, bound: float, digits: int = 0, signed: bool = False) -> str:
    """`value` (a fraction, 1.0 = 100%) as a percent with `digits` decimals that never reads on the wrong side of
    `bound` (a fraction): above it, it reads above it (100.2% of a limit is 101%, not 100%); at or below, at most
    it. Elsewhere it is rounded as usual."""
    scale = 10**digits
    units, edge = round(value * 100 * scale), bound * 100 * scale
    if value > bound and units <= edge:
        units = math.floor(edge) + 1
    elif value <= bound and units > edge:
        units = math.floor(edge)
    return f"{'+' if signed and units >= 0 else ''}{units / scale:.{digits}f}%"


def format_share(used: float, limit: float) -> str:
    """`used` as a whole percent of `limit`: over the limit never reads 100% or less, within it never over 100%."""
    return format_percent(used / limit, 1.0)


def format_setting(fraction: float) -> str:
    """A fraction the user set (headroom, tolerance) as the percent it is: 0.05 -> '5%', 0.025 -> '2.5%' (not 2%)."""
    return f"{fraction * 100:g}%"
