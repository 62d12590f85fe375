"""PopuLoRA: population-based asymmetric self-play for RLVR with LoRA adapters on one frozen base.

Importing the package has no side effects: no model is loaded, no process is started.
"""

__version__ = "0.1.0"
