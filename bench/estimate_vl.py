"""Vision-language fine-tuning before the card: how many 24 GiB or 80 GiB cards do PaddleOCR-VL, Qwen2.5-VL-7B and
ERNIE-4.5-VL-28B-A3B need for full SFT and LoRA, and how? Runs `vramtune estimate` on PaddleFormers VL-SFT configs
shaped like each model's recipe (PaddleOCR-VL as ERNIEKit's run_ocr_vl_sft_16k.yaml: 16,384 tokens packed, 1 x 8;
the others at 8,192 tokens, one image, 1 x 4; ERNIE-4.5-VL with ERNIEKit's freeze_vision and LoRA r=32), naming
local folders that hold only the published config.json (tests/specs/configs), at 1, 2, 4 ... 32 data-parallel ranks,
and prints the fewest that fit with their strategy as a Markdown table (docs/estimate.md).

    python bench/estimate_vl.py
"""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from estimate_paddleformers import ROOT, answer, described

MODELS = {  # folder: (config.json, the recipe's keys)
    "PaddleOCR-VL": ("paddleocr-vl.json", "max_seq_len: 16384\npacking: true\ngradient_accumulation_steps: 8\n"),
    "Qwen2.5-VL-7B": ("qwen2.5-vl-7b.json", "max_seq_len: 8192\ngradient_accumulation_steps: 4\n"),
    "ERNIE-4.5-VL-28B-A3B": ("ernie-4.5-vl-28b-a3b.json", "max_seq_len: 8192\ngradient_accumulation_steps: 4\n"
                             "lora_rank: 32\nfreeze_config: freeze_vision\n"),
}
CONFIG = """stage: VL-SFT
model_name_or_path: ./{model}
fine_tuning: Full
per_device_train_batch_size: 1
compute_type: bf16
"""
RANKS = (1, 2, 4, 8, 16, 32)


def fewest(folder: Path, config: str, card: str, fine_tuning: str) -> str:
    """The fewest ranks whose answer fits the fine-tuning, and its strategy."""
    for devices in RANKS:
        report, _ = answer(folder, config, card, devices)
        if report[fine_tuning]["best"]:
            return f"{devices}: {described(report[fine_tuning]['best'], report['layers'])}"
    return f"nothing fits {RANKS[-1]}"


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        print("| model | fine-tuning | 24 GiB cards | 80 GiB cards |\n|---|---|---|---|")
        for model, (config_json, keys) in MODELS.items():
            (folder / model).mkdir()
            shutil.copy(ROOT / "tests" / "specs" / "configs" / config_json, folder / model / "config.json")
            (folder / f"{model}.yaml").write_text(CONFIG.format(model=model) + keys)
            for fine_tuning in ("full", "LoRA"):
                cells = [fewest(folder, f"{model}.yaml", card, fine_tuning) for card in ("24GiB", "80GiB")]
                print(f"| {model} | {fine_tuning} | {' | '.join(cells)} |", flush=True)


if __name__ == "__main__":
    main()
