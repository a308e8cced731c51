import pytest

from partitions.keys import InvalidName, parse_partition_key, partition_key, validate_name


def test_key_round_trips():
    key = partition_key("acme", "support-v1")
    assert key == "acme__support-v1"
    assert parse_partition_key(key) == ("acme", "support-v1")


@pytest.mark.parametrize("bad", ["", "Acme", "../etc", "a/b", "a_b", "-lead", "x" * 64, "a.b", "a|b", None])
def test_bad_names_are_refused_with_a_clear_message(bad):
    with pytest.raises(InvalidName, match="invalid tenant name"):
        validate_name("tenant", bad)


@pytest.mark.parametrize("key", ["acme", "acme__", "__job", "acme__a__b", "../x__y", "acme__Job"])
def test_malformed_keys_are_refused(key):
    with pytest.raises(InvalidName):
        parse_partition_key(key)


def test_longest_names_are_accepted():
    assert validate_name("job", "a" * 63) == "a" * 63
