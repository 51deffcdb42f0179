"""DRA device selectors in CEL, evaluated like Kubernetes' k8s.io/dynamic-resource-allocation/cel.

compile_selector(expression) -> CompiledSelector (cached; SelectorError(phase="compile") when invalid);
CompiledSelector.matches(device) -> bool (SelectorError(phase="runtime") on an evaluation error).
See environment.py for how the Kubernetes environment is emulated on cel-expr-python.
"""

from extender.decisions.cel.selector import (
    MAX_COST,
    MAX_EXPRESSION_LENGTH,
    CompiledSelector,
    SelectorError,
    clear_cache,
    compile_selector,
)

__all__ = [
    "MAX_COST",
    "MAX_EXPRESSION_LENGTH",
    "CompiledSelector",
    "SelectorError",
    "clear_cache",
    "compile_selector",
]
