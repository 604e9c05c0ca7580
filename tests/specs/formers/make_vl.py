"""Writes the tiny random-init PaddleOCR-VL folder (paddleocr_vl/: config.json, a byte-level BPE tokenizer with the
template's special tokens, the image processor's config) and three images of three sizes with their messages rows
(vl.jsonl). Run with the .venv's Python: python tests/specs/formers/make_vl.py"""
import json
from pathlib import Path

from PIL import Image
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

HERE = Path(__file__).resolve().parent
FOLDER = HERE / "paddleocr_vl"
SPECIAL = ["<unk>", "<s>", "</s>", "<pad>", "<|begin_of_sentence|>", "<|end_of_sentence|>", "<|IMAGE_PLACEHOLDER|>",
           "<|IMAGE_START|>", "<|IMAGE_END|>", "<|video_pad|>"]
CORPUS = ["hello world, this is a tiny corpus for a tiny tokenizer. " * 3,
          "the quick brown fox jumps over the lazy dog", "User: Assistant: read the text in the image"]
NO_FUSION = {"fuse_rms_norm": False}
CONFIG = {"architectures": ["PaddleOCRVLForConditionalGeneration"], "model_type": "paddleocr_vl",
          "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4,
          "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 320, "rms_norm_eps": 1e-5, "hidden_act": "silu",
          "max_position_embeddings": 32768, "rope_scaling": {"mrope_section": [2, 3, 3], "rope_type": "default",
                                                              "type": "default"},
          "rope_theta": 500000, "tie_word_embeddings": False, "use_bias": False, "use_cache": False,
          "pad_token_id": 3, "image_token_id": 6, "vision_start_token_id": 7, "video_token_id": 9,
          "ignored_index": -100, "compression_ratio": 1.0, **NO_FUSION,
          "vision_config": {"model_type": "paddleocr_vl", "hidden_size": 32, "intermediate_size": 48,
                            "num_hidden_layers": 2, "num_attention_heads": 2, "image_size": 56, "patch_size": 14,
                            "spatial_merge_size": 2, "temporal_patch_size": 2, "num_channels": 3,
                            "hidden_act": "gelu_pytorch_tanh", "layer_norm_eps": 1e-6, "tokens_per_second": 2,
                            "attention_dropout": 0.0, **NO_FUSION}}
PROCESSOR = {"image_processor_type": "PaddleOCRVLImageProcessor", "processor_class": "PaddleOCRVLProcessor",
             "min_pixels": 147384, "max_pixels": 2822400, "patch_size": 14, "temporal_patch_size": 1,
             "merge_size": 2, "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5]}
IMAGES = {"small.png": (448, 448), "wide.png": (896, 448), "large.png": (640, 640)}  # (width, height)

def write_data(folder: Path, sizes: dict[str, tuple[int, int]]) -> None:
    """Plain images of the given sizes ((width, height) by file name) and one messages row per image (vl.jsonl)."""
    rows = []
    for name, size in sizes.items():
        Image.new("RGB", size, (200, 180, 160)).save(folder / name)
        rows.append({"messages": [{"role": "user", "content": "<image>read the text in the image"},
                                  {"role": "assistant", "content": "hello world, the quick brown fox"}],
                     "images": [name]})
    (folder / "vl.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))


def main() -> None:
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=310, special_tokens=SPECIAL,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(CORPUS, trainer)
    FOLDER.mkdir(exist_ok=True)
    tokenizer.save(str(FOLDER / "tokenizer.json"))
    (FOLDER / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<|begin_of_sentence|>",
        "eos_token": "<|end_of_sentence|>", "unk_token": "<unk>", "pad_token": "<pad>",
        "additional_special_tokens": SPECIAL[6:]}, indent=1) + "\n")
    (FOLDER / "config.json").write_text(json.dumps(CONFIG, indent=1) + "\n")
    (FOLDER / "preprocessor_config.json").write_text(json.dumps(PROCESSOR, indent=1) + "\n")
    write_data(HERE, IMAGES)


if __name__ == "__main__":
    main()
