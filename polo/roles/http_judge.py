"""An OpenAI-compatible completion client for judges: many prompts in, one reply or one failure per prompt out.

``EndpointClient.complete(prompts)`` sends the prompts to ``{url}/completions`` (``batch_size`` prompts per
request, as the endpoint's ``prompt`` list) or ``{url}/chat/completions`` (one user turn per request), on at
most ``concurrency`` threads at once (stdlib ``urllib``, no extra dependency). Each request has a socket
timeout of ``timeout_s`` and is retried ``retries`` times after a timeout, a connection error or an HTTP
408/429/5xx, waiting ``backoff_s · 2^attempt`` first. A prompt whose request still fails, or whose reply has
no text for it, gets a ``Reply`` naming the reason (``timeout``, ``connection``, ``http_error``,
``malformed``) and is never an exception out of the batch. Replies are cached by request (endpoint, model,
prompt and sampling settings, not the address): in memory, and in a JSON-lines file when ``cache_file`` is set.

``parse_score`` reads a score from a reply: the ``score_pattern`` match (its first group, if it has one) is a
verdict word of ``verdict_scores`` or a number, mapped from ``score_range = (lo, hi)`` onto [0, 1].
"""
from __future__ import annotations

import hashlib
import http.client
import json
import math
import re
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Mapping, Sequence

from polo.core.registry import ConfigError

RETRIED_STATUS = frozenset({408, 429, 500, 502, 503, 504})
"""HTTP statuses worth another try (the server was busy or briefly broken); other errors are final."""


@dataclass
class Reply:
    """One prompt's outcome: the reply ``text``, or None and the ``failure`` reason with its ``detail``."""

    text: str | None
    failure: str | None = None
    detail: str = ""


class RequestFailed(Exception):
    """A request that did not give a usable reply: ``reason`` is the failure's name, ``retry`` whether another
    try may succeed."""

    def __init__(self, reason: str, detail: str, retry: bool):
        super().__init__(detail)
        self.reason, self.retry = reason, retry


def classify(err: BaseException) -> RequestFailed:
    """The failure reason of an exception raised by one request."""
    if isinstance(err, urllib.error.HTTPError):
        body = err.read()[:200].decode("utf-8", "replace") if err.fp is not None else ""
        return RequestFailed("http_error", f"HTTP {err.code}: {body}", err.code in RETRIED_STATUS)
    if isinstance(err, urllib.error.URLError):
        err = err.reason if isinstance(err.reason, BaseException) else OSError(str(err.reason))
    if isinstance(err, TimeoutError):
        return RequestFailed("timeout", f"no reply within the timeout: {err}", True)
    if isinstance(err, (OSError, http.client.HTTPException)):
        return RequestFailed("connection", f"{type(err).__name__}: {err}", True)
    return RequestFailed("malformed", f"{type(err).__name__}: {err}", False)


