"""The model spec: a strict YAML reader (every problem at once) and the records it produces."""
from vramtune.core.reading import Problem, SpecError
from vramtune.core.spec import ProbeSettings, Spec, TrainSettings
from vramtune.spec.files import apply_overrides, dialect_of, load_spec, require_tuned
from vramtune.spec.schema import default_settings, spec_from_dict

__all__ = [
           "ProbeSettings",
           "Problem",
           "Spec",
           "SpecError",
           "TrainSettings",
           "apply_overrides",
           "default_settings",
           "dialect_of",
           "load_spec",
           "require_tuned",
           "spec_from_dict",
]
