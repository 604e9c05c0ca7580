"""Bad input that only Paddle can judge (factories, model names, block paths, shapes): caught at the first
probe, reported as `error: SPEC: key: message` with exit code 2, never as a ladder of failing probes."""
from __future__ import annotations

import pytest
from conftest import CONFIGS, mlp_spec, needs_paddlenlp

pytestmark = pytest.mark.paddle

BERT = {"name": "bert-tiny", "model": {"source": "paddlenlp", "config": "bert-base-chinese",
                                       "overrides": {"num_hidden_layers": 2, "hidden_size": 32,
                                                     "num_attention_heads": 2, "intermediate_size": 64,
                                                     "vocab_size": 100}},
        "data": {"seq_len": 16}, "train": {"target_batch": 2}, "device": "cpu", "budget": "1GiB",
        "probe": {"steps": 1, "warmup": 1}}


def bert(**model) -> dict:
    return {**BERT, "model": {**BERT["model"], **model}}


CASES = [
    ("factory-module-missing", mlp_spec(**{"model.factory": "no_such_module:build"}),
     "model.factory: 'no_such_module:build': no module named 'no_such_module' in the spec's folder (D) or on PYTHONPATH"),
    ("factory-callable-missing", mlp_spec(**{"model.factory": "mlp_model:biuld"}),
     "model.factory: 'mlp_model:biuld': module 'mlp_model' has no callable 'biuld'"),
    ("factory-bad-kwargs", mlp_spec(**{"model.kwargs": {"widht": 3}}),
     "model.factory: 'mlp_model:build' raised TypeError: build() got an unexpected keyword argument 'widht'"),
    ("factory-not-a-layer", mlp_spec(**{"model.factory": "fault_models:build", "model.kwargs": {"mode": "not_a_layer"}}),
     "model.factory: 'fault_models:build' returned str, not a paddle.nn.Layer"),
    pytest.param("nlp-config-unknown", bert(config="bert-base-chinees"),
     "model.config: 'bert-base-chinees' is neither a local folder nor a built-in PaddleNLP configuration name (did you mean 'bert-base-chinese'?)",
     marks=needs_paddlenlp),
    pytest.param("nlp-task-missing", bert(task="causal-lm"),
     "model.task: Bert has no causal-lm model in PaddleNLP (it has: sequence-classification, token-classification, question-answering)",
     marks=needs_paddlenlp),
    pytest.param("nlp-override-unknown", bert(overrides={"num_layers": 2}),
     "model.overrides: 'num_layers' is not a field of BertConfig (did you mean 'num_hidden_layers'?)",
     marks=needs_paddlenlp),
    pytest.param("nlp-seq-too-long", {**bert(), "data": {"seq_len": 4096}},
     "data.seq_len: 4096 exceeds the model's max_position_embeddings (512)", marks=needs_paddlenlp),
    ("blocks-path-unresolved", mlp_spec(**{"model.block_path": "encoder.layers"}),
     "model.block_path: 'encoder.layers' does not resolve: no 'encoder' (children there: embed, blocks, head)"),
    ("blocks-path-not-a-list", mlp_spec(**{"model.block_path": "head"}),
     "model.block_path: 'head' is Linear: no run of >= 2 same-type blocks among its children, and not a Sequential to cut into segments"),
    ("vision-kwargs", {"name": "r", "model": {"source": "vision", "arch": "resnet18", "kwargs": {"widht": 3}},
                       "data": {"image_size": 32, "num_classes": 10}, "train": {"target_batch": 2},
                       "device": "cpu", "budget": "1GiB"},
     "model.kwargs: resnet18 does not accept them: ResNet.__init__() got an unexpected keyword argument 'widht'"),
]


@pytest.mark.parametrize("case, spec, message", CASES,
                         ids=[c.values[0] if hasattr(c, "values") else c[0] for c in CASES])
def test_bad_model_input(cli, write_spec, case, spec, message):
    path = write_spec(spec)
    code, out, err = cli("measure", path, "--micro-batch", 2, "--accumulation", 1)
    assert (code, out) == (2, "")
    assert err == f"error: {path}: {message.replace('(D)', f'({path.parent})')}\n"


@pytest.mark.parametrize("changes, prefix", [
    ({"data.inputs": [{"shape": [100], "dtype": "float32"}]},
     "data: does not fit the model: one sample fails in forward: "),
    ({"data.labels": {"shape": [3], "dtype": "int64", "high": 10}},
     "data: does not fit the model: one sample fails in forward: "),
])
def test_data_that_does_not_fit_the_model(cli, write_spec, changes, prefix):
    path = write_spec(mlp_spec(**changes))
    code, _, err = cli("measure", path, "--micro-batch", 2, "--accumulation", 1)
    assert code == 2 and err.startswith(f"error: {path}: {prefix}")


def test_more_recomputed_blocks_than_found(cli):
    spec = CONFIGS / "mlp-python-cpu.yaml"
    code, _, err = cli("measure", spec, "--micro-batch", 256, "--recompute", 9)
    assert (code, err) == (2, f"error: {spec}: recomputed_blocks 9 is more than the 6 repeated blocks found\n")
