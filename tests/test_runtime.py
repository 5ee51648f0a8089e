"""specsweep.runtime: the deferred rfc3987_syntax import answers exactly as the real one, the process
set-up before nbformat/altair really defers it, and importing specsweep alone changes nothing in
the process (checked in fresh interpreters)."""
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
from specsweep.runtime import configure_process
configure_process(arrow=False)
import nbformat, altair, jsonschema
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
    code = ("import sys, rfc3987_syntax; from specsweep import runtime as startup; "
            "print(startup.defer_rfc3987_syntax(), getattr(sys.modules['rfc3987_syntax'], '__specsweep_deferred__', False))")
    env = {k: v for k, v in os.environ.items() if k != "SPECSWEEP_EAGER_IMPORTS"}
    out = subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True).stdout
    assert out.split() == ["False", "False"]


# ------------------------------------------------------------------------------ the cached Vega bundle


def test_the_bundle_is_made_once_then_read_back_exactly(tmp_path, monkeypatch) -> None:
    import threading

    from specsweep import runtime as startup

    monkeypatch.setenv("SPECSWEEP_CACHE_DIR", str(tmp_path))
    made: list[int] = []
    text = "(function(){ /* ü \\u2028 */ })();\n" * 1000

    def build() -> str:
        made.append(1)
        return text

    # four concurrent first calls: one makes it, the others wait on the lock and read its file
    got: list[str] = []
    threads = [threading.Thread(target=lambda: got.append(startup.vega_bundle_cached(build))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == [text] * 4 and len(made) == 1
    assert startup.bundle_cache_path().parent == tmp_path and startup.bundle_cache_path().is_file()
    assert startup.warm_vega_bundle() is None  # cached: nothing to start
    # a file cut short (a writer killed mid-way) is made again, not served
    path = startup.bundle_cache_path()
    path.write_text(text[:100], encoding="utf-8")
    assert startup.vega_bundle_cached(build) == text and len(made) == 2
    assert startup.vega_bundle_cached(build) == text and len(made) == 2


def test_the_bundle_cache_can_be_off_or_unwritable(tmp_path, monkeypatch) -> None:
    from specsweep import runtime as startup

    made: list[int] = []

    def build() -> str:
        made.append(1)
        return "bundle"

    monkeypatch.setenv("SPECSWEEP_CACHE_DIR", "off")
    assert startup.vega_bundle_cached(build) == "bundle" and startup.vega_bundle_cached(build) == "bundle"
    assert len(made) == 2 and startup.warm_vega_bundle() is None
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("SPECSWEEP_CACHE_DIR", str(blocker / "cache"))  # under a file: cannot be made
    assert startup.vega_bundle_cached(build) == "bundle" and len(made) == 3


def test_the_cached_bundle_is_what_vl_convert_makes(tmp_path, monkeypatch) -> None:
    import vl_convert as vlc
    from altair.utils._importers import vl_version_for_vl_convert

    from specsweep import report
    from specsweep import runtime as startup

    monkeypatch.setenv("SPECSWEEP_CACHE_DIR", str(tmp_path))
    thread = startup.warm_vega_bundle()
    assert thread is not None
    thread.join()
    assert report.vega_bundle() == vlc.javascript_bundle(vl_version=vl_version_for_vl_convert())
    assert startup.bundle_cache_path().name.startswith("vega-bundle-")


def test_a_notebook_exported_in_memory_is_the_page_read_back_from_disk(tmp_path) -> None:
    import nbformat

    from specsweep import report

    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("x")
    cell.outputs = [nbformat.v4.new_output("display_data", data={"text/html": "<h1>T &amp; ü</h1>\n<p>a\nb</p>\n"}),
                    nbformat.v4.new_output("stream", name="stderr", text="noise\n")]
    nb.cells = [cell]
    nbformat.write(nb, tmp_path / "nb.ipynb")
    from_disk = report.export_html(tmp_path / "nb.ipynb", tmp_path / "a.html").read_bytes()
    in_memory = report.export_html(nb, tmp_path / "b.html").read_bytes()
    assert from_disk == in_memory and b"T &amp; \xc3\xbc" in in_memory and b"noise" not in in_memory


SIDE_EFFECTS = """
import json, sys
import pyarrow as pa
from specsweep.runtime import defer_rfc3987_syntax
defer_rfc3987_syntax()  # this probe's own choice: altair's import would otherwise load the real package
import altair as alt
def state():
    return [alt.theme.active, alt.data_transformers.active, pa.default_memory_pool().backend_name]
before = state()
import specsweep, specsweep.results.store, specsweep.analyze.compare, specsweep.report.charts, specsweep.report
after = state()
from specsweep.runtime import configure_process
configure_process()
print(json.dumps({"before": before, "after": after, "configured": state()}))
"""


def test_importing_specsweep_changes_nothing_and_configure_process_is_the_one_set_up() -> None:
    env = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    out = subprocess.run([sys.executable, "-c", SIDE_EFFECTS], env=env, check=True, capture_output=True,
                         text=True).stdout
    got = json.loads(out.strip().splitlines()[-1])
    assert got["after"] == got["before"]  # no theme, transformer or allocator changed by an import
    assert got["configured"][2] == "system"  # the explicit set-up makes malloc Arrow's pool
    assert got["configured"][:2] == got["before"][:2]  # chart defaults are the notebook set-up's, not the process's
