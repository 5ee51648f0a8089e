"""Server introspection: reach the endpoint, detect its API flavour, model and configuration; scrape
``/metrics`` for counter deltas and gauges.

Detection (facts in the design notes' server-API reference) asks each server's dialect
(``specsweep.servers``): SGLang answers ``/server_info`` (or the older ``/get_server_info``) and
has no ``/version``; vLLM answers ``/version`` and ``/v1/models`` with ``owned_by: "vllm"``;
llama.cpp's ``llama-server`` answers ``/props`` with ``default_generation_settings`` and
``total_slots`` (and ``/v1/models`` with ``owned_by: "llamacpp"``); TensorRT-LLM's trtllm-serve
answers ``/version`` and ``/server_info`` too, and ``/v1/models`` with ``owned_by: "tensorrt_llm"``,
which takes precedence; any other OpenAI-compatible server answers ``/v1/models``. ``api="auto"`` picks the dialect's first flavour: ``sglang`` on
SGLang and ``openai-completions`` elsewhere.

Vocabulary: where a server says how many token IDs its model has (llama.cpp: ``/v1/models``
``data[].meta.n_vocab``; any server whose ``/v1/models`` entry carries ``meta.n_vocab`` or
``vocab_size``), ``ServerProbe.vocab_size`` holds it, so random token-ID prompts can be checked
against it before anything is sent. SGLang and vLLM do not publish it (None).

Token counting without usage: :class:`TokenCounter` counts the tokens of returned text with the
server's own ``POST /tokenize`` (the body its dialect builds).
A one-request preflight through the chosen flavour then proves the route, the model name and
the credentials before any level runs, and checks that the server honours ``ignore_eos``.

Prometheus text is parsed with ``prometheus_client``'s parser. The poller hands it only the
sample lines of the metrics it reads (:func:`metric_names`): a server's exposition is mostly
histograms the poller never reads (vLLM's runs to tens of KB), and parsing it whole once a second
in a thread of the measuring process costs CPU and holds the GIL while the load generator's loop
waits to timestamp tokens.
"""
from __future__ import annotations

import functools
import re
import threading
import time
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from specsweep.errors import RunError
from specsweep.measure.client import auth_headers
from specsweep.measure.tls import verify_for
from specsweep.results.redact import cut
from specsweep.servers import FLUSH_ROUTES, Dialect, Fetch, detect, dialect_of, owner
from specsweep.servers.flavours import FLAVOURS, Flavour


class ProbeError(RunError, RuntimeError):
    """The endpoint cannot be measured as configured; the message says what to do."""


@dataclass
class ServerProbe:
    """What the probe found (meta.json keeps it as the server snapshot)."""

    base_url: str
    server: str  # "sglang" | "vllm" | "trtllm" | "llamacpp" | "openai-compatible"
    flavour: Flavour
    flavours: list[Flavour]
    model: str | None
    models: list[str]
    server_info: dict[str, Any] = field(default_factory=dict)
    version: str | None = None
    metrics: bool = False
    simulated: bool = False
    #: token IDs the model has (0 .. vocab_size-1) where the server says so, else None
    vocab_size: int | None = None
    #: where vocab_size came from, e.g. "/v1/models meta.n_vocab"
    vocab_source: str | None = None

    def snapshot(self) -> dict[str, Any]:
        """The ``server`` record of meta.json (trimmed, no credentials)."""
        info = self.server_info
        out: dict[str, Any] = {
            "name": self.server, "version": self.version, "flavours": self.flavours, "models": self.models,
            "metrics_endpoint": self.metrics, "simulated": self.simulated,
        }
        for key in ("max_running_requests", "speculative_algorithm", "speculative_num_steps",
                    "speculative_eagle_topk", "speculative_num_draft_tokens", "mem_fraction_static",
                    "max_total_num_tokens", "tp_size", "context_length", "draft_max", "draft_min",
                    "draft_p_min", "speculative_types", "parallel_slots", "has_chat_template", "launch",
                    "speculative_draft_model_path"):
            if key in info:
                out[key] = info[key]
        if self.vocab_size is not None:
            out["vocab_size"] = self.vocab_size
            out["vocab_source"] = self.vocab_source
        if info:
            out["server_info"] = info
        return out


