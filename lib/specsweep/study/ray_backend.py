"""The study's ``ray`` backend: every (arm, repeat) as a Ray task running :func:`specsweep.study.arm.run_arm`.

Optional (``pip install -e '.[ray]'``); the ``local`` backend never imports Ray. Each task asks
for the arm's ``resources`` (``CPU``/``GPU`` map to Ray's ``num_cpus``/``num_gpus``, default one
CPU; other keys are custom resources), runs the same per-arm function as the local backend on
whichever node Ray places it — the arm's server is started there and swept over localhost
(``{port}``, ``ready_url`` on 127.0.0.1) — in a scratch folder on that node, and returns its
outcome with the (arm, repeat) folder as a tar archive, which the driver unpacks into its own
``out_dir``. Tasks run in parallel as resources allow, so the interleaved order of the local
backend does not apply (positions are submission order).

A task whose worker or node dies is re-run up to ``ray.max_retries`` times (the study file's
top-level ``ray`` section); a server that fails to start is an outcome, not retried. With
``--resume``, (arm, repeat) pairs already complete in ``out_dir`` are not submitted, and an
incomplete run travels to the task so it continues from its finished levels.
"""
from __future__ import annotations

import io
import os
import shutil
import tarfile
import tempfile
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from specsweep.results.study_record import ArmOutcome
from specsweep.study.arm import arm_dir, complete_run, run_arm
from specsweep.study.file import Arm, Study, StudyError


def _pack(folder: Path) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        if folder.is_dir():
            tar.add(str(folder), arcname=".")
    return buffer.getvalue()


def _unpack(data: bytes, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        if hasattr(tarfile, "data_filter"):  # Python >= 3.11.4: refuse links and paths outside the folder
            tar.extractall(str(folder), filter="data")
        else:
            tar.extractall(str(folder))  # noqa: S202 - our own archive, made by _pack on the worker


def _task(study: Study, arm: Arm, repeat: int, position: int, resume: bool, prior: bytes) -> tuple[dict[str, Any], bytes, str]:
    """On the worker: run one (arm, repeat) in a scratch folder; return its outcome and folder."""
    scratch = Path(tempfile.mkdtemp(prefix=f"specsweep-{arm.name}-r{repeat}-"))
    try:
        folder = arm_dir(scratch, arm.name, repeat)
        if prior:
            _unpack(prior, folder)
        outcome = run_arm(study, arm, repeat, scratch, position=position, resume=resume,
                          log=lambda line: print(line, flush=True))
        return asdict(outcome), _pack(folder), str(scratch.resolve())
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def run_on_ray(study: Study, out_dir: Path, *, resume: bool, log: Callable[[str], None],
               on_outcome: Callable[[ArmOutcome], None] = lambda outcome: None) -> list[ArmOutcome]:
    """Run the study's plan as Ray tasks; ``on_outcome`` sees each outcome as it arrives (its
    folder already in ``out_dir``); returns the outcomes in plan order (see the module doc)."""
    try:
        import ray
    except ImportError as exc:
        raise StudyError("backend 'ray' needs Ray: pip install -e '.[ray]' (or use backend 'local')") from exc
    if not ray.is_initialized():
        ray.init(address=study.spec.ray.address or os.environ.get("RAY_ADDRESS") or None)
    remote = ray.remote(_task)
    out_dir = Path(out_dir).resolve()
    outcomes: list[ArmOutcome] = []
    pending: dict[Any, tuple[int, int, Arm]] = {}
    for position, (repeat, arm) in enumerate(study.plan(), 1):
        folder = arm_dir(out_dir, arm.name, repeat)
        if resume and (done := complete_run(out_dir, arm.name, repeat)) is not None:
            log(f"arm {arm.name} repeat {repeat}: already complete ({done}), not measured again")
            outcomes.append(ArmOutcome(arm=arm.name, repeat=repeat, position=position, status="skipped",
                                       run_dir=str(done)))
            on_outcome(outcomes[-1])
            continue
        resources = dict(arm.resources)
        options = dict(num_cpus=resources.pop("CPU", 1), num_gpus=resources.pop("GPU", 0), resources=resources,
                       max_retries=study.spec.ray.max_retries, name=f"specsweep:{arm.name}:r{repeat}")
        prior = _pack(folder) if resume else b""
        ref = remote.options(**options).remote(study, arm, repeat, position, resume, prior)
        pending[ref] = (position, repeat, arm)
        log(f"[{position}] arm {arm.name}, repeat {repeat}: submitted to Ray ({arm.resources or 'CPU: 1'})")
    while pending:
        ready, _ = ray.wait(list(pending), num_returns=1)
        position, repeat, arm = pending.pop(ready[0])
        try:
            data, archive, scratch = ray.get(ready[0])
        except ray.exceptions.RayError as exc:
            outcome = ArmOutcome(arm=arm.name, repeat=repeat, position=position, status="failed",
                                 error=f"Ray task failed (after {study.spec.ray.max_retries} retries): {exc}")
        else:
            folder = arm_dir(out_dir, arm.name, repeat)
            if folder.exists():
                shutil.rmtree(folder)
            _unpack(archive, folder)
            for key in ("run_dir", "server_log", "notebook"):
                if data.get(key):
                    data[key] = data[key].replace(scratch, str(out_dir), 1)
            outcome = ArmOutcome(**data)
        log(f"arm {arm.name} repeat {repeat}: {outcome.status}" + (f" — {outcome.error}" if outcome.error else ""))
        outcomes.append(outcome)
        on_outcome(outcome)
    return sorted(outcomes, key=lambda o: o.position)
