"""A local OpenAI-compatible ``/v1/completions`` stub for judge tests: each prompt's reply text is ``answer(prompt)``;
the prompts it received are kept in order."""
from __future__ import annotations

import json
import threading
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Iterator


@contextmanager
def stub_endpoint(answer: Callable[[str], str], prompts: list[str]) -> Iterator[str]:
    """Serve ``answer`` on 127.0.0.1 while the block runs; yields the base URL (``http://127.0.0.1:PORT/v1``) and
    appends every prompt received to ``prompts``."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            prompts.extend(body["prompt"])
            data = json.dumps({"choices": [{"index": i, "text": answer(p)}
                                           for i, p in enumerate(body["prompt"])]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()
