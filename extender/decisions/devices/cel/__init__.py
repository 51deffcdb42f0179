"""DRA device selectors in CEL, evaluated like Kubernetes' k8s.io/dynamic-resource-allocation/cel.

compile_selector(expression, programs) -> CompiledSelector (remembered in the caller's ProgramCache when given;
SelectorError(phase="compile") when invalid);
CompiledSelector.matches(device, activations) -> bool (SelectorError(phase="runtime") on an evaluation error).
See environment.py for how the Kubernetes environment is emulated on cel-expr-python.
"""

from extender.decisions.devices.cel.device_activation import ActivationCache
from extender.decisions.devices.cel.selector import (
    MAX_COST,
    MAX_EXPRESSION_LENGTH,
    CompiledSelector,
    ProgramCache,
    SelectorError,
    compile_selector,
    new_program_cache,
)

__all__ = [
    "MAX_COST",
    "MAX_EXPRESSION_LENGTH",
    "ActivationCache",
    "CompiledSelector",
    "ProgramCache",
    "SelectorError",
    "compile_selector",
    "new_program_cache",
]
