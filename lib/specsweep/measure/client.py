"""One streaming request over httpx → one ``RequestRecord``; never raises on a failed request.

Three API flavours (``Flavour``):

- ``sglang``: ``POST /generate``; ``meta_info.completion_tokens`` is cumulative; ``text`` is
  cumulative by default (delta with ``--incremental-streaming-output``; both are recognised).
- ``openai-completions``: ``POST /v1/completions``; ``usage`` per chunk with
  ``stream_options.continuous_usage_stats``.
- ``openai-chat``: ``POST /v1/chat/completions``; the same, with ``delta.content``.

The work is split in two so that parsing never delays another stream's timestamps:

1. :func:`send_streaming` (the hot path; :func:`stream_request` builds the request first) sends the
   request and, for every read of the response body, takes ``time.perf_counter()`` and appends the
   raw bytes; nothing else. It returns a :class:`RawExchange` and turns every failure (connection
   refused, timeout, stall, dropped stream) into an ``error`` string instead of an exception.
2. :func:`parse_exchange` (after the stream, or after the whole level) decodes SSE (``sse``) and
   JSON and fills a :class:`~specsweep.results.records.RequestRecord`: token-carrying chunk times, tokens per
   chunk from differences of the server's cumulative counts, finish reason, prompt tokens, digest of
   the text, server-side figures and errors (HTTP status with the server's message, in-stream
   ``{"error": …}``, malformed JSON, stream ended without ``[DONE]``). The common OpenAI stream
   (continuous usage, plain ``data:`` events) is read straight from its bytes by regular
   expressions and ``numpy`` (``_parse_openai_fast``, about half the CPU of the general path);
   anything unusual goes through the general SSE/JSON path, and tests hold the two equal.

Transport: :func:`make_client` builds one ``httpx.AsyncClient`` (:class:`SweepClient`, which ignores
cookies) per sweep. By default its transport is :class:`AiohttpTransport`, a small
``httpx.AsyncBaseTransport`` over an ``aiohttp`` session whose response stream yields what
``StreamReader.readany()`` returns (all bytes buffered so far, per read). Measured by
``bench/client_overhead.py`` on one core, it ingests 4–6× more tok/s than httpx's default transport at
a fifth of the CPU per token, and its timestamps lag the server's writes by < 1 ms p50 / < 3 ms p99
at 12,800 chunks/s; ``transport="httpx"`` keeps httpx's own transport.

The API key comes only from the environment variable ``SPECSWEEP_API_KEY`` and is sent as
``Authorization: Bearer …``; it is never stored in a record or logged.
"""
from __future__ import annotations

import asyncio
import os
import re
import ssl
import sys
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from time import perf_counter
from typing import Any, Literal

import aiohttp
import httpx
import numpy as np
import orjson
from aiohttp.client_proto import ResponseHandler

from specsweep.measure.sse import SSEEvent, decode_reads
from specsweep.measure.token_accounting import MAX_COUNT, account_tokens, drop_implausible
from specsweep.results.records import RequestRecord, output_fingerprint, tokens_array
from specsweep.results.redact import cut
from specsweep.servers import CHOICE_FIGURES, CHUNK_FIGURES
from specsweep.servers.flavours import PATHS, Flavour, check_flavour
from specsweep.servers.sglang import meta_figures as sglang_meta_figures

__all__ = [
    "API_KEY_ENV",
    "AiohttpTransport",
    "RawExchange",
    "ReadPath",
    "SweepClient",
    "TransportKind",
    "auth_headers",
    "encode_body",
    "error_message_from_body",
    "fetch",
    "make_client",
    "parse_exchange",
    "send_streaming",
    "stream_request",
]

#: ``aiohttp``: :class:`AiohttpTransport` (default); ``httpx``: httpx's own transport;
#: ``httpx-aiohttp``: the ``httpx-aiohttp`` package's transport (optional, for measurements only)
TransportKind = Literal["aiohttp", "httpx", "httpx-aiohttp"]
#: how the hot path reads the body: ``raw`` = ``Response.aiter_raw()`` (bytes as read, no decoding),
#: ``bytes`` = ``Response.aiter_bytes()`` (content-decoded), ``stream`` = iterate
#: ``Response.stream`` directly (skips httpx's per-chunk bookkeeping)
ReadPath = Literal["raw", "bytes", "stream"]

API_KEY_ENV = "SPECSWEEP_API_KEY"


def encode_body(body: Mapping[str, Any] | bytes) -> bytes:
    """JSON-encode a body (``orjson``); bytes pass through unchanged.

    The result is a copy of exactly its length: ``orjson.dumps`` returns its 4 KiB work buffer,
    which would make a level's 10,000 prepared bodies hold 40 MB instead of one.
    """
    if isinstance(body, (bytes, bytearray, memoryview)):
        return bytes(body)
    return bytes(memoryview(orjson.dumps(body)))


def auth_headers() -> dict[str, str]:
    """``Authorization: Bearer $SPECSWEEP_API_KEY`` when that variable is set and non-empty, else ``{}``."""
    key = os.environ.get(API_KEY_ENV, "").strip()
    return {"Authorization": f"Bearer {key}"} if key else {}


# --------------------------------------------------------------------------------------------------
# transport: httpx API over aiohttp
# --------------------------------------------------------------------------------------------------

def _map_aiohttp_error(exc: BaseException) -> httpx.TransportError:
    """The httpx exception that best describes an aiohttp failure (message keeps aiohttp's text)."""
    msg = str(exc) or type(exc).__name__
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return httpx.ConnectTimeout(msg)
    if isinstance(exc, (aiohttp.SocketTimeoutError, aiohttp.ServerTimeoutError)):
        return httpx.ReadTimeout(msg)
    if isinstance(exc, aiohttp.ClientConnectorError):
        return httpx.ConnectError(msg)
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return httpx.RemoteProtocolError(f"server disconnected: {msg}")
    if isinstance(exc, aiohttp.ClientPayloadError):
        return httpx.RemoteProtocolError(f"incomplete response body: {msg}")
    if isinstance(exc, (aiohttp.ClientOSError, aiohttp.ClientConnectionResetError)):
        return httpx.ReadError(msg)
    if isinstance(exc, aiohttp.ClientResponseError):
        return httpx.RemoteProtocolError(msg)
    if isinstance(exc, (aiohttp.InvalidURL, aiohttp.NonHttpUrlClientError)):
        return httpx.UnsupportedProtocol(msg)
    if isinstance(exc, asyncio.TimeoutError):
        return httpx.ReadTimeout(msg)
    return httpx.TransportError(f"{type(exc).__name__}: {msg}")


