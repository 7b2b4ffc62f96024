#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Turns the benchmark JSON in bench/results/ into PNGs in the same folder.

    python3 bench/plot.py [results_dir]

Needs matplotlib (`pip install matplotlib`). Reads whichever of these exist:

  forms_sweep.json  (--sweep)    -> tokens_vs_T.png      tokens/s against T per rule and form
                                    softmax_crossover.png speed-up over softmax attention against T
                                    chunk_sweep.png      speed-up over recurrent against C
  forms.json        (main job)   -> main_job.png         tokens/s per rule and form, 1 and 2 threads
  gated_delta.json  (--delta)    -> chunk_sweep_delta.png GatedDelta tokens/s against C
  threads.json      (--threads)  -> thread_scaling.png   speed-up against threads
  decode.json       (--decode)   -> decode.png           decode_step time against the memory floor

Row names are `Rule/form/T:<T>[/H:<H>]/K:<K>[/C:<C>]/threads:<n>` (see bench_forms.cpp).
Quadratic-attention reference: rows whose rule is listed in REFERENCE_RULES (the
`SoftmaxAttention/...` rows: online softmax, fastest tile size per T) are drawn in every
tokens/s-against-T panel as a dashed black line, and softmax_crossover.png plots each linear
form's speed-up over them, so the plots show where each linear form overtakes it.
"""
import json
import os
import statistics
import sys
from collections import defaultdict

REFERENCE_RULES = ("SoftmaxAttention", "Softmax", "softmax")
FORM_STYLE = {"recurrent": ("tab:blue", "o"), "parallel": ("tab:orange", "s"), "chunkwise": ("tab:green", "^")}
CHUNK_COLOURS = {16: "tab:purple", 32: "tab:green", 64: "tab:red", 128: "tab:brown", 256: "tab:gray"}


def parse_name(name):
    """'GatedDelta/chunkwise/T:8192/K:128/C:64/threads:1/repeats:3' -> dict."""
    parts = name.split("/")
    row = {"rule": parts[0], "form": parts[1] if len(parts) > 1 and ":" not in parts[1] else ""}
    for p in parts[1:]:
        if ":" in p:
            key, value = p.split(":", 1)
            if key in ("T", "H", "K", "C", "threads", "B"):
                row[key] = int(value)
    return row


def load(path):
    """Median tokens/s, gflops and time (ms) per row of one Google Benchmark JSON file."""
    with open(path) as f:
        data = json.load(f)
    samples = defaultdict(lambda: defaultdict(list))
    for b in data.get("benchmarks", []):
        if b.get("run_type") != "iteration" or b.get("error_occurred"):
            continue
        key = b["run_name"].split("/repeats:")[0].split("/min_time:")[0].split("/iterations:")[0]
        for counter in ("tokens_per_s", "gflops", "bytes_per_second", "state_bytes"):
            if counter in b:
                samples[key][counter].append(b[counter])
        unit = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[b.get("time_unit", "ms")]
        samples[key]["real_ms"].append(b["real_time"] * unit)
        samples[key]["cpu_ms"].append(b["cpu_time"] * unit)
    rows = []
    for key, counters in samples.items():
        row = parse_name(key)
        row["name"] = key
        row.update({c: statistics.median(v) for c, v in counters.items()})
        rows.append(row)
    return rows, data.get("context", {})


def machine(ctx):
    return f"{ctx.get('num_cpus', '?')} CPUs @ {ctx.get('mhz_per_cpu', '?')} MHz, {ctx.get('date', '')[:10]}"


def gemm(rows):
    g = [r.get("gflops") for r in rows if r["rule"] == "gemm_1024"]
    return g[0] if g else None


def plt_module():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def t_axis(ax, Ts):
    """Log-2 x axis with a plain label at every measured T (1k = 1024 tokens)."""
    Ts = sorted(set(Ts))
    ax.set_xscale("log", base=2)
    ax.set_xticks(Ts, [f"{T // 1024}k" if T >= 1024 and T % 1024 == 0 else str(T) for T in Ts])
    ax.xaxis.set_minor_locator(__import__("matplotlib.ticker", fromlist=["NullLocator"]).NullLocator())


def linear_rules(rows):
    seen = []
    for r in rows:
        if r["rule"] not in seen and r["form"] in FORM_STYLE and r["rule"] not in REFERENCE_RULES:
            seen.append(r["rule"])
    return seen


def reference_series(rows, K):
    """Softmax (or other quadratic reference) rows of head size K, one thread:
    {label: [(T, tokens/s)]}, the fastest row (form, tile size) per T."""
    out = defaultdict(dict)
    for r in rows:
        if r["rule"] in REFERENCE_RULES and r.get("K") == K and "tokens_per_s" in r and r.get("threads", 1) == 1:
            label = "softmax attention (quadratic; online, best C)" if r["rule"] == "SoftmaxAttention" else r["rule"]
            out[label][r["T"]] = max(out[label].get(r["T"], 0), r["tokens_per_s"])
    return {k: sorted(v.items()) for k, v in out.items()}


def best_per_T(rows, rule, form, K):
    """{T: best tokens/s} of one rule and form at head size K, one thread (best C for chunkwise)."""
    pts = {}
    for r in rows:
        if r["rule"] == rule and r["form"] == form and r.get("K") == K and r.get("threads", 1) == 1:
            pts[r["T"]] = max(pts.get(r["T"], 0), r["tokens_per_s"])
    return pts


def crossover(Ts, ratios):
    """First T where the ratio crosses 1 from below (log-log interpolation), or None."""
    import math

    for (t0, r0), (t1, r1) in zip(zip(Ts, ratios), zip(Ts[1:], ratios[1:])):
        if r0 < 1 <= r1:
            f = math.log(1 / r0) / math.log(r1 / r0)
            return math.exp(math.log(t0) + f * (math.log(t1) - math.log(t0)))
    return None


def plot_softmax_crossover(plt, rows, ctx, out):
    """Speed-up of each linear rule's chunkwise (best C) and recurrent form over softmax attention
    against T, one panel per head size; above 1 the linear form is faster."""
    rules = linear_rules(rows)
    Ks = sorted({r["K"] for r in rows if "K" in r and r["rule"] in REFERENCE_RULES})
    if not rules or not Ks:
        return None
    colours = ["tab:green", "tab:red", "tab:purple", "tab:blue", "tab:orange", "tab:brown"]
    fig, axes = plt.subplots(1, len(Ks), figsize=(6.2 * len(Ks), 4.6), squeeze=False)
    for ax, K in zip(axes[0], Ks):
        ref = dict(next(iter(reference_series(rows, K).values()), []))
        lo, hi = 1.0, 1.0
        for colour, rule in zip(colours, rules):
            for form, style in (("chunkwise", "-"), ("recurrent", ":")):
                pts = best_per_T(rows, rule, form, K)
                Ts = sorted(T for T in pts if T in ref)
                if not Ts:
                    continue
                ratios = [pts[T] / ref[T] for T in Ts]
                lo, hi = min(lo, *ratios), max(hi, *ratios)
                x = crossover(Ts, ratios)
                label = f"{rule} {form}" + (" (best C)" if form == "chunkwise" else "")
                if x and form == "chunkwise":
                    label += f", faster from T ≈ {x:,.0f}"
                    ax.plot([x], [1.0], marker="o", color=colour, markersize=7, markerfacecolor="white")
                elif form == "chunkwise" and min(ratios) >= 1:
                    label += f", faster at every T ≥ {Ts[0]}"
                ax.plot(Ts, ratios, style, marker="^" if form == "chunkwise" else "o", color=colour, label=label)
        ax.axhline(1.0, color="k", linestyle="--", linewidth=1.2, label="softmax attention (online, best C) = 1")
        ax.axhspan(lo / 1.5, 1.0, color="0.9", zorder=0)
        ax.text(0.02, 0.03, "below the line: softmax attention is faster", transform=ax.transAxes, fontsize=8,
                color="0.35")
        t_axis(ax, list(ref))
        ax.set_yscale("log")
        ax.set_ylim(lo / 1.5, hi * 1.5)
        ax.yaxis.set_major_formatter(__import__("matplotlib.ticker", fromlist=["FuncFormatter"]).FuncFormatter(
            lambda y, _: f"{y:g}"))
        ax.set_xlabel("sequence length T (tokens)")
        ax.set_ylabel("speed-up over softmax attention (×, tokens/s ratio)")
        ax.set_title(f"K = V = {K}")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7, loc="upper left")
    fig.suptitle(f"Linear forms against causal softmax attention (B=1, H={ctx_heads(ctx)}, one thread) — "
                 f"{machine(ctx)}", fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def plot_tokens_vs_T(plt, rows, ctx, out):
    rules = linear_rules(rows)
    Ks = sorted({r["K"] for r in rows if "K" in r and r["rule"] in rules})
    if not rules or not Ks:
        return None
    fig, axes = plt.subplots(len(Ks), len(rules), figsize=(4.2 * len(rules), 3.6 * len(Ks)), squeeze=False)
    for i, K in enumerate(Ks):
        refs = reference_series(rows, K)
        for j, rule in enumerate(rules):
            ax = axes[i][j]
            mine = [r for r in rows if r["rule"] == rule and r.get("K") == K and r.get("threads", 1) == 1]
            for form, (colour, marker) in FORM_STYLE.items():
                pts = defaultdict(list)
                for r in mine:
                    if r["form"] == form:
                        pts[r["T"]].append(r["tokens_per_s"])
                if not pts:
                    continue
                Ts = sorted(pts)
                label = form if form != "chunkwise" else "chunkwise (best C)"
                ax.plot(Ts, [max(pts[T]) for T in Ts], marker=marker, color=colour, label=label)
            for label, pts in refs.items():
                ax.plot([p[0] for p in pts], [p[1] for p in pts], "k--", marker="x", label=label)
            t_axis(ax, [r["T"] for r in mine])
            ax.set_yscale("log")
            ax.set_title(f"{rule}, K = V = {K}")
            ax.set_xlabel("sequence length T (tokens)")
            ax.set_ylabel("throughput (tokens/s, one core)")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=8)
    fig.suptitle(f"Tokens/s against T (B=1, H={ctx_heads(ctx)}, one thread) — {machine(ctx)}")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def ctx_heads(ctx):
    shape = ctx.get("linattn_shape", "")
    for tok in shape.split():
        if tok.startswith("H="):
            return tok[2:]
    return "?"


def plot_chunk_sweep(plt, rows, ctx, out, T=None):
    """Speed-up of chunkwise over recurrent against C, one line per (rule, K) at one T."""
    rules = linear_rules(rows)
    Ts = sorted({r["T"] for r in rows if r["form"] == "chunkwise"})
    if not Ts:
        return None
    T = T or (4096 if 4096 in Ts else Ts[-1])
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for rule in rules:
        for K in sorted({r["K"] for r in rows if r["rule"] == rule}):
            rec = [r for r in rows if r["rule"] == rule and r["form"] == "recurrent" and r["T"] == T and r["K"] == K
                   and r.get("threads", 1) == 1]
            ch = sorted((r["C"], r["tokens_per_s"]) for r in rows if r["rule"] == rule and r["form"] == "chunkwise"
                        and r["T"] == T and r["K"] == K and r.get("threads", 1) == 1)
            if not rec or not ch:
                continue
            base = rec[0]["tokens_per_s"]
            ax.plot([c for c, _ in ch], [t / base for _, t in ch], marker="o", linestyle="-" if K >= 128 else ":",
                    label=f"{rule}, K = {K}")
    ax.axhline(1.0, color="k", linewidth=0.8)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("chunk size C (tokens)")
    ax.set_ylabel("speed-up over the recurrent form (×)")
    ax.set_title(f"Chunk-size sweep at T = {T} (B=1, one thread) — {machine(ctx)}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def plot_delta_chunks(plt, rows, ctx, out):
    """GatedDelta at the delta shape: tokens/s and % of the GEMM against C."""
    ch = sorted(((r["C"], r) for r in rows if r["rule"] == "GatedDelta" and r["form"] == "chunkwise"),
                key=lambda x: x[0])
    rec = [r for r in rows if r["rule"] == "GatedDelta" and r["form"] == "recurrent"]
    smax = [r["tokens_per_s"] for r in rows if r["rule"] in REFERENCE_RULES and "tokens_per_s" in r]
    if not ch:
        return None
    g = gemm(rows)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    Cs = [c for c, _ in ch]
    ax.plot(Cs, [r["tokens_per_s"] for _, r in ch], marker="^", color="tab:green", label="chunkwise")
    if rec:
        ax.axhline(rec[0]["tokens_per_s"], color="tab:blue", linestyle="--", label="recurrent")
    if smax:
        ax.axhline(max(smax), color="k", linestyle="--", label="softmax attention (online, best C)")
    t_axis(ax, Cs)
    ax.set_xlim(Cs[0] / 1.6, Cs[-1] * 1.6)
    ax.set_xlabel("chunk size C (tokens)")
    ax.set_ylabel("throughput (tokens/s, one core)")
    ax.set_ylim(0, 1.2 * max(r["tokens_per_s"] for _, r in ch))
    if g:
        for c, r in ch:
            ax.annotate(f"{100 * r['gflops'] / g:.0f}% of GEMM", (c, r["tokens_per_s"]), textcoords="offset points",
                        xytext=(0, 6), ha="center", fontsize=8)
        ax.text(0.01, 0.01, "% of GEMM: docs/math.md#costs useful FLOPs per second / gemm_1024's rate in the same run",
                transform=ax.transAxes, fontsize=7, color="0.35")
    ax.set_title(f"GatedDelta B=1 T=8192 H=16 K=V=128 — {machine(ctx)}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def plot_main_job(plt, rows, ctx, out):
    """Grouped bars: one group per rule, one bar per (form, threads)."""
    rules = linear_rules(rows)
    combos = [(f, th) for f in FORM_STYLE for th in (1, 2)
              if any(r["form"] == f and r.get("threads", 1) == th for r in rows)]
    if not rules or not combos:
        return None
    fig, ax = plt.subplots(figsize=(9, 5.2))
    width = 0.8 / len(combos)
    for k, (form, th) in enumerate(combos):
        xs, ys = [], []
        for i, rule in enumerate(rules):
            m = [r for r in rows if r["rule"] == rule and r["form"] == form and r.get("threads", 1) == th]
            if m:
                xs.append(i + (k - (len(combos) - 1) / 2) * width)
                ys.append(m[0]["tokens_per_s"])
        ax.bar(xs, ys, width=width, color=FORM_STYLE[form][0], hatch="//" if th > 1 else None, edgecolor="white",
               label=f"{form}, {th} thread{'s' if th > 1 else ''}")
    for th, style in ((1, "--"), (2, ":")):
        smax = [r["tokens_per_s"] for r in rows if r["rule"] in REFERENCE_RULES and r.get("threads", 1) == th]
        if smax:
            ax.axhline(max(smax), color="k", linestyle=style, linewidth=1,
                       label=f"softmax attention, {th} thread{'s' if th > 1 else ''}")
    ax.set_xticks(list(range(len(rules))), rules)
    ax.set_ylabel("throughput (tokens/s)")
    ax.set_yscale("log")
    ax.set_title(f"Main job ({ctx.get('linattn_shape', '')}, T=4096, C=64) — {machine(ctx)}")
    ax.grid(True, axis="y", which="both", alpha=0.3)
    ax.legend(fontsize=8, ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.08))
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def plot_threads(plt, rows, ctx, out):
    """Speed-up over one thread against the thread count, one line per (rule, form, H)."""
    series = defaultdict(dict)
    for r in rows:
        if r["form"] in FORM_STYLE and "threads" in r:
            series[(r["rule"], r["form"], r.get("H", 0), r.get("C", 0))][r["threads"]] = r["tokens_per_s"]
    if not series:
        return None
    fig, ax = plt.subplots(figsize=(7.5, 5))
    top = 1
    # colour: H; line and marker: rule and form (so that no two lines look alike)
    heads = sorted({H for (_, _, H, _) in series})
    colours = dict(zip(heads, ["tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown"] * 4))
    styles = {}
    for key in sorted({(rule, form) for (rule, form, _, _) in series}):
        styles[key] = [("-", "^"), ("--", "o"), ("-.", "s"), (":", "D"), ("-", "v"), ("--", "P")][len(styles) % 6]
    for (rule, form, H, C), pts in sorted(series.items()):
        if 1 not in pts:
            continue
        ths = sorted(pts)
        top = max(top, ths[-1])
        label = f"{rule} {form} H={H}" + (f" C={C}" if C else "") + f" ({pts[1]:,.0f} tok/s on 1)"
        line, marker = styles[(rule, form)]
        ax.plot(ths, [pts[t] / pts[1] for t in ths], linestyle=line, marker=marker, color=colours[H], label=label)
    ax.plot([1, top], [1, top], "k:", linewidth=0.8, label="linear")
    ax.set_xlabel("threads (options::threads)")
    ax.set_ylabel("speed-up over one thread (×, wall time)")
    ax.set_xticks(list(range(1, top + 1)))
    ax.set_title(f"Thread scaling, B=1 T=8192 K=V=128 — {machine(ctx)}", fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def plot_decode(plt, rows, ctx, out):
    """Time per call of decode_step and of the state copies; the memory floor and twice it."""
    if not rows:
        return None
    rows = sorted(rows, key=lambda r: r["name"])
    fig, ax = plt.subplots(figsize=(8, 4))
    names = [r["name"] for r in rows]
    times = [r["cpu_ms"] * 1e3 for r in rows]
    ax.barh(range(len(rows)), times, color=["tab:green" if "decode" in n else "tab:gray" for n in names])
    ax.set_yticks(list(range(len(rows))), names, fontsize=7)
    floor = [r["cpu_ms"] * 1e3 for r in rows if r["name"] == "copy_state/states:256"]
    if floor:
        ax.axvline(floor[0], color="k", linestyle=":", label="memory floor (copy of the state bytes)")
        ax.axvline(2 * floor[0], color="tab:red", linestyle="--", label="2 × floor (target)")
        ax.legend(fontsize=7, loc="lower right")
    ax.set_xlabel("time per call (µs, one core)")
    ax.set_title(f"decode_step, B=1 H=16 K=V=128 (1 MiB state) — {machine(ctx)}", fontsize=9)
    ax.grid(True, axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    results = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "results")
    try:
        plt = plt_module()
    except ImportError:
        sys.exit("bench/plot.py needs matplotlib: pip install matplotlib")
    made = []

    def path(name):
        return os.path.join(results, name)

    def have(name):
        return os.path.exists(path(name))

    if have("forms_sweep.json"):
        rows, ctx = load(path("forms_sweep.json"))
        made += [plot_tokens_vs_T(plt, rows, ctx, path("tokens_vs_T.png")),
                 plot_softmax_crossover(plt, rows, ctx, path("softmax_crossover.png")),
                 plot_chunk_sweep(plt, rows, ctx, path("chunk_sweep.png"))]
    if have("forms.json"):
        rows, ctx = load(path("forms.json"))
        made.append(plot_main_job(plt, rows, ctx, path("main_job.png")))
    if have("gated_delta.json"):
        rows, ctx = load(path("gated_delta.json"))
        made.append(plot_delta_chunks(plt, rows, ctx, path("chunk_sweep_delta.png")))
    if have("threads.json"):
        rows, ctx = load(path("threads.json"))
        made.append(plot_threads(plt, rows, ctx, path("thread_scaling.png")))
    if have("decode.json"):
        rows, ctx = load(path("decode.json"))
        made.append(plot_decode(plt, rows, ctx, path("decode.png")))
    made = [m for m in made if m]
    for m in made:
        print(f"wrote {os.path.relpath(m)}")
    if not made:
        print(f"no benchmark JSON in {results}: run build/bench/linattn_bench_forms first")


if __name__ == "__main__":
    main()
