"""The job's values in jax.distributed's key-value store, signed: the epoch agreement and
recover()'s reports (jax_accl.recovery), the notices of processes that left
(jax_accl.departures). The key is derived from the job's secret (jax_accl.distributed),
so that a stranger who reaches the coordinator cannot steer a recovery."""

from __future__ import annotations

import hashlib
import hmac

_signing_key = b""


def set_secret(secret: str) -> None:
    """The job's secret (jax_accl/distributed.py): values are signed with a key derived
    from it."""
    global _signing_key
    _signing_key = hmac.new(secret.encode(), b"jax_accl epoch agreement", hashlib.sha256).digest()


def signed(key: str, value: str) -> str:
    tag = hmac.new(_signing_key, f"{key}={value}".encode(), hashlib.sha256).hexdigest()
    return f"{value} {tag}"


def verified_text(key: str, text: str) -> str | None:
    """A signed value's text, or None when its signature is not the job's."""
    *fields, tag = text.split(" ")
    value = " ".join(fields)
    want = hmac.new(_signing_key, f"{key}={value}".encode(), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(tag.encode(), want.encode()):  # bytes: any text compares
        return None
    return value
