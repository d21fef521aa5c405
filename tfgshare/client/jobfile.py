"""Job files: ``tfgshare submit -f jobs.yaml`` read into job specs, each error naming its line."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from tfgshare import schema as s


class UsageError(Exception):
    """Bad command-line input; the text says what is wrong."""


def check_paths(specs: list[s.JobSpec]) -> None:
    """What the agents' path rule (``paths.confine``) refuses without knowing their roots:
    a relative dataset dir. The coordinator checks the roots at submit."""
    from tfgshare.paths import absolute
    for i, spec in enumerate(specs, 1):
        if spec.dataset_dir is not None:
            try:
                absolute(spec.dataset_dir, "dataset_dir")
            except ValueError as exc:
                raise UsageError(f"job {i}: {exc}" if len(specs) > 1 else str(exc)) from None


def specs_from_yaml(path: Path) -> list[s.JobSpec]:
    """Job specs from a YAML file: a list of mappings of JobSpec fields (or {jobs: [...]}).

    The file is read with ``yaml.safe_load`` (no tags that build objects); an error
    names the file's line.
    """
    import yaml
    try:
        text = path.read_text()
        data = yaml.safe_load(text)
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise UsageError(f"{path} is not valid YAML: {exc}") from None
    if isinstance(data, dict) and "jobs" in data:
        data = data["jobs"]
    if not isinstance(data, list) or not data:
        raise UsageError(f"{path} must hold a non-empty list of jobs")
    lines = _job_lines(text)
    specs = []
    for i, item in enumerate(data, 1):
        if isinstance(item, dict) and "model" in item and "model_name" not in item:
            item = {("model_name" if k == "model" else k): v for k, v in item.items()}
        try:
            item = _flag_keys(item, f"job {i}")
            specs.append(s.job_spec(item, f"job {i}"))
        except s.SchemaError as exc:
            line, keys = lines[i - 1] if i <= len(lines) else (None, {})
            # the line of the field the error is about (extra runner flags: their key, if
            # given as one, else "extra")
            flag = re.search(r"runner flag --(?:no)?(\w+)", str(exc))
            key = flag and flag.group(1)
            text = ((key if key in s.RUNNER_FLAGS and key in keys else "extra") if flag
                    else str(exc))
            for key, key_line in keys.items():
                if re.search(rf"\b{re.escape(key)}\b", text):
                    line = key_line
                    break
            where = f"{path.name}, line {line}" if line else path.name
            raise UsageError(f"{where}: {exc}") from None
    check_paths(specs)
    return specs


def _flag_keys(item: Any, where: str) -> Any:
    """A YAML job with runner flags as keys (``seed: 7``, ``deterministic: true``): those
    keys moved into ``extra`` as the flags ``--seed 7`` / ``--deterministic``, which the
    JobSpec then checks as any extra flag (allowed values, given once)."""
    if not isinstance(item, dict) or not any(k in s.RUNNER_FLAGS for k in item):
        return item
    out, flags = {}, []
    for key, value in item.items():
        kind = s.RUNNER_FLAGS.get(key) if isinstance(key, str) else None
        if kind is None:
            out[key] = value
        elif kind is bool:
            if not isinstance(value, bool):
                raise s.SchemaError(f"{where}: runner flag --{key} is true or false, "
                                    f"got {value!r}")
            flags.append(f"--{key}" if value else f"--no{key}")
        elif isinstance(value, (bool, list, dict)) or value is None:
            raise s.SchemaError(f"{where}: runner flag --{key} needs one value, got {value!r}")
        else:
            flags += [f"--{key}", str(value)]
    extra = out.get("extra", [])
    out["extra"] = (list(extra) + flags) if isinstance(extra, list) else extra
    return out


def _job_lines(text: str) -> list[tuple[int, dict[str, int]]]:
    """Per job of a YAML job file: its first line and the line of each of its keys."""
    import yaml
    root = yaml.compose(text, Loader=yaml.SafeLoader)
    if isinstance(root, yaml.MappingNode):
        root = next((v for k, v in root.value if k.value == "jobs"), None)
    if not isinstance(root, yaml.SequenceNode):
        return []
    out = []
    for node in root.value:
        keys = {}
        if isinstance(node, yaml.MappingNode):
            keys = {str(k.value): k.start_mark.line + 1 for k, _ in node.value}
            if "model" in keys:
                keys.setdefault("model_name", keys["model"])
        out.append((node.start_mark.line + 1, keys))
    return out
