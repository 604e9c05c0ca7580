"""Child side: a PaddleFormers model, its batches and its loss, as the SFT workflow makes them (source.py says why
the step is vramtune's). Imports Paddle and PaddleFormers: only the probe child runs this."""
from __future__ import annotations

import contextlib
import io
from typing import Any, Callable

import numpy as np
import paddle

from vramtune.core.errors import BuildError
from vramtune.dialects.paddleformers import keys
from vramtune.dialects.paddleformers.model import FormersModel, architecture_error, parse, probe_arguments
from vramtune.sources.base import BuiltModel
from vramtune.sources.loader import host_read_ahead

FIRST_TOKEN = 4  # ids below are special tokens in the tiny tokenizers and most vocabularies


def model_config(model_args: Any, data_args: Any, training_args: Any, device_kind: str) -> Any:
    """The configuration as run_sft sets it up before building, in the probe's default dtype (the workflow's dtype:
    an O2 run's half type, else float32)."""
    from paddleformers.transformers import AutoConfig
    from paddleformers.transformers.configuration_utils import LlmMetaConfig, QuantizationConfig

    try:
        config = AutoConfig.from_pretrained(model_args.model_name_or_path, dtype=paddle.get_default_dtype(),
                                            quantization_config=QuantizationConfig.from_dict(
                                                {"weight_quantize_algo": None}))
    except Exception as error:
        raise architecture_error(model_args.model_name_or_path, error) from error
    LlmMetaConfig.set_llm_config(config, training_args)
    config.use_fast_layer_norm = model_args.use_fast_layer_norm
    if hasattr(config, "hidden_dropout_prob"):
        config.hidden_dropout_prob = training_args.hidden_dropout_prob
    if hasattr(config, "attention_probs_dropout_prob"):
        config.attention_probs_dropout_prob = training_args.attention_probs_dropout_prob
    if hasattr(config, "ignore_index"):
        config.ignore_index = -100
    config.pp_seg_method = model_args.pp_seg_method
    config.seq_length = data_args.max_seq_len
    config.max_sequence_length = data_args.max_seq_len
    config._attn_implementation = model_args._attn_implementation
    config.is_lora = model_args.lora
    if device_kind == "cpu":  # RMSNorm reads config.get("fuse_rms_norm", True): absent means fused
        for name in keys.FUSED_CONFIG_FIELDS:
            if name == "fuse_rms_norm" or getattr(config, name, False):
                setattr(config, name, False)
    return config


def build(settings: FormersModel, configure: Callable[[Any], None]) -> BuiltModel:
    device_kind = "cpu" if paddle.get_device() == "cpu" else "gpu"
    arguments = probe_arguments(settings, device_kind)
    if settings.stage in keys.VL_STAGES and settings.datasets:  # found from the file's folder, not the child's
        arguments["train_dataset_path"] = ",".join(settings.datasets)
    model_args, data_args, _, _, training_args = parse(arguments)
    config = model_config(model_args, data_args, training_args, device_kind)
    if settings.stage == "DPO":
        built = _dpo(settings, (model_args, data_args, training_args), config, configure)
    elif settings.stage in keys.VL_STAGES:
        built = _vl_sft(settings, (model_args, data_args, training_args), config, configure, device_kind)
    else:
        configure(config)  # the mechanisms' keys read at construction: recompute
        model = _with_lora(model_args, training_args, _causal_lm(config, settings.folder))
        built = BuiltModel(model, _sft_batches(settings, config, model_args, data_args, training_args), _loss, config)
    built.read_ahead = _read_ahead(data_args, training_args, device_kind)  # DPOTrainer's loaders are the Trainer's
    return built


MAP_STYLE = ("map", "offline", "pretrain")  # dataset_type values whose datasets are not paddle.io.IterableDataset


def _read_ahead(data_args: Any, training_args: Any, device_kind: str) -> Callable[[int, bool], int]:
    """The batches the Trainer's DataLoaders hold beside the one trained on or evaluated (BuiltModel.read_ahead).

    get_train_dataloader passes reader_buffer_size=max(gradient_accumulation_steps, 2), prefetch_factor and
    dataloader_num_workers: on a CPU without workers its thread holds max(k, 2) + prefetch_factor + 1 batches in
    Paddle's host allocator, with workers (shared memory: DataLoader's default) none. get_eval_dataloader does the
    same for a map-style dataset; for the workflow's default iterable one it passes neither the buffer nor the
    workers: Paddle's defaults, 5 batches on a CPU.

    On a GPU none is on the card: the DataLoader pins memory in dygraph, so its buffered reader copies every batch
    into CUDA-pinned host memory (buffered_reader.cc), which Paddle counts as host memory, and the Trainer's
    _prepare_input moves only the batch it trains on to the card (`data.cuda()` for a pinned tensor, freed with
    the step): the probe's own batch stands for it. (With paddle.io.use_pinned_memory(False) the buffered reader
    would keep its slots on the card; the workflow does not call it.)"""
    iterable = data_args.dataset_type not in MAP_STYLE

    def ahead(accumulation: int, training: bool) -> int:
        if device_kind != "cpu":
            return 0
        if not training and iterable:
            return host_read_ahead(0, True)
        return host_read_ahead(training_args.dataloader_num_workers, True, max(accumulation, 2),
                               training_args.prefetch_factor)
    return ahead


