"""Exceptions raised by jax_accl outside XLA (inside jitted code XLA raises its own
runtime error carrying jax_accl's message)."""


class AcclError(RuntimeError):
    """A collective failed; ``rank_errors`` maps each failed rank to its message."""

    def __init__(self, message: str, rank_errors: dict | None = None):
        super().__init__(message)
        self.rank_errors = dict(rank_errors or {})


class AcclWarning(UserWarning):
    """jax_accl carries less of a program than its user may think (warned once)."""
