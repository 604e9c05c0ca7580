"""Saved probe results under .vramtune/, keyed by what decides the measurements; append-only and locked.

Every finished probe is appended (and fsynced) at once, signals held back meanwhile, so an interrupted run loses
nothing and the next run resumes. A damaged file, or one from another vramtune version, is set aside with a warning
and its readable lines are kept. Locks: one per spec (a second run of it waits and reuses), one per device while a
probe runs (two specs never measure on the same device at once).
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Callable

from vramtune import __version__
from vramtune.core.files import cache_root, write_atomic
from vramtune.core.records import Device, ProbeResult
from vramtune.core.report import Report
from vramtune.core.strategy import Strategy
from vramtune.probing import interrupts

FORMAT = 2


class StoreError(Exception):
    """Results cannot be written (disk full, read-only folder, ...)."""


def spec_key(raw_spec: dict[str, Any], device: Device, identity: dict[str, Any]) -> str:
    """A stable hash of what decides the measurements: the spec's content, the device, Paddle's and vramtune's
    versions, and the source's identity (e.g. the factory module's text, PaddleNLP's version)."""
    content = {key: value for key, value in raw_spec.items() if key not in ("tuned", "name")}
    key = json.dumps([content, device.kind, device.name, device.total_bytes, device.paddle_version, __version__,
                      identity], sort_keys=True, default=str)
    return hashlib.sha256(key.encode()).hexdigest()[:16]


@contextlib.contextmanager
def file_lock(lock_path: Path, on_wait: Callable[[str], None], what: str) -> Iterator[None]:
    """Hold an exclusive lock on a file holding our pid; if another process holds it, say who and wait."""
    try:
        descriptor = _open_lock(lock_path)
    except OSError as error:
        raise StoreError(f"cannot create the lock file {lock_path}: {error.strerror or error}") from error
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(descriptor, 32, 0).decode(errors="replace").strip()  # empty while it writes it
            on_wait(f"another vramtune run{f' (pid {holder})' if holder else ''} is {what}; waiting for it to finish")
            fcntl.flock(descriptor, fcntl.LOCK_EX)
        with contextlib.suppress(OSError):  # the pid only informs a waiting run; failing to write it is harmless
            os.ftruncate(descriptor, 0)
            os.pwrite(descriptor, str(os.getpid()).encode(), 0)
        yield
    finally:
        os.close(descriptor)  # closing releases the lock


def lock_folder() -> Path:
    """Where the device locks are: one folder for every user of the machine (a GPU is the machine's), sticky and
    open to all as /tmp is; VRAMTUNE_LOCKS to choose another."""
    chosen = os.environ.get("VRAMTUNE_LOCKS")
    folder = Path(chosen) if chosen else Path(tempfile.gettempdir()) / "vramtune-locks"
    if not folder.is_dir():
        folder.mkdir(parents=True, exist_ok=True)
        if not chosen:
            with contextlib.suppress(OSError):
                os.chmod(folder, 0o1777)
    return folder


def device_lock_paths(device: Device, ranks: int = 1) -> list[Path]:
    """One lock per physical device a probe uses, whatever cache folder each run uses: a GPU by its PCI bus id (the
    same card under any CUDA_VISIBLE_DEVICES; its ordinal where the id is unknown), each rank's, in one order (runs
    taking several never wait on each other in a circle)."""
    folder = lock_folder()
    if device.kind != "gpu":
        return [folder / f"{device.kind}{device.index}.lock"]
    ordinals = range(device.index, device.index + ranks)
    names = {f"gpu-{device.buses[i]}" if i < len(device.buses) else f"gpu{i}" for i in ordinals}
    return [folder / f"{name}.lock" for name in sorted(names)]


def _open_lock(lock_path: Path) -> int:
    """The lock file, open for every user (another user's run locks the same card); read-only where another user
    made it without write access for us (flock works on it all the same; no pid is written then)."""
    try:
        descriptor = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o666)
    except PermissionError:
        return os.open(lock_path, os.O_RDONLY)
    with contextlib.suppress(OSError):
        os.fchmod(descriptor, 0o666)  # past the umask; only its owner can
    return descriptor


