"""Forward + backward time of every method (+ dapo aggregation) relative to ``clip``.

All methods are timed in one process, interleaved (the order rotates every repeat) so that load from other
processes hits them alike; each figure is the median over repeats. fp32 on CPU, single thread by default.
The default clock is this thread's CPU time (``time.thread_time``): on a shared machine, wall time mostly
measures how long the scheduler kept us waiting; ``--clock wall`` is there for an idle machine.

    .venv/bin/python scripts/bench_methods.py                       # 64x1024 and 256x2048
    .venv/bin/python scripts/bench_methods.py --shapes 64x1024 --repeats 5
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

import torch

from pspo_repro.methods import (
    aggregate,
    get_method,
    list_methods,
    method_extra_inputs,
    method_optional_inputs,
)

TOPK = 20


def make_inputs(b: int, t: int, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(b, t, generator=g) * 3 - 0.01
    logp = old + 0.3 * torch.randn(b, t, generator=g)  # a realistic spread: some tokens clip at eps 0.2
    adv = torch.randn(b, generator=g)
    mask = (torch.rand(b, t, generator=g) > 0.1).float()
    topk_old = torch.log_softmax(2 * torch.randn(b, t, TOPK, generator=g), -1) - 0.1
    topk_new = topk_old + 0.2 * torch.randn(b, t, TOPK, generator=g)
    # per-token entropies (ASPO, Archer, ERC) and the sampling policy's within a few percent of them (ERC)
    entropies = 3 * torch.rand(b, t, generator=g)
    old_entropies = entropies * torch.exp(0.05 * torch.randn(b, t, generator=g))
    return {
        "logp": logp, "old": old, "adv": adv, "mask": mask, "topk_old": topk_old, "topk_new": topk_new,
        "entropies": entropies, "old_entropies": old_entropies,
    }  # fmt: skip


CLOCKS = {"thread": time.thread_time, "wall": time.perf_counter}
clock = time.thread_time


def time_once(name: str, x: dict[str, torch.Tensor]) -> float:
    logp = x["logp"].detach().requires_grad_(True)
    extra = (
        {"topk_old_logps": x["topk_old"], "topk_logps": x["topk_new"]} if method_extra_inputs(name) else {}
    )
    extra.update({k: x[k] for k in ("entropies", "old_entropies") if k in method_optional_inputs(name)})
    start = clock()
    out = get_method(name)(logp, x["old"], x["adv"], x["mask"], **extra)
    aggregate(out.per_token_loss, x["mask"], "dapo").backward()
    return clock() - start


def bench(shape: tuple[int, int], repeats: int, warmup: int = 2) -> dict[str, float]:
    names = list_methods()
    x = make_inputs(*shape)
    for _ in range(warmup):
        for name in names:
            time_once(name, x)
    times: dict[str, list[float]] = {n: [] for n in names}
    for rep in range(repeats):
        k = rep % len(names)
        for name in names[k:] + names[:k]:  # rotate so no method always runs first/last
            times[name].append(time_once(name, x))
    return {n: statistics.median(v) for n, v in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="64x1024,256x2048", help="comma-separated BxT")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="thread")
    args = parser.parse_args()
    global clock
    clock = CLOCKS[args.clock]
    if args.clock == "thread" and args.threads != 1:
        parser.error("--clock thread measures one thread: use --threads 1 or --clock wall")
    torch.set_num_threads(args.threads)
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"torch {torch.__version__}, {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
        f"threads={args.threads}, clock={args.clock}, repeats={args.repeats}, load average {load:.2f}"
    )
    results = {s: bench(s, args.repeats) for s in shapes}
    header = "| method | " + " | ".join(f"{b}x{t} ms | ratio" for b, t in shapes) + " |"
    print(header)
    print("|" + "---|" * (1 + 2 * len(shapes)))
    for name in list_methods():
        cells = []
        for s in shapes:
            med = results[s][name]
            cells += [f"{med * 1e3:.2f}", f"{med / results[s]['clip']:.3f}"]
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