def _with_lora(model_args: Any, training_args: Any, model: Any) -> Any:
    """LoRA as the workflows add it (create_peft_model: PaddleFormers' target modules for the model type), in the
    model's dtype."""
    from paddleformers.cli.train.sft.workflow import create_peft_model

    with contextlib.redirect_stdout(io.StringIO()):
        return create_peft_model(model_args, training_args, paddle.get_default_dtype(), model)


def _sft_batches(settings: FormersModel, config: Any, model_args: Any, data_args: Any,
                 training_args: Any) -> Callable[[int], dict[str, Any]]:
    """Rows of the measured length (random tokens), collated by PaddleFormers' collate_fn."""
    from paddleformers.datasets.collate import collate_fn
    from paddleformers.datasets.SFTDataset import Sequence

    vocab, length = config.vocab_size, settings.seq_len
    pad_to = data_args.max_seq_len if settings.padded_to_max else None
    tokenizer = _Padding(getattr(config, "pad_token_id", 0) or 0)

    def make_batch(batch: int) -> dict[str, Any]:
        rows = []
        for _ in range(batch):
            ids = np.random.randint(FIRST_TOKEN, vocab, size=length).tolist()
            rows.append([Sequence(token_ids=ids, position_ids=list(range(length)), labels=[*ids[1:], ids[0]],
                                  num_examples=1)])
        collated = collate_fn(rows, tokenizer, training_args, model_args, pad_to, data_args.padding_free)
        return {key: paddle.to_tensor(value) for key, value in collated.items()}
    return make_batch


def _loss(net: Any, batch: dict[str, Any]) -> Any:
    output = net(**batch)
    if hasattr(output, "loss") and output.loss is not None:
        return output.loss
    return output[0] if isinstance(output, (tuple, list)) else output


def _dpo(settings: FormersModel, parsed: tuple[Any, Any, Any], config: Any, configure: Callable[[Any], None]
         ) -> BuiltModel:
    """DPO as its workflow and DPOTrainer run it: every row the longest chosen/rejected pair of the training data
    (one pass of its own dataset), the reference log-probabilities from the same model with LoRA switched off (or a
    second, frozen copy of the model without LoRA), then the policy's, through PaddleFormers' CriterionLayer."""
    from paddleformers.cli.train.dpo.dpo_argument import DPOConfig
    from paddleformers.datasets.collate import dpo_collate_fn
    from paddleformers.nn.criterion import CriterionLayer
    from paddleformers.peft.lora.lora_model import AVAILABLE_LAYERS

    from vramtune.dialects.paddleformers.lengths import longest

    model_args, data_args, training_args = parsed
    sequence, tokenizer, _ = longest(model_args, data_args, training_args)
    if sequence is None:
        raise BuildError("train_dataset_path: DPO is measured on the training data's longest pair, and the workflow "
                         "keeps none of its samples")
    config.dpo_config = DPOConfig(**{name: getattr(training_args, name) for name in (
        "beta", "offset_alpha", "simpo_gamma", "normalize_logps", "ignore_eos_token", "label_smoothing", "loss_type",
        "pref_loss_ratio", "sft_loss_ratio", "dpop_lambda", "ref_model_update_steps", "reference_free")},
        lora=model_args.lora)
    configure(config)
    model = _causal_lm(config, settings.folder)
    reference = None
    if not (model_args.lora or training_args.reference_free):
        reference = _causal_lm(config, settings.folder)
        reference.set_state_dict(model.state_dict())
        for parameter in reference.parameters():
            parameter.stop_gradient = True
    model = _with_lora(model_args, training_args, model)
    criterion = CriterionLayer(config)
    pad_to = data_args.max_seq_len if settings.padded_to_max else None

    def make_batch(batch: int) -> dict[str, Any]:
        collated = dpo_collate_fn([[sequence]] * batch, tokenizer, training_args, max_seq_len=pad_to,
                                  padding_free=data_args.padding_free,
                                  use_filtered_label_loss=config.use_filtered_label_loss)
        return {key: paddle.to_tensor(value) for key, value in collated.items()}

    def switch_lora(net: Any, off: bool) -> None:
        for layer in net.sublayers():
            if isinstance(layer, tuple(AVAILABLE_LAYERS)):
                layer.disable_lora = off

    def loss(net: Any, batch: dict[str, Any]) -> Any:
        inputs = {key: batch[key] for key in ("input_ids", "position_ids", "attention_mask",
                                              "attn_mask_startend_row_indices") if key in batch}
        labels = (batch["response_labels"], batch["response_indexs"], None, None)
        if training_args.reference_free:
            chosen, rejected = paddle.zeros([1]), paddle.zeros([1])
        else:
            with paddle.no_grad():
                if reference is None:
                    switch_lora(net, True)
                    net.eval()
                    chosen, rejected = criterion(net(**inputs), labels)
                    switch_lora(net, False)
                    net.train()
                else:
                    chosen, rejected = criterion(reference(**inputs), labels)
        return criterion(net(**inputs), (*labels[:-2], chosen, rejected))[-1]

    return BuiltModel(model, make_batch, loss, config)