def base_url_of(endpoint: str) -> str:
    """``scheme://host:port`` of an endpoint URL, refusing credentials in it."""
    url = httpx.URL(endpoint.strip())
    if url.scheme not in ("http", "https") or not url.host:
        raise ProbeError(f"endpoint {endpoint!r} is not an http(s) URL; give e.g. http://127.0.0.1:30000")
    if url.userinfo:
        raise ProbeError("endpoint must not carry credentials (user:password@); put an API key in the "
                         "SPECSWEEP_API_KEY environment variable instead")
    port = f":{url.port}" if url.port else ""
    return f"{url.scheme}://{url.host}{port}"


def vocab_of_models(body: Any) -> int | None:
    """Vocabulary size from a ``/v1/models`` body (``data[0].meta.n_vocab`` or ``vocab_size``)."""
    if not isinstance(body, dict):
        return None
    for entry in body.get("data") or []:
        if not isinstance(entry, dict):
            continue
        meta = entry.get("meta")
        if not isinstance(meta, dict):
            meta = {}
        for value in (meta.get("n_vocab"), meta.get("vocab_size"), entry.get("vocab_size")):
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
    return None


def _client(base_url: str, timeout_s: float) -> httpx.Client:
    """A client of the server at ``base_url`` for short requests (``timeout_s`` seconds): its API
    key, nothing from the environment (no proxy), and certificate verification as httpx's default,
    one context shared by clients of ``http://`` servers (:mod:`specsweep.measure.tls`)."""
    return httpx.Client(base_url=base_url, timeout=timeout_s, headers=auth_headers(), trust_env=False,
                        verify=verify_for(base_url))


def _get_json(client: httpx.Client, path: str) -> tuple[int | None, Any, str | None]:
    try:
        resp = client.get(path)
    except httpx.HTTPError as exc:
        return None, None, f"{type(exc).__name__}: {exc}"
    try:
        return resp.status_code, resp.json(), None
    except ValueError:
        return resp.status_code, None, None


def probe(endpoint: str, api: str = "auto", model: str = "auto", *, timeout_s: float = 10.0) -> ServerProbe:
    """Reach ``endpoint``; detect server kind, API flavours, model and configuration.

    Raises :class:`ProbeError` naming the URL and what was tried when nothing answers, when
    ``api`` names a flavour the server does not offer, or ``model`` a model it does not serve.
    """
    base = base_url_of(endpoint)
    if api != "auto" and api not in FLAVOURS:
        raise ProbeError(f"api must be 'auto' or one of {', '.join(FLAVOURS)}; got {api!r}")
    with _client(base, timeout_s) as client:
        seen = _look(client, base)
    flavours = list(seen.dialect.flavours)
    flavour = _choose_flavour(seen.dialect, flavours, api, base)
    chosen = _choose_model(model, seen.models, seen.settings, base)
    info = seen.settings
    # a server's own /version first, else what its settings say (SGLang's server_info, llama.cpp's build)
    version = seen.version or next((str(info[key]) for key in ("version", "build_info") if key in info), None)
    simulated = bool(info.get("simulated")) or "simulated" in str(version or "")
    return ServerProbe(base_url=base, server=seen.dialect.name, flavour=flavour, flavours=flavours,
                       model=str(chosen) if chosen else None, models=seen.models, server_info=info,
                       version=version, metrics=seen.metrics, simulated=simulated, vocab_size=seen.vocab_size,
                       vocab_source="/v1/models meta.n_vocab" if seen.vocab_size is not None else None)


@dataclass
class _Seen:
    """What the server answered the probe: its dialect and the settings it keeps (trimmed), the
    models it serves, its ``/version``, its vocabulary size and whether it has ``/metrics``."""

    dialect: Dialect
    settings: dict[str, Any]
    models: list[str]
    version: str | None
    vocab_size: int | None
    metrics: bool


