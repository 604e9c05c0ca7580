"""Where `apply` may write a tuned spec: a folder that is there, and one where the spec still finds its factory
module. A module found from the spec's own folder is not found from another (`check` on the file said "no longer
trains", exit 1; `probe` exit 2): apply refuses before any probe, exit 2, and says how to write it."""
from __future__ import annotations

import json
import shutil

import yaml
from conftest import SPECS, mlp_spec
from fakes import FakeDevice, MiB


def small():
    return FakeDevice(per_sample=MiB / 20, saved=MiB / 200, blocks=6)


def own_spec(folder):
    """A spec whose factory module (own_net, on no PYTHONPATH) lives beside it."""
    folder.mkdir()
    (folder / "own_net.py").write_text("def build(**kwargs):\n    raise NotImplementedError\n")
    spec = folder / "spec.yaml"
    spec.write_text(yaml.safe_dump(mlp_spec(**{"model.factory": "own_net:build"}), sort_keys=False))
    return spec


def test_a_spec_whose_factory_is_beside_it_is_not_written_elsewhere(fake_cli, tmp_path):
    cli, backend = fake_cli(small())
    spec, other = own_spec(tmp_path / "a"), tmp_path / "b"
    other.mkdir()
    code, out, err = cli("apply", spec, "-o", other / "x.yaml", "--json")
    message = (f"{spec}: model.factory is found from the spec's folder ({tmp_path}/a/own_net.py); a tuned spec in "
               f"{other} would not find it, so `vramtune check` and `probe` on it would fail: write it in the spec's "
               f"folder ({tmp_path}/a/spec.tuned.yaml by default, or -o {tmp_path}/a/x.yaml), or put {tmp_path}/a on "
               "PYTHONPATH")
    assert (code, json.loads(out), err) == (2, {"error": message, "exit_code": 2}, f"error: {message}\n")
    assert backend.jobs == [] and not (other / "x.yaml").exists()  # said before any probe
    (other / "own_net.py").write_text("def build(**kwargs):\n    raise NotImplementedError\n")
    code, _, err = cli("apply", spec, "-o", other / "x.yaml")
    assert code == 2 and f"would find {other}/own_net.py instead, so" in err  # another module of that name


def test_beside_the_spec_or_with_its_folder_on_pythonpath_it_is_written(fake_cli, tmp_path, monkeypatch):
    cli, _ = fake_cli(small())
    spec = own_spec(tmp_path / "a")
    code, _, err = cli("apply", spec, "-o", tmp_path / "a" / "x.yaml")
    assert code == 0 and err.endswith(f"wrote {tmp_path}/a/x.yaml\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "a"))
    code, _, err = cli("apply", spec, "-o", tmp_path / "x.yaml")
    assert code == 0 and err.endswith(f"wrote {tmp_path}/x.yaml\n")


def test_an_output_folder_that_is_not_there_is_refused_before_any_probe(fake_cli, tmp_path):
    cli, backend = fake_cli(small())
    spec = own_spec(tmp_path / "a")
    code, _, err = cli("apply", spec, "-o", tmp_path / "none" / "x.yaml")
    assert (code, err, backend.jobs) == (2, f"error: cannot write {tmp_path}/none/x.yaml: no such folder: "
                                            f"{tmp_path}/none\n", [])


def test_a_paddlenlp_config_folder_given_relative_is_refused_elsewhere_too(fake_cli, tmp_path):
    """model.config: ./tiny-bert is read from the spec's folder: a copy elsewhere would not find it."""
    folder = tmp_path / "a"
    shutil.copytree(SPECS / "tiny-bert", folder / "tiny-bert")
    spec = folder / "bert.yaml"
    spec.write_text(yaml.safe_dump({"name": "bert", "model": {"source": "paddlenlp", "config": "./tiny-bert"},
                                    "data": {"seq_len": 16}, "train": {"target_batch": 4}, "device": "cpu",
                                    "budget": "40MiB"}, sort_keys=False))
    cli, backend = fake_cli(small())
    code, _, err = cli("apply", spec, "-o", tmp_path / "x.yaml")
    assert (code, backend.jobs) == (2, [])
    assert err == (f"error: {spec}: model.config is found from the spec's folder ({folder}/tiny-bert); a tuned spec "
                   f"in {tmp_path} would not find it, so `vramtune check` and `probe` on it would fail: write it in "
                   f"the spec's folder ({folder}/bert.tuned.yaml by default, or -o {folder}/x.yaml), or write "
                   f"model.config as the absolute path {folder}/tiny-bert\n")
    code, _, err = cli("apply", spec, "-o", folder / "x.yaml")
    assert code == 0 and err.endswith(f"wrote {folder}/x.yaml\n")
