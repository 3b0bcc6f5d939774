#!/usr/bin/env python3
"""Writes the sglang-log and Prometheus samples beside this script from the bench_one_batch
sample (Splitwise's measured Llama-2-70B rows on 4 x H100, MIT; see README.md): the same
measurements as a PD prefill server's and a PD decode server's log, and as scrapes of the
decode server's /metrics, in sglang's formats (scheduler_metrics_mixin.py and
metrics/collector.py at sgl-project/sglang 01bb3c8 / 00ae9c1). Run from anywhere:
python3 make_observed.py. The output is deterministic."""

import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(HERE, "llama2-70b-h100-tp4.bench_one_batch.jsonl")
POOL = 400_000  # KV tokens in the decode server's pool (for `token usage`)


def stamp(t):
    h, rest = divmod(int(t), 3600)
    m, s = divmod(rest, 60)
    return f"2026-12-01 {10 + h:02d}:{m:02d}:{s:02d}"


def main():
    rows = [json.loads(l) for l in open(SRC) if l.strip()]
    # Prefill server: every record's batch scheduled back to back with more waiting; each
    # line's input throughput is the previous batch's tokens over its forward.
    t, prev, lines = 0.0, None, []
    for r in rows + [None]:
        bs, n = (r["batch_size"], r["batch_size"] * r["input_len"]) if r else (1, 8)
        thr = prev[0] / prev[1] if prev else 0.0
        queue = 8 if r else 0
        lines.append(
            f"[{stamp(t)} TP0] Prefill batch, #new-seq: {bs}, #new-token: {n}, #cached-token: 0, "
            f"token usage: 0.01, #running-req: 0, #queue-req: {queue}, #prealloc-req: 0, "
            f"#inflight-req: 1, input throughput (token/s): {thr:.2f}, "
        )
        if r:
            prev = (n, r["prefill_latency"])
            t += r["prefill_latency"]
    open(os.path.join(HERE, "llama2-70b-h100-tp4.prefill-server.log"), "w").write("\n".join(lines) + "\n")

    # Decode server: each record's batch held for four log lines (40 steps each, sglang's
    # --decode-log-interval). A line's interval after a change is half the old batch's steps
    # and half the new one's, and its throughput says so, as a real server's would.
    t, lines, prom = 0.0, [], []
    last = None
    steps = tokens = gpu_s = 0.0
    for r in (r for r in rows if r["output_len"] > 1):
        b, step = r["batch_size"], r["median_decode_latency"]
        held = b * (r["input_len"] + r["output_len"] // 2)
        for i in range(4):
            if i == 0 and last is not None:
                pb, ps = last
                tok, dt = 20 * pb + 20 * b, 20 * ps + 20 * step
            else:
                tok, dt = 40 * b, 40 * step
            t += dt
            usage = held / POOL
            lines.append(
                f"[{stamp(t)} TP0] Decode batch, #running-req: {b}, #token: {held}, "
                f"token usage: {usage:.2f}, pre-allocated usage: 0.00, #prealloc-req: 0, "
                f"#transfer-req: 0, #retracted-req: 0, cuda graph: True, "
                f"gen throughput (token/s): {tok / dt:.2f}, #queue-req: 0, "
            )
        last = (b, step)
        # A scrape after 1,000 steps at this batch (the counters as sglang 2026 keeps them).
        steps += 1000
        tokens += 1000 * b
        gpu_s += 1000 * step
        labels = 'engine_type="unified",model_name="meta-llama/Llama-2-70b-hf",pp_rank="0",tp_rank="0"'
        prom.append(
            "# HELP sglang:num_running_reqs The number of running requests.\n"
            "# TYPE sglang:num_running_reqs gauge\n"
            f"sglang:num_running_reqs{{{labels}}} {b}.0\n"
            "# HELP sglang:decode_sum_seq_lens The sum of all sequence lengths in decode.\n"
            "# TYPE sglang:decode_sum_seq_lens gauge\n"
            f"sglang:decode_sum_seq_lens{{{labels}}} {held}.0\n"
            "# HELP sglang:realtime_tokens_total Total number of tokens processed (updated on each log interval). mode: prefill_compute, prefill_cache, decode.\n"
            "# TYPE sglang:realtime_tokens_total counter\n"
            f"sglang:realtime_tokens_total{{{labels},mode=\"prefill_compute\"}} 0.0\n"
            f"sglang:realtime_tokens_total{{{labels},mode=\"prefill_cache\"}} 0.0\n"
            f"sglang:realtime_tokens_total{{{labels},mode=\"decode\"}} {tokens:.1f}\n"
            "# HELP sglang:gpu_execution_seconds_total Total time that GPU is busy executing a workload. Refer to ForwardMode for category labels.\n"
            "# TYPE sglang:gpu_execution_seconds_total counter\n"
            f"sglang:gpu_execution_seconds_total{{{labels},category=\"forward\"}} {gpu_s:.6f}\n"
            "# HELP sglang:cuda_graph_passes_total Total number of forward passes categorized by CUDA graph.\n"
            "# TYPE sglang:cuda_graph_passes_total counter\n"
            f"sglang:cuda_graph_passes_total{{{labels},mode=\"decode\"}} {steps:.1f}\n"
        )
    open(os.path.join(HERE, "llama2-70b-h100-tp4.decode-server.log"), "w").write("\n".join(lines) + "\n")
    # A first scrape of the idle server, before any step: every value 0.
    idle = []
    for line in prom[0].splitlines(keepends=True):
        if line.startswith("sglang:"):
            name, _ = line.rsplit(" ", 1)
            line = f"{name} 0.0\n"
        idle.append(line)
    open(os.path.join(HERE, "llama2-70b-h100-tp4.decode-server.prom"), "w").write("".join(idle) + "".join(prom))


if __name__ == "__main__":
    main()
