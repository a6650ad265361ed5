"""One stage process as the supervisor sees it, and where the stages' logs go."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field

from voxrelay.ipc.channel import ChannelSpec
from voxrelay.ipc.ring import Consumer, Producer
from voxrelay.pipeline.status import StageStatus

log = logging.getLogger("voxrelay.supervisor")


@dataclass(slots=True)
class StageProcess:
    name: str
    specs: dict[str, ChannelSpec]
    status: StageStatus
    control: Producer
    events: Consumer
    stage_config: dict[str, object]
    process: subprocess.Popen[bytes] | None = None
    pidfd: int = -1
    restarts: int = 0
    stderr_path: str = ""
    started_ns: int = field(default=0)
    # Watchdog checks in a row that found the heartbeat stale (supervisor.py).
    stale_checks: int = 0
    # Rings from this stage that it left corrupt: skipped to their head before it restarts.
    corrupt: list[Consumer] = field(default_factory=list)

    def fds(self) -> tuple[int, ...]:
        owned = [self.status.fd]
        for spec in self.specs.values():
            owned.extend(spec.inheritable_fds())
        return tuple(owned)

    def popen(
        self, log_path: str, extra_args: tuple[str, ...] = (), extra_fds: tuple[int, ...] = ()
    ) -> subprocess.Popen[bytes]:
        """`python -m voxrelay.pipeline.worker` for this stage, its stderr appended to `log_path`
        (a standby writes to its stage's log: it becomes that stage)."""
        specs = {k: v.encode() for k, v in self.specs.items()}
        cmd = [
            sys.executable,
            "-m",
            "voxrelay.pipeline.worker",
            self.name,
            *(f"--{k}={v}" for k, v in specs.items()),
            f"--status={self.status.fd}",
            f"--parent={os.getpid()}",
            f"--config={json.dumps(self.stage_config)}",
            *extra_args,
        ]
        with open(log_path, "ab") as err:
            self.stderr_path = err.name
            return subprocess.Popen(
                cmd,
                pass_fds=self.fds() + extra_fds,
                stdin=subprocess.DEVNULL,
                stdout=err,
                stderr=err,
            )

    def log_tail(self, lines: int = 5) -> str:
        try:
            with open(self.stderr_path, "rb") as f:
                text = f.read()[-4000:].decode(errors="replace").strip().splitlines()
        except OSError:
            return "(no log)"
        tail = " | ".join(text[-lines:]) or "(empty log)"
        return f"{tail} (log: {self.stderr_path})"


class StageLogs:
    """The stages' stderr files: a private directory (`voxrelay-<pid>-XXXX` under $TMPDIR)
    removed when the run ends cleanly, kept and named when a stage crashed; with
    VOXRELAY_LOG_DIR, that directory, always kept."""

    def __init__(self) -> None:
        self.directory = os.environ.get("VOXRELAY_LOG_DIR", "")
        self._keep = bool(self.directory)

    def path(self, stage: str) -> str:
        if not self.directory:
            self.directory = tempfile.mkdtemp(prefix=f"voxrelay-{os.getpid()}-")
        os.makedirs(self.directory, exist_ok=True)
        return os.path.join(self.directory, f"{stage}.log")

    def finish(self, crashed: bool) -> None:
        if not self.directory or self._keep:
            return
        if crashed:
            log.warning("a stage crashed during this run: stage logs kept in %s", self.directory)
            return
        shutil.rmtree(self.directory, ignore_errors=True)
