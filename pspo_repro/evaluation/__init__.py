"""Stage 4, evaluation: temperature sweeps into one JSON cell per (model, dataset, temperature)
(``evaluator``), what is evaluated under which identity (``targets``), the cell record itself (``cells``: its
one owner), the generation engines (``backends``: HF generate, vLLM) and a cell's metrics from its
per-sample records (``metrics``). Imports ``training`` (model loading), ``scoring``, ``data``, ``common``.
"""
