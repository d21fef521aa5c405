"""Model profiles: per TF-Slim model and batch size, what a training job costs."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import yaml

BYTES_PER_PARAM = 4  # float32 variables
# the per-batch values whose provenance a profile file may record (and, with
# ``provenance: required``, must): beside each row, ``sources: {field: "where it was read"}``
# and ``estimate: {field: "why it is an estimate"}`` (or a list of fields with an
# ``estimate_reason``); the loader keeps them on ``ModelProfile`` and otherwise ignores them
PROVENANCE_FIELDS = ("step_time_s", "memory_mb", "gpu_util")
PROVENANCE_MODES = ("required", "measured")


@dataclass(frozen=True)
class ModelProfile:
    """One (model, batch size): its cost on the reference GPU, alone."""

    model: str
    batch_size: int
    step_time_s: float     # seconds per step, single tenant, reference GPU
    memory_mb: float       # peak GPU memory of the process
    gpu_util: float        # single-tenant GPU utilisation in (0, 1] (a CPU profile's at
                           # a whole core: its busy share / cpu_share)
    checkpoint_mb: float   # size of a tf.train.Checkpoint (weights + optimizer slots)
    startup_s: float       # process start + graph build before the first step
    image_size: int | None = None   # input size profiled (None: the net's default)
    # a restart from its checkpoint, measured whole (exported graph imported, checkpoint
    # read, first step's excess); None: startup_s plus the checkpoint's read
    resume_startup_s: float | None = None
    # provenance of step_time_s / memory_mb / gpu_util as the file records it: where each
    # was measured or read (``sources``), and why one is an estimate (``estimates``)
    sources: dict[str, str] = field(default_factory=dict, compare=False)
    estimates: dict[str, str] = field(default_factory=dict, compare=False)

    def provenance(self, name: str) -> str:
        """``"estimate"``, ``"measured"`` (a source and no estimate) or ``"unknown"`` for
        one of ``PROVENANCE_FIELDS``."""
        if name in self.estimates:
            return "estimate"
        return "measured" if name in self.sources else "unknown"

    def with_workload(self, gpu_util: float | None = None,
                      memory_mb: float | None = None) -> "ModelProfile":
        """This profile with a job's own utilisation or memory (None: this profile's), as
        ``dataclasses.replace`` gives it at a sixth of its cost (one per job of a trace)."""
        own = object.__new__(ModelProfile)
        values = own.__dict__
        values.update(self.__dict__)
        if gpu_util is not None:
            values["gpu_util"] = gpu_util
        if memory_mb is not None:
            values["memory_mb"] = memory_mb
        return own


@dataclass(frozen=True)
class Profiles:
    """All profiles of a profile file, by (model, batch size)."""

    reference_gpu: str
    by_key: dict[tuple[str, int], ModelProfile]
    colocation: dict | None = None     # fitted {overhead, exponent, ...} of a measured profile
    storage_mb_s: float | None = None  # measured checkpoint bandwidth of a measured profile
    # measured on virtual GPUs (a CPU profile: its models have a cpu_share): a start-up
    # computes on the device's core, beside its co-tenants
    virtual: bool = False
    provenance: str | None = None      # the file's ``provenance`` key (PROVENANCE_MODES)
    path: str = ""                     # the file it was read from

    def sim_overrides(self) -> dict:
        """SimConfig fields this profile measured (co-location model, checkpoint bandwidth)
        or implies (start-ups on the device, for virtual GPUs)."""
        from .colocation import Colocation
        out: dict = {}
        if self.virtual:
            out["startup_on_device"] = True
        if self.colocation:
            out["colocation"] = Colocation(float(self.colocation["overhead"]),
                                           float(self.colocation["exponent"]))
        if self.storage_mb_s:
            out["storage_mb_s"] = float(self.storage_mb_s)
        return out

    def get(self, model: str, batch_size: int) -> ModelProfile:
        """The profile of ``model`` at ``batch_size``; a clear error if absent."""
        try:
            return self.by_key[(model, int(batch_size))]
        except KeyError:
            sizes = sorted(b for m, b in self.by_key if m == model)
            if not sizes:
                raise KeyError(f"no profile for model {model!r}; profiled models: "
                               f"{', '.join(self.models())}") from None
            raise KeyError(f"no profile for {model!r} at batch size {batch_size}; "
                           f"profiled sizes: {sizes}") from None

    def models(self) -> list[str]:
        """Profiled model names, in file order."""
        return list(dict.fromkeys(m for m, _ in self.by_key))

    def step_times(self) -> dict[str, dict[int, float]]:
        """``{model: {batch_size: step_time_s}}``, the form ``philly.mapping`` takes."""
        out: dict[str, dict[int, float]] = {}
        for (m, b), p in self.by_key.items():
            out.setdefault(m, {})[b] = p.step_time_s
        return out


def default_profiles_path() -> Path:
    """The profile file shipped with tfgshare (P100 estimates; the ``profile`` workload's)."""
    return Path(str(resources.files("tfgshare") / "data" / "model_profiles.yaml"))


def published_profiles_path() -> Path:
    """The profile of published measurements, each value with its source (the
    ``measured`` workload's)."""
    return Path(str(resources.files("tfgshare") / "data" / "profiles" / "published.yaml"))


def _positive(value, where: str, upper: float | None = None) -> float:
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{where}: {value!r} is not a number") from None
    if not (x > 0 and math.isfinite(x)) or (upper is not None and x > upper):
        bound = f" and at most {upper}" if upper is not None else ""
        raise ValueError(f"{where}: {value!r} must be positive{bound}")
    return x


def load_profiles(path: str | Path | None = None) -> Profiles:
    """Read a profile file (default: the shipped one) into ``Profiles``."""
    path = Path(path) if path is not None else default_profiles_path()
    try:
        data = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise FileNotFoundError(f"model profile file not found: {path}") from None
    except yaml.YAMLError as err:
        raise ValueError(f"{path}: not valid YAML ({err})") from None
    if not isinstance(data, dict) or not isinstance(data.get("models"), dict) or not data["models"]:
        raise ValueError(f"{path}: expected a mapping with a non-empty 'models' mapping")
    mode = data.get("provenance")
    if mode is not None and mode not in PROVENANCE_MODES:
        raise ValueError(f"{path}: provenance: {mode!r} must be one of "
                         f"{', '.join(PROVENANCE_MODES)}")
    measured = _measured_source(data) if mode == "measured" or (
        mode is None and data.get("measured_by")) else None
    by_key: dict[tuple[str, int], ModelProfile] = {}
    for model, spec in data["models"].items():
        where = f"{path}: models.{model}"
        if not isinstance(spec, dict) or not isinstance(spec.get("batches"), dict):
            raise ValueError(f"{where}: needs 'params', 'startup_s' and a 'batches' mapping")
        slots = spec.get("optimizer_slots", 1)
        if not isinstance(slots, int) or slots < 0:
            raise ValueError(f"{where}.optimizer_slots: {slots!r} must be an integer >= 0")
        if spec.get("checkpoint_mb") is not None:   # measured
            checkpoint_mb = _positive(spec["checkpoint_mb"], f"{where}.checkpoint_mb")
        else:
            params = _positive(spec.get("params"), f"{where}.params")
            checkpoint_mb = params * BYTES_PER_PARAM * (1 + slots) / 2**20
        image_size = spec.get("image_size")
        if image_size is not None and (not isinstance(image_size, int) or image_size < 1):
            raise ValueError(f"{where}.image_size: {image_size!r} must be a positive integer")
        startup = _positive(spec.get("startup_s"), f"{where}.startup_s")
        resume = spec.get("resume_startup_s")
        if resume is not None:
            resume = _positive(resume, f"{where}.resume_startup_s")
        # a CPU profile's utilisation is its runner's busy share of a core that it got only
        # cpu_share of: alone on a virtual GPU it would use gpu_util / cpu_share of it (the
        # co-location fit takes it so too, tfgshare.repro.colocate)
        share = spec.get("cpu_share")
        share = 1.0 if share is None else _positive(share, f"{where}.cpu_share", upper=1.0)
        for batch, row in spec["batches"].items():
            bw = f"{where}.batches.{batch}"
            if not isinstance(batch, int) or batch <= 0:
                raise ValueError(f"{bw}: batch size must be a positive integer")
            if not isinstance(row, dict):
                raise ValueError(f"{bw}: needs step_time_s, memory_mb and gpu_util")
            sources, estimates = _row_provenance(row, bw, measured, mode == "required")
            by_key[(str(model), batch)] = ModelProfile(
                model=str(model), batch_size=batch,
                step_time_s=_positive(row.get("step_time_s"), f"{bw}.step_time_s"),
                memory_mb=_positive(row.get("memory_mb"), f"{bw}.memory_mb"),
                gpu_util=min(1.0, _positive(row.get("gpu_util"), f"{bw}.gpu_util",
                                            upper=1.0) / share),
                checkpoint_mb=checkpoint_mb, startup_s=startup, image_size=image_size,
                resume_startup_s=resume, sources=sources, estimates=estimates)
    coloc = data.get("colocation")
    if coloc is not None:
        if not isinstance(coloc, dict) or "overhead" not in coloc or "exponent" not in coloc:
            raise ValueError(f"{path}: colocation needs 'overhead' and 'exponent'")
        for k in ("overhead", "exponent"):
            if not isinstance(coloc[k], (int, float)) or coloc[k] < 0:
                raise ValueError(f"{path}: colocation.{k}: {coloc[k]!r} must be a number >= 0")
    storage = data.get("storage_mb_s")
    if storage is not None:
        storage = _positive(storage, f"{path}: storage_mb_s")
    virtual = any(isinstance(spec, dict) and spec.get("cpu_share") is not None
                  for spec in data["models"].values())
    return Profiles(str(data.get("reference_gpu", "")), by_key, coloc, storage, virtual, mode,
                    str(path))


def _measured_source(data: dict) -> str:
    """The source a measured profile file gives every value it did not mark otherwise."""
    where = ", ".join(str(data[k]) for k in ("device", "date") if data.get(k))
    by = data.get("measured_by")
    text = f"measured by `{by}`" if by else "measured (provenance: measured)"
    return f"{text} ({where})" if where else text


def _row_provenance(row: dict, where: str, measured: str | None,
                    required: bool) -> tuple[dict[str, str], dict[str, str]]:
    """A batch row's ``sources`` and ``estimate`` entries, checked; ``measured`` fills the
    sources a measured file's rows leave out; ``required`` insists on one or the other for
    each of ``PROVENANCE_FIELDS``."""
    src = row.get("sources") or {}
    if not isinstance(src, dict) or not all(
            isinstance(k, str) and isinstance(v, str) and v.strip() for k, v in src.items()):
        raise ValueError(f"{where}.sources: must map a field name to a non-empty text")
    est = row.get("estimate") or {}
    if isinstance(est, list):
        reason = row.get("estimate_reason")
        if not all(isinstance(f, str) for f in est):
            raise ValueError(f"{where}.estimate: a list must name fields")
        if not isinstance(reason, str) or not reason.strip():
            raise ValueError(f"{where}.estimate: a list of fields needs an 'estimate_reason'")
        est = {f: reason for f in est}
    if not isinstance(est, dict) or not all(
            isinstance(k, str) and isinstance(v, str) and v.strip() for k, v in est.items()):
        raise ValueError(f"{where}.estimate: must map a field name to the reason it is an "
                         "estimate (or list fields, with an 'estimate_reason')")
    unknown = sorted(set(est) - set(PROVENANCE_FIELDS))
    if unknown:
        raise ValueError(f"{where}.estimate: {', '.join(unknown)} not one of "
                         f"{', '.join(PROVENANCE_FIELDS)}")
    sources = {str(k): str(v) for k, v in src.items()}
    if measured:
        for name in PROVENANCE_FIELDS:
            if name not in sources and name not in est:
                sources[name] = measured
    if required:
        for name in PROVENANCE_FIELDS:
            if name not in sources and name not in est:
                raise ValueError(f"{where}.{name}: no source and not listed under 'estimate' "
                                 "(the file says provenance: required)")
    return sources, dict(est)