def device_lock_path(device: Device) -> Path:
    """The lock of the device itself (one rank)."""
    return device_lock_paths(device)[0]


@contextlib.contextmanager
def devices_locked(device: Device, ranks: int, on_wait: Callable[[str], None], what: str) -> Iterator[None]:
    """Hold the locks of every device `ranks` ranks from `device` use."""
    with contextlib.ExitStack() as held:
        for path in device_lock_paths(device, ranks):
            held.enter_context(file_lock(path, on_wait, what))
        yield


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
        """Hold this spec's lock; if another run holds it, say so and wait for it (then reuse its results)."""
        self._ensure_folder()
        with file_lock(self.folder / "lock", on_wait, "tuning this spec (its results will be reused)"):
            yield

    def load(self) -> dict[Strategy, ProbeResult]:
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
                result = ProbeResult.from_json(record["result"])
            except (ValueError, KeyError, TypeError, AttributeError):
                bad += 1
                continue
            results[result.strategy] = result
            good.append(line)
        if bad:
            self._set_aside(f"{bad} damaged or foreign line(s)", good)
        return results

    def _set_aside(self, why: str, keep: list[str]) -> None:
        aside = self.probes_path.with_name(f"probes.jsonl.bad-{int(time.time())}")
        try:
            os.replace(self.probes_path, aside)
            if keep:
                write_atomic(self.probes_path, "".join(line + "\n" for line in keep))
        except OSError as error:
            raise StoreError(f"cannot set aside {self.probes_path}: {error}") from error
        self.warn(f"saved results {self.probes_path} had {why}; moved to {aside.name}, "
                  f"kept {len(keep)} good result(s)")

    def save(self, result: ProbeResult) -> None:
        """Append one finished probe, durably. A failed append is truncated away, so the file stays whole; a signal
        (Ctrl-C, SIGTERM, SIGHUP) waits until the line is written and synced."""
        self._ensure_folder()
        line = json.dumps({"format": FORMAT, "vramtune": __version__, "result": result.to_json()}) + "\n"
        try:
            descriptor = os.open(self.probes_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as error:
            raise StoreError(f"cannot save results to {self.probes_path}: {error.strerror or error}") from error
        size = os.fstat(descriptor).st_size
        try:
            with interrupts.deferred():  # a signal cannot cut the line short: it is handled once the line is whole
                data = line.encode()
                while data:  # unbuffered, so nothing half-written is flushed later
                    data = data[os.write(descriptor, data):]
                os.fsync(descriptor)
        except OSError as error:
            with contextlib.suppress(OSError):
                os.ftruncate(descriptor, size)
            raise StoreError(f"cannot save results to {self.probes_path}: {error.strerror or error} "
                             f"(earlier results are intact)") from error
        finally:
            os.close(descriptor)

    def clear(self) -> None:
        """Start over (--fresh): earlier results are kept aside, not deleted."""
        if self.probes_path.exists():
            os.replace(self.probes_path, self.probes_path.with_name(f"probes.jsonl.old-{int(time.time())}"))

    def save_summary(self, summary: Report) -> None:
        self._ensure_folder()
        try:
            write_atomic(self.summary_path, json.dumps(summary.to_json(), indent=1))
        except OSError as error:
            raise StoreError(f"cannot save {self.summary_path}: {error.strerror or error}") from error

    def load_summary(self) -> Report | None:
        """The last finished tuning run's report; a damaged one is set aside with a warning (and None)."""
        try:
            text = self.summary_path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as error:
            self.warn(f"saved summary {self.summary_path} is unreadable ({error}); tuning again")
            return None
        try:
            data = json.loads(text)
            if data.get("vramtune") != __version__ or not isinstance(data.get("probes"), list):
                raise ValueError("written by another vramtune version")
            summary = Report.from_json(data)
        except (ValueError, AttributeError, KeyError, TypeError) as error:
            aside = self.summary_path.with_name(f"summary.json.bad-{int(time.time())}")
            with contextlib.suppress(OSError):
                os.replace(self.summary_path, aside)
            self.warn(f"saved summary {self.summary_path} is damaged ({error}); moved to {aside.name}, tuning again")
            return None
        return summary
