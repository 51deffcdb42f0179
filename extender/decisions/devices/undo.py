"""How the search takes back a tentative step: each step that changes its bookkeeping returns the function
that reverses it, as upstream's allocateDevice returns the rollback func its caller runs on backtracking
(structured/internal/experimental/allocator_experimental.go)."""

from __future__ import annotations

from collections.abc import Callable

Undo = Callable[[], object]  # what it returns is ignored
