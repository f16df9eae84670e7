"""A stand-in OpenAI-compatible server *process* (stdlib only), for clients that need HTTP.

It answers ``POST /v1/chat/completions`` and ``POST /v1/completions`` (non-streaming)
and ``GET /v1/models`` on 127.0.0.1, over HTTP/1.1 with keep-alive, as llama-server or
vLLM would, so a real client (openai's ``OpenAI`` / ``AsyncOpenAI`` under LangChain's
``ChatOpenAI`` or LlamaIndex's ``OpenAILike``) keeps pooled connections between calls.

The reply to a prompt is a public rule of the prompt: the text between ``«`` and ``»``
in it (a record the test put there), else ``--default``. A token is two characters:
a reply longer than ``2 * max_tokens`` is cut there and ends with
``finish_reason="length"``, as a real server stops at its token limit.

Run ``python tests/openai_stub.py`` (``--port 0``: a free port); it prints
``port N`` on its first line once it listens. :func:`stub_server` does that in a
subprocess and yields the base URL (``http://127.0.0.1:N/v1``).

>>> reply_to("Context: «Paris.» Question: capital?", 64, "I don't know.")
('Paris.', 'stop')
>>> reply_to("no record", 2, "I don't know.")
('I do', 'length')
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

CHARS_PER_TOKEN = 2


def reply_to(prompt: str, max_tokens: int, default: str) -> tuple[str, str]:
    """The stub's completion of ``prompt`` and its finish reason (module docstring)."""
    start, end = prompt.find("«"), prompt.find("»")
    text = prompt[start + 1 : end] if 0 <= start < end else default
    limit = max(1, max_tokens) * CHARS_PER_TOKEN
    return (text[:limit], "length") if len(text) > limit else (text, "stop")


def _prompt_of(body: dict[str, Any]) -> str:
    if "messages" in body:
        parts = []
        for message in body["messages"]:
            content = message.get("content") or ""
            if isinstance(content, list):
                content = " ".join(str(c.get("text", "")) for c in content)
            parts.append(str(content))
        return "\n".join(parts)
    prompt = body.get("prompt", "")
    return prompt[0] if isinstance(prompt, list) else str(prompt)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    default = "I don't know."

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        return

    def _send(self, payload: dict[str, Any], status: int = 200) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path.rstrip("/").endswith("/models"):
            self._send({"object": "list", "data": [{"id": "stub", "object": "model"}]})
        else:
            self._send({"error": {"message": "not found"}}, 404)

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        chat = self.path.endswith("/chat/completions")
        if not chat and not self.path.endswith("/completions"):
            self._send({"error": {"message": "not found"}}, 404)
            return
        max_tokens = int(body.get("max_completion_tokens") or body.get("max_tokens") or 256)
        text, finish = reply_to(_prompt_of(body), max_tokens, self.default)
        tokens = -(-len(text) // CHARS_PER_TOKEN)
        usage = {"prompt_tokens": 1, "completion_tokens": tokens, "total_tokens": tokens + 1}
        if chat:
            message = {"role": "assistant", "content": text}
            choice: dict[str, Any] = {"index": 0, "message": message, "finish_reason": finish}
            kind = "chat.completion"
        else:
            choice = {"index": 0, "text": text, "finish_reason": finish, "logprobs": None}
            kind = "text_completion"
        self._send(
            {
                "id": "stub-1",
                "object": kind,
                "created": 0,
                "model": body.get("model", "stub"),
                "choices": [choice],
                "usage": usage,
            }
        )


@contextlib.contextmanager
def stub_server(default: str = "I don't know.") -> Iterator[str]:
    """Run this file as a server process; yield its base URL, stop it on exit."""
    proc = subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), "--port", "0", "--default", default],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().split()
        if line[:1] != ["port"]:
            raise RuntimeError("the stub server did not start")
        yield f"http://127.0.0.1:{line[1]}/v1"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--default", default=_Handler.default)
    args = parser.parse_args()
    _Handler.default = args.default
    server = ThreadingHTTPServer(("127.0.0.1", args.port), _Handler)
    server.daemon_threads = True
    print(f"port {server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
