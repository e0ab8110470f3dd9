"""A stand-in for a Kimi-K3 OpenAI endpoint: real HTTP, canned answers (only the model is faked).

``python -m k3rig.model_server --mode MODE`` serves ``/v1/models``, ``/v1/completions`` and
``/v1/chat/completions`` on 127.0.0.1 (port printed on stdout) in the answer patterns of reference
§1, §21 and §22, and exits by itself after ``--lifetime`` seconds. ``/metrics`` is ATOM's page of
``--ranks`` DP ranks (atom_engine.py, steered by ``--control``) and ``/health`` answers ok, whatever the
engine does, as ATOM's API server does (§31.2). ``--runners``: a ModelRunner process per rank for py-spy
(model_runner.py), children of the server, stalled by the same control file.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from .atom_engine import AtomEngine

SERVED = "moonshotai/Kimi-K3"
HEALTHY = {
    "The capital of France is": " Paris. The Eiffel Tower is located in Paris.",
    "The chemical symbol for gold is": " Au. It comes from the Latin word aurum.",
    "Monday, Tuesday, Wednesday,": " Thursday, Friday, Saturday, Sunday.",
}
# Answers that never end inside the HTTP framing itself, each read by the client in many small recv()s:
# a byte every half second of the status line, of a header, of a chunk-size line, of a chunk extension;
# or, quickly and forever, `100 Continue` interim answers, or trailer lines after the last chunk.
FRAMING_TRICKLES = ("trickle-status", "trickle-header", "trickle-chunk-size", "trickle-chunk-ext",
                    "endless-continue", "endless-trailers")
MODES = ("healthy", "bang", "repeat", "flat", "nan", "empty", "chat-cut", "name-mismatch", "http-404",
         "http-500", "garbage", "hang", "trickle", "api-key", *FRAMING_TRICKLES)


def _tokens(text: str) -> list:
    out, word = [], ""
    for ch in text:
        if ch == " " and word:
            out.append(word)
            word = ""
        word += ch
    return out + ([word] if word else [])


def completion(mode: str, prompt: str) -> dict:
    text = HEALTHY.get(prompt, " I do not know.")
    if mode == "bang":
        text = "!" * 16
    elif mode == "repeat":
        text = " the" * 16
    elif mode == "empty":
        text = ""
    tokens = _tokens(text) if mode != "bang" else ["!"] * 16
    sure = [{tok: -0.02, " a": -4.5, " the": -5.1, ",": -6.3, ".": -7.0} for tok in tokens]
    if mode == "flat":
        sure = [{tok: -3.21, " a": -3.22, " the": -3.23, ",": -3.24, ".": -3.25} for tok in tokens]
    values = [-0.02] * len(tokens)
    if mode == "nan":
        values = [float("nan")] * len(tokens)
    return {"id": "cmpl-1", "object": "text_completion", "model": SERVED,
            "choices": [{"index": 0, "text": text, "finish_reason": "length",
                         "logprobs": {"tokens": tokens, "token_logprobs": values, "top_logprobs": sure}}]}


def chat(mode: str, max_tokens: int) -> dict:
    if mode == "chat-cut" or max_tokens < 64:
        message, finish = {"role": "assistant", "content": "", "reasoning_content": "Let me add 17 and"}, "length"
    else:
        message, finish = {"role": "assistant", "content": "42", "reasoning_content": "17 + 25 = 42."}, "stop"
    return {"id": "chat-1", "object": "chat.completion", "model": SERVED,
            "choices": [{"index": 0, "message": message, "finish_reason": finish}]}


def handler_for(mode: str, engine: AtomEngine | None = None):
    engine = engine or AtomEngine(1, None)
    served = "/models/Kimi-K3" if mode == "name-mismatch" else SERVED

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def _send(self, status: int, body: bytes, ctype="application/json"):
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _frame_forever(self, head: bytes, drip: bytes, pause_s: float):
            """Write ``head``, then ``drip`` every ``pause_s`` until the client goes away."""
            try:
                self.wfile.write(head)
                self.wfile.flush()
                while True:
                    time.sleep(pause_s)
                    self.wfile.write(drip)
                    self.wfile.flush()
            except OSError:
                return None

        def _answer(self, doc: dict):
            if mode in FRAMING_TRICKLES:
                chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                head, drip, pause = {
                    "trickle-status": (b"H", b"T", 0.5),
                    "trickle-header": (b"HTTP/1.1 200 OK\r\nX-Slow: ", b"a", 0.5),
                    "trickle-chunk-size": (chunked + b"0", b"0", 0.5),
                    "trickle-chunk-ext": (chunked + b"2;ext=", b"x", 0.5),
                    "endless-continue": (b"", b"HTTP/1.1 100 Continue\r\n\r\n", 0.05),
                    "endless-trailers": (chunked + b"2\r\n{}\r\n0\r\n", b"X-Trailer: 1\r\n", 0.05),
                }[mode]
                return self._frame_forever(head, drip, pause)
            if mode == "garbage":
                return self._send(200, b"<html>upstream error</html>", "text/html")
            if mode == "hang":
                time.sleep(3600)
            body = json.dumps(doc).encode()
            if mode == "trickle":  # headers, then one byte a second
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                for byte in body:
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()
                    time.sleep(1)
                return None
            return self._send(200, body)

        def _refused(self) -> bool:
            """api-key: the server was launched with --api-key and refuses a request without it (401)."""
            if mode == "api-key" and not self.headers.get("Authorization"):
                self._send(401, b'{"error":"Unauthorized"}')
                return True
            return False

        def do_GET(self):
            if self._refused():
                return None
            if self.path == "/metrics":
                return self._send(200, engine.page().encode(), "text/plain; version=0.0.4")
            if self.path == "/health":
                return self._send(200, b'{"status":"ok"}')
            if self.path.rstrip("/") == "/v1/models":
                return self._answer({"object": "list", "data": [{"id": served, "object": "model"}]})
            return self._send(404, b'{"detail":"Not Found"}')

        def do_POST(self):
            length = int(self.headers.get("Content-Length") or 0)
            req = json.loads(self.rfile.read(length) or b"{}")
            if self._refused():
                return None
            if mode == "http-404" or req.get("model") != served:
                msg = f"Requested model '{req.get('model')}' does not match server model '{served}'"
                return self._send(400 if mode != "http-404" else 404, json.dumps({"error": msg}).encode())
            if mode == "http-500":
                return self._send(500, b'{"error":"EngineCore died"}')
            if self.path == "/v1/completions":
                return self._answer(completion(mode, req.get("prompt", "")))
            if self.path == "/v1/chat/completions":
                return self._answer(chat(mode, int(req.get("max_tokens") or 16)))
            return self._send(404, b'{"detail":"Not Found"}')

    return Handler


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", choices=MODES, default="healthy")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--lifetime", type=float, default=300.0, help="exit after this many seconds")
    ap.add_argument("--ranks", type=int, default=1, help="DP ranks of the /metrics page")
    ap.add_argument("--control", default=None, help="JSON file of injected faults (atom_engine.py)")
    ap.add_argument("--runners", action="store_true", help="a ModelRunner process per rank (model_runner.py)")
    args = ap.parse_args(argv)
    if args.runners:
        runner = str(Path(__file__).with_name("model_runner.py"))
        for rank in range(args.ranks):
            subprocess.Popen([sys.executable, runner, str(rank), str(args.control), str(os.getpid())],
                             stdin=subprocess.DEVNULL)
    server = ThreadingHTTPServer(("127.0.0.1", args.port), handler_for(args.mode, AtomEngine(args.ranks, args.control)))
    server.daemon_threads = True
    print(server.server_address[1], flush=True)
    threading.Timer(args.lifetime, server.shutdown).start()
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
