"""The question asked before the card: Llama-2-7B with LoRA r=8, bf16, seq 2048, on a 24 GiB card. Runs
`vramtune estimate` on a configuration-only folder (no weights) and reports its wall time and the peak memory of
every vramtune process together (the CLI, its fork server and probes, polled from /proc).

    python bench/estimate_7b.py [--card 24GiB]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LLAMA_2_7B = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
              "intermediate_size": 11008, "num_hidden_layers": 32, "num_attention_heads": 32,
              "num_key_value_heads": 32, "vocab_size": 32000, "max_position_embeddings": 4096, "rms_norm_eps": 1e-5,
              "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}
ARGUMENTS = {"model_name_or_path": "./llama-2-7b", "output_dir": "./checkpoints", "per_device_train_batch_size": 16,
             "gradient_accumulation_steps": 1, "max_length": 2048, "lora": True, "lora_rank": 8, "bf16": True,
             "fp16_opt_level": "O2", "learning_rate": 3e-4}


def tree_rss(root: int) -> int:
    """Resident bytes of a process and all its descendants."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        pid = int(entry.name)
        children.setdefault(int(fields["PPid"]), []).append(pid)
        rss[pid] = int(fields.get("VmRSS", "0 kB").split()[0]) * 1024
    total, stack = 0, [root]
    while stack:
        pid = stack.pop()
        total += rss.get(pid, 0)
        stack.extend(children.get(pid, []))
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--card", default="24GiB")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="estimate-7b-"))
    (folder / "llama-2-7b").mkdir()
    (folder / "llama-2-7b" / "config.json").write_text(json.dumps(LLAMA_2_7B))
    (folder / "lora.json").write_text(json.dumps(ARGUMENTS))
    vramtune = Path(sys.executable).with_name("vramtune")
    start, peak = time.monotonic(), 0
    env = {**os.environ, "VRAMTUNE_CACHE": str(folder / "cache")}
    with subprocess.Popen([str(vramtune), "estimate", "lora.json", "--card", args.card, "--json"], cwd=folder,
                          env=env, stdout=subprocess.PIPE, stderr=sys.stderr, text=True) as process:
        while process.poll() is None:
            peak = max(peak, tree_rss(process.pid))
            time.sleep(0.2)
        out = process.stdout.read() if process.stdout else ""
    wall = time.monotonic() - start
    if process.returncode:
        sys.exit(f"vramtune estimate failed with exit code {process.returncode}")
    best = json.loads(out).get("best")
    answer = (f"{best['precision']} m={best['micro_batch']} k={best['accumulation']} r={best['recomputed_blocks']}, "
              f"{best['reserved_bytes'] / 2**30:.1f} GiB reserved" if best else "nothing fits")
    print(f"Llama-2-7B LoRA r=8 bf16 seq 2048 on {args.card}: {wall:.1f} s, {peak / 2**30:.2f} GiB peak RSS of the "
          f"process tree; predicted best: {answer}")


if __name__ == "__main__":
    main()
