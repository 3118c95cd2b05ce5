"""Studies: one run, grids and zipped lists over config keys, as one DataFrame."""

from .run import run_points, run_study
from .spec import StudySpec, expand, load_study

__all__ = ["StudySpec", "expand", "load_study", "run_points", "run_study"]
