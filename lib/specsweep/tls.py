"""Certificate verification for specsweep's short-lived ``httpx.Client`` instances, built once.

``httpx.Client()`` with its default ``verify=True`` builds a new :class:`ssl.SSLContext` and loads
certifi's CA bundle into it: about 20 ms of CPU for every client, whether or not it ever opens an
``https://`` connection. A sweep opens several (the probe, the metrics poller, the tokenizer check,
health checks), each reference-server start another, so on a plain ``http://`` endpoint that was
most of their cost. :func:`verify_context` gives the same context httpx would build
(``httpx.create_ssl_context``), made once per process and shared: an :class:`ssl.SSLContext` is
safe to share between clients and threads, and nothing here changes it after it is made.
"""
from __future__ import annotations

import functools
import os
import ssl

__all__ = ["verify_context"]


def verify_context(trust_env: bool = False) -> ssl.SSLContext:
    """What ``httpx.Client(verify=True, trust_env=trust_env)`` verifies with, made once.

    With ``trust_env``, ``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` choose the CA bundle as they do for
    httpx; they are read on every call, so a change of either gives a context of its own.
    """
    if trust_env:
        return _context(True, os.environ.get("SSL_CERT_FILE") or "", os.environ.get("SSL_CERT_DIR") or "")
    return _context(False, "", "")


@functools.lru_cache(maxsize=8)
def _context(trust_env: bool, cert_file: str, cert_dir: str) -> ssl.SSLContext:
    import httpx

    # cert_file and cert_dir are in the key so that a changed environment builds afresh; httpx reads them
    return httpx.create_ssl_context(verify=True, trust_env=trust_env)
