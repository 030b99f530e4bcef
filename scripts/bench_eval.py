"""Benchmark: batched hf-backend generation against one-prompt-at-a-time, on the same prompts.

    .venv/bin/python scripts/bench_eval.py [--prompts 32] [--n 4] [--max-new-tokens 32] [--batch-size 64]

Tiny model, GSM8K test prompts in the paper's formatting, one sweep cell: greedy (T=0, 1 sample) by
default, or T=0.8 with ``--n`` samples per prompt (the one-at-a-time baseline then still batches a
prompt's n samples, so the ratio is smaller). Prints prompts/s and generated tokens/s for both modes and their ratio.
"""

from __future__ import annotations

import argparse
import time


def main() -> None:
    """Time both modes and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--n", type=int, default=1, help="samples per prompt; 1 = greedy T=0")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()

    import torch

    from pspo_repro.data.datasets import load_benchmark
    from pspo_repro.data.prompts import render_prompt
    from pspo_repro.evaluation.backends import Request, make_backend, request_seed
    from pspo_repro.training.tiny_model import tiny_model_path

    torch.set_num_threads(args.threads)
    backend = make_backend("hf", str(tiny_model_path()), batch_size=args.batch_size, device="cpu")
    tok = backend.tokenizer
    problems = load_benchmark("gsm8k", limit=args.prompts)
    requests = []
    for p in problems:
        text = render_prompt(tok, p.question)
        ids = tuple(tok(text, add_special_tokens=False)["input_ids"])
        temperature = 0.0 if args.n == 1 else 0.8
        requests.append(Request(text, ids, temperature, args.n, request_seed(123, temperature, p.id)))

    def run(batched: bool) -> tuple[float, int]:
        start = time.perf_counter()
        if batched:
            outs = backend.generate(requests, args.max_new_tokens, 1.0)
        else:  # one prompt per generate call (its n samples still go together)
            outs = [backend.generate([r], args.max_new_tokens, 1.0)[0] for r in requests]
        elapsed = time.perf_counter() - start
        return elapsed, sum(len(c.token_ids) for cs in outs for c in cs)

    run(True)  # warm-up (first-call allocations)
    t_single, tok_single = run(False)
    t_batch, tok_batch = run(True)
    n = len(requests)
    print(
        f"prompts={n} n={args.n} max_new_tokens={args.max_new_tokens} batch_size={args.batch_size} threads={args.threads}"
    )
    print(
        f"one-at-a-time: {n / t_single:8.2f} prompts/s {tok_single / t_single:9.1f} tokens/s ({t_single:.2f} s)"
    )
    print(
        f"batched:       {n / t_batch:8.2f} prompts/s {tok_batch / t_batch:9.1f} tokens/s ({t_batch:.2f} s)"
    )
    print(
        f"speed-up: prompts/s x{t_single / t_batch:.2f}, tokens/s x{(tok_batch / t_batch) / (tok_single / t_single):.2f}"
    )


if __name__ == "__main__":
    main()
