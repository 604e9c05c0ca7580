"""The strategy a PaddleFormers config states, read from its keys (the dialect's `stated`, what `check` and `measure`
take), is the one the round trip through apply's writer reads (tests/round_trip.py written_as) wherever that reads
one: over configs on the model folders of tests/specs/formers (and a 4-layer qwen3, a config.json without
num_hidden_layers), the demo config and the files `apply` writes, on a CPU and on a GPU. Where the round trip reads
none ("no strategy it reads writes this file unchanged"), the direct read refuses too, naming the key. No Paddle."""
from __future__ import annotations

import json
import shutil

import pytest
from conftest import CONFIGS, ROOT
from fakes import FakeDevice, MiB
from formers_client import FORMERS, config_text
from round_trip import written_as

from vramtune.core.reading import SpecError
from vramtune.core.strategy import FIELDS, Strategy
from vramtune.dialects.paddleformers.stated import stated
from vramtune.spec import load_spec

KINDS = ("cpu", "gpu")
GPU = {"device": None}
EVERY_LAYER = {"recompute_granularity": "full", "recompute_method": "uniform", "recompute_num_layers": 1}


def _block(layers, granularity="full") -> dict:
    return {"recompute_granularity": granularity, "recompute_method": "block", "recompute_num_layers": layers}


STATED = {  # keys over config_text's (a CPU file: float32, sharding "", per_device_train_batch_size 4)
    "cpu": {}, "batch": {"per_device_train_batch_size": 3, "gradient_accumulation_steps": 5},
    "bf16": {**GPU, "compute_type": "bf16", "fp16_opt_level": "O1"},
    "bf16-o2": {**GPU, "compute_type": "bf16", "fp16_opt_level": "O2"},
    "fp16": {**GPU, "compute_type": "fp16", "fp16_opt_level": "O1"},
    "fp16-o2": {**GPU, "compute_type": "fp16", "fp16_opt_level": "O2"},
    "float32 and O2": {**GPU, "fp16_opt_level": "O2"},
    "every layer": EVERY_LAYER, "block 1": _block(1), "block 3": _block(3), "block 9": _block(9), "block 0": _block(0),
    "block 1 without granularity": _block(1, None), "block 1 selective": _block(1, "selective"),
    "granularity alone": {"recompute_granularity": "full"}, "uniform 2": {**EVERY_LAYER, "recompute_num_layers": 2},
    "stage1 over 2": {"sharding": "stage1", "sharding_parallel_size": 2},
    "stage2 over 2": {"sharding": "stage2", "sharding_parallel_size": 2},
    "stage3 over 4": {"sharding": "stage3", "sharding_parallel_size": 4},
    "none over 2": {"sharding": "", "sharding_parallel_size": 2},
    "stage2 over 1": {"sharding": "stage2", "sharding_parallel_size": 1}, "two stages over 1": {"sharding": "stage1 stage2"},
    "tp2": {"tensor_model_parallel_size": 2}, "tp2 sp": {"tensor_model_parallel_size": 2, "sequence_parallel": True},
    "tp -1": {"tensor_model_parallel_size": -1}, "tp2 no sp": {"tensor_model_parallel_size": 2, "sequence_parallel": False},
    "every key": {**GPU, "compute_type": "bf16", "fp16_opt_level": "O2", **EVERY_LAYER, "sharding": "stage2",
                  "sharding_parallel_size": 2, "per_device_train_batch_size": 2, "gradient_accumulation_steps": 3},
    # read by neither
    "bf16 without a level": {**GPU, "compute_type": "bf16"}, "no compute_type": {**GPU, "compute_type": None},
    "no accumulation": {"gradient_accumulation_steps": None}, "no batch": {"per_device_train_batch_size": None},
    "no sharding over 2": {"sharding": None, "sharding_parallel_size": 2},
    "two stages over 2": {"sharding": "stage1 stage2", "sharding_parallel_size": 2},
}
READ = [  # (model folder, the keys): the round trip reads a strategy on both kinds of device
    *(("llama", name) for name in list(STATED)[:list(STATED).index("every key")]),  # every key: seconds a trip
    *(("ernie4_5", name) for name in ("every layer", "block 1", "stage1 over 2")),
    *(("qwen3", name) for name in ("every layer", "block 1", "block 0", "granularity alone", "uniform 2")),
    *(("qwen3-4", name) for name in ("every layer", "block 1", "block 3", "block 0", "uniform 2")),
    *(("no-depth", name) for name in ("block 1", "block 9", "granularity alone")),
]
REFUSED = [  # (model folder, the keys, the kind of device, the key named): the round trip reads none there
    ("llama", "bf16 without a level", "gpu", "fp16_opt_level"), ("llama", "no compute_type", "gpu", "compute_type"),
    ("llama", "no accumulation", "cpu", "gradient_accumulation_steps"),
    ("llama", "no batch", "gpu", "per_device_train_batch_size"), ("llama", "no sharding over 2", "cpu", "sharding"),
    ("llama", "two stages over 2", "gpu", "sharding"), ("qwen3", "block 3", "cpu", "recompute_method"),
    ("qwen3-4", "block 9", "gpu", "recompute_method"),
    ("qwen3-4", "block 1 without granularity", "cpu", "recompute_method"),
    ("qwen3-4", "block 1 selective", "gpu", "recompute_method"), ("no-depth", "every layer", "cpu", "recompute_method"),
]


