"""A host calibration (``vdnnsim calibrate --host``): its file, and the factor it gives a
trace's host costs. No torch here: the probing is ``gpu/measure/hostprobe.py``'s.

The calibration probes this machine's host in seconds, without a model (``probe_host``):
the probe before a model (``host_probe_ns``) and CAL_PROBES of the probe that follows a
timed step (their median, ``host_probe_between_ns``). ``host_factor`` gives k, this host's
probe over that of the host a trace's host costs were measured on, as hostspeed.py's note
on host speed says. A file made without CUDA timed the CPU device's dispatcher, which no
reference host was: it gives no factor, and ``read_host_calibration`` refuses it.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import platform
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import ConfigError, shown

FORMAT, VERSION = "vdnnsim-host-calibration", 1
CAL_PROBES = 31  # of the probe between steps: about 0.1 s on a lent machine
LINE_STARTS = ("host costs times ", "host calibration ")  # a result's line of it (host_factor)
NO_CUDA = ("no CUDA: the probe timed the CPU device's dispatcher, not a kernel launch; no "
           "reference host was probed so, so this file gives no host speed factor")


@dataclass(frozen=True)
class HostCalibration:
    """What ``--host-cal FILE`` reads: this host's probes (ns per launch)."""

    path: str
    device: str  # "cuda" or "cpu"
    host_probe_ns: float  # before a model
    host_probe_between_ns: float  # as after a timed step
    gpu: str | None = None
    made: str = ""


def calibration_record(probes: dict[str, Any], device: str, gpu: str | None,
                       torch_version: str, now: datetime.datetime | None = None
                       ) -> dict[str, Any]:
    """The file's contents: ``probes`` (``host_probe_ns``, ``host_probe_between_ns``, the
    single probes ``host_probe_steps_ns``) with the machine, torch and the date."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    return {"format": FORMAT, "version": VERSION, "device": device, "gpu": gpu,
            "machine": _machine(), "torch": torch_version,
            "made": now.isoformat(timespec="seconds"), **probes,
            **({"note": NO_CUDA} if device != "cuda" else {})}


def _machine() -> dict[str, Any]:
    """This machine's name, processor and CPU count, as far as the platform tells."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f
                        if line.startswith("model name")), cpu)
    except OSError:
        pass
    return {"hostname": platform.node(), "cpu": cpu, "cpus": os.cpu_count(),
            "system": platform.system()}


def _probe(data: dict[str, Any], key: str, where: str) -> float:
    v = data.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not (0 < v < math.inf):
        raise ConfigError(f"{where}: {key}: a probe time in ns (a positive number), got "
                          f"{str(v)[:40]!r}")
    return float(v)


def read_host_calibration(path: str | os.PathLike) -> HostCalibration:
    """The file of ``vdnnsim calibrate --host``, checked; one line naming the file where it
    is not one, or was made without CUDA."""
    p, where = Path(path), shown(path)
    try:
        data = json.loads(p.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{where}: no such file") from None
    except IsADirectoryError:
        raise ConfigError(f"{where}: is a folder, not a host calibration") from None
    except (OSError, ValueError) as exc:  # unreadable, or not JSON (UnicodeDecodeError too)
        raise ConfigError(f"{where}: not a host calibration (vdnnsim calibrate --host): "
                          f"{str(exc)[:120]}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ConfigError(f"{where}: not a host calibration (vdnnsim calibrate --host "
                          "writes one)")
    if data.get("version") != VERSION:
        raise ConfigError(f"{where}: host calibration version {data.get('version')!r}; this "
                          f"vdnnsim reads version {VERSION}")
    if data.get("device") != "cuda":
        raise ConfigError(f"{where}: made without CUDA (device {data.get('device')!r}): it "
                          "gives no host speed factor; make it with vdnnsim calibrate --host "
                          "on the machine whose GPU runs the step")
    gpu = data.get("gpu")
    return HostCalibration(str(path), "cuda", _probe(data, "host_probe_ns", where),
                           _probe(data, "host_probe_between_ns", where),
                           gpu if isinstance(gpu, str) else None, str(data.get("made", "")))


def as_calibration(value: Any) -> HostCalibration | None:
    """A HostCalibration, or the file of one (a path), or None."""
    if value is None or isinstance(value, HostCalibration):
        return value
    if isinstance(value, (str, os.PathLike)):
        return read_host_calibration(value)
    raise ConfigError(f"host_cal must be a host calibration file or a HostCalibration, got "
                      f"{type(value).__name__}")


def op_model_probe(gpu: Any) -> float | None:
    """The probe of the host the op model's host costs were measured on (its fit's
    ``host_probe_between_ns``), for ``gpu``'s op model or the one it is timed by."""
    from .costs.ops import for_gpu, predict_for
    model = for_gpu(gpu) or predict_for(gpu)
    v = model.fitted.get("host_probe_between_ns") if model is not None else None
    return float(v) if isinstance(v, (int, float)) and v > 0 else None


def host_factor(cal: HostCalibration, trace: Any, gpu: Any) -> tuple[float | None, str]:
    """k for ``trace``'s host costs on ``gpu``, and the result's one line saying it (None
    and why not, where the costs carry no probe)."""
    from .costs.ops import MODEL, SPEC_MODEL
    src, name = trace.source, shown(cal.path)
    host = "the trace's profiling host" if src.kind == "profiled" else "the trace's host"
    refs = (("between steps", cal.host_probe_between_ns, src.host_probe_between_ns, host),
            ("before a model", cal.host_probe_ns, src.host_probe_ns, host))
    kind, mine, ref, whose = next((r for r in refs if r[2]), ("", 0.0, None, ""))
    if ref is None and src.kind == "synthesized" and src.cost_model in (MODEL, SPEC_MODEL):
        kind, mine, ref, whose = ("between steps", cal.host_probe_between_ns,
                                  op_model_probe(gpu), "the op model's calibration host")
    if not ref:
        return None, (f"host calibration {name} not applied: this trace's host costs "
                      f"({_whose(src)}) carry no host probe to compare it with")
    k = mine / ref
    return k, (f"host costs times {k:.2f}: this host's launch probe ({mine / 1e3:.1f} us "
               f"{kind}, host calibration {name}) over {whose}'s ({ref / 1e3:.1f} us)")


def _whose(src: Any) -> str:
    if src.kind == "profiled":
        return "profiled before the host probe was recorded"
    return f"the {src.gpu} preset's" if src.gpu else "the preset's"
