"""A 128k-vocabulary 8B model (Llama-3-8B's sizes) with LoRA r=16, bf16, seq 4096, on a 24 GiB card: the question a
new user asks, where the 4096 x 128,256 logits dominate every CPU probe. Same output and flags as estimate_7b.py.

    python bench/estimate_8b_128k.py [--card 24GiB] [--against DIR --rounds 2]
"""
from __future__ import annotations

from estimate_7b import ARGUMENTS, LLAMA_2_7B, bench

LLAMA_3_8B = {**LLAMA_2_7B, "intermediate_size": 14336, "num_key_value_heads": 8, "vocab_size": 128256,
              "max_position_embeddings": 8192, "rope_theta": 500000.0, "bos_token_id": 128000,
              "eos_token_id": 128001, "pad_token_id": None}
LORA_16 = {**ARGUMENTS, "max_length": 4096, "lora_rank": 16}

if __name__ == "__main__":
    bench("Llama-3-8B-sized (128k vocabulary) LoRA r=16 bf16 seq 4096", LLAMA_3_8B, LORA_16)
