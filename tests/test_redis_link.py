"""redis+sentinel:// URLs: what parses, into what, and what is refused with a ValueError that says why."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zsynth.core.config import Settings, SettingsError
from zsynth.core.redis_link import DEFAULT_SENTINEL_PORT, check_url, is_sentinel_url, parse_sentinel_url


@pytest.mark.unit
def test_several_sentinels_a_service_and_a_database():
    target = parse_sentinel_url("redis+sentinel://10.0.0.1:26380,sentinel-b:26381,sentinel-c/zsynth/3")
    assert target.sentinels == (("10.0.0.1", 26380), ("sentinel-b", 26381), ("sentinel-c", DEFAULT_SENTINEL_PORT))
    assert (target.service, target.db, target.tls) == ("zsynth", 3, False)
    assert target.username is target.password is target.sentinel_username is target.sentinel_password is None
    assert target.data_kwargs() == {"db": 3, "username": None, "password": None}


@pytest.mark.unit
def test_the_database_defaults_to_0_and_a_trailing_slash_is_allowed():
    assert parse_sentinel_url("redis+sentinel://h:1/svc").db == 0
    assert parse_sentinel_url("redis+sentinel://h:1/svc/").db == 0
    assert parse_sentinel_url("redis+sentinel://h:1/svc/12/").db == 12


@pytest.mark.unit
def test_ipv6_sentinels_in_brackets_with_and_without_a_port():
    target = parse_sentinel_url("redis+sentinel://[::1]:26390,[fe80::2]/svc")
    assert target.sentinels == (("::1", 26390), ("fe80::2", DEFAULT_SENTINEL_PORT))


@pytest.mark.unit
def test_credentials_are_the_data_nodes_and_are_unquoted_and_kept_out_of_repr():
    target = parse_sentinel_url("redis+sentinel://app:p%40ss%3Aword@h:1/svc")
    assert (target.username, target.password) == ("app", "p@ss:word")
    assert "p@ss" not in repr(target)
    only_password = parse_sentinel_url("redis+sentinel://:secret@h:1/svc")
    assert (only_password.username, only_password.password) == (None, "secret")
    assert only_password.sentinel_kwargs()["password"] is None  # the sentinels have none of their own here


@pytest.mark.unit
def test_sentinel_credentials_come_from_the_query():
    target = parse_sentinel_url("redis+sentinel://h:1/svc?sentinel_password=s3cret&sentinel_username=watch")
    assert (target.sentinel_username, target.sentinel_password) == ("watch", "s3cret")
    assert target.sentinel_kwargs()["password"] == "s3cret" and target.sentinel_kwargs()["username"] == "watch"
    assert "s3cret" not in repr(target)
    assert parse_sentinel_url("redis+sentinel://h:1/svc?sentinel_password=").sentinel_password is None


@pytest.mark.unit
def test_the_tls_scheme_asks_for_tls_to_sentinels_and_data_nodes():
    target = parse_sentinel_url("rediss+sentinel://h:1/svc")
    assert target.tls
    assert target.data_kwargs()["ssl"] is True and target.sentinel_kwargs()["ssl"] is True
    assert "ssl" not in parse_sentinel_url("redis+sentinel://h:1/svc").data_kwargs()


@pytest.mark.unit
@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("redis://h:1/0", "expected redis+sentinel://"),
        ("redis+sentinel:/h:1/svc", "expected redis+sentinel://"),
        ("redis+sentinel://h:1/svc?password=x", "unknown option(s) password"),
        ("redis+sentinel://h:1/svc?a=1&b=2", "unknown option(s) a, b"),
        ("redis+sentinel://h:1", "the path is /service_name"),
        ("redis+sentinel://h:1/", "the path is /service_name"),
        ("redis+sentinel://h:1/svc/0/extra", "the path is /service_name"),
        ("redis+sentinel://h:1/svc/zero", "is not a number"),
        ("redis+sentinel:///svc", "name at least one sentinel"),
        ("redis+sentinel://user:pw@/svc", "name at least one sentinel"),
        ("redis+sentinel://h:1,,h:2/svc", "has no host"),
        ("redis+sentinel://:26379/svc", "has no host"),
        ("redis+sentinel://h:0/svc", "has no valid port"),
        ("redis+sentinel://h:65536/svc", "has no valid port"),
        ("redis+sentinel://h:port/svc", "has no valid port"),
        ("redis+sentinel://h:-1/svc", "has no valid port"),
        ("redis+sentinel://::1/svc", "write an IPv6 sentinel as [address]:port"),
        ("redis+sentinel://[::1]x/svc", "is not host:port"),
    ],
)
def test_bad_urls_are_refused_with_the_reason(url: str, says: str):
    with pytest.raises(ValueError) as refused:
        parse_sentinel_url(url)
    assert says in str(refused.value)
    if not url.startswith("redis://"):  # a plain URL is check_url's to pass on to redis-py
        with pytest.raises(ValueError):
            check_url(url)


@pytest.mark.unit
@pytest.mark.parametrize(
    "url",
    ["redis://127.0.0.1:6379/0", "rediss://u:p@h:6380/2", "unix:///run/redis.sock", "redis+sentinel://a,b,c/svc/1"],
)
def test_check_url_returns_a_usable_url_unchanged(url: str):
    assert check_url(url) == url


@pytest.mark.unit
@pytest.mark.parametrize("url", ["", "http://h/", "h:6379", "REDIS://h", "sentinel://h:1/svc"])
def test_check_url_refuses_other_schemes(url: str):
    with pytest.raises(ValueError, match="expected a redis://"):
        check_url(url)


@pytest.mark.unit
def test_is_sentinel_url_looks_at_the_scheme_only():
    assert is_sentinel_url("redis+sentinel://whatever") and is_sentinel_url("rediss+sentinel://")
    assert not is_sentinel_url("redis://h") and not is_sentinel_url("redis+sentinel:h")


_URL_ALPHABET = st.sampled_from(list("redis+sentinl:/@[],?&=%.0123456789-_x\x00 \u00b2\u0661\ufffd"))


@pytest.mark.stack
@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        st.text(max_size=80),
        st.text(_URL_ALPHABET, max_size=80),
        st.builds(lambda rest: "redis+sentinel://" + rest, st.text(_URL_ALPHABET, max_size=60)),
        st.builds(lambda rest: "rediss+sentinel://" + rest, st.text(max_size=60)),
    )
)
def test_check_url_raises_nothing_but_value_error(url: str):
    """Whatever an operator writes in ZSYNTH_REDIS_URL, the settings' parser gets a URL or a ValueError."""
    try:
        assert check_url(url) == url
    except ValueError:
        pass