@pytest.fixture
def folders(tmp_path):
    """The model folders by name: tests/specs/formers's, a 4-layer qwen3 and a llama whose config.json has no
    num_hidden_layers."""
    for name, model, depth in (("qwen3-4", "qwen3", 4), ("no-depth", "llama", None)):
        shutil.copytree(FORMERS / model, tmp_path / name)
        config = json.loads((tmp_path / name / "config.json").read_text())
        config.pop("num_hidden_layers")
        (tmp_path / name / "config.json").write_text(json.dumps({**config, **({"num_hidden_layers": depth}
                                                                                if depth else {})}))
    return {name: FORMERS / name for name in ("llama", "ernie4_5", "qwen3")} | {
        name: tmp_path / name for name in ("qwen3-4", "no-depth")}


def _spec(tmp_path, folders, model: str, name: str, options: tuple[str, ...] = ()):
    path = tmp_path / f"{model}-{name.replace(' ', '-')}.yaml"
    path.write_text(config_text(str(folders[model]), train_dataset_path=None, **STATED[name]))
    return load_spec(path, {"kit.options": list(options)})


def _read(spec, kind: str) -> str:
    """The strategy as the dialect reads it, and as the round trip does: the same label, or why not."""
    direct, trip = stated(spec, kind), written_as(spec, kind)
    assert direct == trip, (direct.label(), trip.label())
    return direct.label()


@pytest.mark.parametrize(("model", "name"), READ)
def test_the_files_keys_read_as_the_round_trip_reads_them(tmp_path, folders, model, name):
    spec = _spec(tmp_path, folders, model, name)
    for kind in KINDS:
        _read(spec, kind)


def test_what_the_keys_read_as(tmp_path, folders):
    """A few by value (the others: as the round trip reads them)."""
    labels = {}
    for model, name in (("llama", "every key"), ("qwen3-4", "block 3"), ("llama", "block 3"), ("llama", "bf16"),
                        ("llama", "tp2"), ("llama", "tp2 sp"), ("llama", "tp -1")):
        spec = _spec(tmp_path, folders, model, name)
        labels[model, name] = [stated(spec, kind).label() for kind in KINDS]
    assert labels == {("llama", "every key"): ["fp32 m=2 k=3 r=2 n=2 s=2", "bf16-o2 m=2 k=3 r=2 n=2 s=2"],
                      ("qwen3-4", "block 3"): ["fp32 m=4 k=1 r=3", "fp32 m=4 k=1 r=3"],
                      ("llama", "block 3"): ["fp32 m=4 k=1 r=0", "fp32 m=4 k=1 r=0"],  # llama: every layer or none
                      ("llama", "bf16"): ["fp32 m=4 k=1 r=0", "bf16 m=4 k=1 r=0"],  # a CPU runs fp32
                      ("llama", "tp2"): ["fp32 m=4 k=1 r=0 tp=2", "fp32 m=4 k=1 r=0 tp=2"],
                      ("llama", "tp2 sp"): ["fp32 m=4 k=1 r=0 tp=2 sp", "fp32 m=4 k=1 r=0 tp=2 sp"],
                      ("llama", "tp -1"): ["fp32 m=4 k=1 r=0", "fp32 m=4 k=1 r=0"]}


