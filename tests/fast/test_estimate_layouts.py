"""`vramtune estimate` of hybrid-parallel layouts (no Paddle, nothing probed): the pruning, the micro-batches in
flight, a layout without model parallelism equal to the data-parallel row, and the shipped recipes' layouts (in
PaddleFormers 1.2's keys) read by `validate` and `estimate` beside the best layout found."""
from __future__ import annotations

import json
import shutil

import pytest
from conftest import SPECS
from fakes import FakeDevice

from vramtune.dialects.paddleformers.layout import layout_keys, stated_layout
from vramtune.estimating.answer import Question, answer
from vramtune.estimating.layouts import search
from vramtune.memory.architecture import architecture
from vramtune.memory.parallel import Layout, Sizes, candidates, in_flight, problems
from vramtune.memory.state import Given

CONFIGS = SPECS / "configs"
QWEN3_30B = json.loads((CONFIGS / "qwen3-30b-a3b.json").read_text())
# PaddleFormers examples/config/sft/qwen3moe.yaml (8 GPUs), its memory keys in PaddleFormers 1.2's names
QWEN3_MOE = """train_dataset_type: erniekit
train_dataset_path: ./data/train.json
max_seq_len: 4096
packing: true
model_name_or_path: ./Qwen3-30B-A3B
stage: SFT
fine_tuning: full
per_device_train_batch_size: 1
gradient_accumulation_steps: 4
tensor_model_parallel_size: 2
pipeline_model_parallel_size: 2
expert_model_parallel_size: 4
use_expert_parallel: true
sequence_parallel: true
sharding: stage1
recompute_granularity: full
recompute_method: uniform
recompute_num_layers: 1
compute_type: bf16
fp16_opt_level: O2
"""
OFFLOAD = "tensorwise_offload_optimizer: true\n"
WARNING = ("changes memory: {what} is not probed on this machine yet (multi-rank probes are a later step): `vramtune "
           "estimate FILE` reads it and predicts the file's layout per rank and pipeline stage; set it to {off} to tune "
           "the rest")
LAYOUTS = """\
layouts of 8 devices, full fine-tuning at bf16-o2 (estimated, the tp and pp split as measured on 2 CPU ranks): 1,080 considered, 298 can run the model (tp within a node of at most 8 devices, dividing the hidden size, heads, key/value heads, vocabulary and sequence; with several nodes pp at most the nodes; pp x vpp divides the layers; vpp > 1 only with pp > 2; accumulation >= pp; pp > 1 with sharding stage 1 at most; ep divides the experts and dp x tp, and takes sharded replicas), 6 predicted to fit 70.8 GiB per rank
the best 5 by preference
┏━━━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━━━━━┳━━━━━━━━━━━━━━━┳━━━━━━━━━━━━━━━━━━━━┓
┃ layout                ┃ batch per replica ┃   recompute ┃ peak per rank ┃          per stage ┃
┡━━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━━━━╇━━━━━━━━━━━━━━━╇━━━━━━━━━━━━━━━━━━━━┩
│ dp2 tp4 sp stage3     │           m=1 x 4 │ every layer │      70.3 GiB │           70.3 GiB │
│ dp2 tp4 ep2 sp stage3 │           m=1 x 4 │ every layer │      70.4 GiB │           70.4 GiB │
│ dp2 tp4 ep4 sp stage3 │           m=1 x 4 │ every layer │      70.4 GiB │           70.4 GiB │
│ dp2 tp4 ep8 sp stage3 │           m=1 x 4 │ every layer │      70.4 GiB │           70.4 GiB │
│ dp1 tp4 pp2 sp        │           m=1 x 4 │ every layer │      70.2 GiB │ 69.7 GiB, 70.2 GiB │
└───────────────────────┴───────────────────┴─────────────┴───────────────┴────────────────────┘
the file's layout: dp2 tp2 pp2 ep4 sp stage1, m=1 x 4, every layer recomputed: peak 72.5 GiB per rank (stage 1) of 70.8 GiB: over
  stage 0: 71.3 GiB: weights 7.5 GiB, gradients 14.9 GiB, optimizer state 42.7 GiB, activations 749.0 MiB, pipeline buffers 48.0 MiB, all-to-all buffers 128.0 MiB, allocator reserve 5.3 GiB
  stage 1: 72.5 GiB: weights 7.5 GiB, gradients 14.9 GiB, optimizer state 42.7 GiB, activations 192.0 MiB, logits 1.7 GiB, pipeline buffers 8.0 MiB, all-to-all buffers 128.0 MiB, allocator reserve 5.4 GiB
best layout: dp2 tp4 sp stage3, m=1 x 4, every layer recomputed: peak 70.3 GiB per rank (stage 0) of 70.8 GiB: fits
  stage 0: 70.3 GiB: weights 7.1 GiB, gradients 14.2 GiB, optimizer state 42.7 GiB, activations 192.0 MiB, logits 882.2 MiB, allocator reserve 5.2 GiB
  in the PaddleFormers config: tensor_model_parallel_size: 4, pipeline_model_parallel_size: 1, sequence_parallel: true, sharding: stage3, per_device_train_batch_size: 1, gradient_accumulation_steps: 4, recompute_granularity: full, recompute_method: uniform, recompute_num_layers: 1
note: layouts, counted: each pipeline stage's parameters from config.json, split as PaddleFormers 1.2 splits them (tp: attention, dense MLP, shared experts and the vocabulary; norms and routers whole; ep: experts/ep whole experts per rank; the embedding on the first stage, the head, final norm and multi-token-prediction block on the last, a tied embedding copied there with pp > 1); the dense state sharded over the dp ranks, the experts' over N / (pp x ep)
note: layouts, measured on 2 CPU ranks (PaddleFormers' Llama, fp32, bench/parallel_ranks.py): what tp leaves whole on every rank (each column-parallel linear's copy of its input, the norms' tensors without sequence parallel), 1F1B's micro-batches in flight and what pp's stages send and receive
note: layouts, assumed: the same on a GPU and in half precision, fused projections as two column-parallel linears, the routed experts' activations over tp too; interleaved pipelines in Megatron's warm-up; under ep two all-to-all buffers of a layer's routed tokens in the compute type. Not counted: the layer sharding stage 3 gathers whole (nor in the data-parallel rows)
(the best layout by preference: no recompute; the least model parallelism (tp x pp); the fewest pipeline stages; the smallest ep; the largest micro-batch; the lowest sharding stage; no interleaving. Speed is not estimated)
"""


