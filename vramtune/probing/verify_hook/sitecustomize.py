"""vramtune's verification hook (issue 36). Python loads it at start-up from the PYTHONPATH of the child that runs
the user's own tool on a tuned file; it acts only when $VRAMTUNE_VERIFY_OUT is set there:
- it resets Paddle's allocator peak where a Trainer's train() starts ($VRAMTUNE_VERIFY_TRAINER names its module:
  paddleformers.trainer, paddlenlp.trainer), else at start-up (a kit's tools/train.py, a vramtune.runtime loop), and
  writes the peak as JSON to $VRAMTUNE_VERIFY_OUT when train() returns, else at exit — the counters the probes
  read: the host allocator's on a CPU, the device's on a GPU;
- a Trainer's evaluate() (which its training loop calls where the file evaluates: the training state resident, the
  training loader still reading ahead), or the function $VRAMTUNE_VERIFY_EVALUATE names ("module:name", PaddleOCR's
  tools.program:eval), is a phase of its own: the peak read and reset as it starts and as it ends,
  its steps (prediction_step calls) counted; the training peak is the largest outside it. Paddle 2.6 cannot reset
  the peak: there the evaluation's figure is the run's peak through it, and the training's the run's before it;
- with $VRAMTUNE_VERIFY_STEPS, it ends the run once the optimizer has stepped that many times (figures written);
  with $VRAMTUNE_VERIFY_EVALUATES too, once the evaluation that follows that step has ended (or at the next
  optimizer step, where none came);
- on a CPU only, it makes paddle.device.synchronize() a no-op and records that it did: PaddleFormers' Trainer calls it
  before each optimizer step with gradient accumulation and it raises there ("device should be gpu, xpu"); a CPU runs
  every op in order, so the no-op changes neither memory nor results.
It is not part of the vramtune package (this folder has no __init__.py): only the verification child imports it."""
import atexit
import json
import os
import sys
import time
import zlib  # noqa: F401  before Paddle: Paddle 2.6's libpaddle exports a zlib of its own (child/worker.py)

