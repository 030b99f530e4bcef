"""Hydra finds launchers only under the ``hydra_plugins`` namespace package: this registers
``pspo_repro.pipelines.launch.SlurmLauncher`` there (conf/hydra/launcher/slurm.yaml targets this name).
Importable when the project root is on ``sys.path`` (``python -m`` from the root, Slurm jobs started
there) or when the package is installed with ``hydra_plugins*`` in pyproject's packages.find.
"""

from pspo_repro.pipelines.launch import SlurmLauncher as _SlurmLauncher


class PspoSlurmLauncher(_SlurmLauncher):
    pass
