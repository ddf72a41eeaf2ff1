"""CLI commands, one module each (registered in ``ckptsel.cli``)."""
