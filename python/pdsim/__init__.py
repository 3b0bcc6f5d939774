"""pdsim from Python: the CLI's verbs in process, with the CLI's bytes.

    import pdsim
    r = pdsim.run("scenarios/quickstart.toml", seed=3, set={"pools.decode.instances": 4})
    r.summary["latency_ms"]["ttft"]["p99"]
    df = r.requests.to_pandas()

Every function calls the function the CLI verb runs (``pdsim::api`` in the Rust crate), so
``run`` writes the same ``summary.json`` bytes as ``pdsim run`` for the same inputs. The GIL is
released while pdsim simulates. Errors are :class:`Error` subclasses, one per CLI exit code,
carrying the key (``pools.decode.server.tp_size``), the file and line, and the CLI's message
(what is wrong and what would be valid).

A scenario is a path (``str`` or ``os.PathLike``), TOML text, or a ``dict`` of the TOML's
tables; text and dictionaries resolve relative paths (traces, model configs) against
``base_dir`` (default: the working directory).
"""

from __future__ import annotations

import json
import math
import os
import shlex
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from . import _native

__version__: str = _native.__version__

__all__ = [
    "SLO_KEYS",
    "run",
    "sweep",
    "plan",
    "plan_one_line",
    "lint",
    "layout",
    "explain",
    "Table",
    "Run",
    "Sweep",
    "Plan",
    "Error",
    "Failed",
    "InvalidInput",
    "FileError",
    "InternalError",
    "ScenarioWarning",
]

#: Every ``[slo]`` key: ``{"kind": "percentile" | "threshold" | "attainment", "meaning": ...,
#: "population": ...}`` — what the target bounds and what it is taken over (``itl_p99_ms``: every
#: inter-token gap of every request; ``tbt_p90_ms``: each request's worst gap; ``tbt_ms``: a
#: per-request threshold that joins attainment). ``summary["slo"]["targets"]`` gives each target
#: set with its ``value``, ``met``, ``population`` (a count) and ``late`` (what lies past it).
SLO_KEYS: Dict[str, Dict[str, str]] = {
    key: {"kind": kind, "meaning": meaning, "population": population}
    for key, kind, meaning, population in _native.slo_keys()
}

Scenario = Union[str, "os.PathLike[str]", Mapping[str, Any]]
Settings = Union[Mapping[str, Any], Sequence[str], None]


# --- errors ---------------------------------------------------------------------------------