class _AiohttpStream(httpx.AsyncByteStream):
    """Response body as aiohttp reads it: each item is every byte buffered since the last read."""

    __slots__ = ("_resp", "_done")

    def __init__(self, resp: aiohttp.ClientResponse) -> None:
        self._resp = resp
        self._done = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        readany = self._resp.content.readany
        try:
            while True:
                data = await readany()
                if not data:
                    break
                yield data
        except aiohttp.ClientError as exc:
            raise _map_aiohttp_error(exc) from exc
        except TimeoutError as exc:  # aiohttp's read timeout (sock_read)
            raise _map_aiohttp_error(exc) from exc
        self._done = True

    async def aclose(self) -> None:
        if self._done:
            self._resp.release()  # body fully read: the connection goes back to the pool
        else:
            self._resp.close()  # unread body: drop the connection


async def _on_reuse(session: aiohttp.ClientSession, ctx: Any, params: Any) -> None:
    """aiohttp trace hook: the request went out on a pooled (kept-alive) connection."""
    if isinstance(ctx.trace_request_ctx, dict):
        ctx.trace_request_ctx["reused"] = True


class AiohttpTransport(httpx.AsyncBaseTransport):
    """An ``httpx`` transport that sends requests with one ``aiohttp.ClientSession`` (HTTP/1.1).

    ``limit``: most open connections (size it to the concurrency). ``keepalive_s``: idle seconds
    before a pooled connection is closed by us (keep it below the server's keep-alive timeout;
    uvicorn's default is 5 s). ``verify``: TLS verification (bool or an ``ssl.SSLContext``).
    Timeouts come from httpx's per-request ``timeout`` extension: connect → ``sock_connect``,
    read → ``sock_read`` (longest silence between reads), pool → ``connect``. Environment proxies
    are not used. The session is created lazily inside the running event loop and must be used
    from that loop only.
    """

    def __init__(self, *, limit: int = 100, keepalive_s: float = 4.0,
                 verify: bool | ssl.SSLContext = True, read_bufsize: int = 1 << 18) -> None:
        if limit < 1:
            raise ValueError(f"limit must be >= 1; got {limit}")
        self._limit = limit
        self._keepalive_s = keepalive_s
        self._verify = verify
        self._read_bufsize = read_bufsize
        self._session: aiohttp.ClientSession | None = None
        self._headers_cache: dict[tuple[tuple[bytes, bytes], ...], list[tuple[str, str]]] = {}

    def _headers(self, request: httpx.Request) -> list[tuple[str, str]]:
        """The request's headers as aiohttp takes them, cached (a sweep repeats the same few)."""
        raw = tuple(request.headers.raw)
        got = self._headers_cache.get(raw)
        if got is None:
            if len(self._headers_cache) > 64:
                self._headers_cache.clear()
            got = self._headers_cache[raw] = request.headers.multi_items()
        return got

    def _get_session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            ssl_arg: bool | ssl.SSLContext = self._verify if isinstance(self._verify, ssl.SSLContext) else bool(self._verify)
            connector = aiohttp.TCPConnector(limit=self._limit, limit_per_host=0, ssl=ssl_arg,
                                             keepalive_timeout=self._keepalive_s, ttl_dns_cache=300)
            trace = aiohttp.TraceConfig()
            trace.on_connection_reuseconn.append(_on_reuse)
            self._session = aiohttp.ClientSession(
                connector=connector, auto_decompress=False, trust_env=False, trace_configs=[trace],
                cookie_jar=aiohttp.DummyCookieJar(), read_bufsize=self._read_bufsize,
                timeout=aiohttp.ClientTimeout(total=None), skip_auto_headers=("User-Agent",),
            )
        return self._session

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        session = self._get_session()
        t = request.extensions.get("timeout") or {}
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=t.get("connect"),
                                        sock_read=t.get("read"), connect=t.get("pool"))
        try:
            data: bytes | None = request.content or None
        except httpx.RequestNotRead:  # a streamed request body: read it (we only send small JSON)
            data = await request.aread() or None
        # every pooled connection may be stale: retry on each one at most once, then on a fresh one
        attempts = self._limit + 1
        for attempt in range(1, attempts + 1):
            state: dict[str, bool] = {}
            try:
                resp = await session.request(request.method, str(request.url), data=data,
                                             headers=self._headers(request),
                                             allow_redirects=False, timeout=timeout, trace_request_ctx=state)
                break
            except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
                # a kept-alive connection the server had closed after its last response although it
                # advertised keep-alive (llama.cpp's llama-server does so after every stream): no
                # response came, the server never handled the request — send it once more on a fresh
                # connection (the stale keep-alive race every HTTP client meets)
                if attempt < attempts and state.get("reused"):
                    continue
                raise _map_aiohttp_error(exc) from exc
            except aiohttp.ClientError as exc:
                raise _map_aiohttp_error(exc) from exc
            except TimeoutError as exc:
                raise _map_aiohttp_error(exc) from exc
        ext: dict[str, Any] = {"http_version": b"HTTP/1.1"}
        if resp.reason:
            ext["reason_phrase"] = resp.reason.encode("latin-1", "replace")
        return httpx.Response(status_code=resp.status, headers=resp.raw_headers,
                              stream=_AiohttpStream(resp), request=request, extensions=ext)

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


class _NoCookies(httpx.Cookies):
    """A cookie store that stores nothing: LLM endpoints need no cookies, and httpx's cookie
    extraction costs about 100 µs of CPU per response."""

    def extract_cookies(self, response: httpx.Response) -> None:
        return None

    def set_cookie_header(self, request: httpx.Request) -> None:
        return None


class SweepClient(httpx.AsyncClient):
    """``httpx.AsyncClient`` that ignores cookies (neither stores nor sends them)."""

    @property  # type: ignore[override]
    def cookies(self) -> httpx.Cookies:
        return _NO_COOKIES

    @cookies.setter
    def cookies(self, value: Any) -> None:
        return None


_NO_COOKIES = _NoCookies()


