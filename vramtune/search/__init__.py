"""The search: the ladder over mechanisms, the memory model that predicts before probing, and the choice."""
from vramtune.memory.line import MemoryModel
from vramtune.search.choice import TIE, choose, complexity
from vramtune.search.ladder import BuildFailure, Measure, Outcome, Progress, SearchProblem, Tuner

__all__ = ["TIE", "BuildFailure", "Measure", "MemoryModel", "Outcome", "Progress", "SearchProblem", "Tuner",
           "choose", "complexity"]