def _look(client: httpx.Client, base: str) -> _Seen:
    """Ask the server what it is: the dialects' signs (:func:`specsweep.servers.detect`), then
    ``/v1/models``, its settings and ``/metrics``; every GET of the detection is kept for the
    error that says nothing answered."""
    tried: list[str] = []
    dialect, found = detect(_fetcher(client, tried))
    models, owned_by, vocab_size = _read_models(client, base, tried)
    dialect = owner(dialect, owned_by)
    settings = dialect.settings(found, _fetcher(client, None))
    version = str(found["/version"]["version"]) if "/version" in found else None
    if not found and not models and version is None:
        raise ProbeError(f"cannot reach an inference server at {base}: tried " + "; ".join(tried)
                         + ". Is the server running, listening on that host and port, and reachable from here?")
    try:  # the dialect's Prometheus route (TensorRT-LLM's /metrics is JSON, not Prometheus text)
        metrics = dialect.metrics_path is not None and client.get(dialect.metrics_path).status_code == 200
    except httpx.HTTPError:
        metrics = False
    return _Seen(dialect, settings, models, version, vocab_size, metrics)


def _fetcher(client: httpx.Client, tried: list[str] | None) -> Fetch:
    """``GET path`` → its JSON body when it answered 200, else None; each GET noted in ``tried``."""
    def fetch(path: str) -> Any:
        status, body, err = _get_json(client, path)
        if tried is not None:
            tried.append(f"GET {path} → {err or status}")
        return body if status == 200 else None
    return fetch


def _read_models(client: httpx.Client, base: str, tried: list[str]) -> tuple[list[str], object, int | None]:
    """``GET /v1/models``: the model ids, the first entry's ``owned_by`` and the vocabulary size;
    :class:`ProbeError` when the server wants credentials."""
    status, body, err = _get_json(client, "/v1/models")
    tried.append(f"GET /v1/models → {err or status}")
    if status in (401, 403):
        raise ProbeError(f"{base}/v1/models answered {status}: the server wants credentials; set the API key "
                         "in the SPECSWEEP_API_KEY environment variable")
    if status != 200 or not isinstance(body, dict):
        return [], None, None
    data = body.get("data") or []
    models = [str(m.get("id")) for m in data if isinstance(m, dict) and m.get("id")]
    owned_by = next((m.get("owned_by") for m in data if isinstance(m, dict)), None)
    return models, owned_by, vocab_of_models(body)


def _choose_flavour(dialect: Dialect, flavours: list[Flavour], api: str, base: str) -> Flavour:
    """``api``, or with ``"auto"`` the dialect's first flavour; :class:`ProbeError` for one it does not offer."""
    if api == "auto":
        return flavours[0]
    if api not in flavours:
        raise ProbeError(f"{base} is a {dialect.name} server and does not offer the '{api}' API; "
                         f"it offers: {', '.join(flavours)} (set api to one of them, or 'auto')")
    return api  # type: ignore[return-value]


def _choose_model(model: str, models: list[str], info: dict[str, Any], base: str) -> Any:
    """``model``, or with ``"auto"`` the first served model (else the one the settings name);
    :class:`ProbeError` for a model the server does not serve."""
    if model == "auto":
        return models[0] if models else (info.get("served_model_name") or info.get("model_path"))
    if models and model not in models:
        raise ProbeError(f"model {model!r} is not served at {base}; it serves: {', '.join(models)} "
                         "(set model to one of them, or 'auto')")
    return model


# ------------------------------------------------------------------------------------- /metrics


@dataclass(frozen=True)
class FlushOutcome:
    """What a prefix-cache flush did: ``route`` that emptied the cache, or None; ``failure``: why a
    route the server has did not (HTTP 500, a refusal, a timeout, a reset connection), or None when
    every route was simply absent (404/405: the server offers none)."""

    route: str | None
    failure: str | None = None

    @property
    def describe(self) -> str:
        """One line for meta.json / a level row: the route, ``failed: …`` or ``none: …``."""
        if self.route:
            return self.route
        if self.failure:
            return f"failed: {self.failure}"
        return "none: the server offers no route"


#: statuses that mean "no such route" (anything else unsuccessful means the route failed)
_NO_ROUTE = (404, 405)