class EndpointClient:
    """Completions from an OpenAI-compatible server (vLLM, SGLang, llama.cpp, a hosted API); see the module
    docstring. ``requests`` counts the HTTP requests sent (retries included), ``max_in_flight`` the most that
    were open at once."""

    def __init__(self, url: str, model: str, *, endpoint: Literal["completions", "chat"] = "completions",
                 api_key: str | None = None, concurrency: int = 4, timeout_s: float = 30.0, retries: int = 2,
                 backoff_s: float = 0.5, batch_size: int = 8, max_tokens: int = 16, temperature: float = 0.0,
                 cache: bool = True, cache_file: str | Path | None = None):
        self.url, self.model, self.endpoint, self.api_key = url.rstrip("/"), model, endpoint, api_key
        self.concurrency, self.timeout_s, self.retries, self.backoff_s = concurrency, timeout_s, retries, backoff_s
        self.batch_size = batch_size if endpoint == "completions" else 1
        self.sampling = {"max_tokens": max_tokens, "temperature": temperature}
        self.cache: dict[str, str] | None = {} if cache else None
        self.cache_file = Path(cache_file) if cache and cache_file else None
        if self.cache_file is not None and self.cache_file.is_file():
            for line in self.cache_file.read_text().splitlines():
                if line.strip():
                    entry = json.loads(line)
                    self.cache[entry["key"]] = entry["text"]
        self.requests = self.in_flight = self.max_in_flight = 0
        self._lock = threading.Lock()

    def wait_until_up(self, wait_s: float, log) -> None:
        """Return once the server answers ``GET {url}/models`` (any HTTP reply, an error status included, shows it is
        up); until then retry after 1, 2, 4, ... seconds while ``wait_s`` lasts, logging one line per failed try. A
        ConfigError in one line when it never answers."""
        delays, total = [], 0.0
        while total < wait_s:
            delays.append(min(2.0 ** len(delays), wait_s - total))
            total += delays[-1]
        for attempt in range(len(delays) + 1):
            try:
                with urllib.request.urlopen(urllib.request.Request(self.url + "/models", headers=self._auth()),
                                            timeout=self.timeout_s):
                    return
            except urllib.error.HTTPError:
                return
            except Exception as err:  # noqa: BLE001 (no answer: the failure is reported below)
                failed = classify(err)
            if attempt < len(delays):
                log(f"judge: waiting for the judge at {self.url} (try {attempt + 1}/{len(delays) + 1}: {failed}); "
                    f"next try in {delays[attempt]:.0f} s")
                time.sleep(delays[attempt])
        raise ConfigError(f"roles.judge: no answer from {self.url} after {len(delays) + 1} tries in {total:.0f} s "
                          f"({failed}): start an OpenAI-compatible server of {self.model!r} there (e.g. vllm serve "
                          f"MODEL), set roles.judge.url to one, or use a local judge (roles.judge.backend: causal or "
                          f"rule)")

    def key(self, prompt: str) -> str:
        """The cache key of ``prompt``'s request: a hash of everything that determines the reply."""
        request = {"endpoint": self.endpoint, "model": self.model, "prompt": prompt, **self.sampling}
        return hashlib.sha256(json.dumps(request, sort_keys=True).encode()).hexdigest()

    def complete(self, prompts: Sequence[str]) -> list[Reply]:
        """One ``Reply`` per prompt, in order. With the cache, cached prompts are not sent again and a prompt
        repeated in ``prompts`` is sent once; without it, every prompt is sent."""
        replies: list[Reply | None] = [None] * len(prompts)
        keys = [self.key(p) for p in prompts]
        todo: dict[str | int, list[int]] = {}  # the rows each request's reply answers
        for i, key in enumerate(keys):
            if self.cache is not None and key in self.cache:
                replies[i] = Reply(self.cache[key])
            else:
                todo.setdefault(key if self.cache is not None else i, []).append(i)
        groups = list(todo.values())
        chunks = [groups[i:i + self.batch_size] for i in range(0, len(groups), self.batch_size)]
        with ThreadPoolExecutor(max_workers=self.concurrency) as pool:
            results = pool.map(lambda chunk: self._send([prompts[rows[0]] for rows in chunk]), chunks)
            for chunk, got in zip(chunks, results):
                for rows, reply in zip(chunk, got):
                    for i in rows:
                        replies[i] = reply
                    if reply.text is not None:
                        self._remember(keys[rows[0]], reply.text)
        return replies

    def _remember(self, key: str, text: str) -> None:
        if self.cache is None:
            return
        with self._lock:
            self.cache[key] = text
            if self.cache_file is not None:
                with self.cache_file.open("a") as f:
                    f.write(json.dumps({"key": key, "text": text}) + "\n")

    def _send(self, prompts: list[str]) -> list[Reply]:
        """One request for ``prompts`` with retries; a failure is every prompt's ``Reply``."""
        attempt = 0
        while True:
            try:
                return self._parse(self._post(prompts), len(prompts))
            except Exception as err:  # noqa: BLE001 (every failure of one request is that request's result)
                failed = err if isinstance(err, RequestFailed) else classify(err)
                if not failed.retry or attempt == self.retries:
                    return [Reply(None, failed.reason, str(failed))] * len(prompts)
                time.sleep(self.backoff_s * 2 ** attempt)
                attempt += 1

    def _auth(self) -> dict[str, str]:
        """The bearer-token header of every request (none without an API key)."""
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def _post(self, prompts: list[str]) -> dict:
        if self.endpoint == "completions":
            path, body = "/completions", {"prompt": prompts}
        else:
            path, body = "/chat/completions", {"messages": [{"role": "user", "content": prompts[0]}]}
        body = {"model": self.model, **self.sampling, **body}
        headers = {"Content-Type": "application/json", **self._auth()}
        request = urllib.request.Request(self.url + path, json.dumps(body).encode(), headers, method="POST")
        with self._lock:
            self.requests += 1
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                raw = response.read()
        finally:
            with self._lock:
                self.in_flight -= 1
        try:
            return json.loads(raw)
        except ValueError as err:
            raise RequestFailed("malformed", f"reply is not JSON: {raw[:200]!r}", False) from err

    def _parse(self, reply: dict, n: int) -> list[Reply]:
        """The text of each of the ``n`` prompts' choices (``index`` orders them; a missing one is malformed)."""
        choices = reply.get("choices") if isinstance(reply, dict) else None
        if not isinstance(choices, list):
            raise RequestFailed("malformed", f"reply has no 'choices' list: {str(reply)[:200]}", False)
        texts: list[str | None] = [None] * n
        for position, choice in enumerate(choices):
            index = choice.get("index", position) if isinstance(choice, dict) else None
            text = (choice.get("text") if self.endpoint == "completions"
                    else (choice.get("message") or {}).get("content")) if isinstance(choice, dict) else None
            if isinstance(index, int) and 0 <= index < n and isinstance(text, str):
                texts[index] = text
        return [Reply(t) if t is not None else Reply(None, "malformed", f"no text for prompt {i} in the reply")
                for i, t in enumerate(texts)]


def parse_score(text: str, pattern: re.Pattern, verdict_scores: Mapping[str, float],
                score_range: tuple[float, float]) -> tuple[float, str | None]:
    """``(score in [0, 1], None)`` read from a reply, or ``(nan, reason)``: ``unparseable`` when the pattern
    does not match or the match is neither a verdict word (compared case-insensitively) nor a number,
    ``out_of_range`` for a number outside ``score_range``. A number ``x`` maps to ``(x − lo)/(hi − lo)``, a
    verdict word to its ``verdict_scores`` value as given (already in [0, 1])."""
    match = pattern.search(text)
    if match is None:
        return math.nan, "unparseable"
    found = (match.group(1) if pattern.groups else match.group(0)).strip()
    verdicts = {word.strip().casefold(): score for word, score in verdict_scores.items()}
    if found.casefold() in verdicts:
        return float(verdicts[found.casefold()]), None
    try:
        value = float(found)
    except ValueError:
        return math.nan, "unparseable"
    lo, hi = score_range
    if not math.isfinite(value) or not lo <= value <= hi:
        return math.nan, "out_of_range"
    return (value - lo) / (hi - lo), None
