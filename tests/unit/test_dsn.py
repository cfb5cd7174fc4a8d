"""DSN errors say what is wrong and where, never what the DSN holds (issue 17, item 18);
TENURE_DSN_FILE keeps the DSN out of the environment. Nothing here connects."""

from __future__ import annotations

from pathlib import Path

import pytest

import tenure
from tenure._dsn import check_dsn
from tenure._errors import ConfigError

SECRET = "S3cretPW"


def _refusal(dsn: str) -> str:
    with pytest.raises(ConfigError) as caught:
        check_dsn(dsn)
    error = caught.value
    assert error.__context__ is None and error.__cause__ is None  # no libpq text rides along
    return str(error)


@pytest.mark.parametrize(
    ("dsn", "said"),
    [
        (f"host=db password=Top {SECRET} dbname=x", "entry 3 has no '=' after its key"),
        (f"host=db password='{SECRET}", "the quoted value of entry 2 is never closed"),
        (f"host=db passwrod={SECRET}", "entry 2 is not a libpq connection option (did you mean"),
        (f"{SECRET}=1 host=db", "the key of entry 1 is not a libpq connection option"),
        (f"postgresql://app:{SECRET}%@db/x", "not followed by two hex digits"),
        (f"postgresql://app:{SECRET}@db:70000/x", "the port is not a number from 1 to 65535"),
        (f"postgresql://app:Top/{SECRET}@db/x", "percent-encode any ':', '/' or '@'"),
        (f"postgresql://app:Top@{SECRET}@db/x", "host 1 is neither a host name"),
        (f"postgresql://db/x?password={SECRET}&sslmode", "query parameter 2 of the URL has no '='"),
        (f"host=db password={SECRET} options='-c log_statement=all'", "a log_* setting"),
        (f"host=db password={SECRET} sslmode=off", "sslmode must be one of"),
    ],
)
def test_a_malformed_dsn_is_named_by_kind_and_position_never_by_content(
    dsn: str, said: str
) -> None:
    message = _refusal(dsn)
    assert said in message
    assert SECRET not in message and "Top" not in message


@pytest.mark.parametrize(
    "dsn",
    [
        "host=db port=5432 user=app password='a b\\'c' dbname=x options='-c search_path=s'",
        "postgresql://app:p%40ss%2Fw%3Ard@db:5432,db2:5433/x?sslmode=require&connect_timeout=3",
        "host=/var/run/postgresql port=5432 user=app password=pässwörd",
        "",
    ],
)
def test_a_sound_dsn_passes_unchanged(dsn: str) -> None:
    assert check_dsn(dsn) == dsn


@pytest.fixture
def dsn_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("TENURE_DSN", raising=False)
    path = tmp_path / "dsn"
    monkeypatch.setenv("TENURE_DSN_FILE", str(path))
    return path


def test_an_app_reads_its_dsn_from_TENURE_DSN_FILE(dsn_file: Path) -> None:
    dsn_file.write_text(f"host=db user=app password={SECRET} dbname=x\n")
    assert tenure.App().configured_dsn == f"host=db user=app password={SECRET} dbname=x"
    assert tenure.App("host=other").configured_dsn == "host=other"  # an explicit DSN still wins


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (None, "cannot read TENURE_DSN_FILE"),
        (b"\n", "is empty"),
        (b"password=\xff" + SECRET.encode(), "is not UTF-8 text"),
        (f"host=db password=Top {SECRET}\n".encode(), "entry 3 has no '='"),
    ],
)
def test_a_bad_TENURE_DSN_FILE_is_a_config_error_that_quotes_none_of_it(
    dsn_file: Path, content: bytes | None, said: str
) -> None:
    if content is not None:
        dsn_file.write_bytes(content)
    with pytest.raises(ConfigError, match=said) as caught:
        tenure.App()
    assert SECRET not in str(caught.value) and "Top" not in str(caught.value)


def test_TENURE_DSN_and_TENURE_DSN_FILE_together_are_refused(
    dsn_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dsn_file.write_text("host=db")
    monkeypatch.setenv("TENURE_DSN", "host=elsewhere")
    with pytest.raises(ConfigError, match="both set"):
        tenure.App()