def make_client(
    base_url: str,
    concurrency: int,
    *,
    connect_timeout_s: float = 30.0,
    read_timeout_s: float | None = 60.0,
    transport: TransportKind = "aiohttp",
    keepalive_s: float = 4.0,
    verify: bool | ssl.SSLContext = True,
    headers: Mapping[str, str] | None = None,
) -> httpx.AsyncClient:
    """One ``httpx.AsyncClient`` for a sweep: connection limits sized to ``concurrency``.

    ``read_timeout_s``: longest silence (seconds) between two reads of a response before the
    request fails as stalled (None: no limit). ``connect_timeout_s``: seconds to open a connection.
    ``transport``: ``"aiohttp"`` (default, :class:`AiohttpTransport`) or ``"httpx"`` (httpx's own).
    ``headers``: extra headers; ``Authorization`` comes from ``SPECSWEEP_API_KEY``.
    Cookies are ignored (:class:`SweepClient`). Must be used, and closed (``await client.aclose()``),
    inside one event loop.
    """
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1; got {concurrency}")
    if not base_url.startswith(("http://", "https://")):
        raise ValueError(f"base_url must start with http:// or https://; got {base_url!r}")
    timeout = httpx.Timeout(connect=connect_timeout_s, read=read_timeout_s, write=connect_timeout_s,
                            pool=connect_timeout_s)
    hdrs = {"Content-Type": "application/json", "Accept": "text/event-stream",
            "Accept-Encoding": "identity", "User-Agent": "specsweep"}
    if headers:
        hdrs.update(headers)
    hdrs.update(auth_headers())
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency,
                          keepalive_expiry=keepalive_s)
    if transport == "aiohttp":
        return SweepClient(base_url=base_url, headers=hdrs, timeout=timeout, trust_env=False,
                           transport=AiohttpTransport(limit=concurrency, keepalive_s=keepalive_s,
                                                      verify=verify))
    if transport == "httpx":
        return SweepClient(base_url=base_url, headers=hdrs, timeout=timeout, trust_env=False,
                           limits=limits, verify=verify)
    if transport == "httpx-aiohttp":
        try:
            from httpx_aiohttp import AiohttpTransport as PkgTransport
        except ImportError as exc:
            raise ValueError("transport 'httpx-aiohttp' needs the package httpx-aiohttp "
                             "(pip install httpx-aiohttp)") from exc
        return SweepClient(base_url=base_url, headers=hdrs, timeout=timeout, trust_env=False,
                           transport=PkgTransport(limits=limits, verify=verify, trust_env=False))
    raise ValueError(f"transport must be 'aiohttp', 'httpx' or 'httpx-aiohttp'; got {transport!r}")


# --------------------------------------------------------------------------------------------------
# hot path
# --------------------------------------------------------------------------------------------------

@dataclass(slots=True)
class RawExchange:
    """What the hot path saw of one request, before any parsing.

    ``t_sent``/``t_end``: perf_counter seconds just before the request was sent and when the
    response ended (or failed). ``reads``/``times``: the bytes of every read of the body and its
    arrival time. ``error``: transport-level failure text (None when the body was read to its end).
    ``spilled``: handles of earlier reads that a :data:`SpillFn` moved out of memory while the
    response streamed (in order, before ``reads``); only their owner can put them back, and an
    exchange is parsed whole (``parse_exchange`` refuses one with reads still spilled).
    """

    t_sent: float = 0.0
    t_end: float = 0.0
    http_status: int | None = None
    content_type: str | None = None
    reads: list[bytes] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    error: str | None = None
    spilled: list[Any] = field(default_factory=list)

    @property
    def nbytes(self) -> int:
        """Bytes of body held in ``reads`` (spilled reads not counted)."""
        return sum(map(len, self.reads))


#: ``spill(exchange, held_bytes) -> moved``: called from the hot path each time a response's reads
#: held in memory grew by :data:`SPILL_STEP_BYTES`; it may move ``exchange.reads``/``times`` out
#: (appending a handle to ``exchange.spilled`` and clearing both lists in place) and says whether it did
SpillFn = Callable[[RawExchange, int], bool]
#: bytes of a streaming response held in memory between two calls of its :data:`SpillFn`
SPILL_STEP_BYTES = 1 << 16


def _describe_error(exc: BaseException, read_timeout_s: float | None) -> str:
    return _short(_describe_error_long(exc, read_timeout_s), 240)


def _describe_error_long(exc: BaseException, read_timeout_s: float | None) -> str:
    if isinstance(exc, httpx.ReadTimeout):
        lim = f" {read_timeout_s:g} s" if read_timeout_s else ""
        return f"stalled: no data for the read timeout{lim} ({exc})"
    if isinstance(exc, httpx.ConnectTimeout):
        return f"connect timeout: {exc}"
    if isinstance(exc, httpx.PoolTimeout):
        return f"pool timeout: no free connection ({exc})"
    if isinstance(exc, httpx.TimeoutException):
        return f"timeout: {exc}"
    if isinstance(exc, httpx.ConnectError):
        return f"connect error: {exc}"
    if isinstance(exc, (httpx.RemoteProtocolError, httpx.ReadError)):
        return f"stream dropped: {exc}"
    if isinstance(exc, httpx.HTTPError):
        return f"{type(exc).__name__}: {exc}"
    return f"{type(exc).__name__}: {exc}"


def _spill_step(spill: SpillFn, ex: RawExchange, held: int) -> tuple[int, int]:
    """Offer ``ex``'s reads to ``spill`` (``held`` bytes of them in memory); the bytes held after
    it and the count at which to offer them next (bytes)."""
    if spill(ex, held):
        return 0, SPILL_STEP_BYTES
    return held, held + SPILL_STEP_BYTES


class _TappedStreamReader(aiohttp.StreamReader):
    """aiohttp's body stream, taken over by :func:`_read_aiohttp` while one response streams: each
    body chunk the HTTP parser feeds goes straight to that response's :class:`_Tap` (timestamp,
    bytes) in the protocol's ``data_received``, instead of into a buffer that a reading coroutine
    then wakes up (a future and a task step) to empty. EOF and errors still reach
    ``wait_eof()``. Same memory layout as its base (no slots of its own), so that a response's
    reader can be switched to it and back (``__class__``); a reader with no tap registered behaves
    exactly like aiohttp's."""

    __slots__ = ()

    def feed_data(self, data: bytes, size: int = 0) -> bool:
        tap = _TAPS.get(id(self))
        if tap is None:
            return super().feed_data(data, size)
        if data:
            self.total_bytes += len(data)
            try:
                tap.feed(data)
            except Exception as exc:  # a spill that failed: end the response with its error
                self.set_exception(exc)
        return False

    def end_http_chunk_receiving(self) -> None:
        if id(self) not in _TAPS:  # no reader consumes chunk offsets here: keep none
            super().end_http_chunk_receiving()


class _Tap:
    """Where a response's body goes, on every read path: ``perf_counter()`` (seconds) then the
    bytes, per read, into its :class:`RawExchange`; with ``spill``, offered every
    :data:`SPILL_STEP_BYTES`. ``last``: the time of the latest read (of the tap's creation before
    the first), kept here because a spill clears ``ex.times``."""

    __slots__ = ("ex", "t_append", "r_append", "spill", "held", "mark", "last")

    def __init__(self, ex: RawExchange, spill: SpillFn | None) -> None:
        self.ex = ex
        self.t_append = ex.times.append
        self.r_append = ex.reads.append
        self.spill = spill
        self.held = 0
        self.mark = SPILL_STEP_BYTES if spill is not None else sys.maxsize
        self.last = perf_counter()

    def feed(self, data: bytes) -> None:
        self.last = t = perf_counter()
        self.t_append(t)
        self.r_append(data)
        self.held += len(data)
        if self.held >= self.mark:
            self.held, self.mark = _spill_step(self.spill, self.ex, self.held)  # type: ignore[arg-type]