OUT = os.environ.get("VRAMTUNE_VERIFY_OUT")
if OUT:
    import paddle

    from vramtune.child.counters import MemoryCounters  # the probes' counters: 2.6 and 3.x, CPU and GPU

    DEVICE = os.environ.get("VRAMTUNE_VERIFY_DEVICE", "cpu")  # cpu, or gpu:N as the probes ran
    GPU = DEVICE.startswith("gpu")
    COUNTERS = MemoryCounters("gpu" if GPU else "cpu", int(DEVICE.partition(":")[2] or 0))
    EVALUATES = bool(os.environ.get("VRAMTUNE_VERIFY_EVALUATES"))  # the run's Trainer evaluates after its steps
    STATE = {"started": time.time(), "stubbed": [], "written": False, "evaluating": 0, "evaluations": 0,
             "eval_steps": 0, "steps": 0, "due": False}
    PEAKS = {"train": (0, None), "eval": None}  # each phase's (allocated, reserved) peak

    def reset() -> None:
        COUNTERS.start()  # where Paddle cannot reset (2.6), the process's peak

    def phase(name: str) -> None:
        """The peak since the last reset, kept as the phase's largest; the counters reset for the next phase."""
        allocated, reserved = COUNTERS.peak()
        before = PEAKS[name] or (0, None)
        PEAKS[name] = (max(allocated, before[0]),
                       None if reserved is None else max(reserved, before[1] or 0))
        reset()

    def figures() -> dict:
        if PEAKS["eval"] is None or COUNTERS.resets:  # on 2.6 a reading after an evaluation includes it
            phase("train")
        (allocated, reserved), evaluation = PEAKS["train"], PEAKS["eval"]
        return {"peak_bytes": allocated, "reserved_bytes": reserved, "resets": COUNTERS.resets,
                **({"raised_in": STATE["raised_in"]} if STATE.get("raised_in") else {}),
                **({"eval_peak_bytes": evaluation[0], "eval_reserved_bytes": evaluation[1],
                    "evaluations": STATE["evaluations"], "eval_steps": STATE["eval_steps"] or None} if evaluation
                   else {})}

    def write(**extra) -> None:
        STATE["written"] = True
        with open(OUT, "w") as out:
            json.dump({"seconds": round(time.time() - STATE["started"], 2), "stubbed": STATE["stubbed"],
                       **figures(), **extra}, out)

    if not GPU:
        def synchronize(device=None):
            return None

        paddle.device.synchronize = synchronize
        STATE["stubbed"].append("paddle.device.synchronize")

    def phased(evaluate):
        """An evaluation function (a Trainer's evaluate, PaddleOCR's tools/program.py eval) as a phase of its own:
        the peak read and reset as it starts and as it ends. Where the bounded steps are done, it ends the run."""

        def evaluated(*args, **kwargs):
            if STATE["evaluating"]:
                return evaluate(*args, **kwargs)
            phase("train")
            STATE["evaluating"] += 1
            try:
                result = evaluate(*args, **kwargs)
            except BaseException:
                STATE["raised_in"] = "evaluation"
                raise
            finally:
                STATE["evaluating"] -= 1
                STATE["evaluations"] += 1
                phase("eval")
            if STATE["due"]:  # the bounded steps are done: the evaluation that followed them ends the run
                write(steps=STATE["steps"])
                os._exit(0)
            return result

        return evaluated

    class Phased:
        """An import finder that makes a module's function a phase when the module is loaded ("module:name", e.g.
        $VRAMTUNE_VERIFY_EVALUATE=tools.program:eval: a kit's tools/train.py imports it after start-up)."""

        def __init__(self, target: str):
            self.module, _, self.name = target.partition(":")

        def find_spec(self, name, path, target=None):
            if name != self.module:
                return None
            import importlib.util

            sys.meta_path.remove(self)
            spec = importlib.util.find_spec(name)
            run, attribute = spec.loader.exec_module, self.name

            def exec_module(module):
                run(module)
                setattr(module, attribute, phased(getattr(module, attribute)))

            spec.loader.exec_module = exec_module
            return spec

    def wrap(name: str) -> None:
        trainer = __import__(name, fromlist=["Trainer"]).Trainer
        original = trainer.train

        def train(self, *args, **kwargs):
            reset()
            result = original(self, *args, **kwargs)
            write(steps=int(self.state.global_step))
            return result

        trainer.train = train
        prediction_step = trainer.prediction_step

        def predicted(self, *args, **kwargs):
            STATE["eval_steps"] += 1 if STATE["evaluating"] and STATE["evaluations"] == 0 else 0
            return prediction_step(self, *args, **kwargs)

        evaluated = phased(trainer.evaluate)
        trainer.evaluate, trainer.prediction_step = evaluated, predicted

    def bound(limit: int) -> None:
        """Stop the run once its optimizer has stepped `limit` times (the outermost step or minimize of any
        optimizer, a GradScaler's included), its figures written: a kit's tools/train.py or the user's own command
        is bounded without a flag of its own. The child's group is swept by vramtune after it exits."""
        state = {"depth": 0, "steps": 0}

        def wrap_method(cls, name: str) -> None:
            original = cls.__dict__[name]

            def stepped(self, *args, **kwargs):
                state["depth"] += 1
                try:
                    result = original(self, *args, **kwargs)
                finally:
                    state["depth"] -= 1
                if state["depth"] == 0:
                    state["steps"] = STATE["steps"] = state["steps"] + 1
                    if state["steps"] == limit and EVALUATES and not STATE["evaluations"]:
                        STATE["due"] = True  # the evaluation after this step ends the run, else the next step
                    elif state["steps"] >= limit:
                        write(steps=state["steps"])
                        os._exit(0)
                return result

            setattr(cls, name, stepped)

        pending = [paddle.optimizer.Optimizer]
        while pending:
            cls = pending.pop()
            pending += cls.__subclasses__()
            for name in ("step", "minimize"):
                if name in cls.__dict__:
                    wrap_method(cls, name)

    if os.environ.get("VRAMTUNE_VERIFY_EVALUATE"):
        sys.meta_path.insert(0, Phased(os.environ["VRAMTUNE_VERIFY_EVALUATE"]))
    if os.environ.get("VRAMTUNE_VERIFY_STEPS"):
        bound(int(os.environ["VRAMTUNE_VERIFY_STEPS"]))
    if os.environ.get("VRAMTUNE_VERIFY_TRAINER"):
        wrap(os.environ["VRAMTUNE_VERIFY_TRAINER"])
    else:
        reset()
    atexit.register(lambda: None if STATE["written"] else write())
