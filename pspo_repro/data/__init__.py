"""Stage 1, the data: problem records, benchmark loaders, the synthetic task and prompt templates.

``problems`` (the ``Problem`` record and dataset registry types), ``datasets`` (the benchmarks, the
registry and the loaders), ``synthetic`` (the mini-reproduction's generated task), ``prompts`` (chat
templates), ``user_sets`` (a researcher's own set: a file, a dataset folder or a hub id, with a
column map). Imports only ``common``.
"""
