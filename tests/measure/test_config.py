"""Sweep parameters: auto rules and errors that name the parameter."""
from __future__ import annotations

import json

import pytest

from specsweep.measure.config import ConfigError, parse_config

pytestmark = pytest.mark.fast  # the quick tier: no server, kernel or subprocess


def test_defaults_and_auto_rules() -> None:
    cfg = parse_config({})
    assert cfg.embedded and cfg.concurrency == [1, 4, 16, 32, 64, 128]
    assert cfg.resolved_output_tokens() == 256  # reduced workload on the embedded server
    assert parse_config({"endpoint": "http://h:1"}).resolved_output_tokens() == 1000
    assert [cfg.requests_for(c) for c in (1, 2, 16)] == [4, 4, 32]
    # a larger minimum: the low levels send a 145-prompt set whole, the high ones still 2 x C
    wide = parse_config({"min_requests_per_level": 145, "concurrency": [4, 64, 96, 128]})
    assert [wide.requests_for(c) for c in wide.concurrency] == [145, 145, 192, 256]
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
    ({"requests_per_level": 8, "concurrency": [16]}, "parameter 'requests_per_level': 8 is below the largest concurrency (16)"),
    ({"warmup_requests": -1}, "parameter 'warmup_requests': must be >= 0"),
    ({"min_requests_per_level": 0}, "parameter 'min_requests_per_level'"),
    ({"min_requests_per_level": 145, "requests_per_level": 200},
     "parameter 'min_requests_per_level': applies only with requests_per_level='auto'"),
    ({"repeats": 0}, "parameter 'repeats'"),
    ({"concurency": [1]}, "parameter 'concurency': unknown parameter — did you mean 'concurrency'?"),
    ({"request_timeout_s": -1}, "parameter 'request_timeout_s'"),
])
def test_errors_name_the_parameter(params: dict, fragment: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(params)
    assert fragment in str(err.value)


def test_cross_field_errors_name_the_parameter_not_the_dict() -> None:
    with pytest.raises(ConfigError) as err:
        parse_config({"requests_per_level": 8, "concurrency": [16], "endpoint": "http://h:1"})
    assert "parameter 'parameters'" not in str(err.value) and "http://h:1" not in str(err.value)


def test_notebook_namespace_with_a_misspelled_parameter_fails() -> None:
    from specsweep.measure.config import check_notebook_parameters

    namespace = {"In": [""], "Out": {}, "_": "", "get_ipython": print, "json": json, "concurrency": [1],
                 "arm": "mtp", "display": print}
    check_notebook_parameters(namespace)  # kernel names, modules and functions are not parameters
    with pytest.raises(ConfigError, match=r"parameter 'concurency': not a parameter of this notebook — did you mean "
                                          r"'concurrency'\?"):
        check_notebook_parameters({**namespace, "concurency": [1, 2]})
