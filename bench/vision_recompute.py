"""Per-block recompute on paddle.vision models: blocks found, and the CPU allocator peak at r=0 vs r=2.

Each measurement is a fresh child process: the model (num_classes=10) gets its first r blocks recomputed, then
AdamW trains one warmup step (the optimizer state exists after it), the host "Allocated" peak is reset, and one
measured step reads the peak. Archs run one after another (a 2-core machine) on 64x64 images, or the smallest
size an arch's fixed-size head accepts (AlexNet: 224). Prints a markdown table.

Recompute lowers a peak reached while activations are held (end of forward, early backward). A peak at the end of
backward, where all weight gradients exist and the first layer's gradients are in flight, is the same for every r:
VGG11's at accumulation 1 (equal r=0 and r=2 peaks at 64x64 and at 128x128).

    python bench/vision_recompute.py [--batch 8] [--recompute 0 2] [--out FILE] [ARCH ...]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MiB = 1 << 20

# arch -> image size: 64, or the smallest size the arch's fixed-size head accepts (AlexNet's fc6 needs 6x6).
ARCHS = {
    "resnet18": 64, "resnet34": 64, "resnet50": 64, "resnet101": 64, "resnet152": 64, "resnext50_32x4d": 64,
    "wide_resnet50_2": 64, "vgg11": 64, "vgg13": 64, "vgg16": 64, "vgg19": 64, "mobilenet_v1": 64,
    "mobilenet_v2": 64, "mobilenet_v3_small": 64, "mobilenet_v3_large": 64, "densenet121": 64,
    "squeezenet1_1": 64, "shufflenet_v2_x1_0": 64, "alexnet": 224,
}

CHILD = """
import json, sys
import paddle
import paddle.nn.functional as F
from paddle.base import core
from vramtune.child.blocks import apply_recompute

arch, size, batch, recomputed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
paddle.set_device("cpu")
paddle.seed(0)
model = getattr(paddle.vision.models, arch)(num_classes=10)
total, path = apply_recompute(model, recomputed)
model.train()
optimizer = paddle.optimizer.AdamW(learning_rate=1e-3, parameters=model.parameters())
images, labels = paddle.randn([batch, 3, size, size]), paddle.randint(0, 10, [batch])

def step():
    F.cross_entropy(model(images), labels).backward()
    optimizer.step()
    optimizer.clear_grad(set_to_zero=False)

step()
core.host_memory_stat_reset_peak_value("Allocated", 0)
step()
print(json.dumps({"peak": int(core.host_memory_stat_peak_value("Allocated", 0)), "total": total, "path": path}))
"""


def measure(arch: str, size: int, batch: int, recomputed: int) -> dict:
    """One fresh child: {"peak": bytes, "total": blocks found, "path": block_path}."""
    done = subprocess.run([sys.executable, "-c", CHILD, arch, str(size), str(batch), str(recomputed)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"{arch} r={recomputed}: {done.stderr.strip().splitlines()[-1:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def row(arch: str, size: int, batch: int, recomputed: list[int]) -> str:
    results = [measure(arch, size, batch, r) for r in recomputed]
    peaks = [result["peak"] for result in results]
    ratio = peaks[-1] / peaks[0]
    cells = [arch, f"{size}x{size}", str(results[0]["total"]), results[0]["path"] or "-",
             *(f"{peak / MiB:.1f}" for peak in peaks), f"{ratio:.4f}", "yes" if ratio < 1 else "NO"]
    return "| " + " | ".join(cells) + " |"


def header(recomputed: list[int]) -> list[str]:
    peaks = " | ".join(f"peak r={r} MiB" for r in recomputed)
    ratio = f"ratio r={recomputed[-1]}/r={recomputed[0]}"
    return [f"| arch | image | total_blocks | block_path | {peaks} | {ratio} | lower |",
            "|---|---|---:|---|" + "---:|" * (len(recomputed) + 1) + "---|"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("archs", nargs="*", default=list(ARCHS))
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--recompute", type=int, nargs="+", default=[0, 2], help="recomputed_blocks to measure")
    parser.add_argument("--out", type=Path, help="also write the table here")
    args = parser.parse_args()
    lines = header(args.recompute)
    print("\n".join(lines), flush=True)
    start = time.monotonic()
    for arch in args.archs:
        lines.append(row(arch, ARCHS[arch], args.batch, args.recompute))
        print(lines[-1], flush=True)
    lines.append(f"\nmicro-batch {args.batch}, CPU, {time.monotonic() - start:.0f} s in all")
    print(lines[-1])
    if args.out:
        args.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
