"""Stage 3, training: the GRPO entry (``grpo``), TRL's ``GRPOTrainer`` with our loss (``trainer``),
callbacks, the experiment tracker's run per job (``tracking``), model loading and precision (``models``, ``precision``), the tiny model, and the SFT stage that
makes the mini's base model (``sft``). Imports ``methods``, ``scoring``, ``data`` and ``common``.
"""
