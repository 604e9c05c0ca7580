"""PaddleNLP transformers from the package's built-in configuration names; weights are never downloaded."""
from __future__ import annotations

import difflib

import paddle
import paddle.nn.functional as F

from vramtune.models import BuildError, BuiltModel, first_output
from vramtune.spec import PADDLENLP_CONFIGS, PADDLENLP_MODELS, Spec


def _transformers():
    try:
        import paddlenlp.transformers as transformers
    except ImportError as error:
        raise BuildError(f"model.source: paddlenlp needs PaddleNLP: pip install 'vramtune[nlp]' ({error})") from error
    return transformers


def build_paddlenlp(spec: Spec) -> BuiltModel:
    transformers = _transformers()
    model_spec, data = spec.model, spec.data
    config_class = getattr(transformers, PADDLENLP_CONFIGS[model_spec.arch])
    known = config_class.pretrained_init_configuration
    if model_spec.config not in known:
        close = difflib.get_close_matches(model_spec.config, list(known), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else f" (known: {', '.join(list(known)[:8])}, ...)"
        raise BuildError(f"model.config: {model_spec.config!r} is not a built-in PaddleNLP "
                         f"{model_spec.arch} configuration{hint}")
    values = dict(known[model_spec.config])
    unknown = [key for key in model_spec.overrides if key not in values and not hasattr(config_class(), key)]
    if unknown:
        raise BuildError(f"model.overrides: {unknown[0]!r} is not a field of {config_class.__name__}")
    values.update(model_spec.overrides)
    config = config_class(**values, num_labels=data.num_labels)
    limit = getattr(config, "max_position_embeddings", None)
    if limit and data.seq_len > limit:
        raise BuildError(f"data.seq_len: {data.seq_len} exceeds the model's max_position_embeddings ({limit})")
    model = getattr(transformers, PADDLENLP_MODELS[(model_spec.arch, model_spec.task)])(config)
    vocab = config.vocab_size
    causal = model_spec.task == "causal-lm"

    def make_batch(batch: int):
        ids = paddle.randint(0, vocab, [batch, data.seq_len])
        return ids, None if causal else paddle.randint(0, data.num_labels, [batch])

    def loss(net: paddle.nn.Layer, batch) -> paddle.Tensor:
        ids, labels = batch
        logits = first_output(net(ids))
        if causal:  # next-token prediction
            return F.cross_entropy(logits[:, :-1].reshape([-1, logits.shape[-1]]), ids[:, 1:].reshape([-1]))
        return F.cross_entropy(logits, labels)

    return BuiltModel(model, make_batch, loss)
