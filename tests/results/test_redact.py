"""Secrets masked whole, in their encodings and at every cut (``specsweep.results.redact``), and a
study whose server quotes its secrets near a client's cut, and base64-encoded, stores no fragment."""
from __future__ import annotations

import base64
import json
import random
import string
from pathlib import Path
from urllib.parse import quote

import pandas as pd
import pytest

from specsweep.results import redact

#: at least this many characters of a secret in a row count as a fragment of it
FRAGMENT = 6


def fragments(secret: str) -> set[str]:
    """Every FRAGMENT-character piece of ``secret``: any longer fragment holds one."""
    return {secret[i:i + FRAGMENT] for i in range(len(secret) - FRAGMENT + 1)}


def encoded(secret: str) -> list[str]:
    """The encodings a server may quote, computed here independently of the module."""
    forms = [base64.b64encode(secret.encode()).decode(), quote(secret, safe="")]
    forms += [base64.b64encode(f"{user}:{secret}".encode()).decode() for user in ("u", "us", "user", "admin")]
    return [f.rstrip("=") for f in forms]


def leaks(text: str, secret: str) -> list[str]:
    found = [f for f in fragments(secret) if f in text]
    return found + [f for f in encoded(secret) if f in text]


def random_secret(rng: random.Random) -> str:
    alphabet = string.ascii_letters + string.digits + "-_+/=:@"
    return rng.choice(["sk-", "hf_", ""]) + "".join(rng.choice(alphabet) for _ in range(rng.randint(8, 48)))


@pytest.mark.fast
def test_a_secret_quoted_near_any_cut_leaves_no_fragment() -> None:
    rng = random.Random(1)
    for _ in range(400):
        secret = random_secret(rng)
        before = "".join(rng.choice(string.ascii_letters + " ") for _ in range(rng.randint(0, 320)))
        text = f"{before} key {secret} and more text after it"
        limit = rng.randint(20, 320)
        shown = redact.cut(text, limit, values=[secret])
        assert len(shown) <= max(limit, len(text)) and not leaks(shown, secret), (secret, limit, shown)
        assert not leaks(redact.cut(text, limit, ellipsis="", values=[secret]), secret)


@pytest.mark.fast
def test_a_secret_already_cut_elsewhere_is_masked_at_the_cut() -> None:
    rng = random.Random(2)
    for _ in range(300):
        secret = random_secret(rng)
        n = rng.randint(FRAGMENT, len(secret) - 1)
        for text in (f"error: {secret[:n]}", f"error: {secret[:n]}… (more)", f"{secret[-n:]} was the end",
                     f"a … {secret[-n:]} b", f"error: {secret[:n]}...\n"):
            assert not leaks(redact.redact_text(text, [secret]), secret), (secret, text)


@pytest.mark.fast
def test_base64_and_url_encodings_of_a_secret_and_of_user_secret_are_masked() -> None:
    rng = random.Random(3)
    for _ in range(300):
        secret = random_secret(rng)
        user = "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(0, 12)))
        for form in (base64.b64encode(f"{user}:{secret}".encode()).decode(),
                     base64.urlsafe_b64encode(f"{user}:{secret}".encode()).decode(),
                     base64.b64encode(secret.encode()).decode(), quote(secret, safe="")):
            masked = redact.redact_text(f"Authorization: Basic {form} refused", [secret])
            assert form not in masked and not leaks(masked, secret), (secret, form, masked)


@pytest.mark.fast
def test_text_without_a_secret_is_left_as_it_is() -> None:
    rng = random.Random(4)
    for _ in range(200):
        secret = random_secret(rng)
        text = "".join(rng.choice(string.ascii_letters + " …") for _ in range(rng.randint(0, 400)))
        if any(f in text for f in [*fragments(secret), *redact.encodings(secret)]):
            continue
        assert redact.redact_text(text, [secret]) == text


# ------------------------------------------------- a study: the server quotes each secret near a cut

API_KEY = "sk-Qz7w0a1b2c3d4e5f6a7b8c9Xy"
HF_TOKEN = "hf_Jm4t9f8e7d6c5b4a3f2e1Rk"
ARGV_TOKEN = "av-Pw2n5e6f7a8b9c0d1eGh"


def _readable(path: Path) -> str:
    """A written file as text: Parquet decoded (every cell), anything else as its bytes."""
    if path.suffix == ".parquet":
        frame = pd.read_parquet(path)
        return "\n".join(map(str, [*frame.columns, *frame.to_numpy().ravel()]))
    return path.read_bytes().decode("utf-8", "replace")


def test_a_study_stores_no_fragment_or_encoding_of_a_secret_its_server_quotes(tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from helpers import run_canary_study
    from specsweep.results.store import load_result_set

    monkeypatch.setenv("SPECSWEEP_API_KEY", API_KEY)
    lines: list[str] = []
    result, out, reports = run_canary_study(
        tmp_path, ["--fault-error-rate", "0.5", "--seed", "5", "--fault-echo-auth", "--fault-echo-env", "HF_TOKEN",
                   "--fault-echo-token", ARGV_TOKEN, "--fault-echo-pad", "300", "--fault-echo-base64"],
        {"HF_TOKEN": HF_TOKEN}, requests=16, log=lines.append)
    assert [o.status for o in result.outcomes] == ["complete", "complete"]
    errors = load_result_set(Path(result.outcomes[0].run_dir)).requests["error"].dropna()
    assert len(errors) >= 8 and errors.str.endswith("…").any()  # the server did quote them, past the cut
    files = [p for p in [*out.rglob("*"), *reports.rglob("*")] if p.is_file()]
    assert {".parquet", ".ipynb", ".json", ".log", ".html"} <= {p.suffix for p in files}
    for p in files:
        text = _readable(p)
        for secret in (API_KEY, HF_TOKEN, ARGV_TOKEN):
            assert not leaks(text, secret), (p, secret, leaks(text, secret))
    for secret in (API_KEY, HF_TOKEN, ARGV_TOKEN):
        assert not leaks(json.dumps(lines), secret)
