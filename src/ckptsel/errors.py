"""One exception type for bad input, so the CLI can print one clear line and exit 2."""

from __future__ import annotations


class CkptselError(Exception):
    """Bad input or a broken contract. The message names the file/trajectory/step/item."""

    exit_code = 2


class VerificationError(CkptselError):
    """Frozen choices or results do not match what the records give (``ckptsel verify``)."""

    exit_code = 1
