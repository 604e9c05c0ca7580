"""Child-process entry of a doctor check (imports Paddle through the check):

    python -m vramtune.doctor.child CHECK --device DEVICE --part PART --out RESULT.json

DEVICE is the Device as JSON (the device check: what the user asked for, e.g. 'auto'). Under
`paddle.distributed.launch` each rank writes RESULT.json.rankN."""
from __future__ import annotations

import argparse
import json
import os
import sys
import zlib  # noqa: F401  before Paddle: 2.6's libpaddle exports its own zlib, which breaks Python's if loaded first
from typing import NoReturn

from vramtune.core.files import write_atomic
from vramtune.core.records import Device


def main(argv: list[str] | None = None) -> NoReturn:
    from vramtune.child.rank import die_with_launcher, rank, world_size
    from vramtune.core.oom import is_oom
    from vramtune.core.text import short_error
    from vramtune.doctor.checks import by_name

    die_with_launcher()
    parser = argparse.ArgumentParser(prog="python -m vramtune.doctor.child")
    checks = by_name()
    parser.add_argument("check", choices=sorted(checks))
    parser.add_argument("--device", required=True)
    parser.add_argument("--part", default="")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    device = Device.from_json(json.loads(args.device)) if args.device.startswith("{") else args.device
    try:
        payload = {"status": "measured", **checks[args.check].measure(device, args.part)}
    except Exception as error:
        payload = {"status": "oom" if is_oom(error) else "crashed", "error": short_error(error)}
    write_atomic(f"{args.out}.rank{rank()}" if world_size() > 1 else args.out, json.dumps(payload))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # the result is on disk: skip the interpreter's teardown


if __name__ == "__main__":
    main()
