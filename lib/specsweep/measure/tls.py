"""Certificate verification for specsweep's short-lived ``httpx.Client`` instances on plain HTTP.

``httpx.Client()`` with its default ``verify=True`` builds a new :class:`ssl.SSLContext` and loads
certifi's CA bundle into it: CPU paid for every client, whether or not it ever opens an
``https://`` connection. A sweep opens several (the probe, the metrics poller, the tokenizer check,
health checks), a study one per server wait, and most talk to ``http://`` servers.
:func:`verify_for` gives those clients one context made once per process (the one httpx would
build, ``httpx.create_ssl_context``): a client of an ``http://`` server never opens a TLS
connection, so the context is never used nor changed. A client of an ``https://`` server gets
``True``, so httpx builds a context of its own as before: httpcore sets ALPN protocols on the
context at every TLS connection, and a context shared between threads must not be changed while
another thread opens a connection with it.
"""
from __future__ import annotations

import functools
import os
import ssl

__all__ = ["verify_for"]


def verify_for(url: str, trust_env: bool = False) -> ssl.SSLContext | bool:
    """What to pass as ``verify=`` to an ``httpx.Client`` (``trust_env`` as given to it) that talks
    to ``url``: the process's shared context for ``http://``, ``True`` (httpx's own, per client)
    for anything else. Verification is httpx's default either way.

    With ``trust_env``, ``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` choose the CA bundle as they do for
    httpx; they are read on every call, so a change of either gives a context of its own.
    """
    if not url.lower().startswith("http://"):
        return True
    if trust_env:
        return _context(True, os.environ.get("SSL_CERT_FILE") or "", os.environ.get("SSL_CERT_DIR") or "")
    return _context(False, "", "")


@functools.lru_cache(maxsize=8)
def _context(trust_env: bool, cert_file: str, cert_dir: str) -> ssl.SSLContext:
    import httpx

    # cert_file and cert_dir are in the key so that a changed environment builds afresh; httpx reads them
    return httpx.create_ssl_context(verify=True, trust_env=trust_env)
