"""The README's capacity-planning question, from Python (the notebook capacity_planning_70b.ipynb
has these cells; `python python/examples/notebook.py` regenerates it). Runs headless:

    MPLBACKEND=Agg python python/examples/capacity_planning_70b.py    # from the repository root

Writes results/notebook-70b/ (PDSIM_EXAMPLE_OUT overrides), with latency-cost.png.
"""

# %% [markdown]
# # Capacity planning: Llama-3.1-70B on H100 nodes
#
# *Azure conversation lengths at 20 req/s Poisson, p99 TTFT ≤ 2 s and p99 TPOT ≤ 100 ms:
# what is the cheapest prefill:decode split and TP?* `scenarios/plan/llama70b-azure-conv.toml`
# states the question (model, price per GPU-hour, the trace's lengths, the `[slo]`); pdsim
# answers it from Python with the same bytes as `pdsim plan`.

# %%
import os
from pathlib import Path

import matplotlib.pyplot as plt
from matplotlib.ticker import FuncFormatter
import pdsim

ROOT = Path.cwd()
while not (ROOT / "scenarios" / "plan").is_dir() and ROOT != ROOT.parent:
    ROOT = ROOT.parent  # run from anywhere inside the repository
OUT = Path(os.environ.get("PDSIM_EXAMPLE_OUT", ROOT / "results" / "notebook-70b"))
SCENARIO = ROOT / "scenarios" / "plan" / "llama70b-azure-conv.toml"
GRID = {
    "pools.prefill.instances": [1, 2, 3, 4],
    "pools.decode.instances": [1, 2, 3, 4],
    "pools.prefill.server.tp_size": [4, 8],
    "pools.decode.server.tp_size": [4, 8],
}

# %% [markdown]
# ## 1. Plan
# Every point of the 4 × 4 × 2 × 2 grid on 3 seeds (`full_grid=True`, so the sweep holds the
# whole trade-off; the cheapest-first search gives the same answer in fewer runs). A run stops
# once its `[slo]` is lost.

# %%
plan = pdsim.plan(SCENARIO, GRID, rate=20, seeds=3, full_grid=True, out=OUT / "plan")
best = plan.answer["best"]
print("cheapest point meeting [slo] at 20 req/s:", dict(best["values"]))
print(f"  {best['gpus']} GPUs on {best['nodes']} nodes, ${best['usd_per_hour']:.2f}/hour;",
      f"{plan.answer['runs']} runs")

# %% [markdown]
# ## 2. The sweep in pandas
# `plan.rows` is `sweep.csv` as columns; one row per point and seed. A point meets `[slo]`
# when every seed does, and its latency is its worst seed's.

# %%
df = plan.to_pandas()
keys = list(GRID)
points = (
    df.groupby(keys, observed=True)
    .agg(
        ttft_p99_ms=("ttft_p99_ms", "max"),
        tpot_p99_ms=("tpot_p99_ms", "max"),
        usd_per_hour=("usd_per_hour", "first"),
        gpus=("gpus", "first"),
        slo_met=("slo_met", "all"),
    )
    .reset_index()
    .sort_values(["usd_per_hour", "ttft_p99_ms"])
)
points["label"] = [
    f"{p}P·tp{ptp} {d}D·tp{dtp}"
    for p, d, ptp, dtp in points[keys].itertuples(index=False)
]
print(points[points.slo_met].head(8).to_string(index=False))

# %% [markdown]
# ## 3. The latency–cost trade-off
# Worst-seed p99 TTFT against the price of the point; green points meet `[slo]`, the line is
# the Pareto front (no point is both cheaper and faster), the star the plan's answer.

# %%
fig, ax = plt.subplots(figsize=(8, 5))
met, missed = points[points.slo_met], points[~points.slo_met]
ax.scatter(missed.usd_per_hour, missed.ttft_p99_ms / 1e3, c="0.7", label="misses [slo]")
ax.scatter(met.usd_per_hour, met.ttft_p99_ms / 1e3, c="tab:green", label="meets [slo]")
front, fastest = [], float("inf")
for row in points.itertuples():
    if row.ttft_p99_ms < fastest:
        front.append(row)
        fastest = row.ttft_p99_ms
ax.step([r.usd_per_hour for r in front], [r.ttft_p99_ms / 1e3 for r in front],
        where="post", c="tab:blue", lw=1, label="Pareto front")
ax.scatter([best["usd_per_hour"]], [max(s["ttft_p99_ms"] for s in best["seeds"]) / 1e3],
           marker="*", s=300, c="gold", edgecolors="k", zorder=3, label="plan's answer")
ax.axhline(2.0, ls="--", c="tab:red", lw=1, label="p99 TTFT target (2 s)")
ax.set_yscale("log")
for axis in (ax.yaxis.set_major_formatter, ax.yaxis.set_minor_formatter):
    axis(FuncFormatter(lambda v, _: f"{v:g}"))
ax.set_xlabel("cost, $/hour")
ax.set_ylabel("worst-seed p99 TTFT, s")
ax.set_title("Llama-3.1-70B at 20 req/s: latency against cost (64 points × 3 seeds)")
ax.legend(loc="upper right", fontsize=8)
fig.tight_layout()
OUT.mkdir(parents=True, exist_ok=True)
fig.savefig(OUT / "latency-cost.png", dpi=100)
print("wrote", OUT / "latency-cost.png")

# %% [markdown]
# ## 4. Check the answer on seeds the plan never saw
# `best.toml` is runnable as it is (its paths are rewritten to run from the plan's folder).

# %%
for seed in (101, 102):
    r = pdsim.run(plan.dir / "best.toml", seed=seed, summary_only=True)
    t = {x["key"]: round(x["value"], 1) for x in r.summary["slo"]["targets"]}
    print(f"seed {seed}: [slo] met = {r.summary['slo']['met']}, {t}")
