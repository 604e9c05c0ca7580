"""The activation coefficients of vramtune/estimating/llama.py (the auto_tuner tool's Llama model), fitted to
vramtune's CPU probes of Llamas of several shapes: per layer and sample, fp32 bytes = SBH*s*h + SBF*s*f + AS2*a*s^2;
per sample outside the layers, LOGITS*s*V (+ a small rest). Prints the fit and each shape's residual.

    python bench/llama_activations.py
"""
from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

from vramtune.estimating import llama  # noqa: E402
from vramtune.estimating.run import estimate  # noqa: E402
from vramtune.runner import ChildBackend  # noqa: E402
from vramtune.search.fitting import linear_fit  # noqa: E402
from vramtune.spec import load_spec  # noqa: E402

SHAPES = [  # hidden, intermediate, heads, seq, vocab
    (128, 344, 4, 128, 1000), (128, 344, 4, 512, 1000), (256, 688, 4, 256, 1000), (256, 1376, 8, 256, 4000),
    (512, 1376, 8, 128, 2000), (384, 1024, 6, 384, 3000),
]


def main() -> None:
    backend = ChildBackend()
    folder = Path(tempfile.mkdtemp(prefix="vramtune-llama-"))
    measured = []
    try:
        for index, (h, f, a, s, v) in enumerate(SHAPES):
            model = folder / f"llama-{index}"
            model.mkdir()
            (model / "config.json").write_text(json.dumps({
                "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": h,
                "intermediate_size": f, "num_hidden_layers": 4, "num_attention_heads": a, "vocab_size": v,
                "max_position_embeddings": 2048, "rms_norm_eps": 1e-6}))
            spec = folder / f"llama-{index}.yaml"
            spec.write_text(yaml.safe_dump({"model": {"source": "paddlenlp", "config": str(model)},
                                            "data": {"seq_len": s}, "train": {"target_batch": 4},
                                            "device": "cpu", "budget": "8GiB"}))
            fit = estimate(load_spec(spec), backend, 8 << 30, None, 1, lambda line: None).fit
            measured.append(((h, f, a, s, v), fit.b1, fit.b0))
            print(f"h={h} f={f} a={a} s={s} V={v}: per layer {fit.b1:,.0f} B/sample, outside {fit.b0:,.0f}", flush=True)
    finally:
        shutil.rmtree(folder)
    layer = linear_fit([[s * h, s * f, a * s * s] for (h, f, a, s, v), _, _ in measured], [b1 for _, b1, _ in measured])
    outside = linear_fit([[s * v, s * h] for (h, f, a, s, v), _, _ in measured], [b0 for _, _, b0 in measured])
    print(f"\nACTIVATION_SBH = {layer[0]:.2f}  ACTIVATION_SBF = {layer[1]:.2f}  ACTIVATION_AS2B = {layer[2]:.2f}")
    print(f"LOGITS_BYTES = {outside[0]:.2f}  (and {outside[1]:.2f} B per token and hidden unit outside the layers)")
    print(f"in vramtune/estimating/llama.py: SBH {llama.ACTIVATION_SBH}, SBF {llama.ACTIVATION_SBF}, "
          f"AS2B {llama.ACTIVATION_AS2B}, LOGITS {llama.LOGITS_BYTES}")
    for (h, f, a, s, _), b1, _ in measured:
        model = llama.ACTIVATION_SBH * s * h + llama.ACTIVATION_SBF * s * f + llama.ACTIVATION_AS2B * a * s * s
        print(f"h={h} s={s}: measured {b1:,.0f}, llama.py {model:,.0f} ({model / b1 - 1:+.1%})")


if __name__ == "__main__":
    main()
