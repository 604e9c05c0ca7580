"""The bad-input corpus: (case id, spec as a dict of changes to the MLP spec or raw YAML text, expected stderr).

Each expected text is exactly what `vramtune validate` prints (F is the spec file's path)."""
from __future__ import annotations

CASES: list[tuple[str, object, str]] = [
    ("yaml-syntax", "name: x\nmodel: {source: python\ntrain: [\n", "error: F: line 3, column 6: YAML syntax error: expected ',' or '}', but got ':'"),
    ("yaml-tab", "name: x\n\tmodel: 1\n", "error: F: line 2, column 1: YAML syntax error: found character '\\t' that cannot start any token"),
    ("empty-file", "", "error: F: is empty"),
    ("not-a-mapping", "- 1\n- 2\n", "error: F: must be a mapping, got a list"),
    ("unknown-top-key", {"budgt": "1GiB"}, "error: F: budgt: unknown key (did you mean 'budget'?)"),
    ("unknown-nested-key", {"train.target_bach": 8}, "error: F: train.target_bach: unknown key (did you mean 'target_batch'?)"),
    ("unknown-key-no-hint", {"probe.colour": "red"}, "error: F: probe.colour: unknown key"),
    ("missing-model", {"model": None}, "error: F: model: is required"),
    ("missing-source", {"model.source": None}, "error: F: model.source: is required"),
    ("bad-source", {"model.source": "torch"}, "error: F: model.source: must be one of paddlenlp, vision, python; got 'torch'"),
    ("source-typo", {"model.source": "pyhton"}, "error: F: model.source: must be one of paddlenlp, vision, python; got 'pyhton' (did you mean 'python'?)"),
    ("factory-shape", {"model.factory": "mlp_model.build"}, "error: F: model.factory: must look like 'package.module:callable', got 'mlp_model.build'"),
    ("bad-loss", {"model.loss": "hinge"}, "error: F: model.loss: must be one of cross_entropy, mse, model; got 'hinge'"),
    ("kwargs-not-mapping", {"model.kwargs": [1, 2]}, "error: F: model.kwargs: must be a mapping, got a list"),
    ("target-string", {"train.target_batch": "lots"}, "error: F: train.target_batch: must be an integer, got a string ('lots')"),
    ("target-zero", {"train.target_batch": 0}, "error: F: train.target_batch: must be positive, got 0"),
    ("target-negative", {"train.target_batch": -8}, "error: F: train.target_batch: must be positive, got -8"),
    ("target-huge", {"train.target_batch": 10**9}, "error: F: train.target_batch: must be at most 1048576, got 1000000000"),
    ("target-float", {"train.target_batch": 8.5}, "error: F: train.target_batch: must be an integer, got a number (8.5)"),
    ("target-bool", {"train.target_batch": True}, "error: F: train.target_batch: must be an integer, got a boolean (True)"),
    ("target-unreachable", {"train.target_batch": 100, "search.micro_batches": [8, 16]}, "error: F: train.target_batch: 100 cannot be reached: no micro-batch in micro_batches [8, 16] divides it with accumulation <= 64"),
    ("target-over-accumulation", {"train.target_batch": 96, "search.micro_batches": [1], "search.max_accumulation": 32}, "error: F: train.target_batch: 96 cannot be reached: no micro-batch in micro_batches [1] divides it with accumulation <= 32"),
    ("budget-unit", {"budget": "12 parsecs"}, "error: F: budget: unknown unit 'parsecs' in '12 parsecs' (use B, KiB, MiB, GiB, TiB, KB, MB, GB, TB) (or 'auto' on a GPU)"),
    ("budget-negative", {"budget": -1}, "error: F: budget: must be a positive size, got -1 (or 'auto' on a GPU)"),
    ("budget-zero", {"budget": "0MiB"}, "error: F: budget: must be a positive size, got '0MiB' (or 'auto' on a GPU)"),
    ("budget-float", {"budget": 1.5}, "error: F: budget: a size needs a unit (e.g. 1.5GiB) or whole bytes, got 1.5 (or 'auto' on a GPU)"),
    ("headroom-range", {"headroom": 1.5}, "error: F: headroom: must be in [0, 0.9), got 1.5"),
    ("device-bad", {"device": "tpu"}, "error: F: device: must be auto, cpu, gpu or gpu:N, got 'tpu'"),
    ("precision-bad", {"search.precisions": ["fp8"]}, "error: F: search.precisions: unknown precision 'fp8'; allowed: fp16, bf16 (fp32 is always tried)"),
    ("precision-typo", {"search.precisions": ["fp61"]}, "error: F: search.precisions: unknown precision 'fp61' (did you mean 'fp16'?); allowed: fp16, bf16 (fp32 is always tried)"),
    ("recompute-mode", {"search.recompute": "yes"}, "error: F: search.recompute: must be one of auto, off; got 'yes'"),
    ("micro-batches-bad", {"search.micro_batches": [0, "x"]}, "error: F: search.micro_batches: must be a list of positive integers, got [0, 'x']"),
    ("max-accumulation-zero", {"search.max_accumulation": 0}, "error: F: search.max_accumulation: must be positive, got 0"),
    ("steps-zero", {"probe.steps": 0}, "error: F: probe.steps: must be positive, got 0"),
    ("timeout-negative", {"probe.timeout": -3}, "error: F: probe.timeout: must be positive, got -3"),
    ("inputs-missing", {"data.inputs": None}, "error: F: data.inputs: is required: a non-empty list of {shape, dtype[, high]}, one per forward() input"),
    ("input-shape-bad", {"data.inputs": [{"shape": [0, -1]}]}, "error: F: data.inputs[0].shape: must be a list of positive integers (without the batch dimension), got [0, -1]"),
    ("input-dtype-bad", {"data.inputs": [{"shape": [4], "dtype": "float33"}]}, "error: F: data.inputs[0].dtype: must be one of float32, float16, bfloat16, int64, int32; got 'float33' (did you mean 'float32'?)"),
    ("labels-high-missing", {"data.labels": {"shape": [], "dtype": "int64"}}, "error: F: data.labels.high: is required for int64 tensors (values are drawn from [0, high))"),
    ("labels-with-model-loss", {"model.loss": "model"}, "error: F: data.labels: is not used with loss: model (the model returns its own loss)"),
    ("vision-arch", {"model": {"source": "vision", "arch": "resnet19"}, "data": {"image_size": 32}}, "error: F: model.arch: must be one of " + ", ".join(__import__("vramtune.spec", fromlist=["VISION_ARCHS"]).VISION_ARCHS) + "; got 'resnet19' (did you mean 'resnet18'?)"),
    ("nlp-task", {"model": {"source": "paddlenlp", "arch": "bert", "config": "bert-base-chinese", "task": "causal-lm"}, "data": {"seq_len": 16}}, "error: F: model.task: 'causal-lm' is not available for arch 'bert' (use sequence-classification)"),
    ("nlp-seq-len-missing", {"model": {"source": "paddlenlp", "arch": "gpt", "config": "gpt2-small-en"}, "data": {}}, "error: F: data.seq_len: is required"),
]

# Several problems in one file are all reported, in file order.
MULTI = ({"train.target_batch": -1, "budget": "lots", "probe.steps": "many", "extra": 1}, [
    "error: F: train.target_batch: must be positive, got -1",
    "error: F: budget: expected a size like 512MiB or 15.5GiB, got 'lots' (or 'auto' on a GPU)",
    "error: F: probe.steps: must be an integer, got a string ('many')",
    "error: F: extra: unknown key",
])