#: id(reader) → its tap, for the responses now streaming through :class:`_TappedStreamReader`
_TAPS: dict[int, _Tap] = {}


class _SilenceWatch:
    """The read timeout (longest silence between two reads, seconds) of a tapped response, on one
    timer re-armed lazily: it fires ``limit`` after the last read it knows of, and when a read
    came since, sleeps until ``limit`` after that one. aiohttp's own ``sock_read`` moves a timer
    on every read instead (a cancel and a ``call_later`` per chunk)."""

    __slots__ = ("reader", "tap", "limit", "handle")

    def __init__(self, reader: aiohttp.StreamReader, tap: _Tap, limit: float) -> None:
        self.reader = reader
        self.tap = tap
        self.limit = limit
        self.handle: asyncio.TimerHandle | None = asyncio.get_running_loop().call_later(limit, self.check)

    def check(self) -> None:
        silent = perf_counter() - self.tap.last
        if silent >= self.limit:
            self.handle = None
            self.reader.set_exception(aiohttp.SocketTimeoutError("Timeout on reading data from socket"))
        else:
            self.handle = asyncio.get_running_loop().call_later(self.limit - silent, self.check)

    def cancel(self) -> None:
        if self.handle is not None:
            self.handle.cancel()
            self.handle = None


#: ``SPECSWEEP_READ_PATH=readany`` reads every aiohttp response with ``readany`` (the path before
#: the tap, one wake-up of the reading task per read): a switch to compare the two, or to fall back
#: should an aiohttp release change what the tap relies on. Read once, at import.
_READANY = os.environ.get("SPECSWEEP_READ_PATH", "").strip().lower() == "readany"


def _tap_protocol(content: object, resp: aiohttp.ClientResponse) -> ResponseHandler | None:
    """The protocol of a response whose body can be read through a tap, else None: a tappable body is
    a plain aiohttp reader (not the empty one of a bodiless response) on a live connection whose
    protocol exposes its read timeout, unless ``SPECSWEEP_READ_PATH=readany``."""
    conn = resp.connection
    proto = conn.protocol if conn is not None else None
    if (_READANY or content.__class__ is not aiohttp.StreamReader or proto is None
            or not hasattr(type(proto), "read_timeout")):
        return None
    return proto


async def _read_aiohttp(stream: _AiohttpStream, ex: RawExchange, spill: SpillFn | None) -> None:
    """The hot path over :class:`AiohttpTransport`'s response: every body chunk, timestamped
    (``perf_counter()``, seconds) where the protocol receives it, appended to ``ex`` (see
    :class:`_TappedStreamReader`); the read timeout kept by :class:`_SilenceWatch`. A response
    that cannot be tapped is read with ``readany`` as before. aiohttp failures become httpx
    exceptions as in ``_AiohttpStream``."""
    resp = stream._resp
    content = resp.content
    tap = _Tap(ex, spill)
    proto = _tap_protocol(content, resp)
    if proto is None:
        return await _read_aiohttp_any(stream, tap)
    limit = proto.read_timeout
    watch: _SilenceWatch | None = None
    key = id(content)
    try:
        exc = content.exception()
        if exc is not None:
            raise exc
        # what came before the tap (with the headers, or while this task waited to run): drained
        # until none is left, since a drain that resumes a paused protocol can feed more at once
        while buffered := content.read_nowait():
            tap.feed(buffered)
        if not content.is_eof():
            try:
                content.__class__ = _TappedStreamReader
            except TypeError:  # a reader class that cannot be switched (a compiled one): read it the old way
                return await _read_aiohttp_any(stream, tap)
            _TAPS[key] = tap
            if limit:
                # aiohttp's per-read timer stops here (its handle already set covers the silence
                # up to the next read); this watch keeps the same limit from then on
                proto.read_timeout = None
                watch = _SilenceWatch(content, tap, limit)
            await content.wait_eof()
    except aiohttp.ClientError as exc:
        raise _map_aiohttp_error(exc) from exc
    except TimeoutError as exc:  # a read timeout
        raise _map_aiohttp_error(exc) from exc
    finally:
        _TAPS.pop(key, None)
        if watch is not None:
            watch.cancel()
        # tested apart: an `if` on the class itself would narrow it and so refuse the base class back
        tapped = content.__class__ is _TappedStreamReader
        if tapped:
            content.__class__ = aiohttp.StreamReader
    stream._done = True


async def _read_aiohttp_any(stream: _AiohttpStream, tap: _Tap) -> None:
    """The fallback over :class:`AiohttpTransport`'s response: each ``readany`` to ``tap``
    (``perf_counter()`` when the reading task got it, then the bytes; see :class:`_Tap`)."""
    readany = stream._resp.content.readany
    feed = tap.feed
    try:
        while data := await readany():
            feed(data)
    except aiohttp.ClientError as exc:
        raise _map_aiohttp_error(exc) from exc
    except TimeoutError as exc:  # aiohttp's read timeout (sock_read)
        raise _map_aiohttp_error(exc) from exc
    stream._done = True


async def stream_request(
    client: httpx.AsyncClient,
    path: str,
    body: bytes,
    *,
    timeout_s: float | None = None,
    read: ReadPath = "raw",
) -> RawExchange:
    """Send one streaming POST of ``body`` (encoded JSON) to ``path`` (relative to the client's base
    URL) and record every read; see :func:`send_streaming`."""
    return await send_streaming(client, client.build_request("POST", path, content=body),
                                timeout_s=timeout_s, read=read)


async def send_streaming(
    client: httpx.AsyncClient,
    request: httpx.Request,
    *,
    timeout_s: float | None = None,
    read: ReadPath = "raw",
    spill: SpillFn | None = None,
) -> RawExchange:
    """The hot path: send a prepared request and, per read of the body, ``perf_counter()`` then append.

    ``request``: from ``client.build_request`` (prepare requests before a level starts: building one
    costs about 60 µs). ``timeout_s``: limit on the whole request in seconds (None: none; the
    client's read timeout still catches stalls). ``spill``: offered the reads every
    :data:`SPILL_STEP_BYTES` of body, so that a long response need not stay in memory until it ends
    (``loadgen`` moves them to the level's spool file). Never raises for a failed request (the
    failure is in ``.error``); ``asyncio.CancelledError`` propagates. A request object can be sent
    only once.
    """
    ex = RawExchange()
    try:
        async with asyncio.timeout(timeout_s):
            ex.t_sent = perf_counter()
            response = await client.send(request, stream=True)
            try:
                ex.http_status = response.status_code
                ex.content_type = response.headers.get("content-type")
                inner = getattr(response.stream, "_stream", None)  # httpx's BoundAsyncStream wraps it
                if read == "raw" and inner.__class__ is _AiohttpStream:
                    # our own transport: read aiohttp's buffer directly (three async-generator
                    # layers less per read than aiter_raw)
                    response.is_stream_consumed = True
                    await _read_aiohttp(inner, ex, spill)  # type: ignore[arg-type]
                else:
                    if read == "raw":
                        it = response.aiter_raw()
                    elif read == "stream":
                        it = response.stream.__aiter__()  # type: ignore[union-attr]
                    else:
                        it = response.aiter_bytes()
                    await _read_iter(it, _Tap(ex, spill))
            finally:
                await response.aclose()
    except TimeoutError:
        ex.error = f"timeout: request exceeded {timeout_s:g} s"
    except Exception as exc:  # every failure becomes a record, never an abort
        ex.error = _describe_error(exc, client.timeout.read)
    ex.t_end = perf_counter()
    return ex


