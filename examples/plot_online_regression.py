#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Plots the per-step losses written by the online_regression example (needs matplotlib).

usage: plot_online_regression.py online_regression.csv [online_regression.png]
"""
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

src = sys.argv[1] if len(sys.argv) > 1 else "online_regression.csv"
dst = sys.argv[2] if len(sys.argv) > 2 else src.rsplit(".", 1)[0] + ".png"
with open(src) as f:
    rows = list(csv.DictReader(f))
t = [int(r["t"]) for r in rows]
labels = {"naive": "naive forecaster", "linear_attention": "linear attention (output-normalised)",
          "rls": "unweighted RLS", "softmax": "softmax (QK-norm)", "p1_attention": "p = 1 attention"}
fig, ax = plt.subplots(figsize=(8, 4.5))
for key, label in labels.items():
    ax.plot(t, [float(r[key]) for r in rows], label=label, lw=1.4)
ax.axvline(len(t) / 4, color="grey", ls="--", lw=0.8)
ax.set_yscale("log")
ax.set_xlabel("t")
ax.set_ylabel("loss $||v_{t+1} - y_t||^2$ (mean over seeds)")
ax.set_title("Online regression on a switching AR process")
ax.legend(fontsize=8)
fig.tight_layout()
fig.savefig(dst, dpi=120)
print("wrote", dst)