@pytest.fixture
def recipe(tmp_path):
    """The Qwen3-30B-A3B recipe beside a model folder holding only the published config.json."""
    (tmp_path / "Qwen3-30B-A3B").mkdir()
    shutil.copy(CONFIGS / "qwen3-30b-a3b.json", tmp_path / "Qwen3-30B-A3B" / "config.json")
    (tmp_path / "qwen3moe.yaml").write_text(QWEN3_MOE)
    return tmp_path / "qwen3moe.yaml"


def test_a_layout_is_pruned_for_every_reason_at_once():
    sizes = Sizes(hidden=2048, heads=32, kv_heads=4, vocab=151936, layers=48, experts=128, seq=4096)
    assert problems(Layout(dp=1, mp=8, pp=1, vpp=2, ep=3, stage=2, sp=True, accumulation=1), sizes) == [
        "tp 8 does not divide kv-heads 4", "vpp > 1 needs pp > 2 and the accumulation a multiple of pp",
        "ep 3 does not divide the 128 experts",
        "ep 3 does not divide dp x tp 8", "sharding needs dp > 1"]
    assert problems(Layout(dp=2, pp=4, stage=2, ep=2, accumulation=2), sizes) == [
        "accumulation 2 < pp 4: the pipeline would idle", "pipeline parallel takes sharding stage 1 at most "
        "(PaddleFormers)"]
    assert problems(Layout(dp=2, ep=2, accumulation=1), sizes) == [
        "expert parallel takes no plain data parallel: the replicas must be a sharding group"]
    assert problems(Layout(dp=1, mp=2, pp=5, accumulation=8), Sizes(2048, 32, 4, 151936, 48)) == [
        "pp 5 x vpp 1 does not divide the 48 layers"]
    assert problems(Layout(dp=1, mp=8, pp=2, accumulation=8), sizes, nodes=4) == [
        "tp 8 spans more than one node of 4 devices", "tp 8 does not divide kv-heads 4"]
    assert problems(Layout(dp=2, mp=4, pp=4, stage=1, accumulation=8), sizes, nodes=2) == [
        "pp 4 > 2 nodes (auto_tuner's bound)"]
    kept, considered = candidates(sizes, 8, 4)
    assert (len(kept), considered) == (298, 1080)
    assert all(layout.devices == 8 and not problems(layout, sizes) for layout in kept)


def test_micro_batches_in_flight_are_1f1bs_and_megatrons_interleaved_warm_up():
    assert [in_flight(4, 1, stage) for stage in range(4)] == [4, 3, 2, 1]
    for pp, vpp in ((4, 2), (8, 3)):  # the first stage: L (1 + (pp - 1) / (pp vpp)) layers' worth, in L/pp units
        assert in_flight(pp, vpp, 0) == pytest.approx(pp * (1 + (pp - 1) / (pp * vpp)))
    assert in_flight(4, 2, 3) == 2.5  # the last stage: (vpp - 1) pp + 1 chunks of L/(pp vpp) layers


