"""Sweep parameters: auto rules and errors that name the parameter."""
from __future__ import annotations

import pytest

from specsweep.config import ConfigError, parse_config


def test_defaults_and_auto_rules() -> None:
    cfg = parse_config({})
    assert cfg.embedded and cfg.concurrency == [1, 4, 16, 32, 64, 128]
    assert cfg.resolved_output_tokens() == 256  # reduced workload on the embedded server
    assert parse_config({"endpoint": "http://h:1"}).resolved_output_tokens() == 1000
    assert [cfg.requests_for(c) for c in (1, 2, 16)] == [4, 4, 32]
    assert cfg.warmups_for(16) == 16
    assert cfg.resolved_embedded_spec() == "off"
    assert parse_config({"arm": "mtp"}).resolved_embedded_spec() == "mtp"
    assert parse_config({"concurrency": [1, 4], "repeats": 2}).plan() == [(1, 0), (1, 1), (4, 0), (4, 1)]


def test_papermill_string_lists_are_accepted() -> None:
    assert parse_config({"concurrency": "[1, 4, 16]"}).concurrency == [1, 4, 16]
    assert parse_config({"concurrency": "1,8"}).concurrency == [1, 8]
    assert parse_config({"concurrency": 8}).concurrency == [8]
    assert parse_config({"embedded_args": "--max-running-requests 128"}).embedded_args == ["--max-running-requests", "128"]


@pytest.mark.parametrize("params, fragment", [
    ({"concurrency": "fast"}, "parameter 'concurrency'"),
    ({"concurrency": [0, 4]}, "levels must be >= 1"),
    ({"concurrency": [4, 4]}, "levels must be unique"),
    ({"arm": "my arm/1"}, "parameter 'arm'"),
    ({"endpoint": "localhost:3000"}, "parameter 'endpoint': give scheme://host:port"),
    ({"api": "grpc"}, "parameter 'api'"),
    ({"requests_per_level": 8, "concurrency": [16]}, "requests_per_level (8) is below the largest concurrency (16)"),
    ({"repeats": 0}, "parameter 'repeats'"),
    ({"concurency": [1]}, "parameter 'concurency': unknown parameter"),
    ({"request_timeout_s": -1}, "parameter 'request_timeout_s'"),
])
def test_errors_name_the_parameter(params: dict, fragment: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(params)
    assert fragment in str(err.value)