def try_flush_prefix_cache(endpoint: str, timeout_s: float = 10.0, busy_retries: int = 2,
                           routes: Sequence[str] | None = None) -> FlushOutcome:
    """Empty the server's prefix cache, telling "no route" from "the route failed".

    Tries ``routes`` in order (the server dialect's ``flush_routes``; None: every dialect's,
    SGLang's ``POST /flush_cache`` then vLLM's ``POST /reset_prefix_cache``) with the
    ``SPECSWEEP_API_KEY`` header when set, each within ``timeout_s`` seconds; a 400 (SGLang
    refuses while requests run) is retried ``busy_retries`` times, a second apart. The first route
    that succeeds wins; 404/405 mean the route is absent; any other answer, a timeout or a reset
    connection is a failure, kept (with its route) in ``failure``.
    """
    failures: list[str] = []
    with _client(endpoint, timeout_s) as client:
        for route in FLUSH_ROUTES if routes is None else routes:
            for attempt in range(busy_retries + 1):
                try:
                    resp = client.post(route)
                except httpx.TimeoutException:
                    failures.append(f"POST {route} gave no answer within {timeout_s:g} s")
                    break
                except httpx.HTTPError as exc:
                    failures.append(f"POST {route} failed: {type(exc).__name__}: {exc}")
                    break
                if resp.is_success:
                    return FlushOutcome(route)
                if resp.status_code in _NO_ROUTE:
                    break
                if resp.status_code == 400 and attempt < busy_retries:
                    time.sleep(1.0)
                    continue
                failures.append(f"POST {route} answered HTTP {resp.status_code}")
                break
    return FlushOutcome(None, "; ".join(failures) or None)


def flush_prefix_cache(endpoint: str, timeout_s: float = 10.0) -> str | None:
    """Empty the server's prefix cache; returns the route that did it, or None if none did
    (:func:`try_flush_prefix_cache` says which of "no route" and "failed")."""
    return try_flush_prefix_cache(endpoint, timeout_s).route


def erase_llamacpp_slots(endpoint: str, timeout_s: float = 10.0) -> tuple[str | None, str]:
    """Empty every slot of a llama.cpp server (``POST /slots/{id}?action=erase`` for each id that
    ``GET /slots`` lists); returns (how, "") when every slot was erased, else (None, why not).

    llama-server allows the action only when started with ``--slot-save-path`` (it answers 501
    otherwise; ``specsweep.engines.llamacpp`` sets one) and ``/slots`` needs its slots endpoint.
    """
    with _client(endpoint, timeout_s) as client:
        status, slots, err = _get_json(client, "/slots")
        if status != 200 or not isinstance(slots, list):
            return None, f"GET /slots answered {err or status}"
        ids = [x["id"] for x in slots if isinstance(x, dict) and isinstance(x.get("id"), int)]
        if not ids:
            return None, "GET /slots listed no slot ids"
        for i in ids:
            try:
                resp = client.post(f"/slots/{i}", params={"action": "erase"})
            except httpx.HTTPError as exc:
                return None, f"POST /slots/{i}?action=erase failed: {type(exc).__name__}"
            if not resp.is_success:
                return None, (f"POST /slots/{i}?action=erase answered {resp.status_code}: "
                              f"{cut(resp.text, 160)}")
    return f"POST /slots/{{id}}?action=erase ({len(ids)} slots)", ""


def metric_names(server: str, what: str) -> frozenset[str]:
    """The sample names the poller reads from a ``server`` family's /metrics: ``what="gauges"``
    (its dialect's ``gauges``, polled during a level) or ``"counters"`` (its ``counters`` and
    ``per_position``, read before and after it)."""
    dialect = dialect_of(server)
    if what == "gauges":
        return frozenset(name for name, _ in dialect.gauges.values())
    if what == "counters":
        per_position = {dialect.per_position} if dialect.per_position else set()
        return frozenset(set(dialect.counters.values()) | per_position)
    raise ValueError(f"what must be 'gauges' or 'counters', not {what!r}")


@functools.lru_cache(maxsize=16)
def _sample_lines(names: frozenset[str]) -> re.Pattern[str]:
    """A line that is a sample of one of ``names``: the name, then labels (``{``) or a blank."""
    alternatives = "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))
    return re.compile(rf"^[ \t]*(?:{alternatives})(?=[{{ \t]).*$", re.M)


