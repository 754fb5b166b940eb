"""A minimal client for OpenAI-compatible chat completions (vLLM, llama.cpp's server,
Ollama, hosted APIs), through httpx (`pip install 'kdsl[tune]'`).

- one request has a deadline (`timeout` seconds for the whole answer, however slowly the
  server trickles it), and the answer is read in chunks up to MAX_RESPONSE_BYTES, past which
  it is dropped unparsed;
- HTTP 429 and 5xx, timeouts and dropped connections are retried with exponential backoff
  (honouring Retry-After, in seconds or as an HTTP date, up to MAX_WAIT); other statuses are
  final;
- the API key comes from the environment (KDSL_LLM_API_KEY, else OPENAI_API_KEY) and goes
  only into the Authorization header: it is never logged or shown.

The answer's text is returned as data: kdsl.tune.protocol reads replacement lines from it.
"""
from __future__ import annotations

import email.utils
import json
import os
import time

from ..backends import need

MAX_RESPONSE_BYTES = 1 << 20
MAX_WAIT = 60.0
KEY_VARIABLES = ("KDSL_LLM_API_KEY", "OPENAI_API_KEY")


class LlmError(RuntimeError):
    """The endpoint gave no usable answer; the message says why (the proposal's rejection)."""


class Client:
    def __init__(self, url: str, model: str, timeout: float = 60.0, retries: int = 3, backoff: float = 1.0,
                 temperature: float = 0.7, max_tokens: int = 4096):
        httpx = need("httpx", "tune", "kdsl tune --rewriter llm")
        self.url = url.rstrip("/")
        if not self.url.endswith("/chat/completions"):
            self.url += "/chat/completions"
        self.model, self.timeout, self.retries, self.backoff = model, timeout, retries, backoff
        self.options = {"temperature": temperature, "max_tokens": max_tokens}
        key = next((os.environ[v] for v in KEY_VARIABLES if os.environ.get(v)), None)
        headers = {"Content-Type": "application/json"}
        if key:
            headers["Authorization"] = f"Bearer {key}"
        self._httpx = httpx
        self._http = httpx.Client(headers=headers, timeout=httpx.Timeout(timeout), follow_redirects=False)
        self.attempts = 0  # requests sent in the last complete() call

    def close(self):
        self._http.close()

    def complete(self, messages: list[dict]) -> str:
        """The first choice's message text, after retries; LlmError otherwise."""
        body = {"model": self.model, "messages": messages, **self.options}
        last = "no attempt"
        self.attempts = 0
        for attempt in range(self.retries + 1):
            self.attempts += 1
            wait = self.backoff * 2 ** attempt
            try:
                status, headers, data = self._post(body)
            except (self._httpx.TimeoutException, TimeoutError):
                last = f"no answer within {self.timeout:g} s"
            except self._httpx.TransportError as e:
                last = f"connection failed: {type(e).__name__}"
            except self._httpx.HTTPError as e:  # an answer httpx cannot decode, ...: not transient
                raise LlmError(f"request failed: {type(e).__name__}: {str(e)[:200]}") from None
            else:
                if status == 200:
                    return _content(data)
                last = f"HTTP {status}"
                if status != 429 and status < 500:
                    raise LlmError(f"{last}: {data[:200].decode('utf-8', 'replace')}")
                wait = max(wait, _retry_after(headers.get("retry-after")))
            if attempt < self.retries:
                time.sleep(min(wait, MAX_WAIT))
        raise LlmError(f"{last} after {self.attempts} attempt(s)")

    def _post(self, body: dict):
        deadline = time.monotonic() + self.timeout
        with self._http.stream("POST", self.url, content=json.dumps(body).encode()) as r:
            chunks, size = [], 0
            for chunk in r.iter_bytes():
                size += len(chunk)
                if size > MAX_RESPONSE_BYTES:
                    raise LlmError(f"response larger than {MAX_RESPONSE_BYTES} bytes; dropped unread")
                chunks.append(chunk)
                if time.monotonic() > deadline:
                    raise TimeoutError
            return r.status_code, r.headers, b"".join(chunks)


def _retry_after(value: str | None) -> float:
    if not value:
        return 0.0
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return 0.0
    return max(0.0, when.timestamp() - time.time())


def _content(data: bytes) -> str:
    try:
        reply = json.loads(data)
        content = reply["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError):
        raise LlmError("the answer is not a chat completion (no choices[0].message.content)") from None
    if not isinstance(content, str):
        raise LlmError("the answer's message content is not text")
    return content