class _Padding:
    """What collate_fn asks of the tokenizer: its padding id."""

    def __init__(self, pad_token_id: int):
        self.pad_token_id = pad_token_id


def _causal_lm(config: Any, folder: str) -> Any:
    from paddleformers.transformers import AutoModelForCausalLM

    try:
        return AutoModelForCausalLM.from_config(config, dtype=paddle.get_default_dtype())
    except Exception as error:
        raise architecture_error(folder, error) from error


def _vl_sft(settings: FormersModel, parsed: tuple[Any, Any, Any], config: Any, configure: Callable[[Any], None],
            device_kind: str) -> BuiltModel:
    """VL-SFT as its workflow runs it (cli/train/sft/workflow.py): the vision tower's configuration given the
    attention and recompute keys, freeze_config, the model by AutoModelForConditionalGeneration, LoRA by its own
    create_peft_model; every row of a micro-batch the training data's worst row (vl_data.py: its images through the
    template and processor, augmentation at its worst), collated by its mm_collate_fn."""
    import os

    from paddleformers.cli.utils.mllm_utils import freeze_model_parameters
    from paddleformers.datasets.collate import mm_collate_fn
    from paddleformers.transformers import AutoModelForConditionalGeneration

    from vramtune.dialects.paddleformers import vl_attention
    from vramtune.dialects.paddleformers.vl_data import worst

    model_args, data_args, training_args = parsed
    sequence, _, parts = worst(model_args, data_args, training_args)
    if sequence is None:
        raise BuildError(f"train_dataset_path: every row is longer than max_seq_len {data_args.max_seq_len}: "
                         "PaddleFormers deletes them all and its workflow never ends")
    configure(config)
    vision = getattr(config, "vision_config", None)
    if vision is not None:
        vision._attn_implementation = model_args._attn_implementation
        if device_kind == "cpu" and os.environ.get(keys.VL_CPU_ATTENTION, "linear") != "eager":
            vl_attention.register()
            vision._attn_implementation = vl_attention.NAME
        for name in ("recompute_granularity", "recompute_method", "recompute_num_layers"):
            setattr(vision, name, getattr(config, name, None))
        if device_kind == "cpu":
            vision.fuse_rms_norm = False
    freeze = getattr(training_args, "freeze_config", "")
    if freeze:
        config.freeze_vision_model = "freeze_vision" in freeze
        config.freeze_language_model = "freeze_llm" in freeze
        config.freeze_vision_projection = "freeze_aligner" in freeze
    try:
        model = AutoModelForConditionalGeneration.from_config(config, dtype=paddle.get_default_dtype())
    except Exception as error:
        raise architecture_error(settings.folder, error) from error
    if not model_args.lora and freeze:
        with contextlib.redirect_stdout(io.StringIO()):
            freeze_model_parameters(model, freeze)
    model = _with_lora(model_args, training_args, model)
    pad_to = data_args.max_seq_len if settings.packing else None

    def make_batch(batch: int) -> dict[str, Any]:
        collated = mm_collate_fn([[sequence]] * batch, template=parts["template"], processor=parts["processor"],
                                 tokenizer=parts["tokenizer"], training_args=training_args, model_args=model_args,
                                 max_seq_len=pad_to, padding_free=data_args.padding_free, model=model)
        return {key: value if isinstance(value, paddle.Tensor) else paddle.to_tensor(value)
                for key, value in collated.items() if value is not None and not _empty(value)}

    return BuiltModel(model, make_batch, _loss, config)


def _empty(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and not value
