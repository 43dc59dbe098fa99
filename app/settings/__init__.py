"""Every run setting, declared once.

`trainctl train` reads these from `TRAIN_*` environment variables (and a `.env` file in the
working directory). The env listing (`trainctl env`), docs/settings.md, the Helm chart's
ConfigMap and the rendered manifests all derive from `TrainSettings`, so a setting is added in
one section module here (data, model, scaling, run, tracking) and nowhere else.
`app.settings.env` reads them from the environment and `.env` with clear messages.
"""

from app.settings.data import NAMED_DATASETS, CacheMode, DatasetName
from app.settings.model import SEED_MAX, ModelName
from app.settings.scaling import WorkerRange
from app.settings.train import ENV_PREFIX, TrainSettings, env_name

__all__ = [
    "ENV_PREFIX",
    "NAMED_DATASETS",
    "SEED_MAX",
    "CacheMode",
    "DatasetName",
    "ModelName",
    "TrainSettings",
    "WorkerRange",
    "env_name",
]