@pytest.mark.parametrize(("model", "name", "kind", "key"), REFUSED)
def test_where_the_round_trip_reads_nothing_the_key_is_named(tmp_path, folders, model, name, kind, key):
    spec = _spec(tmp_path, folders, model, name)
    with pytest.raises(SpecError) as refused:
        stated(spec, kind)
    assert [problem.key for problem in refused.value.problems] == [key]


@pytest.mark.parametrize("options", [
    ("compute_type=float32",), ("fp16_opt_level=O2",), ("sharding=stage1", "sharding_parallel_size=2"),
    ("per_device_train_batch_size=2", "gradient_accumulation_steps=2"), ("max_steps=2",)])
def test_the_overrides_after_the_file_set_its_ranks_not_its_strategy(tmp_path, folders, options):
    """As apply's writer, the read takes the file's own keys: what the overrides set of the strategy is not read (the
    ranks are the spec's: sharding_parallel_size=2 reads the file's sharding "" over 2 ranks)."""
    spec = _spec(tmp_path, folders, "llama", "bf16", options)
    assert [_read(spec, kind) for kind in KINDS] == [
        f"fp32 m=4 k=1 r=0{' n=2' if spec.devices > 1 else ''}", f"bf16 m=4 k=1 r=0{' n=2' if spec.devices > 1 else ''}"]


def test_an_override_of_the_batch_is_named(tmp_path, folders):
    """The spec's batch is the overrides' (2 per device), the file states 4 x 1: the round trip read nothing either."""
    spec = _spec(tmp_path, folders, "llama", "cpu", ("per_device_train_batch_size=2",))
    with pytest.raises(SpecError) as refused:
        stated(spec, "cpu")
    assert [str(problem) for problem in refused.value.problems] == [
        f"{spec.path}: per_device_train_batch_size: 4 x gradient_accumulation_steps 1 in the file, a batch of 2 per "
        "device with the overrides given after it: check measures the batch the file states (give the overrides that "
        "set no tuned key)"]


def test_the_round_trip_reads_nothing_there_either(tmp_path, folders):
    """One of them (the round trip tries every listed strategy before it says so: seconds)."""
    with pytest.raises(SpecError, match="no strategy it reads writes this file unchanged"):
        written_as(_spec(tmp_path, folders, "llama", "no sharding over 2"), "cpu")


def test_the_demo_config(monkeypatch):
    monkeypatch.chdir(ROOT)  # it names its model folder from the repository's root
    spec = load_spec(CONFIGS / "formers-sft-lora-cpu.yaml", read_data=False)
    assert [_read(spec, kind) for kind in KINDS] == ["fp32 m=4 k=1 r=0"] * 2


@pytest.mark.parametrize(("device", "keys", "flags"), [
    (FakeDevice(), {}, ["--budget", "27MiB"]),  # accumulation and recompute
    (FakeDevice(kind="gpu", name="fake gpu", card_bytes=80 * MiB, amp_factor=0.5, amp_speed=2.0),
     {**GPU, "compute_type": "bf16", "per_device_train_batch_size": 16}, ["--budget", "30MiB"]),
    (FakeDevice(kind="gpu", name="fake gpu", card_bytes=80 * MiB, amp_factor=0.5, amp_speed=2.0, o2_factor=0.4,
                o2_speed=1.2),
     {**GPU, "compute_type": "fp16", "fp16_opt_level": "O1", "sharding": "stage1", "sharding_parallel_size": 2,
      "per_device_train_batch_size": 8, **EVERY_LAYER}, ["--budget", "30MiB"]),
])
def test_the_files_apply_writes(fake_cli, tmp_path, device, keys, flags):
    """Whatever the search chose, both read it back from the file apply wrote, on either kind of device."""
    cli, _ = fake_cli(device)
    path = tmp_path / "sft.yaml"
    path.write_text(config_text(train_dataset_path=None, **keys))
    code, out, err = cli("apply", path, *flags, "--json")
    assert code == 0, err
    chosen = {name: json.loads(out)["chosen"][name] for name in FIELDS}
    spec = load_spec(path.with_name("sft.tuned.yaml"))
    labels = [_read(spec, kind) for kind in KINDS]
    layers = 2 if chosen["recomputed_blocks"] else 0  # every layer of the 2-layer Llama (the fake counts 4 blocks)
    assert stated(spec, device.kind) == Strategy(**{**chosen, "recomputed_blocks": layers}), labels
