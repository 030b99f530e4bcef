"""Stage 6, orchestration: the staged mini-reproduction and study (``mini``), its comparison with a
committed copy (``mini_committed``), and the Slurm launcher behind Hydra's ``hydra/launcher=slurm``
(``launch``). Runs the stages as subprocesses; may import any stage.
"""
