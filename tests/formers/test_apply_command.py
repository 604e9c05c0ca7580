"""The training command `apply` prints for a PaddleFormers config given key=value overrides names the file it wrote
(quoted for the shell), or TUNED_FILE when the file goes to stdout. Fake devices: no Paddle."""
from __future__ import annotations

import shlex

from fakes import FakeDevice
from formers_client import config_text

OVERRIDES = ("max_steps=2", "logging_dir=my logs")


def test_the_training_command_names_the_file_written_or_tuned_file_on_stdout(fake_cli, tmp_path):
    config = tmp_path / "sft.yaml"
    config.write_text(config_text(train_dataset_path=None))
    (tmp_path / "my runs").mkdir()
    written = tmp_path / "my runs" / "sft.tuned.yaml"
    invoke, _ = fake_cli(FakeDevice())
    flags = ("--budget", "32MiB", "--no-recompute")
    code, _, err = invoke("apply", config, *OVERRIDES, *flags, "-o", written)
    assert code == 0, err
    command = f"paddleformers-cli train {shlex.quote(str(written.resolve()))} 'logging_dir=my logs' max_steps=2"
    assert f"warning: train the tuned file with: {command}\n" in err
    code, out, err = invoke("apply", config, *OVERRIDES, *flags, "-o", "-")
    assert code == 0 and out == written.read_text(), err
    assert "warning: train the tuned file with: paddleformers-cli train TUNED_FILE 'logging_dir=my logs' max_steps=2\n" \
        in err
