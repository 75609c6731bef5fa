"""The launcher's --port: the workers meet on a port of the range given; a malformed range or
one with no free port is refused before any worker starts."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from torch_helpers import SCRIPTS

from stint.torch import launch

SRC = str(Path(__file__).resolve().parents[2] / "src")


def _free() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow
def test_the_workers_meet_on_a_port_of_the_range(tmp_path: Path) -> None:
    p = _free()
    out = subprocess.run([sys.executable, "-m", "stint.torch.launch", "--workers", "2", "--port",
                          f"{p}-{p + 3}", str(SCRIPTS / "port_job.py")], check=False, capture_output=True,
                         text=True, timeout=180, env={**os.environ, "PYTHONPATH": SRC})
    assert out.returncode == 0, out.stderr
    port, mean = out.stdout.split()[1], out.stdout.split()[3]
    assert p <= int(port) <= p + 3 and float(mean) == 0.5, out.stdout


@pytest.mark.parametrize(("given", "says"), [
    ("9-1", "--port: port range 9-1: the first port is above the last"),
    ("29500..29600", "--port: port range '29500..29600': expected FIRST-LAST"),
])
def test_a_malformed_port_range_is_refused(given: str, says: str,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        launch.main(["--port", given, "script.py"])
    assert e.value.code == 2 and says in capsys.readouterr().err


def test_a_range_with_no_free_port_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        taken = s.getsockname()[1]
        with pytest.raises(SystemExit) as e:
            launch.main(["--port", str(taken), "script.py"])
    assert e.value.code == 2 and f"--port: no free port in {taken} on 127.0.0.1" in capsys.readouterr().err