async def _read_iter(it: AsyncIterator[bytes], tap: _Tap) -> None:
    """The loop over an httpx byte iterator (the other read paths): each read to ``tap``."""
    feed = tap.feed
    async for data in it:
        feed(data)


async def fetch(
    client: httpx.AsyncClient,
    flavour: Flavour,
    body: Mapping[str, Any] | bytes,
    *,
    timeout_s: float | None = None,
    read: ReadPath = "raw",
) -> RequestRecord:
    """One request of ``flavour`` → its record (hot path plus parsing at the end)."""
    raw = await stream_request(client, PATHS[check_flavour(flavour)], encode_body(body),
                               timeout_s=timeout_s, read=read)
    return parse_exchange(flavour, raw)


# --------------------------------------------------------------------------------------------------
# parsing (after the stream)
# --------------------------------------------------------------------------------------------------

def _short(text: str, limit: int = 300) -> str:
    # masked whole before the cut: a secret the server quoted near the cut is never stored in part
    return cut(" ".join(text.split()), limit)


def _message_of(err: object) -> str:
    """A readable message from an error object: OpenAI ``{"message":…}``, FastAPI ``detail``, text."""
    if isinstance(err, Mapping):
        for key in ("message", "detail", "error", "msg"):
            if key in err and err[key] not in (None, ""):
                return _message_of(err[key])
        return _short(orjson.dumps(err).decode())
    if isinstance(err, list) and err:
        return "; ".join(_message_of(e) for e in err[:3])
    return _short(str(err))


def error_message_from_body(body: bytes) -> str:
    """The server's error message in an HTTP error body (JSON ``error.message``/``detail``/``message``
    or the text itself), shortened to one line."""
    if not body:
        return "(empty body)"
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        return _short(body.decode("utf-8", "replace"))
    return _message_of(obj)


def _norm_finish(fr: object) -> str | None:
    """``"length"``/``"stop"``/``"abort"``/… from a string or SGLang's ``{"type": …}``."""
    if fr is None:
        return None
    if isinstance(fr, Mapping):
        fr = fr.get("type")
    return str(fr) if fr is not None else None


#: SGLang chunks larger than this (bytes) are read without parsing their text (see _sglang_meta)
_SGLANG_FAST_BYTES = 4096
_META_KEY = b'"meta_info":'


def _sglang_meta(data: bytes) -> dict[str, Any] | None:
    """``meta_info`` of a big SGLang chunk, parsing only that object, or None (then parse it all).

    With SGLang's default cumulative output every chunk repeats the whole text and token IDs, so a
    1,000-token stream is megabytes of JSON; counts need only ``meta_info``, which SGLang writes as
    the last key. The key cannot occur inside a JSON string (its quotes would be escaped there).
    """
    if data[:1] != b"{" or data[-1:] != b"}":
        return None
    k = data.rfind(_META_KEY)
    if k < 0:
        return None
    try:
        meta = orjson.loads(data[k + len(_META_KEY):-1])
    except orjson.JSONDecodeError:
        return None
    if not isinstance(meta, dict) or meta.get("finish_reason") is not None:
        return None
    return meta


_DONE_TAIL = b"data: [DONE]\n\n"
_COUNT_KEY = b'"completion_tokens":'
#: per event, its first ``completion_tokens`` value (the rest of the event is skipped: one per event)
_COUNT_RE = re.compile(rb'"completion_tokens":(-?\d+)[,}][^\n]*\n\n')
#: a JSON string value of ``text`` (completions) or ``content`` (chat), escapes included
_TEXT_RE = {
    "openai-completions": re.compile(rb'"text":("[^"\\]*(?:\\.[^"\\]*)*")'),
    "openai-chat": re.compile(rb'"content":("[^"\\]*(?:\\.[^"\\]*)*")'),
}
_FINISH_RE = re.compile(rb'"finish_reason":("[^"\\]*(?:\\.[^"\\]*)*")')
_PROMPT_RE = re.compile(rb'"prompt_tokens":(\d+)[,}]')
#: bytes that send a stream to the general parser: errors, server figures (every dialect's chunk
#: keys), reasoning text, a second choice, CR line ends (each is one memchr-speed scan)
_SLOW_MARKS = (b"\r", b'"error"', *(f'"{key}"'.encode() for key, _ in (*CHUNK_FIGURES, *CHOICE_FIGURES)),
               b'"index":1')


#: bytes at the end of a response searched for its last count (:func:`count_hint`)
_HINT_TAIL_BYTES = 4096
_HINT_RE = re.compile(rb'"completion_tokens":\s*(\d+)')


def count_hint(raw: RawExchange) -> int | None:
    """A finished response's output tokens as its last ``"completion_tokens"`` in its final 4 KiB
    says (OpenAI ``usage``, SGLang ``meta_info``): microseconds, for the live per-level stopping rule
    only — the level's figures always come from :func:`parse_exchange`. 0 for a failed request;
    None when the tail holds no count (no counts sent, or the tail spilled to the level's spool)."""
    if raw.error is not None or (raw.http_status is not None and raw.http_status >= 300):
        return 0
    tail: list[bytes] = []
    held = 0
    for read in reversed(raw.reads):
        tail.append(read[-_HINT_TAIL_BYTES:])
        held += len(tail[-1])
        if held >= _HINT_TAIL_BYTES:
            break
    body = b"".join(reversed(tail))
    at = body.rfind(_COUNT_KEY)
    m = _HINT_RE.match(body, at) if at >= 0 else None
    return int(m.group(1)) if m is not None else None


def _json_list(items: list[bytes]) -> list[Any]:
    """``orjson.loads`` of JSON values given as bytes, in one call."""
    return orjson.loads(b"[" + b",".join(items) + b"]") if items else []


