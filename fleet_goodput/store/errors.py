"""What the output store raises: StoreError and the kinds a caller tells apart (busy, not a store, damaged)."""

from __future__ import annotations


class StoreError(RuntimeError):
    """The output cannot be used as asked (busy, older as-of, foreign state…)."""


class StoreBusy(StoreError):
    """Another run holds the output, or committed to it meanwhile: the same run later is right."""


class NotAStore(StoreError):
    """The output folder holds files this project did not write: a run would overwrite or delete them."""


class StoreDamaged(StoreError):
    """Part of the store is missing or unreadable: `problem` names it, and the message the way back."""

    def __init__(self, problem: str, root: str):
        hint = f"nothing was changed; `mpg check --output {root}` says what is damaged and how to recover"
        separator = "" if problem.endswith("\n") else "; "  # a list of problems ends its own line
        super().__init__(f"{problem}{separator}{hint}")
        self.problem = problem
