"""Writes distserve-a100-13b-{vllm,distserve}.csv: DistServe's fitted A100-80G latency models as
pdsim step-time profiles (`pools.step_times`).

Source (Apache-2.0, LICENSE.Apache-2.0.txt here; Copyright 2024 DistServe Authors):
LLMServe/DistServe@82831f1, `simdistserve/estimators/time_estimator.py` (the model: prefill
a + b*sum(len) + c*sum(len^2) ms; decode a + b*sum(ctx) + c*batch ms with separate coefficients
below and from batch 95; a per-step "ray overhead" of 2 + 1e-4 * tokens ms) and
`simdistserve/estimators/profile_data/profiler-a100-80g.*.json` (OPT-13B, TP 1). Changed from
the source: the coefficients are evaluated on a grid of shapes; a chunk over a cached prefix pays
the quadratic term of the pairs it adds. Run: python3 make_profiles.py
"""

ENGINES = {
    "distserve": ((18.1025, 0.101912, 7.1223e-6), (19.9347, 0.000626936, 0.0385070), (7.16619, 0.00057980, 0.158311)),
    "vllm": ((22.0522, 0.140509, 8.07658e-6), (23.4750, 0.000592934, 0.0607269), (20.2064, 0.000490773, 0.120003)),
}


def ray(tokens):
    return 2.0 + 0.0001 * tokens


for name, (pf, ds, dl) in ENGINES.items():
    rows = ["phase,tokens,batch_size,context_tokens,time_ms"]
    for t in [16, 64, 128, 256, 512, 1024, 1536, 2048, 3072, 4096, 8192]:
        for ctx in [0, 4096]:
            a, b, c = pf
            ms = a + b * t + c * ((t + ctx) ** 2 - ctx**2) + ray(t)
            rows.append(f"prefill,{t},,{ctx},{ms:.4f}")
    for bsz in [1, 2, 4, 8, 16, 32, 64, 94, 95, 128, 192, 256]:
        a, b, c = ds if bsz < 95 else dl
        for per in [16, 576, 2048]:
            ctx = bsz * per
            ms = a + b * ctx + c * bsz + ray(bsz)
            rows.append(f"decode,,{bsz},{ctx},{ms:.4f}")
    with open(f"distserve-a100-13b-{name}.csv", "w") as f:
        f.write("\n".join(rows) + "\n")