def _plain_event_ends(flavour: Flavour, body: bytes) -> np.ndarray | None:
    """Where each event of ``body`` ends (the offset of the second LF of its blank line), when the
    body is what :func:`_parse_openai_fast` takes: plain ``data: {…}`` events, one line each, LF
    line ends, none of ``_SLOW_MARKS`` (nor chat reasoning text), ``data: [DONE]`` last and at
    least one JSON event; None otherwise."""
    if not body.startswith(b"data: ") or not body.endswith(_DONE_TAIL):
        return None
    for mark in _SLOW_MARKS:
        if mark in body:
            return None
    if flavour == "openai-chat" and b'"reasoning' in body:
        return None
    arr = np.frombuffer(body, dtype=np.uint8)
    lfs = np.flatnonzero(arr == 10)
    if len(lfs) // 2 - 1 < 1 or len(lfs) % 2:
        return None
    ends = lfs[1::2]
    if not (ends == lfs[0::2] + 1).all():
        return None  # a line that is not followed by a blank line: several lines in one event
    starts = np.concatenate(([0], ends[:-2] + 1))  # every JSON event: "data: {" … "}"
    for k, ch in enumerate(b"data: {"):
        if not (arr[starts + k] == ch).all():
            return None
    if not (arr[ends[:-1] - 2] == 125).all():  # "}" before the blank line: catches a truncated event
        return None
    return ends


def _parse_openai_fast(flavour: Flavour, raw: RawExchange, rec: RequestRecord) -> bool:
    """The common OpenAI stream read straight from its bytes; False (``rec`` untouched) when unusual.

    Taken only when the body is nothing but ``data: <JSON>\\n\\n`` events (LF line ends, one
    ``data:`` line each, no comments or other fields), ends with ``data: [DONE]``, holds none of
    ``_SLOW_MARKS``, and every JSON event has exactly one ``"completion_tokens":<int>`` (the
    continuous-usage case) with at least one non-empty text piece. A JSON key cannot occur inside a
    JSON string (its quotes would be escaped), so these scans see keys only. Each event must read
    ``{…}`` (a truncated event fails that); JSON inside an event is not otherwise validated — a
    malformed event that still holds its count and text is taken as it reads. In that case the
    general parser's accounting reduces to "a chunk's tokens = rise of the running maximum of the
    counts", computed here with regular expressions (C), ``numpy`` (event ends located in the read
    boundaries give each event the arrival time of the read that completed it) and three small
    ``orjson`` calls — no per-event Python object but the count's digits and the text piece.
    Anything else returns False and :func:`parse_exchange`'s general path decides; tests check
    that both paths give identical records. Cost on a shared 2-core VM: about 1.2 µs of CPU per
    event, against about 2.6 µs for the general path.
    """
    if raw.error is not None:
        return False
    reads = raw.reads
    body = reads[0] if len(reads) == 1 else b"".join(reads)
    ends = _plain_event_ends(flavour, body)
    if ends is None:
        return False
    n_json = len(ends) - 1  # JSON events ([DONE] is the last event)
    counts = _COUNT_RE.findall(body)
    if len(counts) != n_json or body.count(_COUNT_KEY) != n_json:
        return False  # an event without a count, or with two
    try:
        c = np.array(_json_list(counts), dtype=np.int64)
        pieces = _json_list(_TEXT_RE[flavour].findall(body))
        # the last of each wins, as in the general path: search from the end
        f_at = body.rfind(b'"finish_reason":"')
        m = _FINISH_RE.match(body, f_at) if f_at >= 0 else None
        finish = orjson.loads(m.group(1)) if m is not None else None
        p_at = body.rfind(b'"prompt_tokens":')
        m = _PROMPT_RE.match(body, p_at) if p_at >= 0 else None
        if p_at >= 0 and m is None:
            return False  # the last prompt count is not an integer: the general rules decide
    except (orjson.JSONDecodeError, KeyError, OverflowError):
        return False  # OverflowError: a count beyond int64; the general path makes it the request's error
    if c.max() > MAX_COUNT or (m is not None and int(m.group(1)) > MAX_COUNT):
        return False  # an impossible count: the general path makes it the request's error
    full = "".join(pieces)
    if not full:
        return False  # no content piece: the general rules decide what counts
    # event i ends at the second LF of its blank line; its time is that of the read holding that byte
    read_ends = np.cumsum(np.fromiter(map(len, reads), dtype=np.int64, count=len(reads)))
    ev_times = np.asarray(raw.times, dtype=float)[np.searchsorted(read_ends, ends[:-1], side="right")]
    before = np.maximum.accumulate(np.concatenate(([0], c[:-1])))  # running max of earlier counts
    np.maximum(before, 0, out=before)
    rise = c > before
    rec.chunk_times = ev_times[rise]
    rec.chunk_tokens = tokens_array((c - before)[rise])
    rec.output_tokens = int(max(0, c.max()))
    rec.token_source = "usage"
    rec.prompt_tokens = int(m.group(1)) if m is not None else None
    rec.finish_reason = finish
    rec.output_digest, rec.output_head, rec.output_blocks = output_fingerprint(full)
    if rec.finish_reason == "abort":
        rec.error = "server aborted the request: no message"
    return True


def _huge(count: object) -> float | None:
    """``count`` when it is a number beyond :data:`MAX_COUNT` that is not an int (or NaN), else None."""
    if isinstance(count, float) and not count <= MAX_COUNT:
        return count
    return None


def _response_failure(raw: RawExchange) -> str | None:
    """Why ``raw`` holds no event stream to parse, or None: no response (the transport's error),
    an HTTP error status (with the server's message), or a body that is not ``text/event-stream``
    (a JSON ``{"error": …}`` body gives its message)."""
    if raw.http_status is None:
        return raw.error or "no response"
    if not 200 <= raw.http_status < 300:
        return f"HTTP {raw.http_status}: {error_message_from_body(b''.join(raw.reads))}"
    ctype = (raw.content_type or "").lower()
    if ctype and "event-stream" not in ctype:
        if "json" in ctype and raw.reads and raw.error is None:
            try:
                obj = orjson.loads(b"".join(raw.reads))
            except orjson.JSONDecodeError:
                obj = None
            if isinstance(obj, Mapping) and obj.get("error"):
                return f"server error: {_message_of(obj['error'])}"
        return f"server did not stream (content-type {raw.content_type!r}); is stream=true accepted?"
    return None


def _stream_events(raw: RawExchange) -> tuple[list[SSEEvent], list[float], SSEEvent | None]:
    """The SSE events of ``raw``'s body, each event's arrival time (perf_counter seconds) and the
    event left without its blank line at the end (None when there is none); a trailing
    ``[DONE]`` counts as an event, timed at the last read."""
    decoded = decode_reads(raw.reads, raw.times)
    events, ev_times, trailing = decoded.events, decoded.times, decoded.trailing
    if trailing is not None and trailing.data.strip() == b"[DONE]":
        events = [*events, trailing]
        ev_times = [*ev_times, raw.times[-1] if raw.times else raw.t_end]
        trailing = None
    return events, ev_times, trailing