@pytest.mark.heavy
@pytest.mark.parametrize(
    "url",
    [
        "redis:/app:s3cret@10.0.0.5:6379/0",  # a slash short of a scheme
        "redis//app:s3cret@10.0.0.5:6379/0",
        "http://app:s3/cr:et@10.0.0.5:6379/0",  # a password with raw "/" and ":" in it
        "redis+sentinel://app:s3cret@h:1/svc?password=x",  # an option the Sentinel URL does not take
        "redis+sentinel://h:1/svc/zero?sentinel_password=s3cret",
    ],
)
def test_a_mistyped_url_is_refused_without_its_password(url: str):
    """Issue 36 F10: the settings' error, which goes to the journal, quoted the whole URL, password included."""
    with pytest.raises(SettingsError) as refused:
        Settings.from_env({"ZSYNTH_REDIS_URL": url})
    message = str(refused.value)
    assert message.startswith("ZSYNTH_REDIS_URL=") and "***" in message
    assert "s3cret" not in message and "s3/cr:et" not in message and "cr:et" not in message
    assert refused.value.__cause__ is None and refused.value.__suppress_context__  # no traceback quotes it either
    # What the command prints when it refuses to start (systemd puts it in the journal).
    done = subprocess.run(
        [sys.executable, "-m", "zsynth", "worker"],
        env={**os.environ, "ZSYNTH_REDIS_URL": url},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "ZSYNTH_REDIS_URL=" in done.stderr
    assert "s3cret" not in done.stderr + done.stdout and "cr:et" not in done.stderr


@pytest.mark.unit
def test_redaction_keeps_what_a_url_says_but_its_secrets():
    from zsynth.core.config import redacted  # here: the test above runs (and fails) on code that predates it

    assert redacted("redis://app:pw@h:6379/0") == "redis://app:***@h:6379/0"
    assert redacted("rediss+sentinel://:pw@a,b/svc?sentinel_password=x&sentinel_username=w") == (
        "rediss+sentinel://:***@a,b/svc?sentinel_password=***&sentinel_username=w"
    )
    assert redacted("redis://h:6379/0") == "redis://h:6379/0" and redacted("unix:///run/r.sock") == "unix:///run/r.sock"
