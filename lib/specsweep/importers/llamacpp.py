"""Read llama.cpp ``llama-batched-bench --output-format jsonl`` results (one JSON object per
(prompt length, generation length, parallel sequences) cell) into
:class:`~specsweep.importers.common.ToolRun`: ``pl`` (parallel sequences) is the concurrency.

Written against ggml-org/llama.cpp ``tools/batched-bench/batched-bench.cpp`` at commit
0a1f01792b770ef0f41729956665880e109b2660 (fixtures follow that documented shape; llama.cpp was not
run here). What a line means there:

- ``pp`` prompt tokens and ``tg`` generated tokens per sequence, ``pl`` sequences decoded **in
  lockstep in one process** (no server, no HTTP, no scheduler: every sequence starts and ends
  together), ``is_pp_shared``: one prompt shared by all sequences.
- ``t_pp``: prefill of all sequences (seconds); ``t_tg``: the ``tg`` decode steps (seconds).
- ``speed_tg`` = pl × tg / t_tg: aggregate decode tok/s, **prefill excluded** (specsweep's
  aggregate counts the whole window, prefill and queueing included).
- Per sequence: decode speed tg / t_tg (tok/s) and time to first token ≈ t_pp (all prompts are
  prefilled before the first decode step).

So its figures compare only with other llama-batched-bench arms (e.g. two builds, quantisations or
flags), never with a served measurement: the definition ids say so. A line with the same (pp, tg)
as the first line's is a level; other lengths are left out, with a note.
"""
from __future__ import annotations

import math
from pathlib import Path

from specsweep.importers.common import BadInput, Level, ToolRun, concurrency_of, number, read_json_objects

TOOL = "llama.cpp llama-batched-bench"
READER = "specsweep.importers.llamacpp (llama.cpp batched-bench.cpp at commit 0a1f01792b770ef0f41729956665880e109b2660)"
IDS: dict[str, str] = {
    "output_tok_s": "llama-batched-bench S_TG: pl × tg / decode time (prefill excluded, sequences in lockstep)",
    "user_tok_s_mean": "llama-batched-bench: tg / decode time per sequence (sequences in lockstep)",
    "ttft_mean_s": "llama-batched-bench T_PP: prefill time of all pl prompts",
    "e2e_mean_s": "llama-batched-bench T: prefill + decode time of the whole batch",
}
WARNING = ("Imported from llama.cpp llama-batched-bench: pl sequences decoded in lockstep in one process (no server, "
           "no scheduler), aggregate tok/s over the decode phase only (prefill excluded); its figures are compared "
           "only with other llama-batched-bench arms.")


def read(path: Path) -> ToolRun:
    """One JSON-lines file of llama-batched-bench cells."""
    levels, notes = [], []
    shape: tuple[float, float] | None = None
    for line, obj in read_json_objects(path):
        where = f"{path}, line {line}"
        if not {"pp", "tg", "pl", "t_tg"} <= set(obj):
            raise BadInput(f"{where}: no 'pp'/'tg'/'pl'/'t_tg': not a llama-batched-bench --output-format jsonl line")
        pp, tg = number(obj, "pp", where, required=True), number(obj, "tg", where, required=True)
        conc = concurrency_of(obj.get("pl"), where, "pl")
        if shape is None:
            shape = (pp, tg)
        elif (pp, tg) != shape:
            notes.append(f"{where}: pp={pp:.0f}, tg={tg:.0f} differs from the first line's "
                         f"(pp={shape[0]:.0f}, tg={shape[1]:.0f}); left out")
            continue
        t_pp, t_tg = number(obj, "t_pp", where), number(obj, "t_tg", where, required=True)
        if tg < 1 or t_tg <= 0:
            raise BadInput(f"{where}: tg {tg} and t_tg {t_tg} must be positive")
        f = {
            "output_tok_s": conc * tg / t_tg,
            "user_tok_s_mean": tg / t_tg,
            "ttft_mean_s": t_pp,
            "e2e_mean_s": t_pp + t_tg if t_pp == t_pp else math.nan,
            "output_tokens": conc * tg,
            "n_ok": float(conc),
        }
        speed = number(obj, "speed_tg", where)
        if speed == speed and abs(speed - f["output_tok_s"]) > 0.01 * f["output_tok_s"] + 0.01:
            notes.append(f"{where}: speed_tg {speed:.2f} differs from pl × tg / t_tg = {f['output_tok_s']:.2f}; "
                         "the latter was used")
        levels.append(Level(conc, {k: v for k, v in f.items() if v == v}, None, where))
    if shape is None:
        raise BadInput(f"{path}: no result lines")
    return ToolRun(tool=TOOL, version=None, levels=levels, source=path,
                   workload={"kind": "llama-batched-bench", "input_tokens": int(shape[0]), "output_tokens": int(shape[1])},
                   definitions=dict(IDS), definition_ids=dict(IDS), warnings=[WARNING], notes=notes, reader=READER,
                   server={"name": "llama.cpp (in-process)"})
