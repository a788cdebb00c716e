"""User-facing errors: the CLI prints them as one clear line and exits 2, no traceback.

They are netem's classes (netem loads link profiles and must not import pddbench), so an error
raised by either package is caught as the same UserError / InputError."""

from __future__ import annotations

from netem.errors import InputError, UserError

__all__ = ["InputError", "UserError"]
