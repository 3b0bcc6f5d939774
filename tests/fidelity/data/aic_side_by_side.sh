#!/usr/bin/env bash
# Regenerates aic_side_by_side.csv: AIConfigurator 0.12's own estimate of each configuration
# that tests/fidelity/aic_side_by_side.rs prices with pdsim (docs/performance-model.md §2.3).
# Needs `pip install aiconfigurator==0.12.0` (a peer, not a dependency; nothing here runs in CI).
# Columns: id, model (AIC's HF id), gpu (AIC system), tp, ep (MoE EP; 1 = TP-sharded experts),
# mode (gen: decode step = AIC's TPOT; ctx: one prefill = AIC's TTFT), batch, isl, osl, aic_ms.
set -euo pipefail
cd "$(dirname "$0")"
out=aic_side_by_side.csv
rows=(
  # id                model                              gpu       tp ep mode batch isl   osl
  "8b-h100-gen1       meta-llama/Meta-Llama-3.1-8B       h100_sxm  1  1  gen  1     1024  256"
  "8b-h100-gen64      meta-llama/Meta-Llama-3.1-8B       h100_sxm  1  1  gen  64    1024  256"
  "8b-h100-gen256     meta-llama/Meta-Llama-3.1-8B       h100_sxm  1  1  gen  256   1024  256"
  "8b-h100-gen512     meta-llama/Meta-Llama-3.1-8B       h100_sxm  1  1  gen  512   1024  256"
  "8b-h100-ctx128     meta-llama/Meta-Llama-3.1-8B       h100_sxm  1  1  ctx  1     128   2"
  "8b-h100-ctx2k      meta-llama/Meta-Llama-3.1-8B       h100_sxm  1  1  ctx  1     2048  2"
  "8b-h100-ctx32k     meta-llama/Meta-Llama-3.1-8B       h100_sxm  1  1  ctx  1     32768 2"
  "8b-tp8-h100-ctx1k  meta-llama/Meta-Llama-3.1-8B       h100_sxm  8  1  ctx  1     1024  2"
  "8b-tp8-h100-ctx8k  meta-llama/Meta-Llama-3.1-8B       h100_sxm  8  1  ctx  1     8192  2"
  "70b-h100-gen124    meta-llama/Meta-Llama-3.1-70B      h100_sxm  4  1  gen  124   1024  256"
  "70b-h100-gen1      meta-llama/Meta-Llama-3.1-70B      h100_sxm  4  1  gen  1     1024  256"
  "70b-h100-ctx1k     meta-llama/Meta-Llama-3.1-70B      h100_sxm  4  1  ctx  1     1024  2"
  "70b-tp8-h100-gen256 meta-llama/Meta-Llama-3.1-70B     h100_sxm  8  1  gen  256   2048  256"
  "70b-b200-gen256    meta-llama/Meta-Llama-3.1-70B      b200_sxm  4  1  gen  256   1024  256"
  "70b-b200-ctx4k     meta-llama/Meta-Llama-3.1-70B      b200_sxm  4  1  ctx  1     4096  2"
  "q32b-h100-gen64    Qwen/Qwen3-32B                     h100_sxm  2  1  gen  64    2048  256"
  "q32b-h100-ctx8k    Qwen/Qwen3-32B                     h100_sxm  2  1  ctx  1     8192  2"
  "q235b-h200-gen128  Qwen/Qwen3-235B-A22B               h200_sxm  8  8  gen  128   2048  256"
  "q235b-h200-ctx4k   Qwen/Qwen3-235B-A22B               h200_sxm  8  8  ctx  1     4096  2"
  "q235b-h100-tp-gen64 Qwen/Qwen3-235B-A22B              h100_sxm  8  1  gen  64    1024  256"
  "8b-a100-gen64      meta-llama/Meta-Llama-3.1-8B       a100_sxm  1  1  gen  64    1024  256"
  "ds3-h200-gen64     deepseek-ai/DeepSeek-V3            h200_sxm  8  8  gen  64    2048  256"
  "ds3-h200-gen256    deepseek-ai/DeepSeek-V3            h200_sxm  8  8  gen  256   2048  256"
  "ds3-h200-ctx4k     deepseek-ai/DeepSeek-V3            h200_sxm  8  8  ctx  1     4096  2"
  "ds3-h200-ctx2kx8   deepseek-ai/DeepSeek-V3            h200_sxm  8  8  ctx  8     2048  2"
  "ds3-b200-gen128    deepseek-ai/DeepSeek-V3            b200_sxm  8  8  gen  128   2048  256"
  "ds3-b200-ctx4k     deepseek-ai/DeepSeek-V3            b200_sxm  8  8  ctx  1     4096  2"
  "8b-a100-ctx512     meta-llama/Meta-Llama-3.1-8B       a100_sxm  1  1  ctx  1     512   2"
)
echo "id,model,gpu,tp,ep,mode,batch,isl,osl,aic_ms" > "$out"
for r in "${rows[@]}"; do
  read -r id model gpu tp ep mode batch isl osl <<<"$r"
  args=(--model-path "$model" --system "$gpu" --backend sglang --batch-size "$batch" --isl "$isl" --osl "$osl" --tp-size "$tp")
  if [ "$ep" != 1 ]; then
    args+=(--moe-ep-size "$ep" --moe-tp-size 1)
  elif [[ "$model" == *A22B* ]]; then
    # A MoE model without EP: its experts TP-sharded over the instance.
    args+=(--moe-ep-size 1 --moe-tp-size "$tp")
  fi
  if [ "$mode" = gen ]; then
    ms=$(aiconfigurator cli estimate "${args[@]}" --estimate-mode static_gen 2>/dev/null | awk '/TPOT:/{print $2}')
  else
    ms=$(aiconfigurator cli estimate "${args[@]}" --estimate-mode static_ctx 2>/dev/null | awk '/TTFT:/{print $2}')
  fi
  echo "$id,$model,$gpu,$tp,$ep,$mode,$batch,$isl,$osl,${ms:-}" | tee -a "$out"
done
