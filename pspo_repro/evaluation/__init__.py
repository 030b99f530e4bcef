"""Stage 4, evaluation: temperature sweeps into one JSON cell per (model, dataset, temperature)
(``evaluator``), the generation engines (``backends``: HF generate, vLLM) and a cell's metrics from its
per-sample records (``metrics``). Imports ``training`` (model loading), ``scoring``, ``data``, ``common``.
"""
