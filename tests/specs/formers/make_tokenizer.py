"""Writes the tiny byte-level BPE tokenizer (tokenizer.json, 300 tokens) the model folders here share:
PaddleFormers' AutoTokenizer loads it offline through PreTrainedTokenizerFast. Run with the .venv's Python (the
`tokenizers` package comes with PaddleFormers): python tests/specs/formers/make_tokenizer.py FOLDER..."""
import sys

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

CORPUS = ["hello world, this is a tiny corpus for a tiny tokenizer. " * 3,
          "the quick brown fox jumps over the lazy dog"]

tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tokenizer.decoder = decoders.ByteLevel()
trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<unk>", "<s>", "</s>", "<pad>"],
                              initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
tokenizer.train_from_iterator(CORPUS, trainer)
for folder in sys.argv[1:]:
    tokenizer.save(f"{folder}/tokenizer.json")
