"""ckptsel: which checkpoint of an SFT run to keep, and what the validation data buys.

The analysis layer (``ckptsel.analysis``) is pure NumPy and never imports torch.
"""

__version__ = "0.1.0"