@pytest.mark.parametrize("recompute", [False, True])
def test_without_model_parallelism_a_layout_is_the_data_parallel_row_to_the_byte(recompute):
    """Layouts and the data-parallel table share the counted state (the mechanisms') and the activations."""
    result = answer(Question("Qwen3-30B-A3B", QWEN3_30B, seq_len=2048, batch=4, devices=2), 80 * 2**30)
    rows = {(r.strategy.sharding_stage, r.strategy.micro_batch): r for r in result.rows["full"]
            if r.strategy.precision == "bf16-o2" and r.strategy.recomputed_blocks == (48 if recompute else 0)}
    for stage in range(4):
        layout = Layout(dp=2, stage=stage, micro_batch=2, accumulation=2, recompute=recompute)
        found = search(architecture(QWEN3_30B), 2048, True, 4, 2, "bf16-o2", Given("adamw", True, 1.0),
                       result.factors, result.budget, stated=layout)
        assert found.stated is not None and found.stated.reserved == rows[stage, 2].reserved


def test_the_recipes_layout_is_estimated_beside_the_best(fake_cli, recipe):
    cli, _ = fake_cli(FakeDevice())
    code, _, err = cli("estimate", recipe, "--card", "80GB")
    assert code == 0 and err[err.index("layouts of"):err.index("answered in")] == LAYOUTS
    code, out, _ = cli("estimate", recipe, "--card", "80GB", "--json")
    layouts = json.loads(out)["layouts"]
    assert [stage["reserved_bytes"] for stage in layouts["stated"]["stages"]] == [
        sum(stage[part] for part in ("weights", "gradients", "optimizer_state", "amp_copies", "buffers",
                                     "activations", "logits", "pipeline", "dispatch", "allocator"))
        for stage in layouts["stated"]["stages"]]
    assert (layouts["best"][0]["label"], layouts["fitting"], layouts["stated"]["fits"]) == ("dp2 tp4 sp stage3", 6,
                                                                                             False)


def test_validate_reads_the_parallel_keys_and_names_what_nothing_estimates(fake_cli, recipe):
    cli, _ = fake_cli(FakeDevice())
    code, _, err = cli("validate", recipe)
    # tensor_model_parallel_size and sequence_parallel are read (measure probes them): no warning
    warnings = [f"warning: {recipe}: {key}: {value} " + WARNING.format(what=what, off=off) for key, value, what, off in (
        ("pipeline_model_parallel_size", 2, "pipeline parallelism", 1),
        ("expert_model_parallel_size", 4, "expert parallelism", 1),
        ("use_expert_parallel", True, "expert parallelism", "false"))]
    assert (code, err) == (0, "\n".join([*warnings, f"ok for estimate: {recipe} (probe and apply refuse its "
                                                    "parallel keys here)"]) + "\n")
    recipe.write_text(QWEN3_MOE + OFFLOAD)
    code, _, err = cli("validate", recipe)
    assert code == 2 and err.endswith(f"error: {recipe}: tensorwise_offload_optimizer: True changes memory: "
                                      "offloading the optimizer to the host is neither measured nor estimated: set it "
                                      "to false\n")
    code, _, err = cli("estimate", recipe, "--card", "80GB")
    assert code == 0 and "note: tensorwise_offload_optimizer: True is not modelled: the figures are without it\n" in err
    code, _, err = cli("probe", recipe)
    assert code == 2 and f"error: {recipe}: pipeline_model_parallel_size: 2 " + WARNING.format(
        what="pipeline parallelism", off=1) in err


def test_devices_the_files_layout_cannot_divide_exit_2(fake_cli, recipe):
    cli, _ = fake_cli(FakeDevice())
    code, _, err = cli("estimate", recipe, "--card", "80GB", "--devices", "6")
    assert (code, err) == (2, f"error: {recipe}: --devices: 6 devices: the file's tensor x pipeline parallel degrees "
                              "(2 x 2) do not divide them\n")


def test_a_stated_layout_the_model_cannot_take_is_named(fake_cli, recipe):
    cli, _ = fake_cli(FakeDevice())
    recipe.write_text(QWEN3_MOE.replace("tensor_model_parallel_size: 2", "tensor_model_parallel_size: 8"))
    code, _, err = cli("estimate", recipe, "--card", "80GB", "--devices", "16")
    assert code == 0 and ("\nthe file's layout cannot run the model: tp 8 does not divide kv-heads 4\n") in err


