"""Type stubs of pdsim._native, the PyO3 extension (python/src/lib.rs). Use the `pdsim`
package's functions; these take the CLI's own strings."""

from typing import List, Optional, Tuple

__version__: str

class NativeError(Exception):
    """args = (exit_code, message, key, file, line)."""

    args: Tuple[int, str, Optional[str], Optional[str], Optional[int]]

def run(
    path: str,
    text: Optional[str],
    seed: Optional[int],
    sets: List[str],
    out: str,
    summary_only: bool,
    trace_events: bool,
) -> List[str]: ...
def sweep(
    path: str,
    text: Optional[str],
    vary: List[str],
    seeds: int,
    jobs: Optional[int],
    shard: Optional[str],
    sets: List[str],
    out: str,
    resume: bool,
) -> None: ...
def plan(
    path: str,
    text: Optional[str],
    vary: List[str],
    seeds: int,
    jobs: Optional[int],
    sets: List[str],
    out: str,
    resume: bool,
    rate: Optional[float],
    tolerance: float,
    full_grid: bool,
    no_early_stop: bool,
) -> None: ...
def plan_question(
    model: str,
    gpu: str,
    isl: int,
    osl: int,
    ttft: float,
    tpot: float,
    gpus: int,
    rate: Optional[float],
    seeds: int,
    jobs: Optional[int],
    out: str,
    resume: bool,
) -> None: ...
def lint(
    prefill: str, decode: str, model_config: Optional[str], profile: str, sglang_version: Optional[str] = ...
) -> Tuple[str, bool]: ...
def layout(
    model: str,
    tp: int,
    page_size: int,
    kv_cache_dtype: str,
    enable_unified_memory: bool,
    rank: int,
    mamba_ssm_dtype: Optional[str] = ...,
    pp_size: int = ...,
    pp_rank: int = ...,
) -> str: ...
def explain(path: str, markdown: bool, out: Optional[str], sets: List[str]) -> str: ...
def toml_of_json(json: str) -> str: ...
def read_columns(
    path: str,
) -> Tuple[int, List[Tuple[str, str, bytes, Optional[bytes], Optional[List[str]]]]]: ...
def slo_keys() -> List[Tuple[str, str, str, str]]: ...
