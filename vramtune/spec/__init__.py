"""The model spec: a strict YAML reader (every problem at once) and the records it produces."""
from vramtune.core.reading import Problem, SpecError
from vramtune.spec.files import apply_overrides, load_spec, read_yaml, require_tuned
from vramtune.spec.schema import ProbeSettings, Spec, TrainSettings, default_settings, spec_from_dict

__all__ = [
           "ProbeSettings",
           "Problem",
           "Spec",
           "SpecError",
           "TrainSettings",
           "apply_overrides",
           "default_settings",
           "load_spec",
           "read_yaml",
           "require_tuned",
           "spec_from_dict",
]
