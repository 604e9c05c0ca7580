"""The activation coefficients of vramtune/estimating/analytic.py, remeasured: PaddleFormers' Llama and ERNIE-4.5
built from a config on CPU (fp32, eager attention, unfused RMSNorm), one AdamW training step, the host allocator's
peak less the weights, the optimizer state and the gradients; per layer and sample from 1 and 2 layers at 4 and 8
samples. Solves the coefficients from four shapes per family (and the logits' from two vocabularies), prints them
beside analytic.py's, then a held-out shape of each family at 2 and 4 layers, predicted against measured.

    python bench/estimate_activations.py
"""
from __future__ import annotations

import json
import math
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

from vramtune.memory import analytic  # noqa: E402
from vramtune.memory.architecture import architecture  # noqa: E402
from vramtune.memory.fitting import linear_fit  # noqa: E402


def llama(h: int, f: int, a: int, kv: int, vocab: int) -> dict:
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": h, "intermediate_size": f,
            "num_attention_heads": a, "num_key_value_heads": kv, "vocab_size": vocab, "rms_norm_eps": 1e-5,
            "tie_word_embeddings": False, "num_hidden_layers": 1}


def ernie(h: int, f: int, a: int, kv: int, vocab: int) -> dict:
    return {"architectures": ["Ernie4_5_ForCausalLM"], "model_type": "ernie4_5", "hidden_size": h,
            "intermediate_size": f, "num_attention_heads": a, "num_key_value_heads": kv, "vocab_size": vocab,
            "rms_norm_eps": 1e-5, "num_hidden_layers": 1}


FIT = {  # family: [(config, seq)]: the hidden size, the intermediate size, the key/value width, heads x seq
    "separate": [(llama(256, 688, 4, 4, 1000), 256), (llama(256, 1376, 4, 4, 1000), 256),
                 (llama(384, 688, 4, 2, 1000), 256), (llama(256, 688, 8, 8, 1000), 512)],
    "fused": [(ernie(256, 688, 4, 4, 1000), 256), (ernie(256, 1376, 4, 4, 1000), 256),
              (ernie(384, 688, 4, 2, 1000), 256), (ernie(256, 688, 8, 8, 1000), 512)],
}
VOCAB = (llama(256, 688, 4, 4, 4000), 256)  # against FIT["separate"][0]: the logits' coefficient
HELD_OUT = [(llama(320, 864, 5, 5, 3000), 384), (ernie(320, 864, 5, 5, 3000), 384)]


def measure(config: dict, folder: Path, micro: int, seq: int, layers: int, recompute: bool = False) -> int:
    """fp32 activation bytes of one training step (AdamW) of `config` at `layers` layers, built by PaddleFormers on
    CPU: the host allocator's peak in the second step less what was allocated before it, less the gradients. With
    every layer recomputed as PaddleFormers' workflow sets it on the model's configuration."""
    import paddle
    from paddle.base import core
    from paddleformers.transformers import AutoConfig, AutoModelForCausalLM

    paddle.set_device("cpu")
    (folder / "config.json").write_text(json.dumps({**config, "num_hidden_layers": layers}))
    built = AutoConfig.from_pretrained(str(folder))
    built._attn_implementation, built.fuse_rms_norm = "eager", False  # the CPU's kernels
    if recompute:
        built.recompute_granularity, built.recompute_method, built.recompute_num_layers = "full", "uniform", 1
    paddle.seed(0)
    model = AutoModelForCausalLM.from_config(built)
    model.train()
    optimizer = paddle.optimizer.AdamW(1e-4, parameters=model.parameters())
    ids = paddle.randint(0, config["vocab_size"], [micro, seq])

    def step() -> None:
        out = model(input_ids=ids, labels=ids)
        (out[0] if isinstance(out, (tuple, list)) else out.loss).backward()
        optimizer.step()
        optimizer.clear_grad(set_to_zero=False)

    step()  # the optimizer's state exists from here on
    before = core.host_memory_stat_current_value("Allocated", 0)
    core.host_memory_stat_reset_peak_value("Allocated", 0)
    step()
    gradients = 4 * sum(math.prod(p.shape) for p in model.parameters() if not p.stop_gradient)
    return core.host_memory_stat_peak_value("Allocated", 0) - before - gradients


def slopes(config: dict, seq: int, folder: Path) -> tuple[float, float]:
    """(per layer and sample, outside the layers per sample), from 1 and 2 layers at 4 and 8 samples."""
    r = {(layers, m): measure(config, folder, m, seq, layers) for layers in (1, 2) for m in (4, 8)}
    layer = ((r[2, 8] - r[1, 8]) / 8 + (r[2, 4] - r[1, 4]) / 4) / 2
    return layer, (r[1, 8] - r[1, 4]) / 4 - layer


def main() -> None:
    folder = Path(tempfile.mkdtemp(prefix="vramtune-activations-"))
    for family, shapes in FIT.items():
        rows, values = [], []
        for config, seq in shapes:
            h, a = config["hidden_size"], config["num_attention_heads"]
            kv = config["num_key_value_heads"] * h // a
            rows.append([seq * h, seq * kv, seq * config["intermediate_size"], a * seq * seq])
            values.append(slopes(config, seq, folder)[0])
        fitted = linear_fit(rows, values)
        assert fitted is not None, rows
        stated = analytic.FUSED if family == "fused" else analytic.SEPARATE
        print(f"{family}: C_h C_kv C_f C_a measured {', '.join(f'{c:.2f}' for c in fitted)}; analytic.py "
              f"{stated.hidden}, {stated.kv}, {stated.intermediate}, {stated.scores}", flush=True)
    base, wide = slopes(*FIT["separate"][0], folder)[1], slopes(*VOCAB, folder)[1]
    print(f"logits: {(wide - base) / (256 * 3000):.2f} bytes per token and vocabulary entry; analytic.py "
          f"{analytic.LOGITS}", flush=True)
    recompute = []
    for config, seq in (FIT["separate"][0], FIT["fused"][0]):
        fit = analytic.activations(architecture({**config, "num_hidden_layers": 4}), seq, flash=False)
        measured = measure(config, folder, 8, seq, 4, recompute=True) / 8 - 4 * fit.kept
        recompute.append(([fit.outside, fit.layer], measured))
    outside, layer = linear_fit([row for row, _ in recompute], [value for _, value in recompute]) or (0.0, 0.0)
    print(f"recompute: x{layer:.2f} of a layer, x{outside:.2f} of the outside; analytic.py "
          f"x{analytic.RECOMPUTE_LAYER}, x{analytic.RECOMPUTE_OUTSIDE}", flush=True)
    for config, seq in HELD_OUT:
        for layers, recomputed in ((2, 0), (4, 0), (4, 4)):
            arch = architecture({**config, "num_hidden_layers": layers})
            predicted = analytic.activations(arch, seq, flash=False).activations(layers, 8, recomputed)
            measured = measure(config, folder, 8, seq, layers, recompute=bool(recomputed))
            print(f"held out {config['model_type']} h={config['hidden_size']} s={seq} {layers} layers m=8"
                  + (" every layer recomputed" if recomputed else "") + ": predicted "
                  f"{predicted / 2**20:.1f} MiB, measured {measured / 2**20:.1f} MiB "
                  f"({(predicted - measured) / measured:+.1%})", flush=True)


if __name__ == "__main__":
    main()
