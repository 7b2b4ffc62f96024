# SPDX-License-Identifier: MIT
"""linattn for Python: recurrent linear-attention kernels built from the linattn C++ headers.

`import linattn.torch` for the PyTorch functions (fla's names and arguments); docs/python.md.
"""

__version__ = "0.1.0"
