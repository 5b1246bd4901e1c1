"""``python -m dial_runtime.cli``: the ``dial-runtime`` command."""

from . import console

console()
