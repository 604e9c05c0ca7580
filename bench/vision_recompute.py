"""Per-block recompute on paddle.vision models: blocks found, and the CPU allocator peak at r=0 vs r=2.

Each measurement is one real probe, as `vramtune measure SPEC -m 8 -r R` runs it: a fresh child, AdamW, a
warmup step until the optimizer state exists, then the host "Allocated" peak of one measured step. Archs run
one after another (a 2-core machine) on 64x64 images, or the smallest size an arch's fixed-size head accepts
(AlexNet: 224). Prints a markdown table.

Recompute lowers a peak reached while activations are held (end of forward, early backward); on weight-heavy
models (VGG, AlexNet) most of the peak is weights, gradients and AdamW state, so the ratio stays near 1.

    python bench/vision_recompute.py [--batch 8] [--recompute 0 2] [--out FILE] [ARCH ...]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
MiB = 1 << 20

# arch -> image size: 64, or the smallest size the arch's fixed-size head accepts (AlexNet's fc6 needs 6x6).
ARCHS = {
    "resnet18": 64, "resnet34": 64, "resnet50": 64, "resnet101": 64, "resnet152": 64, "resnext50_32x4d": 64,
    "wide_resnet50_2": 64, "vgg11": 64, "vgg13": 64, "vgg16": 64, "vgg19": 64, "mobilenet_v1": 64,
    "mobilenet_v2": 64, "mobilenet_v3_small": 64, "mobilenet_v3_large": 64, "densenet121": 64,
    "squeezenet1_1": 64, "shufflenet_v2_x1_0": 64, "alexnet": 224,
}

def measure(arch: str, size: int, batch: int, recomputed: int) -> dict:
    """One real probe (a fresh child, as `vramtune measure` runs it): {"peak", "total", "path"}."""
    from vramtune.core.strategy import Strategy
    from vramtune.probing.runner import ChildBackend
    from vramtune.spec import spec_from_dict
    from vramtune.tuning.session import measure as probe
    from vramtune.tuning.session import open_session

    spec = spec_from_dict({"name": arch, "model": {"source": "vision", "arch": arch},
                           "data": {"image_size": size, "num_classes": 10}, "train": {"target_batch": batch},
                           "device": "cpu", "budget": "64GiB", "probe": {"steps": 1, "warmup": 1, "timeout": 600}},
                          str(ROOT / "bench" / f"{arch}.yaml"))
    result = probe(open_session(spec, ChildBackend(), print), Strategy(micro_batch=batch, recomputed_blocks=recomputed),
                   print)
    if not result.measured:
        raise RuntimeError(f"{arch} r={recomputed}: {result.status}: {result.error}")
    facts = result.facts
    return {"peak": result.peak_bytes, "total": facts.get("total_blocks"), "path": facts.get("block_path")}


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
