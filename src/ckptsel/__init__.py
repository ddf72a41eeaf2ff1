"""ckptsel: which checkpoint of an SFT run to keep, and what the validation data buys.

One package per stage, in the order data flows (ARCHITECTURE.md): ``records`` (the contract),
``data``, ``study``, ``train``, ``measure``, ``choose``, ``results``, ``stats``, ``report``,
``workflows``, ``sim``, ``integrations``, ``cli``. The analysis (``records``, ``choose``,
``stats``) is pure NumPy and never imports torch.
"""

from ckptsel._util.blas import pin_kernels

pin_kernels()  # before numpy/torch load: the same float results on every x86-64 CPU (_util/blas.py)

__version__ = "0.1.0"
