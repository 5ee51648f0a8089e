"""specsweep.startup: the deferred rfc3987_syntax import answers exactly as the real one, and
importing specsweep before nbformat/altair really defers it (checked in fresh interpreters)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("rfc3987_syntax", reason="jsonschema's IRI checker package is not installed here")

# IRIs and non-IRIs: schemes, authorities, non-ASCII, percent-escapes, relative references, junk.
SAMPLES = [
    "http://example.com/", "https://ex.com/ü/ä?q=ö#frag", "mailto:a@b.c", "urn:isbn:0451450523",
    "ftp://[2001:db8::7]/c=GB?objectClass?one", "http://192.0.2.16:80/", "file:///etc/hosts",
    "not an iri", "//host/only", "", "/absolute/path", "relative/path", "?query", "#frag",
    "http://exa mple.com", "http://%zz", "http://ex.com/%41", "a:b", ":nope", "http://[::1", "☃:x",
]

PROBE = """
import json, sys
import specsweep, nbformat, altair, jsonschema
fc = jsonschema.Draft202012Validator.FORMAT_CHECKER
deferred = "rfc3987_syntax.syntax_helpers" not in sys.modules
answers = [[fc.conforms(s, "iri"), fc.conforms(s, "iri-reference")] for s in json.loads(sys.argv[1])]
print(json.dumps({"deferred_until_used": deferred, "answers": answers,
                  "loaded_after_use": "rfc3987_syntax.syntax_helpers" in sys.modules}))
"""


def _probe(eager: bool) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "SPECSWEEP_EAGER_IMPORTS"}
    if eager:
        env["SPECSWEEP_EAGER_IMPORTS"] = "1"
    out = subprocess.run([sys.executable, "-c", PROBE, json.dumps(SAMPLES)], env=env, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def test_deferred_checker_answers_as_the_real_one() -> None:
    deferred, eager = _probe(eager=False), _probe(eager=True)
    assert deferred["deferred_until_used"] is True  # importing specsweep first kept the parsers unbuilt
    assert eager["deferred_until_used"] is False  # the opt-out imports it as jsonschema does
    assert deferred["loaded_after_use"] is True  # the first IRI check loaded the real package
    assert deferred["answers"] == eager["answers"]
    flat = [a for pair in eager["answers"] for a in pair]
    assert any(flat) and not all(flat)  # the samples exercise both answers


def test_stand_in_is_installed_only_once_and_not_over_a_real_import() -> None:
    code = ("import sys, rfc3987_syntax; from specsweep import startup; "
            "print(startup.defer_rfc3987_syntax(), getattr(sys.modules['rfc3987_syntax'], '__specsweep_deferred__', False))")
    env = {k: v for k, v in os.environ.items() if k != "SPECSWEEP_EAGER_IMPORTS"}
    out = subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True).stdout
    assert out.split() == ["False", "False"]
