# SPDX-License-Identifier: MIT
"""fla and linattn.torch side by side on one GPU: the host time of a Python call (launch
overhead: the call returns before the GPU finishes) and the GPU time per call (CUDA events),
forward and forward+backward, bf16 q/k/v with fp32 g/beta. Small calls (decode, B=1 prefill)
are where host overhead shows. linattn runs its 16-bit CUDA kernels on the bf16 tensors as they
are, g and beta read in fp32 (docs/python.md#cuda-tensors). The last row repeats the training
shape with use_qk_l2norm_in_kernel=True (q and k normalised inside each library's call). Then
float32 inputs, where fla takes TF32 products and linattn exact or TF32 ones (`bench.py float32`:
that section alone). Then the per-key decays' forward, chunk_kda and chunk_gla (`bench.py per_key`:
that section alone)."""

import sys
import time

import torch
import torch.nn.functional as F

import linattn.torch as la

try:
    import fla.ops.gated_delta_rule as fla_gdn
    import fla.ops.common.chunk_o as fla_chunk_o

    # fla-core 0.6.0 refuses its gated backward on Hopper with Triton < 3.7.1 ("incorrect
    # results", its issue #640). For timing only the guard is switched off: fla's gradients
    # here are not to be trusted, and none are compared.
    fla_chunk_o.IS_NVIDIA_HOPPER = False
    import fla.ops.gla as fla_gla
    import fla.ops.kda as fla_kda
except ImportError:  # fla missing: linattn's numbers only
    fla_gdn = fla_gla = fla_kda = None

# name, form, B, T, H, K, V, backward too, use_qk_l2norm_in_kernel
SHAPES = [
    ("decode B1", "fused_recurrent", 1, 1, 16, 128, 128, False, False),
    ("decode B32", "fused_recurrent", 32, 1, 16, 128, 128, False, False),
    ("prefill B1 T512", "chunk", 1, 512, 16, 128, 128, True, False),
    ("prefill B1 T8192", "chunk", 1, 8192, 16, 128, 128, True, False),
    ("train B4 T2048", "chunk", 4, 2048, 16, 128, 128, True, False),
    ("... with l2norm", "chunk", 4, 2048, 16, 128, 128, True, True),
]


def inputs(B, T, H, K, V, grad):
    d = "cuda"
    q = torch.randn(B, T, H, K, device=d, dtype=torch.bfloat16)
    k = F.normalize(torch.randn(B, T, H, K, device=d), dim=-1).bfloat16()
    v = torch.randn(B, T, H, V, device=d, dtype=torch.bfloat16)
    g = F.logsigmoid(torch.randn(B, T, H, device=d))
    beta = torch.rand(B, T, H, device=d)
    h0 = torch.randn(B, H, K, V, device=d) * 0.1
    xs = [q, k, v, g, beta]
    if grad:
        for x in xs:
            x.requires_grad_(True)
    return xs, h0


def call(lib, form, xs, h0, l2norm=False):
    q, k, v, g, beta = xs
    if form == "chunk":
        f = lib.chunk_gated_delta_rule
        return f(q, k, v, g, beta, initial_state=h0, output_final_state=True, use_qk_l2norm_in_kernel=l2norm)
    f = lib.fused_recurrent_gated_delta_rule
    return f(q, k, v, g=g, beta=beta, initial_state=h0, output_final_state=True, use_qk_l2norm_in_kernel=l2norm)


def measure(fn, iters):
    for _ in range(2):
        fn()
    torch.cuda.synchronize()
    host = 0.0
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        host += time.perf_counter() - t0
    end.record()
    torch.cuda.synchronize()
    return host / iters * 1e6, start.elapsed_time(end) / iters * 1e3   # microseconds


