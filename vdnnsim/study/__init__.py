"""Studies: one run, grids and zipped lists over config keys, as one DataFrame."""

from .run import run_points, run_study, write_results
from .spec import StudySpec, expand, load_study

__all__ = ["StudySpec", "expand", "load_study", "run_points", "run_study", "sweep",
           "write_results"]


def sweep(study, workers: int | None = None, scheduler=None, progress: bool = False,
          host_cal=None):
    """A study (a YAML path, a mapping or a StudySpec) as one DataFrame, a row per run.
    ``host_cal``: a host calibration file or ``hostcal.HostCalibration``."""
    import os

    from ..errors import ConfigError
    from ..yamlio import parse_model

    if isinstance(study, StudySpec):
        spec, base = study, "."
    elif isinstance(study, dict):
        spec, base = parse_model(StudySpec, study, "<study>", ConfigError), "."
    elif isinstance(study, (str, os.PathLike)):
        spec, base = load_study(study)
    else:
        raise ConfigError(f"sweep: expected a study path, mapping or StudySpec, got "
                          f"{type(study).__name__}")
    return run_study(spec, base, progress, workers, scheduler, host_cal)
