"""``GET /v1/jobs/{id}/logs`` and ``/progress``: a job's log, read in chunks that end on whole
UTF-8 characters, and the SDK's last report (its ``status.json``)."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Query

from stint.runtime.api.context import Ctx, JobId, Who, job_dir
from stint.runtime.reads import progress_out
from stint.runtime.schemas import LogsOut, ProgressOut
from stint.runtime.states import TERMINAL

LOG_CHUNK = 256 * 1024
MAX_LOG_OFFSET = 2**53  # an offset beyond any log; also exact in every JSON reader
router = APIRouter()


@router.get("/v1/jobs/{job_id}/logs")
def logs(job_id: JobId, who: Who, api: Ctx,
         offset: Annotated[int, Query(ge=0, le=MAX_LOG_OFFSET)] = 0,
         tail: Annotated[int | None, Query(ge=0, le=LOG_CHUNK)] = None) -> LogsOut:
    """The log from ``offset``; ``tail``: its last ``tail`` bytes instead."""
    job = api.own_job(job_id, who)
    path = job_dir(api.settings, job) / "log.txt"
    if tail is not None:
        offset = max(0, _log_size(path) - tail)
    text, nxt = _read_log(path, offset)
    return LogsOut(text=text, next_offset=nxt, finished=job.state in TERMINAL)


@router.get("/v1/jobs/{job_id}/progress")
def progress(job_id: JobId, who: Who, api: Ctx) -> ProgressOut:
    job = api.own_job(job_id, who)
    return progress_out(job_dir(api.settings, job) / "status.json", job.total_steps)


def _read_log(path: Path, offset: int) -> tuple[str, int]:
    """Up to ``LOG_CHUNK`` bytes from ``offset``, ending on a whole UTF-8 character (from the
    start if the log is now shorter than ``offset``: it was cut to its cap). The file is in a
    directory its job owns: links are not followed, only a plain file is read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return "", offset
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode) and offset > st.st_size:
            offset = 0  # the log passed its cap and lost its oldest part: read it anew
        if not stat.S_ISREG(st.st_mode) or offset >= st.st_size:
            return "", offset  # (a seek beyond the file system's largest file is EINVAL)
        f.seek(offset)
        data = f.read(LOG_CHUNK)
    if len(data) == LOG_CHUNK:
        data = data[:len(data) - _partial_tail(data)]
    return data.decode("utf-8", errors="replace"), offset + len(data)


def _log_size(path: Path) -> int:
    try:
        st = os.lstat(path)
    except OSError:
        return 0
    return st.st_size if stat.S_ISREG(st.st_mode) else 0


def _partial_tail(data: bytes) -> int:
    """How many bytes at the end of ``data`` start a UTF-8 character that is cut off."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 != 0x80:  # a lead byte (or ASCII): is its character complete?
            need = 2 if byte >> 5 == 0b110 else 3 if byte >> 4 == 0b1110 else \
                4 if byte >> 3 == 0b11110 else 1
            return back if need > back else 0
    return 0
