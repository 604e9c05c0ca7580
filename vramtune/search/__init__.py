"""The search: the ladder over mechanisms, the memory model that predicts before probing, and the choice."""
from vramtune.memory.line import MemoryModel
from vramtune.search.choice import TIE, choose, complexity, micro_batch_floor
from vramtune.search.ladder import Tuner
from vramtune.search.problem import BuildFailure, Measure, Outcome, Progress, SearchProblem

__all__ = ["TIE", "BuildFailure", "Measure", "MemoryModel", "Outcome", "Progress", "SearchProblem", "Tuner",
           "choose", "complexity", "micro_batch_floor"]
