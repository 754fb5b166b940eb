"""A scripted OpenAI-compatible chat-completions server on loopback (stdlib http.server in a
thread), for testing `kdsl tune --rewriter llm` against a real HTTP endpoint.

Each request takes the next step of the script:
    "text"                          200, a chat completion whose message is the text
    {"status": 500}                 that status, a short error body
    {"status": 429, "retry_after": "1"}
    {"delay": 3.0, "text": "..."}   answer after sleeping (slower than the client's timeout)
    {"huge": 5_000_000}             200 with a body of that many bytes
    {"raw": b"..."}                 200 with exactly these bytes
Requests past the end of the script get HTTP 503. The server records each request's time,
headers and JSON body.
"""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class ChatServer:
    def __init__(self, script):
        self.script = list(script)
        self.requests: list[dict] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with server._lock:
                    server.requests.append({"time": time.monotonic(), "path": self.path,
                                            "headers": dict(self.headers), "body": json.loads(body)})
                    step = server.script.pop(0) if server.script else {"status": 503}
                try:
                    server._answer(self, step)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client hung up (a capped or timed-out answer)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()

    @staticmethod
    def _answer(h, step):
        if isinstance(step, str):
            step = {"text": step}
        if "delay" in step:
            time.sleep(step["delay"])
        status = step.get("status", 200)
        if "huge" in step:
            body = b'{"choices": [{"message": {"content": "' + b"x" * step["huge"] + b'"}}]}'
        elif "raw" in step:
            body = step["raw"]
        elif status == 200:
            body = json.dumps({"id": "x", "object": "chat.completion",
                               "choices": [{"index": 0, "message": {"role": "assistant", "content": step["text"]},
                                            "finish_reason": "stop"}]}).encode()
        else:
            body = json.dumps({"error": {"message": f"scripted {status}"}}).encode()
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(body)))
        if "retry_after" in step:
            h.send_header("Retry-After", step["retry_after"])
        h.end_headers()
        h.wfile.write(body)