def parse_metrics(text: str, names: Collection[str] | None = None) -> list[tuple[str, dict[str, str], float]]:
    """Every sample of a Prometheus text exposition: (name, labels, value).

    ``names``: only the samples of these names; every other line (other metrics, ``# HELP`` and
    ``# TYPE`` comments) is dropped before the parser sees it, so the same samples come back
    (name, labels and value as parsed whole) for a fraction of the work.
    """
    if names is not None:
        wanted = frozenset(names)
        if not wanted:
            return []
        text = "\n".join(_sample_lines(wanted).findall(text)) + "\n"
    out = []
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.append((sample.name, dict(sample.labels), float(sample.value)))
    return out


def _combine(values: Iterable[float], how: str) -> float | None:
    vals = list(values)
    if not vals:
        return None
    return max(vals) if how == "max" else sum(vals)


def select(samples: list[tuple[str, dict[str, str], float]], name: str, how: str = "sum") -> float | None:
    """The value of metric ``name`` over all its label sets (ranks), summed or maxed."""
    return _combine((v for n, _, v in samples if n == name), how)


def gauges(samples: list[tuple[str, dict[str, str], float]], server: str) -> dict[str, float]:
    """The polled gauges (running, queued, KV usage, …) this server family exposes."""
    out = {}
    for key, (name, how) in dialect_of(server).gauges.items():
        value = select(samples, name, how)
        if value is not None:
            out[key] = value
    return out


def counters(samples: list[tuple[str, dict[str, str], float]], server: str) -> dict[str, float]:
    """The counters whose deltas over a level matter (tokens, requests, speculation)."""
    dialect = dialect_of(server)
    out = {}
    for key, name in dialect.counters.items():
        value = select(samples, name)
        if value is not None:
            out[key] = value
    if dialect.per_position:
        name = dialect.per_position
        for n, labels, value in samples:
            pos = labels.get("position")
            if n == name and pos is not None and pos.isdigit():
                key = f"spec_accepted_pos_{int(pos)}"
                out[key] = out.get(key, 0.0) + value
    return out


def scrape(client: httpx.Client, names: Collection[str] | None = None,
           path: str = "/metrics") -> list[tuple[str, dict[str, str], float]] | None:
    """GET ``path`` (the dialect's ``metrics_path``) and parse it (only the samples of ``names``,
    when given: :func:`parse_metrics`); None when unavailable or unparsable."""
    try:
        resp = client.get(path)
        if resp.status_code != 200:
            return None
        return parse_metrics(resp.text, names)
    except (httpx.HTTPError, ValueError):
        return None


def _deltas(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """``after - before`` of every counter read both times."""
    return {key: after[key] - before[key] for key in before if key in after}


def acceptance_from_counters(before: dict[str, float], after: dict[str, float], server: str) -> float | None:
    """Acceptance length over a level from counter deltas (tokens per verify step incl. bonus), by
    the ``server`` family's dialect (its ``acceptance_formula``); None when the counters did not
    move or the server has none.
    """
    return dialect_of(server).acceptance(_deltas(before, after))


class MetricsPoller:
    """Polls ``/metrics`` in a background thread while a level runs (gauges every ``interval_s``).

    Samples are ``(t, name, value)`` with ``t`` in perf_counter seconds.
    """

    def __init__(self, base_url: str, server: str, interval_s: float = 1.0, timeout_s: float = 5.0) -> None:
        self.server = server
        self.interval_s = interval_s
        self.samples: list[tuple[float, str, float]] = []
        self._client = _client(base_url, timeout_s)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._gauges, self._counters = metric_names(server, "gauges"), metric_names(server, "counters")
        self._path = dialect_of(server).metrics_path or "/metrics"

    def snapshot(self) -> dict[str, float]:
        """Counters right now (for deltas)."""
        samples = scrape(self._client, self._counters, self._path)
        return counters(samples, self.server) if samples else {}

    def _run(self) -> None:
        while not self._stop.is_set():
            t = time.perf_counter()
            samples = scrape(self._client, self._gauges, self._path)
            if samples:
                for key, value in gauges(samples, self.server).items():
                    self.samples.append((t, key, value))
            self._stop.wait(self.interval_s)

    def start(self) -> None:
        self.samples = []
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="specsweep-metrics", daemon=True)
        self._thread.start()

    def stop(self) -> list[tuple[float, str, float]]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        return list(self.samples)

    def close(self) -> None:
        self._stop.set()
        self._client.close()