#: :func:`_bad_event`'s ``obj`` for an event that is not JSON
_NOT_JSON = object()


def _bad_event(obj: object, data: bytes, i: int) -> str:
    """Why event ``i`` (``data``, read as ``obj``; :data:`_NOT_JSON` when it is not JSON) ends the
    stream: not JSON, not a JSON object, or the server's in-stream ``{"error": …}``."""
    shown = _short(data[:400].decode("utf-8", "replace"), 120)
    if obj is _NOT_JSON:
        return f"malformed chunk JSON (event {i}): {shown}"
    if not isinstance(obj, dict):
        return f"malformed chunk (event {i}): not a JSON object: {shown}"
    return f"server error in stream: {_message_of(obj['error'])}"


#: what a chunk's field that is absent or not a JSON object reads as (never written to)
_NO_FIELDS: Mapping[str, Any] = {}


@dataclass(slots=True)
class _Events:
    """What a flavour's parser read from a stream's events, for :func:`parse_exchange` to account.

    Per event read up to ``[DONE]`` or the first bad one: ``times`` (arrival, perf_counter
    seconds), ``counts`` (cumulative completion tokens it carried, or None), ``contents`` (it
    carried text or token IDs). ``prompt_tokens``/``finish``: the last ones seen; ``abort_msg``:
    SGLang's message of an ``abort`` finish; ``server``: server-side figures (``RequestRecord.server``);
    ``huge``: the first count written as a non-integer number beyond ``MAX_COUNT``; ``done``:
    ``[DONE]`` was reached; ``error``: why parsing stopped early.
    """

    times: list[float] = field(default_factory=list)
    counts: list[int | None] = field(default_factory=list)
    contents: list[bool] = field(default_factory=list)
    prompt_tokens: int | None = None
    finish: str | None = None
    abort_msg: str | None = None
    server: dict[str, float] = field(default_factory=dict)
    huge: float | None = None
    done: bool = False
    error: str | None = None


def _read_sglang(events: list[SSEEvent], ev_times: list[float], acc: _Events) -> str | None:
    """SGLang's native ``/generate`` events into ``acc``; the generated text (None: unknown).

    Counts and the prompt count come from ``meta_info``; the final ``meta_info`` (with its
    ``finish_reason``) brings ``e2e_latency`` and the speculation figures. A chunk carries content
    when it has ``output_ids``, else when its ``text`` is non-empty and differs from the last
    chunk's. Big chunks before the last two are read by their ``meta_info`` only
    (:func:`_sglang_meta`: they count as content); the text is then known only when the chunks
    parsed in full show SGLang's cumulative pattern (each text extends the one before).
    """
    t_add, c_add, has_add = acc.times.append, acc.counts.append, acc.contents.append
    loads = orjson.loads
    texts: list[str] = []
    prompt_tokens: int | None = None
    finish: str | None = None
    huge: float | None = None
    prev_text = ""
    skipped_text = False
    fast_upto = len(events) - 2  # the last events (final chunk, [DONE]) are always parsed in full
    for i, (ev, t) in enumerate(zip(events, ev_times)):
        data = ev.data
        if data == b"[DONE]" or data.strip() == b"[DONE]":
            acc.done = True
            break
        if i < fast_upto and len(data) > _SGLANG_FAST_BYTES:
            head = _sglang_meta(data)  # its meta_info alone, or None: parse it in full
            if head is not None:
                c = head.get("completion_tokens")
                p = head.get("prompt_tokens")
                if isinstance(p, int):
                    prompt_tokens = p
                t_add(t)
                c_add(c if isinstance(c, int) else None)
                if huge is None:
                    huge = _huge(c)
                has_add(True)
                skipped_text = True
                continue
        try:
            obj = loads(data)
        except orjson.JSONDecodeError:
            acc.error = _bad_event(_NOT_JSON, data, i)
            break
        if not isinstance(obj, dict) or obj.get("error"):
            acc.error = _bad_event(obj, data, i)
            break
        text = ""
        meta = obj.get("meta_info")
        if not isinstance(meta, dict):  # absent, or not an object: no figures
            meta = _NO_FIELDS
        c = meta.get("completion_tokens")
        cum = c if isinstance(c, int) else None
        if huge is None:
            huge = _huge(c)
        p = meta.get("prompt_tokens")
        if isinstance(p, int):
            prompt_tokens = p
        fr = meta.get("finish_reason")
        if fr is not None:  # the final chunk
            finish = _sglang_finish(fr, meta, acc)
        t_txt = obj.get("text")
        if isinstance(t_txt, str):
            text = t_txt
        ids = obj.get("output_ids")
        t_add(t)
        c_add(cum)
        has_add(bool(ids) if isinstance(ids, list) else (bool(text) and text != prev_text))
        texts.append(text)
        prev_text = text
    acc.prompt_tokens, acc.finish, acc.huge = prompt_tokens, finish, huge
    return _sglang_text(texts, skipped_text)


def _sglang_finish(fr: object, meta: Mapping[str, Any], acc: _Events) -> str | None:
    """The final ``meta_info``: its finish reason (normalised; an ``abort``'s message into ``acc``)
    and the server's figures (``servers.sglang.meta_figures``) into ``acc.server``."""
    finish = _norm_finish(fr)
    if finish == "abort" and isinstance(fr, Mapping):
        acc.abort_msg = _message_of(fr)
    sglang_meta_figures(meta, acc.server)
    return finish


def _sglang_text(texts: list[str], skipped_text: bool) -> str | None:
    """A ``/generate`` stream's text from its chunks' ``text``: the last one when each extends the
    one before (SGLang's cumulative output), else their concatenation (incremental output), else
    None when chunks were read by their ``meta_info`` only (they are cumulative: without the
    pattern, the text is unknown) or there were none."""
    if not texts:
        return None
    cumulative = all(texts[j].startswith(texts[j - 1]) for j in range(1, len(texts)))
    if cumulative:
        return texts[-1]
    return None if skipped_text else "".join(texts)


