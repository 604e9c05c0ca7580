"""Saved probe results under .vramtune/, keyed by spec + device + Paddle version; append-only and locked.

Every finished probe is appended (and fsynced) at once, so an interrupted run loses nothing and the next run
resumes. A damaged file is set aside with a warning and its readable lines are kept.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Callable

from vramtune import __version__
from vramtune.strategy import Strategy

FORMAT = 1


class StoreError(Exception):
    """Results cannot be written (disk full, read-only folder, ...)."""


def cache_root() -> Path:
    return Path(os.environ.get("VRAMTUNE_CACHE", ".vramtune"))


def spec_key(raw_spec: dict[str, Any], device: dict[str, Any]) -> str:
    """A stable hash of what decides the measurements: the spec's content, the device, Paddle's version."""
    content = {key: value for key, value in raw_spec.items() if key not in ("tuned", "name")}
    identity = json.dumps([content, device["kind"], device["name"], device["total_bytes"],
                           device["paddle_version"]], sort_keys=True, default=str)
    return hashlib.sha256(identity.encode()).hexdigest()[:16]


class ResultStore:
    def __init__(self, key: str, root: Path | None = None, warn: Callable[[str], None] = print):
        self.folder = (root or cache_root()) / key
        self.probes_path = self.folder / "probes.jsonl"
        self.summary_path = self.folder / "summary.json"
        self.warn = warn

    def _ensure_folder(self) -> None:
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise StoreError(f"cannot create the results folder {self.folder}: {error.strerror or error}") from error

    @contextlib.contextmanager
    def locked(self, on_wait: Callable[[str], None]) -> Iterator[None]:
        """Hold this spec's lock; if another run holds it, say so and wait for it."""
        self._ensure_folder()
        lock_path = self.folder / "lock"
        try:
            descriptor = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as error:
            raise StoreError(f"cannot create the lock file {lock_path}: {error.strerror or error}") from error
        try:
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(descriptor, 32, 0).decode(errors="replace").strip() or "unknown"
                on_wait(f"another vramtune run (pid {holder}) is tuning this spec; waiting for it to finish "
                        f"(its results will be reused)")
                fcntl.flock(descriptor, fcntl.LOCK_EX)
            try:  # the pid only informs a waiting run; failing to write it (disk full) is harmless
                os.ftruncate(descriptor, 0)
                os.pwrite(descriptor, str(os.getpid()).encode(), 0)
            except OSError:
                pass
            yield
        finally:
            os.close(descriptor)  # closing releases the lock

    def load(self) -> dict[Strategy, dict[str, Any]]:
        """Saved results by strategy; unreadable or foreign lines are set aside with a warning."""
        try:
            lines = self.probes_path.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            return {}
        except (OSError, UnicodeDecodeError) as error:
            self._set_aside(f"unreadable ({error})", [])
            return {}
        results, good, bad = {}, [], 0
        for line in lines:
            try:
                record = json.loads(line)
                if record.get("format") != FORMAT or record.get("vramtune") != __version__:
                    raise ValueError("written by another vramtune version")
                strategy = Strategy.from_json(record["result"])
            except (ValueError, KeyError, TypeError, AttributeError):
                bad += 1
                continue
            results[strategy] = record["result"]
            good.append(line)
        if bad:
            self._set_aside(f"{bad} damaged or foreign line(s)", good)
        return results

    def _set_aside(self, why: str, keep: list[str]) -> None:
        aside = self.probes_path.with_name(f"probes.jsonl.bad-{int(time.time())}")
        try:
            os.replace(self.probes_path, aside)
            if keep:
                self._write_atomic(self.probes_path, "".join(line + "\n" for line in keep))
        except OSError as error:
            raise StoreError(f"cannot set aside {self.probes_path}: {error}") from error
        self.warn(f"warning: saved results {self.probes_path} had {why}; moved to {aside.name}, "
                  f"kept {len(keep)} good result(s)")

    def save(self, result: dict[str, Any]) -> None:
        """Append one finished probe, durably."""
        self._ensure_folder()
        line = json.dumps({"format": FORMAT, "vramtune": __version__, "result": result}) + "\n"
        try:
            with open(self.probes_path, "a", encoding="utf-8") as handle:
                handle.write(line)
                handle.flush()
                os.fsync(handle.fileno())
        except OSError as error:
            raise StoreError(f"cannot save results to {self.probes_path}: {error.strerror or error} "
                             f"(earlier results are intact)") from error

    def clear(self) -> None:
        """Start over (--fresh): earlier results are kept aside, not deleted."""
        if self.probes_path.exists():
            os.replace(self.probes_path, self.probes_path.with_name(f"probes.jsonl.old-{int(time.time())}"))

    def save_summary(self, summary: dict[str, Any]) -> None:
        self._ensure_folder()
        try:
            self._write_atomic(self.summary_path, json.dumps(summary, indent=1))
        except OSError as error:
            raise StoreError(f"cannot save {self.summary_path}: {error.strerror or error}") from error

    def load_summary(self) -> dict[str, Any] | None:
        try:
            return json.loads(self.summary_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None

    @staticmethod
    def _write_atomic(path: Path, text: str) -> None:
        temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            temporary.write_text(text, encoding="utf-8")
            os.replace(temporary, path)
        finally:
            temporary.unlink(missing_ok=True)