def main():
    libs = [("linattn", la)] + ([("fla", fla_gdn)] if fla_gdn else [])
    if sys.argv[1:] == ["float32"]:  # only the float32 section
        return float32_inputs(libs)
    if sys.argv[1:] == ["per_key"]:  # only the per-key section
        return per_key(libs)
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; times in microseconds per call")
    print(f"{'shape':20} {'lib':8} {'fwd host':>10} {'fwd gpu':>10} {'f+b host':>10} {'f+b gpu':>10}")
    for name, form, B, T, H, K, V, backward, l2norm in SHAPES:
        for lib_name, lib in libs:
            xs, h0 = inputs(B, T, H, K, V, False)
            iters = 200 if T == 1 else 20
            fh, fg = measure(lambda: call(lib, form, xs, h0, l2norm), iters)
            bh = bg = float("nan")
            if backward:
                gx, _ = inputs(B, T, H, K, V, True)

                def step():
                    o, s = call(lib, form, gx, h0, l2norm)
                    (o.float().sum() + s.sum()).backward()
                bh, bg = measure(step, 3 if lib is la else 10)
            print(f"{name:20} {lib_name:8} {fh:10.1f} {fg:10.1f} {bh:10.1f} {bg:10.1f}", flush=True)

    float32_inputs(libs)
    per_key(libs)


# float32 q, k, v, g, beta: fla's kernels take TF32 products; linattn's exact (the default) and
# TF32 ones (torch.backends.cuda.matmul.allow_tf32, linattn::options::precision = tf32)
FLOAT32_SHAPES = [("B1 T8192 H16", 1, 8192, 16), ("B4 T4096 H16", 4, 4096, 16), ("B1 T32768 H32", 1, 32768, 32)]


def float32_inputs(libs):
    print("\nfloat32 inputs, chunk forward, K = V = 128: GPU microseconds per call (and / fla)")
    flag = torch.backends.cuda.matmul.allow_tf32
    for name, B, T, H in FLOAT32_SHAPES:
        xs, h0 = inputs(B, T, H, 128, 128, False)
        xs = [x.float() for x in xs]
        times = {}
        for lib_name, lib in libs:
            for tf32 in ([False, True] if lib is la else [flag]):
                torch.backends.cuda.matmul.allow_tf32 = tf32
                label = lib_name + (" tf32" if lib is la and tf32 else " exact" if lib is la else "")
                times[label] = measure(lambda: call(lib, "chunk", xs, h0), 20)[1]
        torch.backends.cuda.matmul.allow_tf32 = flag
        ref = times.get("fla")
        for label, us in times.items():
            ratio = f"{us / ref:6.2f}" if ref else ""
            print(f"{name:20} {label:14} {us:10.1f} {ratio}", flush=True)


# the per-key decays' chunk forward: bf16 q, k, v, fp32 per-key log gates g [B, T, H, K] (and beta)
PER_KEY_SHAPES = [("prefill B1 T512", 1, 512, 16), ("prefill B1 T8192", 1, 8192, 16), ("B4 T4096 H16", 4, 4096, 16)]


def per_key(libs):
    print("\nper-key decays, chunk forward, bf16 q, k, v, fp32 g, K = V = 128: microseconds per call (gpu / fla)")
    print(f"{'shape':20} {'call':10} {'lib':8} {'host':>8} {'gpu':>9} {'/ fla':>6}")
    for name, B, T, H in PER_KEY_SHAPES:
        (q, k, v, _, beta), h0 = inputs(B, T, H, 128, 128, False)
        g = F.logsigmoid(torch.randn(B, T, H, 128, device="cuda") + 3.0)
        for call_name in ("chunk_kda", "chunk_gla"):
            times = {}
            for lib_name, lib in libs:
                mod = lib if lib is la else (fla_kda if call_name == "chunk_kda" else fla_gla)
                f = getattr(mod, call_name)
                fn = (lambda: f(q, k, v, g=g, beta=beta, initial_state=h0, output_final_state=True)) \
                    if call_name == "chunk_kda" else (lambda: f(q, k, v, g=g, initial_state=h0, output_final_state=True))
                times[lib_name] = measure(fn, 20)
            for lib_name, (host, gpu) in times.items():
                ratio = f"{gpu / times['fla'][1]:6.2f}" if "fla" in times else ""
                print(f"{name:20} {call_name:10} {lib_name:8} {host:8.1f} {gpu:9.1f} {ratio}", flush=True)


if __name__ == "__main__":
    main()
