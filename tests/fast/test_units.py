import pytest

from vramtune.core.units import SizeError, format_bytes, format_percent, format_setting, format_share, parse_size


@pytest.mark.parametrize("text, expected", [
    (1048576, 1048576), ("512MiB", 512 * 2**20), ("15.5GiB", int(15.5 * 2**30)), ("2GB", 2 * 10**9),
    ("100 KB", 100_000), ("64mib", 64 * 2**20), ("1048576", 2**20), ("1024B", 1024), ("1TiB", 2**40),
])
def test_parse_size(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("text, message", [
    (0, "must be a positive size, got 0"),
    (-5, "must be a positive size, got -5"),
    ("12 parsecs", "unknown unit 'parsecs' in '12 parsecs' (use B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)"),
    ("lots", "expected a size like 512MiB or 15.5GiB, got 'lots'"),
    ("40", "'40' has no unit, so it is bytes, too few for any model: write 40GiB or 40MiB (40B if bytes are meant)"),
    (1.5, "a size needs a unit (e.g. 1.5GiB) or whole bytes, got 1.5"),
    (True, "expected a size like 512MiB or 15.5GiB, got True"),
    ("0GiB", "must be a positive size, got '0GiB'"),
])
def test_bad_sizes(text, message):
    with pytest.raises(SizeError) as error:
        parse_size(text)
    assert str(error.value) == message


def test_format_bytes():
    assert format_bytes(512) == "512 B"
    assert format_bytes(1536) == "1.5 KiB"
    assert format_bytes(3 * 2**30) == "3.0 GiB"
    assert format_bytes(None) == "-"


@pytest.mark.parametrize(("size", "nearest", "up"), [
    (180880001, "172.5 MiB", "172.6 MiB"),  # 172.5006 MiB: the budget advised must read enough
    (172 * 2**20 + 2**20 // 2, "172.5 MiB", "172.5 MiB"),  # exactly 172.5 MiB stays
    (2**30 - 1, "1024.0 MiB", "1024.0 MiB"),
    (22605091032, "21.1 GiB", "21.1 GiB"),
    (5 * 2**40 + 1, "5.00 TiB", "5.01 TiB"),
    (1535.5, "1.5 KiB", "1.5 KiB"),
])
def test_a_size_rounded_up_reads_at_least_the_size(size, nearest, up):
    assert (format_bytes(size), format_bytes(size, up=True)) == (nearest, up)
    assert parse_size(up.replace(" ", "")) >= int(size)


LIMIT = 38 * 2**20


@pytest.mark.parametrize("used, shown", [
    (LIMIT + 1, "101%"), (LIMIT * 1.002, "101%"), (LIMIT * 1.006, "101%"),  # over: never 100% (was 100%, 100%, 101%)
    (LIMIT * 1.05, "105%"), (LIMIT * 1.2345, "123%"),  # further over: rounded as before
    (LIMIT, "100%"), (LIMIT - 1, "100%"), (LIMIT * 0.5, "50%"), (1, "0%"),  # within: never over 100%
])
def test_a_share_of_the_limit_stays_on_its_side(used, shown):
    assert format_share(used, LIMIT) == shown


@pytest.mark.parametrize("value, shown", [
    (0.0504, "+5.1%"),  # over a 5% tolerance: was +5.0% (> tolerance 5%)
    (0.05, "+5.0%"), (0.0496, "+5.0%"), (0.04, "+4.0%"), (0.0, "+0.0%"), (-0.03, "-3.0%"), (0.12, "+12.0%"),
])
def test_growth_against_a_tolerance_stays_on_its_side(value, shown):
    assert format_percent(value, 0.05, 1, signed=True) == shown


def test_a_setting_reads_as_given():
    assert [format_setting(value) for value in (0.05, 0.025, 0.07, 0.1, 0.0)] == ["5%", "2.5%", "7%", "10%", "0%"]
