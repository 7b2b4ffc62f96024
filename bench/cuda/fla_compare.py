#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Times fla's chunk_gated_delta_rule (forward, backward, both), chunk_kda, chunk_gla,
chunk_linear_attn, chunk_simple_gla, chunk_delta_rule and the fused_recurrent kernels (Triton) on the shapes of bench/cuda/bench_cuda.cu and prints our/fla time ratios from the JSON that
linattn_bench_cuda wrote. fla is timed twice: as a Python user calls it (median of do_bench,
which flushes the L2 before every call; includes the host-side launch gaps between fla's
kernels) and replayed from a CUDA graph (median of CUDA-event timings with an L2 flush before
every replay: its GPU time alone, the fair kernel-to-kernel comparison).

    python3 bench/cuda/fla_compare.py --ours build-cuda-dev/cuda_bench.json

Needs torch, triton and fla-core (measurement only; never a dependency of the library)."""
import argparse
import json
import statistics

import torch
import torch.nn.functional as F
import triton.testing
from fla.ops.delta_rule import chunk_delta_rule
from fla.ops.gated_delta_rule import chunk_gated_delta_rule, fused_recurrent_gated_delta_rule
from fla.ops.gla import chunk_gla, fused_recurrent_gla
from fla.ops.kda import chunk_kda, fused_recurrent_kda
from fla.ops.linear_attn import chunk_linear_attn
from fla.ops.simple_gla import chunk_simple_gla

# fla's chunkwise forward for each of our rules with a scalar gate or none (Longhorn has none)
SCALAR_GATE_FORWARD = {
    "Hebbian": lambda q, k, v, g, b: chunk_linear_attn(q, k, v, normalize=False, output_final_state=True),
    "ScalarDecay": lambda q, k, v, g, b: chunk_simple_gla(q, k, v, g=g, output_final_state=True),
    "Delta": lambda q, k, v, g, b: chunk_delta_rule(q, k, v, b, output_final_state=True),
    "GatedDelta": lambda q, k, v, g, b: chunk_gated_delta_rule(q, k, v, g=g, beta=b, output_final_state=True),
}


def inputs(B, T, H, D, dtype=torch.bfloat16):
    g = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(B, T, H, D, device="cuda", dtype=dtype, generator=g)
    k = F.normalize(torch.randn(B, T, H, D, device="cuda", dtype=torch.float32, generator=g), dim=-1).to(dtype)
    v = torch.randn(B, T, H, D, device="cuda", dtype=dtype, generator=g)
    gate = F.logsigmoid(torch.randn(B, T, H, device="cuda", generator=g) + 3.0).to(dtype)
    beta = torch.sigmoid(torch.randn(B, T, H, device="cuda", generator=g)).to(dtype)
    return q, k, v, gate, beta


def time_ms(fn, reps):
    return triton.testing.do_bench(fn, warmup=25, rep=max(100, reps), return_mode="median")


def time_graph_ms(fn, reps=50):
    """Median GPU time of one replay of fn captured in a CUDA graph, or None if fn cannot be
    captured."""
    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):  # autotuning and allocations happen before the capture
                fn()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
    except Exception:  # noqa: BLE001 - any capture failure just means no graph timing
        return None
    flush = torch.empty(64 * 1024 * 1024, dtype=torch.int32, device="cuda")  # 256 MiB > L2
    times = []
    for _ in range(reps):
        flush.zero_()
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times)


def fla_training_step(q, k, v, gate, beta, with_forward_time, call=None):
    """fla's forward + backward through autograd (the fwd+bwd rows), or its backward alone: the
    backward of a forward already run (the graph is kept), the backward rows. fla-core 0.6
    refuses its gated backward on Hopper with Triton < 3.7.1 (its issue #640: the results can be
    wrong); the guard is switched off here for timing only, never for results. `call(q, k, v,
    gate, beta)` is the fla call differentiated (default chunk_gated_delta_rule)."""
    import sys
    for name, mod in list(sys.modules.items()):
        if name.startswith("fla.") and hasattr(mod, "IS_NVIDIA_HOPPER"):
            mod.IS_NVIDIA_HOPPER = False
    if call is None:
        call = SCALAR_GATE_FORWARD["GatedDelta"]
    leaves = [x.detach().clone().requires_grad_(True) for x in (q, k, v, gate, beta)]
    dout = torch.randn(q.shape, device=q.device, dtype=q.dtype, generator=torch.Generator(device="cuda").manual_seed(1))
    if with_forward_time:
        def step():
            o, _ = call(*leaves)
            return torch.autograd.grad(o, leaves, dout, allow_unused=True)
        return step
    o, _ = call(*leaves)
    return lambda: torch.autograd.grad(o, leaves, dout, retain_graph=True, allow_unused=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ours", required=True, help="JSON written by linattn_bench_cuda --json")
    ap.add_argument("--reps", type=int, default=200, help="do_bench repetition budget in ms")
    ap.add_argument("--match", default="", help="only the rows whose name contains this")
    ap.add_argument("--exclude", default=None, help="not the rows whose name contains this")
    args = ap.parse_args()
    ours = json.load(open(args.ours))
    print(f"\nfla comparison on {torch.cuda.get_device_name()} (torch {torch.__version__})")
    print(f"{'case':32s} {'B':>4s} {'T':>6s} {'H':>4s} {'linattn ms':>11s} {'fla ms':>9s} {'linattn/fla':>12s}"
          f" {'fla graph ms':>13s} {'linattn/graph':>14s}")
    for r in ours["rows"]:
        if "commit_drafts" in r["name"] or "checkpoints" in r["name"]:  # fla has no draft commit, no checkpoints
            continue
        if r["name"].startswith("state copy"):  # a reference row of ours, not a kernel of fla's
            continue
        if args.match not in r["name"] or (args.exclude and args.exclude in r["name"]):
            continue
        rule = r["name"].split(" ")[0]
        if rule not in ("GatedDelta", "KDA", "VectorDecay") and not r["name"].endswith("chunkwise"):
            continue  # the other rules' decode loops: no fla counterpart here
        if rule not in SCALAR_GATE_FORWARD and rule not in ("KDA", "VectorDecay"):
            print(f"{r['name']:32s} {r['B']:4d} {r['T']:6d} {r['H']:4d} {r['ms']:11.4f}   (fla has no kernel for this rule)")
            continue
        B, T, H, D = r["B"], r["T"], r["H"], r["D"]
        q, k, v, gate, beta = inputs(B, T, H, D, torch.float16 if " fp16" in r["name"] else torch.bfloat16)
        if r["name"].endswith("backward") or r["name"].endswith("fwd+bwd"):
            call = None
            if r["name"].startswith(("KDA", "VectorDecay")):  # fp32 per-key g [B, T, H, K] (and beta), as ours
                gate = F.logsigmoid(torch.randn(B, T, H, D, device="cuda") + 3.0)
                beta = beta.float()
                if r["name"].startswith("KDA"):
                    call = lambda q, k, v, g, b: chunk_kda(q, k, v, g=g, beta=b, output_final_state=True)
                else:
                    call = lambda q, k, v, g, b: chunk_gla(q, k, v, g=g, output_final_state=True)
            fn = fla_training_step(q, k, v, gate, beta, with_forward_time=r["name"].endswith("fwd+bwd"), call=call)
        elif r["name"].startswith(("KDA", "VectorDecay")) and r["name"].endswith("chunkwise"):
            gk = F.logsigmoid(torch.randn(B, T, H, D, device="cuda") + 3.0)  # fp32 [B, T, H, K], as ours
            if r["name"].startswith("KDA"):
                fn = lambda: chunk_kda(q, k, v, g=gk, beta=beta.float(), output_final_state=True)
            else:
                fn = lambda: chunk_gla(q, k, v, g=gk, output_final_state=True)
        elif r["name"].endswith("chunkwise"):
            fn = lambda call=SCALAR_GATE_FORWARD[rule]: call(q, k, v, gate, beta)
        elif r["name"].endswith("recurrent"):  # fla's recurrent kernel reads the gates as fp32
            g32 = gate.float()
            fn = lambda: fused_recurrent_gated_delta_rule(q, k, v, g=g32, beta=beta, output_final_state=True)
        elif r["name"].startswith(("KDA", "VectorDecay")):  # per-key decode: fla's per-key recurrent kernels
            gk = F.logsigmoid(torch.randn(B, T, H, D, device="cuda") + 3.0)  # fp32 [B, T, H, K], as ours
            s0 = torch.randn(B, H, D, D, device="cuda", dtype=torch.float32)
            if r["name"].startswith("KDA"):
                fn = lambda: fused_recurrent_kda(q, k, v, g=gk, beta=beta.float(), initial_state=s0, output_final_state=True)
            else:
                fn = lambda: fused_recurrent_gla(q, k, v, gk=gk, initial_state=s0, output_final_state=True)
        else:  # decode (one token) or verify_drafts (T draft tokens): state carried in and out
            g32 = gate.float()
            s0 = torch.randn(B, H, D, D, device="cuda", dtype=torch.float32)
            fn = lambda: fused_recurrent_gated_delta_rule(q, k, v, g=g32, beta=beta, initial_state=s0, output_final_state=True)
        fla_ms = time_ms(fn, args.reps)
        graph_ms = time_graph_ms(fn)
        graph = f"{graph_ms:13.4f} {r['ms'] / graph_ms:14.2f}" if graph_ms else f"{'n/a':>13s} {'':>14s}"
        print(f"{r['name']:32s} {B:4d} {T:6d} {H:4d} {r['ms']:11.4f} {fla_ms:9.4f} {r['ms'] / fla_ms:12.2f} {graph}")
        del q, k, v, gate, beta
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