class Error(Exception):
    """A pdsim error. ``exit_code`` is what the CLI exits with for it; ``key`` the scenario key,
    flag or file it is about (or None); ``file`` and ``line`` where a scenario error is;
    ``message`` the CLI's text: what is wrong and what would be valid."""

    exit_code: int = 0

    def __init__(
        self,
        message: str,
        key: Optional[str] = None,
        file: Optional[str] = None,
        line: Optional[int] = None,
        exit_code: Optional[int] = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.key = key
        self.file = file
        self.line = line
        if exit_code is not None:
            self.exit_code = exit_code


class Failed(Error):
    """Exit 1: a negative verdict (``lint(..., check=True)`` of an incompatible pair)."""

    exit_code = 1


class InvalidInput(Error, ValueError):
    """Exit 2: an invalid scenario, trace, config or argument."""

    exit_code = 2


class FileError(Error):
    """Exit 3: a file could not be read or written, or another pdsim process holds the folder."""

    exit_code = 3


class InternalError(Error):
    """Exit 4: an internal invariant broke (a bug in pdsim; a Rust panic lands here)."""

    exit_code = 4


class ScenarioWarning(UserWarning):
    """A scenario's warning (what ``pdsim run`` prints as ``warning: ...``)."""


_BY_CODE = {1: Failed, 2: InvalidInput, 3: FileError, 4: InternalError}


def _call(f: Any, *args: Any) -> Any:
    """Calls a native function, raising its error as the :class:`Error` of its exit code."""
    try:
        return f(*args)
    except _native.NativeError as e:
        code, message, key, file, line = e.args
        cls = _BY_CODE.get(code, Error)
        raise cls(message, key=key, file=file, line=line, exit_code=code) from None


# --- tables ---------------------------------------------------------------------------------


class Table:
    """A results CSV as typed columns (numpy arrays over the bytes pdsim produced; no row is
    ever a Python object). Column types follow the values: integers → ``int64`` (masked where
    a cell is empty: a stage never reached), decimals → ``float64`` (NaN where empty),
    ``true``/``false`` → ``bool``, anything else → text coded as ``int32`` codes into a list
    of categories (-1 where empty).

    ``to_pandas()`` gives nullable ``Int64``/``boolean`` and categorical columns,
    ``to_polars()`` a polars DataFrame; ``table[name]`` a numpy array (``numpy.ma`` where
    masked, an object array of str/None for text)."""

    def __init__(self, rows: int, columns: List[Tuple[str, str, Any, Any, Any]]) -> None:
        self.rows = rows
        self._cols: Dict[str, Tuple[str, np.ndarray, Optional[np.ndarray], Optional[List[str]]]] = {}
        for name, kind, values, mask, cats in columns:
            dtype = {"int": "<i8", "float": "<f8", "bool": "?", "text": "<i4"}[kind]
            arr = np.frombuffer(values, dtype=dtype)
            m = None if mask is None else np.frombuffer(mask, dtype="?")
            self._cols[name] = (kind, arr, m, cats)

    @classmethod
    def read(cls, path: Union[str, "os.PathLike[str]"]) -> "Table":
        """Reads a results CSV (``requests.csv``, ``timeseries.csv``, ``links.csv``,
        ``sweep.csv``, ``plan.csv``)."""
        rows, cols = _call(_native.read_columns, os.fspath(path))
        return cls(rows, cols)

    @property
    def names(self) -> List[str]:
        """The columns, in the CSV's order."""
        return list(self._cols)

    def __len__(self) -> int:
        return self.rows

    def __iter__(self) -> Iterator[str]:
        return iter(self._cols)

    def __contains__(self, name: object) -> bool:
        return name in self._cols

    def __repr__(self) -> str:
        return f"<pdsim.Table {self.rows} rows × {len(self._cols)} columns: {', '.join(self._cols)}>"

    def kind(self, name: str) -> str:
        """``int``, ``float``, ``bool`` or ``text``."""
        return self._cols[name][0]

    def __getitem__(self, name: str) -> np.ndarray:
        kind, arr, mask, cats = self._cols[name]
        if kind == "text":
            # codes -1 index the trailing None: empty cells become None, in one numpy gather.
            return np.array(list(cats or []) + [None], dtype=object)[arr]
        if mask is not None:
            return np.ma.MaskedArray(arr, mask=mask)
        return arr

    def to_dict(self) -> Dict[str, np.ndarray]:
        """Column name → numpy array (as ``table[name]``)."""
        return {n: self[n] for n in self._cols}

    def to_pandas(self) -> Any:
        """A pandas DataFrame: nullable ``Int64``/``boolean`` where a column has empty cells,
        categoricals for text."""
        import pandas as pd

        data: Dict[str, Any] = {}
        for name, (kind, arr, mask, cats) in self._cols.items():
            if kind == "text":
                data[name] = pd.Categorical.from_codes(arr, categories=list(cats or []))
            elif kind == "int" and mask is not None:
                data[name] = pd.arrays.IntegerArray(arr.copy(), mask.copy())
            elif kind == "bool" and mask is not None:
                data[name] = pd.arrays.BooleanArray(arr.copy(), mask.copy())
            else:
                data[name] = arr
        return pd.DataFrame(data, index=pd.RangeIndex(self.rows))

    def to_polars(self) -> Any:
        """A polars DataFrame (nulls where cells are empty; text as ``String``)."""
        import polars as pl

        series = []
        for name, (kind, arr, mask, cats) in self._cols.items():
            if kind == "text":
                # A gather in polars: code -1 picks the trailing null.
                cs = list(cats or [])
                pool = pl.Series(name, cs + [None], dtype=pl.String)
                series.append(pool.gather(np.where(arr < 0, len(cs), arr)))
                continue
            s = pl.Series(name, arr)
            if mask is not None:
                s = (
                    pl.DataFrame({name: s, "_null": pl.Series(mask)})
                    .select(pl.when(pl.col("_null")).then(None).otherwise(pl.col(name)).alias(name))
                    .to_series()
                )
            series.append(s)
        return pl.DataFrame(series)


# --- arguments ------------------------------------------------------------------------------


def _toml(v: Any) -> str:
    """A Python value as a TOML value (what ``--set``/``--vary`` take)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, Mapping):
        return "{ " + ", ".join(f"{json.dumps(str(k))} = {_toml(x)}" for k, x in v.items()) + " }"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml(x) for x in v) + "]"
    raise InvalidInput(f"{v!r}: not a TOML value (give a bool, int, float, str, list or dict)")


def _sets(s: Settings) -> List[str]:
    """``{"key": value}`` or ``["key=TOML", ...]`` as ``--set`` arguments."""
    if s is None:
        return []
    if isinstance(s, Mapping):
        return [f"{k}={_toml(v)}" for k, v in s.items()]
    if isinstance(s, str):
        return [s]
    return [str(x) for x in s]


def _vary(v: Union[Mapping[Any, Sequence[Any]], Sequence[str], None]) -> List[str]:
    """``{"key": [v1, v2]}``, linked keys ``{("k1", "k2"): [(a1, a2), (b1, b2)]}`` (the keys
    move together, one tuple per point) or ``["key=v1,v2", ...]`` as ``--vary`` arguments."""
    if v is None:
        return []
    if isinstance(v, Mapping):
        out = []
        for k, vals in v.items():
            if isinstance(vals, (str, bytes)) or not isinstance(vals, Sequence):
                vals = [vals]
            if isinstance(k, tuple):
                cells = []
                for t in vals:
                    if not isinstance(t, (tuple, list)) or len(t) != len(k):
                        raise InvalidInput(
                            f"vary[{k!r}]: {t!r} is not a tuple of {len(k)} values; linked keys "
                            f"take one tuple per point, e.g. {{('a.tp_size', 'a.ep_size'): [(8, 8), (16, 16)]}}"
                        )
                    cells.append("(" + ",".join(_toml(x) for x in t) + ")")
                out.append(",".join(str(x) for x in k) + "=" + ",".join(cells))
            else:
                out.append(f"{k}=" + ",".join(_toml(x) for x in vals))
        return out
    if isinstance(v, str):
        return [v]
    return [str(x) for x in v]


#: Bounds of the integer arguments, as the CLI's flags take them (``u64``, ``u32``) and
#: ``--jobs``'s bound (``vocab::limits::MAX_JOBS``).
_U64 = 2**64 - 1
_U32 = 2**32 - 1
_MAX_JOBS = 1024


def _int_arg(name: str, v: Any, lo: int, hi: int) -> int:
    """``v`` as a whole number in ``[lo, hi]``, else :class:`InvalidInput` naming the argument
    and the range (never a bare ``OverflowError`` or ``TypeError`` from the binding)."""
    if isinstance(v, bool) or not isinstance(v, int):
        raise InvalidInput(f"{name}={v!r}: give a whole number from {lo} to {hi}", key=name)
    if not lo <= v <= hi:
        raise InvalidInput(f"{name}={v}: out of range; give a whole number from {lo} to {hi}", key=name)
    return v


def _float_arg(name: str, v: Any) -> float:
    """``v`` as a float, else :class:`InvalidInput` naming the argument."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise InvalidInput(f"{name}={v!r}: give a number", key=name)
    try:
        return float(v)
    except OverflowError:
        raise InvalidInput(f"{name}={v}: too large for a float", key=name) from None


def _out_arg(out: Any, resume: bool = False) -> Any:
    """``out`` checked as the CLI checks ``--out``: a non-empty path (an empty one would write
    into the working directory), and ``resume=True`` only with one (there is nothing to resume
    in a temporary folder)."""
    if out is None:
        if resume:
            raise InvalidInput(
                "resume=True needs out=DIR: the folder of the interrupted sweep or plan to continue "
                "(without out the results go to a temporary folder, which holds nothing to resume)",
                key="resume",
            )
        return None
    if not isinstance(out, (str, os.PathLike)):
        raise InvalidInput(f"out={out!r}: give a folder path (str or os.PathLike)", key="out")
    p = os.fspath(out)
    if not isinstance(p, str) or p.strip() == "":
        raise InvalidInput(
            "out: an empty path; give the folder to write the results into (the CLI's --out refuses it too)",
            key="out",
        )
    return out


def _jobs_arg(jobs: Any) -> Optional[int]:
    return None if jobs is None else _int_arg("jobs", jobs, 1, _MAX_JOBS)


def _check_scenario_dict(v: Any, path: str) -> None:
    """Every value of a dict scenario is one TOML can hold: a finite number, a bool, a string,
    a list or a table with string keys. A NaN or infinity (which JSON, the way the dict reaches
    pdsim, cannot carry), or another type, is refused naming its key path."""
    where = path or "scenario"
    if isinstance(v, Mapping):
        for k, x in v.items():
            if not isinstance(k, str):
                raise InvalidInput(f"{where}: key {k!r} is not a string; TOML keys are strings", key=path or None)
            _check_scenario_dict(x, f"{path}.{k}" if path else k)
    elif isinstance(v, (list, tuple)):
        for i, x in enumerate(v):
            _check_scenario_dict(x, f"{path}[{i}]")
    elif isinstance(v, float):
        if not math.isfinite(v):
            raise InvalidInput(f"{where}: {v} is not a finite number; give a finite value", key=path)
    elif isinstance(v, int) and not isinstance(v, bool):
        if not -(2**63) <= v <= _U64:
            raise InvalidInput(f"{where}: {v} is beyond a 64-bit integer", key=path)
    elif not isinstance(v, (bool, str)) and v is not None:
        raise InvalidInput(
            f"{where}: {type(v).__name__} is not a scenario value (give a bool, int, float, str, list or dict)",
            key=path,
        )


def _source(scenario: Scenario, base_dir: Union[str, "os.PathLike[str]", None]) -> Tuple[str, Optional[str]]:
    """(path, TOML text or None): a file is read by pdsim; text and dictionaries get a stand-in
    path in ``base_dir`` that names them in errors and resolves their relative paths."""
    base = os.fspath(base_dir) if base_dir is not None else os.getcwd()
    if isinstance(scenario, Mapping):
        _check_scenario_dict(scenario, "")
        text = _call(_native.toml_of_json, json.dumps(scenario))
        return os.path.join(base, "<dict>"), text
    if isinstance(scenario, os.PathLike):
        return os.fspath(scenario), None
    if isinstance(scenario, str):
        if "\n" in scenario or (not os.path.exists(scenario) and ("=" in scenario or "[" in scenario)):
            return os.path.join(base, "<string>"), scenario
        return scenario, None
    raise InvalidInput(f"scenario: {type(scenario).__name__} is neither a path, TOML text nor a dict")


class _Out:
    """The output folder: the one given, else a temporary one removed after reading."""

    def __init__(self, out: Union[str, "os.PathLike[str]", None], name: str) -> None:
        self._tmp = None if out is not None else tempfile.TemporaryDirectory(prefix="pdsim-")
        self.path = Path(out) if out is not None else Path(self._tmp.name) / name
        self.kept: Optional[Path] = None if out is None else self.path

    def __enter__(self) -> "_Out":
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._tmp is not None:
            self._tmp.cleanup()


def _json(p: Path) -> Any:
    with open(p, "rb") as f:
        return json.loads(f.read())


def _maybe_table(p: Path) -> Optional[Table]:
    return Table.read(p) if p.is_file() else None


def _maybe_text(p: Path) -> Optional[str]:
    return p.read_text(encoding="utf-8") if p.is_file() else None


# --- verbs ----------------------------------------------------------------------------------


@dataclass
class Run:
    """What ``pdsim run`` wrote, read back. ``dir`` is None when the run went to a temporary
    folder (``out=None``)."""

    summary: Dict[str, Any]
    summary_json: bytes
    run: Dict[str, Any]
    requests: Optional[Table]
    timeseries: Optional[Table]
    links: Optional[Table]
    dir: Optional[Path]
    notes: List[str] = field(default_factory=list)


def run(
    scenario: Scenario,
    seed: Optional[int] = None,
    set: Settings = None,
    *,
    out: Union[str, "os.PathLike[str]", None] = None,
    summary_only: bool = False,
    trace_events: bool = False,
    base_dir: Union[str, "os.PathLike[str]", None] = None,
) -> Run:
    """``pdsim run SCENARIO [--seed N] [--set K=V]... [--out DIR]``: runs one scenario.

    ``set`` is ``{"pools.decode.instances": 4}`` (Python values, written as TOML) or
    ``["pools.decode.instances=4"]`` (the CLI's strings). Without ``out`` the files go to a
    temporary folder, read back and removed. Returns the summary (a dict, and the exact bytes
    of ``summary.json``), ``run.json``, and the request, timeseries and link tables
    (None with ``summary_only``)."""
    if seed is not None:
        seed = _int_arg("seed", seed, 0, _U64)
    out = _out_arg(out)
    path, text = _source(scenario, base_dir)
    with _Out(out, "run") as o:
        notes = _call(_native.run, path, text, seed, _sets(set), str(o.path), summary_only, trace_events)
        for n in notes:
            warnings.warn(n, ScenarioWarning, stacklevel=2)
        summary_json = (o.path / "summary.json").read_bytes()
        return Run(
            summary=json.loads(summary_json),
            summary_json=summary_json,
            run=_json(o.path / "run.json"),
            requests=_maybe_table(o.path / "requests.csv"),
            timeseries=_maybe_table(o.path / "timeseries.csv"),
            links=_maybe_table(o.path / "links.csv"),
            dir=o.kept,
            notes=list(notes),
        )


@dataclass
class Sweep:
    """What ``pdsim sweep`` wrote: ``rows`` is ``sweep.csv`` (one row per point and seed, in
    grid order), ``csv`` its bytes, ``manifest`` ``sweep.json``."""

    rows: Table
    csv: bytes
    manifest: Dict[str, Any]
    dir: Optional[Path]

    def to_pandas(self) -> Any:
        """``sweep.csv`` as a pandas DataFrame."""
        return self.rows.to_pandas()


def sweep(
    scenario: Scenario,
    vary: Union[Mapping[Any, Sequence[Any]], Sequence[str]],
    *,
    seeds: int = 1,
    jobs: Optional[int] = None,
    shard: Optional[str] = None,
    set: Settings = None,
    out: Union[str, "os.PathLike[str]", None] = None,
    resume: bool = False,
    base_dir: Union[str, "os.PathLike[str]", None] = None,
) -> Sweep:
    """``pdsim sweep SCENARIO --vary KEY=V1,V2 ... [--seeds N] [--jobs N] [--shard I/N]``.

    ``vary`` is ``{"pools.decode.instances": [1, 2, 4]}`` or ``["pools.decode.instances=1,2,4"]``;
    keys that move together are a tuple key with one tuple per point,
    ``{("pools.decode.server.tp_size", "pools.decode.server.ep_size"): [(8, 8), (16, 16)]}``.
    ``jobs`` (default: every core) never changes the bytes. An interrupt (Ctrl-C) takes effect
    when the call returns; with ``out`` every finished point is kept and ``resume=True``
    continues."""
    seeds = _int_arg("seeds", seeds, 1, _U32)
    jobs = _jobs_arg(jobs)
    out = _out_arg(out, resume)
    if shard is not None and not isinstance(shard, str):
        raise InvalidInput(f"shard={shard!r}: give \"I/N\", the I-th of N slices", key="shard")
    path, text = _source(scenario, base_dir)
    with _Out(out, "sweep") as o:
        _call(_native.sweep, path, text, _vary(vary), seeds, jobs, shard, _sets(set), str(o.path), resume)
        csv = (o.path / "sweep.csv").read_bytes()
        return Sweep(rows=Table.read(o.path / "sweep.csv"), csv=csv, manifest=_json(o.path / "sweep.json"), dir=o.kept)


@dataclass
class Plan:
    """What ``pdsim plan`` wrote: ``answer`` is ``plan.json``; ``rows`` ``sweep.csv`` (the runs
    made); ``max_rate`` ``plan.csv`` (``--max-rate`` only); ``best_toml``, ``launch``, ``k8s``
    and ``slurm`` the deployment of the answer (``--rate`` with an answer only)."""

    answer: Dict[str, Any]
    rows: Table
    max_rate: Optional[Table]
    best_toml: Optional[str]
    launch: Optional[str]
    k8s: Optional[str]
    slurm: Optional[str]
    dir: Optional[Path]

    def to_pandas(self) -> Any:
        """``sweep.csv`` as a pandas DataFrame."""
        return self.rows.to_pandas()


def _plan_read(o: "_Out") -> Plan:
    """The :class:`Plan` a plan wrote into ``o``."""
    return Plan(
        answer=_json(o.path / "plan.json"),
        rows=Table.read(o.path / "sweep.csv"),
        max_rate=_maybe_table(o.path / "plan.csv"),
        best_toml=_maybe_text(o.path / "best.toml"),
        launch=_maybe_text(o.path / "launch.txt"),
        k8s=_maybe_text(o.path / "k8s.yaml"),
        slurm=_maybe_text(o.path / "slurm.sh"),
        dir=o.kept,
    )


def plan(
    scenario: Scenario,
    vary: Union[Mapping[Any, Sequence[Any]], Sequence[str]],
    *,
    rate: Optional[float] = None,
    max_rate: bool = False,
    seeds: int = 3,
    jobs: Optional[int] = None,
    set: Settings = None,
    out: Union[str, "os.PathLike[str]", None] = None,
    resume: bool = False,
    tolerance: float = 0.02,
    full_grid: bool = False,
    early_stop: bool = True,
    base_dir: Union[str, "os.PathLike[str]", None] = None,
) -> Plan:
    """``pdsim plan SCENARIO (--rate R | --max-rate) --vary ...``: the cheapest grid point that
    meets ``[slo]`` at ``rate`` on every seed, or (``max_rate=True``) every point's highest
    rate. ``early_stop=False`` is ``--no-early-stop``. When no grid point meets ``[slo]``
    at ``rate`` (the CLI's exit 1), the plan is still returned: ``answer["best"]`` is
    ``None`` and ``answer["closest"]`` the point that came nearest."""
    if (rate is None) == (not max_rate):
        raise InvalidInput("give rate=R (the cheapest point at R req/s) or max_rate=True, not both or neither", key="rate")
    seeds = _int_arg("seeds", seeds, 1, _U32)
    jobs = _jobs_arg(jobs)
    out = _out_arg(out, resume)
    if rate is not None:
        rate = _float_arg("rate", rate)
    tolerance = _float_arg("tolerance", tolerance)
    path, text = _source(scenario, base_dir)
    with _Out(out, "plan") as o:
        _call(
            _native.plan, path, text, _vary(vary), seeds, jobs, _sets(set), str(o.path), resume,
            None if max_rate else float(rate), tolerance, full_grid, not early_stop,
        )
        return _plan_read(o)


def plan_one_line(
    *,
    model: str,
    gpu: str,
    isl: int,
    osl: int,
    ttft: float,
    tpot: float,
    rate: Optional[float] = None,
    gpus: int = 32,
    seeds: int = 3,
    jobs: Optional[int] = None,
    out: Union[str, "os.PathLike[str]", None] = None,
    resume: bool = False,
) -> Plan:
    """``pdsim plan --model M --gpu G --isl I --osl O --ttft MS --tpot MS --rate R --gpus N``:
    the planner in one line. The scenario (the presets, Poisson arrivals at ``rate`` of fixed
    lengths, each request's TTFT and TPOT within the targets at 90 % attainment) and a grid of
    disaggregated and colocated deployments of at most ``gpus`` GPUs are built for you; the
    answer says PD or not (``answer["pd_or_not"]``) and what its step times rest on
    (``answer["grounding"]``: pdsim's default calibration here), and ``dir`` (with ``out``)
    holds the ``scenario.toml`` it used. ``rate=None`` finds each deployment's highest rate instead."""
    for name, v in (("model", model), ("gpu", gpu)):
        if not isinstance(v, str) or not v:
            raise InvalidInput(f"{name}={v!r}: give a preset name", key=name)
    isl = _int_arg("isl", isl, 1, _U32)
    osl = _int_arg("osl", osl, 1, _U32)
    gpus = _int_arg("gpus", gpus, 1, _U32)
    ttft = _float_arg("ttft", ttft)
    tpot = _float_arg("tpot", tpot)
    if rate is not None:
        rate = _float_arg("rate", rate)
    seeds = _int_arg("seeds", seeds, 1, _U32)
    jobs = _jobs_arg(jobs)
    out = _out_arg(out, resume)
    with _Out(out, "plan") as o:
        _call(_native.plan_question, model, gpu, isl, osl, ttft, tpot, gpus, rate, seeds, jobs, str(o.path), resume)
        return _plan_read(o)


def _line(args: Union[str, Sequence[str]]) -> str:
    return args if isinstance(args, str) else shlex.join(args)


def lint(
    prefill_args: Union[str, Sequence[str]],
    decode_args: Union[str, Sequence[str]],
    *,
    model_config: Union[str, "os.PathLike[str]", None] = None,
    profile: str = "guarded",
    sglang_version: Optional[str] = None,
    check: bool = False,
) -> Dict[str, Any]:
    """``pdsim lint --prefill ARGS --decode ARGS [--sglang-version V] --json``: the outcome
    pdsim predicts for two ``python -m sglang.launch_server`` lines (a string, or a list of
    arguments) at an sglang release (``seed`` when ``None``; ``2026-09``, ``2026-09+pr37840``:
    ``docs/sglang-pd.md`` §24). Returns the report (``report["prediction"]["compatible"]``);
    ``check=True`` raises :class:`Failed` (the CLI's exit 1) when the pair is incompatible."""
    mc = None if model_config is None else os.fspath(model_config)
    if sglang_version is not None and not isinstance(sglang_version, str):
        raise InvalidInput(
            f"--sglang-version {sglang_version!r}: give a release name such as 'seed' or '2026-09'",
            key="--sglang-version",
        )
    report_json, compatible = _call(
        _native.lint, _line(prefill_args), _line(decode_args), mc, profile, sglang_version
    )
    report = json.loads(report_json)
    if check and not compatible:
        kind = report.get("prediction", {}).get("kind") or "silent corruption"
        raise Failed(f"incompatible pair: {kind}", exit_code=1)
    return report


def layout(
    model: str,
    tp: int = 1,
    page_size: int = 1,
    kv_cache_dtype: str = "auto",
    enable_unified_memory: bool = False,
    rank: int = 0,
    mamba_ssm_dtype: Optional[str] = None,
    pp_size: int = 1,
    pp_rank: int = 0,
) -> Dict[str, Any]:
    """``pdsim layout --model M --tp N --page-size P ... [--mamba-ssm-dtype T] [--pp-size N
    --pp-rank S] --json``: the KV and state regions one rank registers (``mamba_ssm_dtype``: a
    hybrid's temporal-state dtype, ``float32``, ``bfloat16`` or ``float16``; ``None`` keeps the
    model's own; ``pp_size``/``pp_rank``: a prefill's pipeline stage, which holds only its
    layers)."""
    if mamba_ssm_dtype is not None and not isinstance(mamba_ssm_dtype, str):
        raise InvalidInput(
            f"--mamba-ssm-dtype {mamba_ssm_dtype!r}: give float32, bfloat16 or float16", key="--mamba-ssm-dtype"
        )
    for flag, v in (
        ("--tp", tp),
        ("--page-size", page_size),
        ("--rank", rank),
        ("--pp-size", pp_size),
        ("--pp-rank", pp_rank),
    ):
        if not isinstance(v, int) or isinstance(v, bool) or v < 0 or v >= 2**32:
            raise InvalidInput(f"{flag} {v!r}: give a whole number from 0 to 2^32-1", key=flag)
    return json.loads(
        _call(
            _native.layout,
            model,
            tp,
            page_size,
            kv_cache_dtype,
            enable_unified_memory,
            rank,
            mamba_ssm_dtype,
            pp_size,
            pp_rank,
        )
    )


def explain(
    target: Scenario,
    *,
    markdown: bool = False,
    out: Union[str, "os.PathLike[str]", None] = None,
    set: Settings = None,
    base_dir: Union[str, "os.PathLike[str]", None] = None,
) -> str:
    """``pdsim explain RESULTS_DIR | SCENARIO``: what happened to the requests and why. A
    scenario file runs first as the CLI does (into ``out``, default ``results/<run.name>/``);
    TOML text or a dict runs into ``out`` or a temporary folder."""
    out = _out_arg(out)
    if isinstance(target, (str, os.PathLike)) and not isinstance(target, Mapping):
        path, text = _source(target, base_dir)
        if text is None:
            o = None if out is None else os.fspath(out)
            return _call(_native.explain, path, markdown, o, _sets(set))
    with _Out(out, "run") as o:
        path, text = _source(target, base_dir)
        _call(_native.run, path, text, None, _sets(set), str(o.path), False, False)
        return _call(_native.explain, str(o.path), markdown, None, [])
