"""Whether a probe at a reduced sequence could stand in for one at the model's (issue 27): the activations of
Llama-2-7B's layer as the estimate probes it (width x0.125, LoRA r=8, PaddleNLP, fp32 on CPU, vocabulary 2,000), at
depth 1 and 2, 1 and 2 samples, and twice the vocabulary, at sequence lengths 256, 512, 1024 and 2048. Each figure at
the two shortest is fitted as a s + b s^2 (no constant: every tensor of a sample grows with its tokens, the attention
scores with their square) and the two longest predicted from it, against measured, in bytes: 8 of 8 to the byte.
vramtune's own probes hold a constant beside these (each layer's rotary cache, 4,194,560 B at 4,096 positions), so the
estimate fits c + a s + b s^2 through three sequences and checks a fourth (vramtune/estimating/sequence.py,
docs/estimate-reference.md).

    python bench/estimate_sequence.py        (.venv26: PaddleNLP; each point its own process)
"""
from __future__ import annotations

import subprocess
import sys

SEQUENCES = (256, 512, 1024, 2048)
POINTS = ((1, 1, 2000), (2, 1, 2000), (1, 2, 2000), (1, 1, 4000))  # (depth, micro-batch, vocabulary)
CHILD = r"""
import json, sys, zlib
import paddle
from paddle.base import core
from paddlenlp.peft import LoRAConfig, LoRAModel
from paddlenlp.transformers import LlamaConfig, LlamaForCausalLM
depth, micro, vocab, seq = map(int, sys.argv[1:5])
paddle.set_device("cpu")
config = LlamaConfig(hidden_size=512, intermediate_size=1376, num_hidden_layers=depth, num_attention_heads=4,
                     num_key_value_heads=4, vocab_size=vocab, max_position_embeddings=4096)
targets = [f".*{name}.*" for name in ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")]
model = LoRAModel(LlamaForCausalLM(config), LoRAConfig(target_modules=targets, r=8, lora_alpha=16))
model.mark_only_lora_as_trainable()
model.train()
optimizer = paddle.optimizer.AdamW(parameters=[p for p in model.parameters() if not p.stop_gradient])
ids = paddle.randint(0, vocab, [micro, seq])
for _ in range(2):  # the second step's peak over what it starts with: its activations
    before = core.host_memory_stat_current_value("Allocated", 0)
    out = model(input_ids=ids, labels=ids)
    (out[0] if isinstance(out, tuple) else out.loss).backward()
    optimizer.step()
    optimizer.clear_grad()
print(json.dumps(core.host_memory_stat_peak_value("Allocated", 0) - before))
"""


def measure(depth: int, micro: int, vocab: int, seq: int) -> int:
    out = subprocess.run([sys.executable, "-c", CHILD, str(depth), str(micro), str(vocab), str(seq)], check=True,
                         capture_output=True, text=True).stdout
    return int(out.strip().splitlines()[-1])


def main() -> None:
    s1, s2, *held_out = SEQUENCES
    for depth, micro, vocab in POINTS:
        measured = {seq: measure(depth, micro, vocab, seq) for seq in SEQUENCES}
        square = (measured[s2] / s2 - measured[s1] / s1) / (s2 - s1)  # a s + b s^2 through both
        linear = measured[s1] / s1 - square * s1
        for seq in held_out:
            predicted = round(linear * seq + square * seq * seq)
            print(f"depth {depth} m={micro} vocabulary {vocab:,} seq {seq}: predicted from {s1} and {s2} "
                  f"{predicted:,} B, measured {measured[seq]:,} B, difference {predicted - measured[seq]:+,} B",
                  flush=True)


if __name__ == "__main__":
    main()
