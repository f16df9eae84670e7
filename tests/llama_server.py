"""A real llama.cpp server on loopback, serving the shipped reader (for tests and benchmarks).

:func:`find_binary` returns the ``llama-server`` binary (``DPRAG_LLAMA_SERVER``, or
the one scripts/build_llama_server.sh cached) or None; :func:`convert_reader`
writes the reader as GGUF f32 with the converter vendored beside it
(scripts/convert_to_gguf.py); :func:`serve` starts the server on a free
127.0.0.1 port and stops it on exit. The server's own output (it may echo
prompts at high verbosity) goes to a log file in the caller's directory, never
to the test output.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
BUILD_SCRIPT = ROOT / "scripts" / "build_llama_server.sh"
CONVERT_SCRIPT = ROOT / "scripts" / "convert_to_gguf.py"


def find_binary() -> Path | None:
    """The llama-server binary: ``$DPRAG_LLAMA_SERVER`` if set, else the cached build."""
    explicit = os.environ.get("DPRAG_LLAMA_SERVER")
    if explicit:
        path = Path(explicit)
        return path if path.is_file() and os.access(path, os.X_OK) else None
    found = subprocess.run(
        ["bash", str(BUILD_SCRIPT), "--cached"], capture_output=True, text=True, check=False
    )
    return Path(found.stdout.strip()) if found.returncode == 0 else None


def source_dir(binary: Path) -> Path:
    """The llama.cpp source the cached binary was built from (holds the converter)."""
    return binary.resolve().parent.parent / "src"


def convert_reader(binary: Path, model_dir: Path, out_dir: Path) -> Path:
    """``model_dir`` as GGUF f32 in ``out_dir`` (the converter's log in ``convert.log``)."""
    out = out_dir / "model-f32.gguf"
    with open(out_dir / "convert.log", "w") as log:
        subprocess.run(
            [sys.executable, str(CONVERT_SCRIPT), str(source_dir(binary)), str(model_dir),
             str(out), "--outtype", "f32"],
            stdout=log, stderr=subprocess.STDOUT, check=True,
        )  # fmt: skip
    return out


SERVE_FLAGS = ("--no-cache-idle-slots",)
"""What DP voting wants beyond the slots: don't copy every idle slot into the RAM prompt
cache at each new task (llama.cpp's default: 2-4 ms per row per request,
benchmarks/server_requests.py, docs/servers.md)."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def serve(
    binary: Path,
    gguf: Path,
    log_dir: Path,
    *,
    slots: int = 16,
    ctx_per_slot: int = 1024,
    threads: int = 1,
    flags: Sequence[str] = SERVE_FLAGS,
) -> Iterator[str]:
    """Run llama-server on 127.0.0.1; yield its ``/v1`` URL.

    ``slots`` parallel sequences, each with its own ``ctx_per_slot`` KV cells
    (``-no-kvu``: a unified cache makes every row attend over all slots' cells);
    ``threads`` CPU threads (1 on a shared machine: ggml's threads spin-wait on
    each other, and a preempted one stalls every step); ``flags``: more
    arguments (:data:`SERVE_FLAGS`, docs/servers.md).
    """
    port = _free_port()
    command = [
        str(binary), "-m", str(gguf), "--host", "127.0.0.1", "--port", str(port),
        "-np", str(slots), "-no-kvu", "-c", str(slots * ctx_per_slot), "-t", str(threads),
        "--no-webui", *flags,
    ]  # fmt: skip
    with open(log_dir / "llama-server.log", "w") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        try:
            _wait_healthy(proc, f"http://127.0.0.1:{port}/health")
            yield f"http://127.0.0.1:{port}/v1"
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _wait_healthy(proc: subprocess.Popen[bytes], url: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"llama-server exited with {proc.returncode} (see its log)")
        try:
            if httpx.get(url, timeout=2.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError("llama-server did not become healthy in time (see its log)")