ERNIE_SFT_8K = """# ERNIE examples/configs/ERNIE-4.5-21B-A3B/sft/run_sft_8k.yaml (8 x 80 GB, moe_group: mp), in PaddleFormers 1.2's keys
train_dataset_type: erniekit
train_dataset_path: ./data/train.json
max_seq_len: 8192
model_name_or_path: ./ERNIE-4.5-21B-A3B
stage: SFT
fine_tuning: full
per_device_train_batch_size: 1
gradient_accumulation_steps: 8
tensor_model_parallel_size: 4
pipeline_model_parallel_size: 2
expert_model_parallel_size: 4
use_expert_parallel: true
sequence_parallel: true
recompute_granularity: full
recompute_method: uniform
recompute_num_layers: 1
compute_type: bf16
fp16_opt_level: O2
"""


def test_ernies_recipe_layout_holds_its_pipeline_stages_apart(fake_cli, tmp_path):
    """The last stage holds the head's logits and the multi-token-prediction block: the stages' peaks differ."""
    (tmp_path / "ERNIE-4.5-21B-A3B").mkdir()
    shutil.copy(CONFIGS / "ernie-4.5-21b-a3b.json", tmp_path / "ERNIE-4.5-21B-A3B" / "config.json")
    (tmp_path / "sft_8k.yaml").write_text(ERNIE_SFT_8K)
    cli, _ = fake_cli(FakeDevice())
    code, _, err = cli("estimate", tmp_path / "sft_8k.yaml", "--card", "80GB")
    assert code == 0 and """
the file's layout: dp1 tp4 pp2 ep4 sp, m=1 x 8, every layer recomputed: peak 55.4 GiB per rank (stage 1) of 70.8 GiB: fits
  stage 0: 49.6 GiB: weights 5.0 GiB, gradients 10.0 GiB, optimizer state 29.9 GiB, activations 861.5 MiB, pipeline buffers 60.0 MiB, all-to-all buffers 120.0 MiB, allocator reserve 3.7 GiB
  stage 1: 55.4 GiB: weights 5.4 GiB, gradients 10.7 GiB, optimizer state 32.2 GiB, activations 140.0 MiB, logits 2.8 GiB, pipeline buffers 10.0 MiB, all-to-all buffers 120.0 MiB, allocator reserve 4.1 GiB
best layout: dp2 tp4 sp stage3, m=1 x 8, no recompute: peak 67.6 GiB per rank (stage 0) of 70.8 GiB: fits
""" in err


def test_an_expert_parallel_degree_on_a_dense_model_is_read_as_1(fake_cli, tmp_path):
    (tmp_path / "Qwen3-8B").mkdir()
    shutil.copy(CONFIGS / "qwen3-8b.json", tmp_path / "Qwen3-8B" / "config.json")
    config = tmp_path / "dense.yaml"
    config.write_text(QWEN3_MOE.replace("./Qwen3-30B-A3B", "./Qwen3-8B"))
    cli, _ = fake_cli(FakeDevice())
    code, _, err = cli("estimate", config, "--card", "80GB")
    assert code == 0 and "\nnote: expert_model_parallel_size: 4: the model has no experts, read as 1\n" in err
    assert "\nthe file's layout: dp2 tp2 pp2 sp stage1, m=1 x 4, every layer recomputed: " in err


def test_the_best_layouts_keys_state_that_layout_again():
    """What the estimate prints for a layout is what the dialect reads back as the file's layout."""
    sizes = Sizes(hidden=2048, heads=32, kv_heads=4, vocab=151936, layers=48, experts=128, seq=4096)
    for layout in candidates(sizes, 8, 8)[0]:
        assert stated_layout(layout_keys(layout), layout.devices) == layout


def test_nodes_bound_tensor_and_pipeline_parallelism(fake_cli):
    cli, _ = fake_cli(FakeDevice())
    folder = CONFIGS / "qwen3-30b-a3b.json"
    code, out, _ = cli("estimate", folder, "--card", "80GB", "--devices", "16", "--nodes", "2", "--json")
    layouts = json.loads(out)["layouts"]
    assert code == 0 and (layouts["nodes"], layouts["candidates"], layouts["best"][0]["label"]) == (2, 474,
                                                                                                   "dp16 stage3")
    code, _, err = cli("estimate", folder, "--card", "80GB", "--devices", "16", "--nodes", "3")
    assert (code, err) == (2, f"error: {folder}: --nodes: 3 nodes do not divide 16 devices\n")


def test_nothing_fitting_any_layout_exits_1(fake_cli):
    cli, _ = fake_cli(FakeDevice())
    code, _, err = cli("estimate", CONFIGS / "deepseek-v3.json", "--card", "80GB", "--devices", "8")
    assert code == 1 and "\nbest layout: none of the 344 is predicted to fit 70.8 GiB\n" in err