def _read_openai(events: list[SSEEvent], ev_times: list[float], acc: _Events, *, chat: bool) -> str | None:
    """OpenAI completions (``chat=False``: ``choices[0].text``) or chat (``choices[0].delta``: its
    reasoning text and content) events into ``acc``; the generated text (None when no event was JSON).

    Counts and the prompt count come from ``usage``; a chunk carries content when its first choice
    has text or ``token_ids``. Server figures: every chunk key a dialect reads
    (``specsweep.servers.CHUNK_FIGURES``: vLLM's ``metrics``, SGLang's ``sglext``, llama.cpp's
    ``timings``) and every key of the first choice a dialect reads (``CHOICE_FIGURES``: vLLM's
    earlier ``speculative_decoding_stats``, TensorRT-LLM's ``avg_decoded_tokens_per_iter``).
    """
    t_add, c_add, has_add = acc.times.append, acc.counts.append, acc.contents.append
    loads = orjson.loads
    texts: list[str] = []
    server = acc.server
    prompt_tokens: int | None = None
    finish: str | None = None
    huge: float | None = None
    for i, (ev, t) in enumerate(zip(events, ev_times)):
        data = ev.data
        if data == b"[DONE]" or data.strip() == b"[DONE]":
            acc.done = True
            break
        try:
            obj = loads(data)
        except orjson.JSONDecodeError:
            acc.error = _bad_event(_NOT_JSON, data, i)
            break
        if not isinstance(obj, dict) or obj.get("error"):
            acc.error = _bad_event(obj, data, i)
            break
        cum: int | None = None
        text = ""
        has_content = False
        usage = obj.get("usage")
        if isinstance(usage, dict):
            c = usage.get("completion_tokens")
            cum = c if isinstance(c, int) else None
            if huge is None:
                huge = _huge(c)
            p = usage.get("prompt_tokens")
            if isinstance(p, int):
                prompt_tokens = p
        for key, read_figures in CHUNK_FIGURES:  # the key names the server that sent the figures
            figures = obj.get(key)
            if isinstance(figures, dict):
                read_figures(figures, server)
        choices = obj.get("choices")
        if choices and isinstance(choices, list) and isinstance(choices[0], dict):
            text, has_content, fr = _read_choice(choices[0], server, chat)
            if fr is not None:
                finish = _norm_finish(fr)
        t_add(t)
        c_add(cum)
        has_add(has_content)
        texts.append(text)
    acc.prompt_tokens, acc.finish, acc.huge = prompt_tokens, finish, huge
    return "".join(texts) if texts else None


def _read_choice(ch: Mapping[str, Any], server: dict[str, float], chat: bool) -> tuple[str, bool, object]:
    """A streamed chunk's first choice: its text (chat: reasoning text, then content), whether it
    carried content (text or ``token_ids``) and its finish reason (None: not yet); the figures a
    dialect reads from a choice (``CHOICE_FIGURES``: vLLM's earlier ``speculative_decoding_stats``,
    TensorRT-LLM's ``avg_decoded_tokens_per_iter``) go to ``server``."""
    text = ""
    if chat:
        delta = ch.get("delta")
        if not isinstance(delta, dict):
            delta = _NO_FIELDS
        parts = [delta.get(k) for k in ("reasoning_content", "reasoning", "content")]
        text = "".join(p for p in parts if isinstance(p, str))
    else:
        t_txt = ch.get("text")
        if isinstance(t_txt, str):
            text = t_txt
    for key, read_value in CHOICE_FIGURES:
        if key in ch:
            read_value(ch[key], server)
    return text, bool(text) or bool(ch.get("token_ids")), ch.get("finish_reason")


def _stream_end_error(raw: RawExchange, acc: _Events, trailing: SSEEvent | None) -> str | None:
    """The request's error once its events are read, or None: the transport's error first, then
    why parsing stopped (bad event, impossible count), a stream that ended without ``[DONE]``, and
    an ``abort`` finish."""
    if raw.error is not None:
        return raw.error
    if acc.error is not None:
        return acc.error
    if not acc.done:
        return "stream ended mid-event without [DONE]" if trailing is not None else "stream ended without [DONE]"
    if acc.finish == "abort":
        return f"server aborted the request: {acc.abort_msg or 'no message'}"
    return None


def parse_exchange(flavour: Flavour, raw: RawExchange) -> RequestRecord:
    """Turn a :class:`RawExchange` into a :class:`RequestRecord` (no I/O; never raises on bad data).

    Tokens: from the server's cumulative counts (``usage.completion_tokens`` per chunk, SGLang
    ``meta_info.completion_tokens``); a chunk carries the difference of consecutive counts and only
    chunks carrying ≥ 1 token are timed (so the chat role chunk and usage-only chunks never count).
    When counts arrive only at the end, chunk times are those of content chunks and
    ``chunk_tokens`` is None; when no count arrives at all, ``output_tokens`` is the number of
    content chunks with ``token_source="chunks"`` and the text is kept in ``output_text`` (for
    ``probe.TokenCounter``); see ``token_accounting``. Per-request speculation figures go to
    ``rec.server``, read by the server's dialect (``specsweep.servers``): llama.cpp's final
    ``timings`` (``draft_n``, ``draft_n_accepted``) become ``server["spec_draft_tokens"]``,
    ``["spec_accepted_tokens"]``, ``["spec_verify_ct"]`` and ``["spec_accept_length"]``; vLLM's
    ``metrics.speculative_decoding`` the same names; SGLang's final ``meta_info`` or OpenAI
    ``sglext.spec_tokens_details`` ``spec_accept_length``, ``spec_verify_ct`` and the rest of
    ``servers.sglang.SPEC_KEYS``; an acceptance histogram ``["spec_accepted_pos_<i>"]``.

    Steps: :func:`_response_failure` (no stream to parse), the OpenAI fast path
    (:func:`_parse_openai_fast`), else the events (:func:`_stream_events`) read by the flavour's
    parser (:func:`_read_sglang`, :func:`_read_openai`), the int32 rule
    (``token_accounting.drop_implausible``), the accounting (``token_accounting.account_tokens``),
    the text's digest and the request's error (:func:`_stream_end_error`).
    """
    check_flavour(flavour)
    if raw.spilled:
        raise ValueError("parse_exchange: the exchange still has spilled reads; put them back first")
    rec = RequestRecord(t_sent=raw.t_sent, t_end=raw.t_end, http_status=raw.http_status)
    failure = _response_failure(raw)
    if failure is not None:
        rec.error = failure
        return rec
    if flavour != "sglang" and _parse_openai_fast(flavour, raw, rec):
        return rec
    events, ev_times, trailing = _stream_events(raw)
    acc = _Events()
    if flavour == "sglang":
        text = _read_sglang(events, ev_times, acc)
    else:
        text = _read_openai(events, ev_times, acc, chat=flavour == "openai-chat")
    counts, acc.prompt_tokens, count_error = drop_implausible(acc.counts, acc.huge, acc.prompt_tokens)
    acc.error = acc.error or count_error
    tok = account_tokens(acc.times, counts, acc.contents, counts_per_chunk=flavour == "sglang")
    rec.chunk_times, rec.chunk_tokens = tok.chunk_times, tok.chunk_tokens
    rec.output_tokens, rec.token_source = tok.output_tokens, tok.token_source
    if text is not None:
        rec.output_digest, rec.output_head, rec.output_blocks = output_fingerprint(text)
        if rec.token_source == "chunks":
            rec.output_text = text  # to be counted with the server's tokenizer
    rec.prompt_tokens = acc.prompt_tokens
    rec.finish_reason = acc.finish
    rec.server = acc.server
    rec.error = _stream_end_error(raw, acc, trailing)
    return rec