def spec_level_figures(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """Acceptance detail over a level from counter deltas, where the server has the counters.

    ``spec_draft_acceptance_rate`` = Δaccepted tokens / Δdraft tokens (fraction of drafted tokens
    kept); ``spec_accept_rate_pos_<i>`` = Δaccepted at draft position i / Δdrafts (verify steps):
    the fraction of verify steps whose i-th draft token was accepted (vLLM and llama.cpp export
    accepted tokens per position; position 0 is the first draft token). Empty when the counters
    did not move.
    """
    out: dict[str, float] = {}

    def delta(key: str) -> float | None:
        return after[key] - before[key] if key in before and key in after else None

    drafted, accepted, drafts = delta("spec_draft_tokens"), delta("spec_accepted_tokens"), delta("spec_drafts")
    if drafted and accepted is not None:
        out["spec_draft_acceptance_rate"] = accepted / drafted
    if drafts:
        for key in sorted(k for k in after if k.startswith("spec_accepted_pos_")):
            d = delta(key)
            if d is not None:
                out["spec_accept_rate_pos_" + key.rsplit("_", 1)[1]] = d / drafts
    return out


class TokenCounter:
    """Counts tokens of returned text with the server's ``POST /tokenize`` (see the module notes).

    ``count(text)`` returns the number of tokens (special tokens not added), or None when the
    server has no usable ``/tokenize``; after the first failure it is not asked again
    (``available`` turns False and ``why`` says what happened).
    """

    def __init__(self, base_url: str, server: str, model: str | None, timeout_s: float = 30.0) -> None:
        self.server = server
        self.model = model
        self.available = True
        self.why: str | None = None
        self._client = _client(base_url, timeout_s)
        self._tokenize_body = dialect_of(server).tokenize_body

    def _body(self, text: str) -> dict[str, Any]:
        return self._tokenize_body(text, self.model)

    def count(self, text: str) -> int | None:
        """Tokens in ``text`` by the server's tokenizer, or None (see ``why``)."""
        if not self.available:
            return None
        try:
            resp = self._client.post("/tokenize", json=self._body(text))
            body = resp.json() if resp.status_code == 200 else None
        except (httpx.HTTPError, ValueError) as exc:
            self.available, self.why = False, f"POST /tokenize failed: {type(exc).__name__}: {exc}"
            return None
        tokens = body.get("tokens") if isinstance(body, dict) else None
        if not isinstance(tokens, list):
            self.available = False
            self.why = f"POST /tokenize answered {resp.status_code} without a token list"
            return None
        limit = len(text.encode("utf-8", "surrogatepass")) + 2  # at most a token a byte (+ a prefix token)
        if len(tokens) > limit:  # a claim to check: the server's count would multiply the throughput
            self.available = False
            self.why = (f"POST /tokenize claimed {len(tokens):,} tokens for a text of {limit - 2:,} bytes (a tokenizer "
                        "gives at most about one token a byte), so its counts are not used")
            return None
        return len(tokens)

    def recount(self, records: Iterable[Any]) -> int:
        """Set ``output_tokens`` of every record counted from chunks (``token_source="chunks"``)
        that kept its text to the tokenizer's count, with ``token_source="tokenize"``.

        Returns how many records were recounted; stops at the first failure (the rest keep their
        chunk counts).
        """
        done = 0
        for rec in records:
            if rec.token_source != "chunks" or rec.output_text is None:
                continue
            n = self.count(rec.output_text)
            if n is None:
                break
            rec.output_tokens = n
            rec.token_source = "tokenize"
            done += 1
        return done

    def close(self) -> None:
        self._client.close()
