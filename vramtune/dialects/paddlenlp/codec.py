"""PaddleNLP's memory keys both ways: an arguments file's keys -> the spec's dotted keys (`from_arguments`), the
tuned values -> TrainingArguments and the llm scripts' keys (`to_arguments`), what a parser without some of those keys
cannot say (`inexpressible`, `expressible_neighbour`), and the strategy a file states (`stated`).

The keys go in the order `apply` adds them to a file and the warnings in the order it says them: LoRA and prefix
tuning, precision, the batch, recompute, the ranks, sharding, to_static, evaluation."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from vramtune.core.reading import Problem, Section, SpecError, positive, refuse_when_on
from vramtune.core.report import Tuned
from vramtune.core.spec import Spec
from vramtune.core.strategy import AMP_PRECISIONS, GRANULARITIES, PURE, SAFE_BLACK_LIST, Strategy, dtype_of, level_of
from vramtune.dialects.paddlenlp.local import local_path
from vramtune.dialects.trainer_keys import refuse_sharding_extras
from vramtune.memory.architecture import ArchitectureError, read_config

# the llm-script keys `to_arguments` writes -> what a parser without them (TrainingArguments alone) leaves in a
# PaddleNLP model's configuration: writing nothing says the same
ARGUMENT_DEFAULTS = {"recompute_granularity": "full", "no_recompute_layers": None}
SHARDING_STAGES = {"stage1": 1, "stage2": 2, "stage3": 3}  # TrainingArguments' `sharding` options (ShardingOption)


# -- the file -> the spec ------------------------------------------------------------------------------------------
def from_arguments(arguments: Section) -> dict[str, Any]:
    """The dotted spec keys the file's memory keys say (problems recorded on the section): what is trained, the AMP
    the run keeps to, the ranks, the evaluation; the keys the search decides are read to be checked."""
    return {**read_peft(arguments), **read_precision(arguments), **read_recompute(arguments),
            **read_sharding(arguments), **read_to_static(arguments), **read_evaluation(arguments)}


def _saved_config(arguments: Section, key: str, name: str) -> dict[str, Any]:
    """The configuration saved next to adapter weights (lora_config.json, prefix_config.json); never the weights."""
    value = arguments.get(key, str, None)
    if not value:
        return {}
    folder = local_path(arguments, key, value, f"a local folder with {name}")
    if folder is None or not (folder / name).is_file():
        if folder is not None:
            arguments.fail(key, f"{value!r}: the folder has no {name} (vramtune reads only the configuration, never "
                                "the weights)")
        return {}
    try:
        return json.loads((folder / name).read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        arguments.fail(key, f"{value!r}: {name} cannot be read: {error}")
        return {}


def read_peft(arguments: Section) -> dict[str, Any]:
    """LoRA and prefix tuning as the llm script builds them; a saved adapter's configuration replaces rank, targets
    and tokens, as in the script."""
    keys: dict[str, Any] = {}
    rank = arguments.get("lora_rank", int, 8, check=positive(1 << 16))
    extras = {name: arguments.get(name, kind, default) for name, kind, default in (
        ("rslora", bool, False), ("pissa", bool, False), ("use_quick_lora", bool, False),
        ("lora_plus_scale", float, 1.0))}
    saved_lora = _saved_config(arguments, "lora_path", "lora_config.json")
    if arguments.get("lora", bool, False):
        lora = {"rank": saved_lora.get("r", rank), **extras}
        if saved_lora.get("target_modules"):
            lora["target_modules"] = saved_lora["target_modules"]
        if saved_lora.get("lora_alpha"):
            lora["alpha"] = saved_lora["lora_alpha"]
        keys["train.lora"] = lora
    tokens = arguments.get("num_prefix_tokens", int, 128, check=positive(1 << 16))
    saved_prefix = _saved_config(arguments, "prefix_path", "prefix_config.json")
    if arguments.get("prefix_tuning", bool, False):
        keys["train.prefix_tuning"] = {"tokens": saved_prefix.get("num_prefix_tokens", tokens)}
    return keys


def read_precision(arguments: Section) -> dict[str, Any]:
    """fp16 / bf16 say which half type the run uses (the search keeps to it and chooses O1 or O2); with neither,
    every AMP mode is offered. amp_master_grad and the custom op lists are measured as the Trainer applies them."""
    fp16, bf16 = arguments.get("fp16", bool, False), arguments.get("bf16", bool, False)
    arguments.get("fp16_opt_level", str, "O1", choices=("O1", "O2"))
    keys: dict[str, Any] = {}
    if fp16 or bf16:
        keys["search.precisions"] = [p for p in AMP_PRECISIONS if dtype_of(p) == ("bf16" if bf16 else "fp16")]
    if arguments.get("amp_master_grad", bool, False) and (fp16 or bf16):  # the Trainer ignores it without AMP
        keys["train.amp_master_grad"] = True
    for name in ("black_list", "white_list"):
        ops = arguments.get(f"amp_custom_{name}", list, None)
        if ops:
            keys[f"train.amp_custom_{name}"] = ops
    return keys


def read_recompute(arguments: Section) -> dict[str, Any]:
    """recompute, recompute_granularity and no_recompute_layers are what the search decides (and apply writes)."""
    arguments.get("recompute", bool, False)
    arguments.get("recompute_granularity", str, "full", choices=GRANULARITIES)
    arguments.get("no_recompute_layers", list, None)
    return {}


def read_sharding(arguments: Section) -> dict[str, Any]:
    """sharding and its degree are what the search decides with the ranks; a degree above 1 says how many ranks
    the run has (at least). Offload and sharding_parallel_config options are not measured: refused."""
    mode = arguments.get("sharding", str, "") or ""
    degree = arguments.get("sharding_parallel_degree", int, -1)
    legacy = arguments.get("sharding_degree", int, -1)
    config = arguments.get("sharding_parallel_config", str, "") or ""
    refuse_sharding_extras(arguments, mode, config)
    ranks = max(degree or -1, legacy or -1)
    return {"devices": ranks} if ranks > 1 else {}


def read_to_static(arguments: Section) -> dict[str, Any]:
    """The Trainer's own to_static key converts the model its way, not vramtune's: refused when on."""
    refuse_when_on(arguments, "to_static", "the Trainer's own to_static conversion is not what vramtune "
                                           "measures (it measures eager, and its own to_static for non-PaddleNLP "
                                           "models): set it to false to tune")
    return {}


def read_evaluation(arguments: Section) -> dict[str, Any]:
    """The Trainer evaluates when do_eval is set or its evaluation strategy is not "no"; generation while
    evaluating is refused (not measured)."""
    refuse_when_on(arguments, "eval_with_do_generation", "generation during evaluation (a KV cache per sequence) "
                                                         "is not measured: set it to false to tune the evaluation "
                                                         "loss and predictions")
    evaluates = bool(arguments.get("do_eval", bool, False))
    strategy = arguments.get("evaluation_strategy", str, "no", choices=("no", "steps", "epoch"))
    batch = arguments.get("per_device_eval_batch_size", int, 8, check=positive(1 << 20))
    steps = arguments.get("eval_accumulation_steps", int, None, check=positive(1 << 20))
    loss_only = arguments.get("prediction_loss_only", bool, False)
    if not (evaluates or strategy not in (None, "no")):
        return {}
    return {"train.evaluation": {"batch": batch or 8, "keep": "loss" if loss_only else "predictions",
                                 **({"accumulation_steps": steps} if steps else {})}}


# -- the tuned values -> the file --------------------------------------------------------------------------------
def to_arguments(tuned: Tuned) -> tuple[dict[str, Any], list[str]]:
    """PaddleNLP keys for the tuned values (TrainingArguments, or the llm scripts' ModelArgument), and warnings for
    what does not map."""
    strategy, facts = tuned.strategy, tuned.facts
    arguments: dict[str, Any] = {}
    warnings: list[str] = []
    applied = facts.get("peft") or {}
    if applied.get("lora"):
        arguments.update(lora=True, lora_rank=applied["lora"]["rank"])
    if applied.get("prefix_tokens"):
        arguments.update(prefix_tuning=True, num_prefix_tokens=applied["prefix_tokens"])
    dtype = dtype_of(strategy.precision)
    arguments.update(fp16=dtype == "fp16", bf16=dtype == "bf16")
    if strategy.precision != "fp32":
        arguments["fp16_opt_level"] = level_of(strategy.precision)
    if strategy.precision == "fp16-safe":
        arguments["amp_custom_black_list"] = list(SAFE_BLACK_LIST)
    arguments.update(per_device_train_batch_size=strategy.micro_batch,
                     gradient_accumulation_steps=strategy.accumulation)
    arguments.update(_recompute_arguments(tuned))
    if strategy.devices > 1:
        warnings.append(f"launch with: python -m paddle.distributed.launch --nproc_per_node {strategy.devices} "
                        "YOUR_SCRIPT.py THIS_FILE.json (the data-parallel degree is the ranks left after sharding)")
    if strategy.sharding_stage:
        arguments.update(sharding=f"stage{strategy.sharding_stage}", sharding_parallel_degree=strategy.devices)
    elif strategy.devices > 1:  # a stage the file stated would otherwise stay and train what was not measured
        arguments["sharding"] = ""
    if strategy.to_static:
        arguments["to_static"] = True
    chosen, requested = facts.get("eval_batch"), facts.get("eval_requested")
    if chosen is not None:
        arguments["per_device_eval_batch_size"] = chosen
        if chosen < requested:
            warnings.append(f"per_device_eval_batch_size lowered from {requested} to {chosen}: evaluation at "
                            f"{requested} does not fit beside the training state")
    return arguments, warnings


def _recompute_arguments(tuned: Tuned) -> dict[str, Any]:
    """A model's own recompute: exactly what was measured. vramtune's wrapper has no PaddleNLP key (the Trainer's
    `recompute` only reaches layers with their own enable_recompute): see inexpressible()."""
    facts = tuned.facts
    recomputed, native = tuned.strategy.recomputed_blocks, facts.get("recompute_options")
    if not (native and recomputed):
        return {"recompute": False}
    arguments = {"recompute": True, "recompute_granularity": tuned.strategy.recompute_granularity}
    if native["partial"]:
        arguments["no_recompute_layers"] = list(range(recomputed, facts["total_blocks"])) or None
    return arguments


def inexpressible(tuned: Tuned, accepted: frozenset[str]) -> str | None:
    """Why a PaddleNLP parser whose fields are `accepted` cannot be made to train the tuned values as measured, or
    None: recompute through vramtune's wrapper, or r of L layers where the parser has no no_recompute_layers."""
    facts = tuned.facts
    recomputed = tuned.strategy.recomputed_blocks
    if not recomputed:
        return None
    what = f"recompute of {recomputed} of {facts.get('total_blocks', '?')} blocks"
    if not facts.get("recompute_options"):
        return (f"{what} ran through vramtune's wrapper, which no PaddleNLP key switches on (the Trainer's "
                "`recompute` only reaches layers with their own enable_recompute)")
    unsaid = [f"{key}: {json.dumps(value)}" for key, value in _recompute_arguments(tuned).items()
              if key not in accepted and (key, value) not in ARGUMENT_DEFAULTS.items()]
    return f"{what} needs {', '.join(unsaid)}, which this parser does not read" if unsaid else None


def expressible_neighbour(tuned: Tuned) -> Strategy | None:
    """Every layer at the models' default granularity (`recompute: true` alone says it), for `apply` to measure when
    no saved probe can stand in for an inexpressible configuration; None when the model's recompute has no such."""
    facts = tuned.facts
    native = facts.get("recompute_options")
    granularity = ARGUMENT_DEFAULTS["recompute_granularity"]
    if not native or granularity not in native["granularities"]:
        return None
    return tuned.strategy.with_(recomputed_blocks=facts["total_blocks"], recompute_granularity=granularity)



# -- the strategy a file states --------------------------------------------------------------------------------------
def stated(spec: Spec, device_kind: str) -> Strategy:
    """The strategy the arguments file states, read from its keys as PaddleNLP 2.8.1's TrainingArguments and llm
    scripts take them (their defaults where a key is absent), for a probe on this kind of device: a CPU runs fp32
    whatever the file's precision. The ranks are the spec's (the file's sharding degree, or --devices). A key whose
    value no strategy says (a SpecError names it): both fp16 and bf16; recompute where the model's layers are not
    known (a built-in name: its configuration is PaddleNLP's) or no_recompute_layers is not the layers after the
    first r (what apply writes); sharding over some of the ranks only."""
    problems: list[Problem] = []
    arguments = Section(problems, spec.path, "", spec.arguments)
    fp16, bf16 = arguments.get("fp16", bool, False), arguments.get("bf16", bool, False)
    if fp16 and bf16:
        arguments.fail("bf16", "true with fp16 true: PaddleNLP's TrainingArguments allows at most one of them")
    level = arguments.get("fp16_opt_level", str, "O1")
    half = "bf16" if bf16 else "fp16" if fp16 else None
    precision = "fp32" if half is None or device_kind == "cpu" else f"{half}{PURE}" if level == "O2" else half
    recomputed, granularity = _stated_recompute(spec, arguments)
    strategy = Strategy(precision=precision, micro_batch=arguments.get("per_device_train_batch_size", int, 8),
                        accumulation=arguments.get("gradient_accumulation_steps", int, 1),
                        recomputed_blocks=recomputed, recompute_granularity=granularity, devices=spec.devices,
                        sharding_stage=_stated_stage(arguments, spec.devices))
    if problems:
        raise SpecError(problems)
    return strategy


def _stated_recompute(spec: Spec, arguments: Section) -> tuple[int, str]:
    """The layers recomputed and the granularity: with recompute on, the model's layers (its config.json's
    num_hidden_layers, as a probe counts them) less no_recompute_layers."""
    if not arguments.get("recompute", bool, False):
        return 0, "full"
    granularity = arguments.get("recompute_granularity", str, ARGUMENT_DEFAULTS["recompute_granularity"])
    skipped = arguments.get("no_recompute_layers", list, None) or []
    config = spec.model.config
    if not spec.model.local:
        arguments.fail("recompute", f"true: the layers {config!r} has are PaddleNLP's to say (a built-in name), not "
                                    "read here: give the model as a local folder with config.json, or gate this "
                                    "file with `vramtune measure FILE -m M -k K -r R --budget B`")
        return 0, "full"
    try:
        read = read_config(Path(config))
    except ArchitectureError as error:
        arguments.fail("recompute", f"true: the layers of {config} cannot be read: {error}")
        return 0, "full"
    layers = int(read.get("num_hidden_layers") or read.get("num_layers") or 0)
    recomputed = layers - len(skipped)
    if not layers:
        arguments.fail("recompute", f"true: {config} says no num_hidden_layers, the layers recomputed")
        return 0, "full"
    if skipped != list(range(recomputed, layers)):
        arguments.fail("no_recompute_layers", f"{skipped}: vramtune recomputes the first r of the model's {layers} "
                                              "layers, so the layers not recomputed are the last ones (what apply "
                                              "writes)")
        return 0, "full"
    return recomputed, granularity if recomputed else "full"


def _stated_stage(arguments: Section, devices: int) -> int:
    """The sharding stage over the ranks, as TrainingArguments reads `sharding` and its degree: none on one rank or
    at degree 1; a degree of -1 shards over every rank."""
    if devices < 2:
        return 0
    mode = arguments.get("sharding", str, "") or ""
    degree, legacy = arguments.get("sharding_parallel_degree", int, -1), arguments.get("sharding_degree", int, -1)
    degree = max(degree, legacy) if legacy > 0 else degree
    ranks = devices if degree == -1 else max(degree, 1)
    if not mode.split() or ranks == 1:
        return 0
    if mode.strip() not in SHARDING_STAGES:
        arguments.fail("sharding", f"{mode!r}: TrainingArguments takes one of {', '.join(SHARDING_STAGES)}")
    elif ranks != devices:
        arguments.fail("sharding_parallel_degree", f"{degree}: sharding over {ranks} of the {devices} ranks is not "
                                                   f"measured (vramtune shards over every rank): set it to {devices}")
    else:
        return SHARDING_STAGES[mode.strip()]
    return 0
