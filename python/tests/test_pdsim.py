"""pdsim from Python gives the CLI's bytes, its errors as typed exceptions with their key, and
tables pandas (and polars) take as columns."""

import array
import errno
import faulthandler
import fcntl
import json
import os
import subprocess
import sys
import termios
import threading
import tomllib
from pathlib import Path

import numpy as np
import pytest

import pdsim

ROOT = Path(__file__).resolve().parents[2]
REGRESSION = sorted((ROOT / "scenarios" / "regression").glob("*.toml"))
DETERMINISTIC = ["summary.json", "requests.csv", "timeseries.csv", "links.csv"]


def test_the_regression_suite_is_there():
    assert len(REGRESSION) >= 5, REGRESSION


@pytest.mark.parametrize("scenario", REGRESSION, ids=lambda p: p.stem)
def test_run_gives_the_cli_bytes(scenario, cli, tmp_path):
    code, _, err = cli("run", scenario, "--out", tmp_path / "cli", "-q")
    assert code == 0, err
    r = pdsim.run(scenario)
    assert r.summary_json == (tmp_path / "cli" / "summary.json").read_bytes()
    assert r.dir is None
    # With a folder, every deterministic file is the CLI's.
    kept = pdsim.run(scenario, out=tmp_path / "py")
    assert kept.dir == tmp_path / "py"
    for f in DETERMINISTIC:
        a, b = tmp_path / "cli" / f, tmp_path / "py" / f
        assert a.is_file() == b.is_file(), f
        if a.is_file():
            assert a.read_bytes() == b.read_bytes(), f"{scenario.name}: {f} differs from the CLI's"
    # The tables hold the CSV's rows.
    assert len(r.requests) == r.summary["requests"]["arrived"]


def test_seed_and_set_are_the_cli_flags(cli, tmp_path):
    sc = "scenarios/regression/healthy-2p2d-8b.toml"
    code, _, err = cli(
        "run", sc, "--seed", "11", "--set", "pools.decode.instances=1",
        "--set", "workload.arrival.rate_per_s=3.5", "--out", tmp_path, "-q",
    )
    assert code == 0, err
    r = pdsim.run(sc, seed=11, set={"pools.decode.instances": 1, "workload.arrival.rate_per_s": 3.5})
    assert r.summary_json == (tmp_path / "summary.json").read_bytes()
    strings = pdsim.run(sc, seed=11, set=["pools.decode.instances=1", "workload.arrival.rate_per_s=3.5"])
    assert strings.summary_json == r.summary_json
    assert r.run["seed"] == 11


def test_text_and_dict_scenarios_run_as_the_file_does():
    path = ROOT / "scenarios" / "regression" / "page-size-mismatch.toml"
    text = path.read_text()
    by_file = pdsim.run(path, summary_only=True)
    assert by_file.requests is None
    by_text = pdsim.run(text, summary_only=True, base_dir=path.parent)
    by_dict = pdsim.run(tomllib.loads(text), summary_only=True, base_dir=path.parent)
    assert by_text.summary_json == by_file.summary_json
    assert by_dict.summary_json == by_file.summary_json


def test_errors_are_typed_and_carry_their_key():
    sc = "scenarios/regression/healthy-2p2d-8b.toml"
    with pytest.raises(pdsim.InvalidInput) as e:
        pdsim.run(sc, set={"pools.decode.server.tp_size": 0})
    err = e.value
    assert (err.exit_code, err.key) == (2, "pools.decode.server.tp_size")
    assert err.file == sc and isinstance(err.line, int)
    assert "use one of" in err.message  # the fix travels with the error
    assert isinstance(err, pdsim.Error) and isinstance(err, ValueError)

    # A misspelt key: named, with the valid ones.
    bad = tomllib.loads((ROOT / sc).read_text())
    bad["run"]["durashun_s"] = 5
    with pytest.raises(pdsim.InvalidInput) as e:
        pdsim.run(bad, base_dir=ROOT / "scenarios" / "regression")
    assert e.value.key and "durashun_s" in e.value.key, e.value
    assert "<dict>" in e.value.file

    # A dictionary's None has no TOML spelling: its key is named.
    with pytest.raises(pdsim.InvalidInput, match=r"pools\.1\.instances"):
        pdsim.run({"run": {"name": "x"}, "pools": [{}, {"instances": None}]})

    # A sweep's bad axis, a layout's bad flag, lint's unreadable line: exit 2, keyed.
    with pytest.raises(pdsim.InvalidInput) as e:
        pdsim.sweep(sc, {"pools.decode.server.tp_size": [0, 3]}, seeds=1)
    assert e.value.exit_code == 2
    with pytest.raises(pdsim.InvalidInput) as e:
        pdsim.layout("llama-3.1-8b", tp=2, rank=2)
    assert e.value.key == "--rank"
    with pytest.raises(pdsim.InvalidInput):
        pdsim.lint("python -m sglang.launch_server", "nonsense --tp-size x")

    # A missing file is invalid input (exit 2), an unwritable folder is I/O (exit 3).
    with pytest.raises(pdsim.InvalidInput, match="cannot read the scenario file"):
        pdsim.run("scenarios/no-such-scenario.toml")
    with pytest.raises(pdsim.FileError) as e:
        pdsim.run(sc, out="/dev/null/results", summary_only=True)
    assert e.value.exit_code == 3


def test_tables_load_into_pandas(tmp_path):
    pd = pytest.importorskip("pandas")
    r = pdsim.run("scenarios/regression/decode-crash.toml")
    df = r.requests.to_pandas()
    assert list(df.columns) == r.requests.names
    assert len(df) == r.summary["requests"]["arrived"]
    assert df["id"].dtype == np.int64 and df["id"].is_monotonic_increasing
    counts = df["outcome"].value_counts()
    for outcome in ("completed", "failed", "corrupted", "unfinished"):
        assert counts.get(outcome, 0) == r.summary["requests"][outcome], outcome
    # A stage never reached is missing, not 0.
    never = df["outcome"] != "completed"
    if never.any():
        assert df.loc[never, "first_token_ns"].isna().any() or df.loc[never, "finish_ns"].notna().all()
    assert df["first_token_ns"].dtype.name in ("Int64", "int64")
    # The same values as pandas' own CSV reader.
    with_csv = pdsim.run("scenarios/regression/decode-crash.toml", out=tmp_path)
    ref = pd.read_csv(with_csv.dir / "requests.csv")
    assert (ref["arrival_ns"].to_numpy() == df["arrival_ns"].to_numpy()).all()
    assert (ref["first_token_ns"].isna().to_numpy() == df["first_token_ns"].isna().to_numpy()).all()
    ts = r.timeseries.to_pandas()
    assert {"second", "instance"} <= set(ts.columns) and len(ts) == len(r.timeseries)
    assert len(r.links.to_pandas()) == len(r.links)
    # numpy access: columns are arrays over pdsim's bytes.
    assert isinstance(r.requests["arrival_ns"], np.ndarray)
    assert r.requests.kind("outcome") == "text"


def test_tables_load_into_polars():
    pl = pytest.importorskip("polars")
    r = pdsim.run("scenarios/regression/decode-crash.toml")
    df = r.requests.to_polars()
    assert df.height == r.summary["requests"]["arrived"]
    assert df["id"].dtype == pl.Int64
    assert df.filter(pl.col("outcome") == "completed").height == r.summary["requests"]["completed"]
    pdf = r.requests.to_pandas()
    assert df["first_token_ns"].null_count() == int(pdf["first_token_ns"].isna().sum())


def test_sweep_gives_the_cli_bytes(cli, tmp_path):
    sc = "scenarios/quickstart.toml"
    code, _, err = cli(
        "sweep", sc, "--vary", "pools.decode.instances=1,2", "--vary", "workload.arrival.rate_per_s=4,8",
        "--seeds", "2", "--set", "run.duration_s=8", "--out", tmp_path / "cli", "-q", "--jobs", "2",
    )
    assert code == 0, err
    s = pdsim.sweep(
        sc, {"pools.decode.instances": [1, 2], "workload.arrival.rate_per_s": [4, 8]},
        seeds=2, set={"run.duration_s": 8}, jobs=1,
    )
    assert s.csv == (tmp_path / "cli" / "sweep.csv").read_bytes()
    assert s.manifest == json.loads((tmp_path / "cli" / "sweep.json").read_bytes())
    df = s.to_pandas()
    assert len(df) == 8 and list(df.columns[:3]) == ["pools.decode.instances", "workload.arrival.rate_per_s", "seed"]
    # Sharded from Python, merged by the CLI: the unsharded bytes.
    for i in range(2):
        pdsim.sweep(sc, ["pools.decode.instances=1,2", "workload.arrival.rate_per_s=4,8"], seeds=2,
                    set=["run.duration_s=8"], shard=f"{i}/2", out=tmp_path / f"shard-{i}")
    code, _, err = cli("merge", tmp_path / "shard-0", tmp_path / "shard-1", "--out", tmp_path / "merged")
    assert code == 0, err
    assert (tmp_path / "merged" / "sweep.csv").read_bytes() == s.csv


def test_a_linked_vary_moves_its_keys_together(cli, tmp_path):
    sc = "scenarios/quickstart.toml"
    keys = ("pools.decode.server.tp_size", "pools.decode.instances")
    code, _, err = cli(
        "sweep", sc, "--vary", ",".join(keys) + "=(1,4),(2,2)", "--vary", "pools.prefill.instances=1,2",
        "--set", "run.duration_s=8", "--out", tmp_path / "cli", "-q",
    )
    assert code == 0, err
    s = pdsim.sweep(sc, {keys: [(1, 4), (2, 2)], "pools.prefill.instances": [1, 2]}, set={"run.duration_s": 8})
    assert s.csv == (tmp_path / "cli" / "sweep.csv").read_bytes()
    df = s.to_pandas()
    assert list(df.columns[:3]) == [*keys, "pools.prefill.instances"]
    assert sorted(zip(df[keys[0]], df[keys[1]])) == [(1, 4), (1, 4), (2, 2), (2, 2)]
    with pytest.raises(pdsim.InvalidInput, match="not a tuple of 2 values"):
        pdsim.sweep(sc, {keys: [(1, 4), 2]})


def test_the_planner_in_one_line(cli, tmp_path):
    args = dict(model="llama-3.1-8b", gpu="h100-sxm", isl=512, osl=128, ttft=500, tpot=50)
    p = pdsim.plan_one_line(**args, rate=4, gpus=2, out=tmp_path / "py")
    code, _, err = cli(
        "plan", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--isl", "512", "--osl", "128",
        "--ttft", "500", "--tpot", "50", "--rate", "4", "--gpus", "2", "--out", tmp_path / "cli", "-q",
    )
    assert code == 0, err
    cli_answer = json.loads((tmp_path / "cli" / "plan.json").read_bytes())
    # The same answer; only where each wrote its scenario differs.
    assert p.answer["scenario"].endswith("py/scenario.toml")
    assert {**p.answer, "scenario": None} == {**cli_answer, "scenario": None}
    assert p.answer["best"] is not None and "pd_or_not" in p.answer
    # What the answer rests on: the presets' default calibration, nothing calibrated.
    assert p.answer["grounding"]["source"] == "default"
    assert "not your cluster" in p.answer["grounding"]["note"]
    assert (tmp_path / "py" / "scenario.toml").read_bytes() == (tmp_path / "cli" / "scenario.toml").read_bytes()
    with pytest.raises(pdsim.Error, match="--gpu"):
        pdsim.plan_one_line(**{**args, "gpu": "h1000"}, rate=4, gpus=2)
    with pytest.raises(pdsim.InvalidInput, match="isl"):
        pdsim.plan_one_line(**{**args, "isl": 0}, rate=4)


def test_plan_gives_the_cli_answer(cli, tmp_path):
    sc = "scenarios/quickstart.toml"
    sets = ["run.duration_s=10", "slo.ttft_p99_ms=2000", "slo.tpot_p99_ms=100"]
    args = ["plan", sc, "--rate", "6", "--vary", "pools.decode.instances=1,2", "--seeds", "2", "--out", tmp_path / "cli", "-q"]
    for s in sets:
        args += ["--set", s]
    code, _, err = cli(*args)
    assert code == 0, err
    p = pdsim.plan(sc, {"pools.decode.instances": [1, 2]}, rate=6, seeds=2, set=sets, out=tmp_path / "py")
    for f in ("plan.json", "sweep.csv", "best.toml", "launch.txt"):
        a, b = tmp_path / "cli" / f, tmp_path / "py" / f
        assert a.is_file() == b.is_file(), f
        if a.is_file():
            assert a.read_bytes() == b.read_bytes(), f
    assert p.answer == json.loads((tmp_path / "cli" / "plan.json").read_bytes())
    with pytest.raises(pdsim.InvalidInput):
        pdsim.plan(sc, {"pools.decode.instances": [1]}, seeds=1)  # neither rate nor max_rate


def test_a_plan_with_no_answer_is_returned_with_its_closest_point(cli, tmp_path):
    sc = "scenarios/quickstart.toml"
    sets = ["run.duration_s=10", "slo.ttft_p99_ms=20"]
    args = ["plan", sc, "--rate", "10", "--vary", "pools.decode.instances=1,2", "--out", tmp_path / "cli", "-q"]
    for s in sets:
        args += ["--set", s]
    code, _, err = cli(*args)
    assert code == 1, err  # the CLI's negative verdict
    p = pdsim.plan(sc, {"pools.decode.instances": [1, 2]}, rate=10, set=sets, out=tmp_path / "py")
    assert p.answer["best"] is None
    assert p.answer["closest"]["values"]
    assert p.answer == json.loads((tmp_path / "cli" / "plan.json").read_bytes())


LLAMA = "python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct --tp-size 2"


def test_lint_predicts_as_the_cli(cli):
    p, d = LLAMA + " --disaggregation-mode prefill --page-size 64", LLAMA + " --disaggregation-mode decode --page-size 32"
    code, out, _ = cli("lint", "--prefill", p, "--decode", d, "--json")
    assert code == 1
    report = pdsim.lint(p, d)
    assert report == json.loads(out)
    assert report["prediction"]["compatible"] is False
    with pytest.raises(pdsim.Failed) as e:
        pdsim.lint(p, d.split(), check=True)
    assert e.value.exit_code == 1
    ok = pdsim.lint(p, d.replace("32", "64"), check=True)
    assert ok["prediction"]["compatible"] is True


QWEN_NEXT = "python -m sglang.launch_server --model-path Qwen/Qwen3-Next-80B-A3B-Instruct --tp 2"


def test_lint_takes_the_sglang_version_as_the_cli(cli):
    # The Mamba-state dtype pair (docs/sglang-pd.md §24): silent at the seed, where the
    # transfer worker finds the slot sizes apart after the KV was sent, and rejected at
    # registration under PR #37840's profile.
    p = QWEN_NEXT + " --disaggregation-mode prefill --mamba-ssm-dtype float32"
    d = QWEN_NEXT + " --disaggregation-mode decode --mamba-ssm-dtype bfloat16"
    kinds = {}
    for v in ("seed", "2026-09+pr37840"):
        code, out, _ = cli("lint", "--prefill", p, "--decode", d, "--sglang-version", v, "--json")
        assert code == 1
        report = pdsim.lint(p, d, sglang_version=v)
        assert report == json.loads(out)
        kinds[v] = report["prediction"]["kind"]
    assert kinds == {"seed": "mamba_slot_size_mismatch", "2026-09+pr37840": "peer_layout_rejected"}
    assert pdsim.lint(p, d) == pdsim.lint(p, d, sglang_version="seed")
    with pytest.raises(pdsim.InvalidInput) as e:
        pdsim.lint(p, d, sglang_version="2027-01")
    assert e.value.exit_code == 2 and "2026-09" in e.value.message
    with pytest.raises(pdsim.InvalidInput) as e:
        pdsim.lint(p, d, sglang_version=2026)
    assert e.value.key == "--sglang-version"


def test_layout_takes_the_mamba_state_dtype_as_the_cli(cli):
    code, out, _ = cli(
        "layout", "--model", "qwen3-next-80b-a3b", "--tp", "2", "--mamba-ssm-dtype", "bfloat16", "--json"
    )
    assert code == 0
    bf16 = pdsim.layout("qwen3-next-80b-a3b", tp=2, mamba_ssm_dtype="bfloat16")
    assert bf16 == json.loads(out)
    assert bf16 != pdsim.layout("qwen3-next-80b-a3b", tp=2)
    with pytest.raises(pdsim.InvalidInput) as e:
        pdsim.layout("qwen3-next-80b-a3b", tp=2, mamba_ssm_dtype="fp8")
    assert e.value.exit_code == 2 and "float32" in e.value.message


def test_layout_takes_a_pipeline_stage_as_the_cli(cli):
    code, out, _ = cli(
        "layout", "--model", "llama-3.1-8b", "--tp", "2", "--pp-size", "2", "--pp-rank", "1", "--json"
    )
    assert code == 0
    stage = pdsim.layout("llama-3.1-8b", tp=2, pp_size=2, pp_rank=1)
    assert stage == json.loads(out)
    assert (stage["pipeline"]["start_layer"], stage["pipeline"]["end_layer"]) == (16, 32)
    assert stage != pdsim.layout("llama-3.1-8b", tp=2)
    with pytest.raises(pdsim.InvalidInput) as e:
        pdsim.layout("llama-3.1-8b", tp=2, pp_size=2, pp_rank=2)
    assert e.value.exit_code == 2 and "--pp-rank" in e.value.message
    with pytest.raises(pdsim.InvalidInput) as e:
        pdsim.layout("llama-3.1-8b", tp=2, pp_size=0)
    assert e.value.exit_code == 2 and "--pp-size" in e.value.message
    with pytest.raises(pdsim.InvalidInput) as e:
        pdsim.layout("llama-3.1-8b", tp=2, pp_size="2")
    assert e.value.key == "--pp-size"


def test_layout_and_explain_are_the_cli_output(cli, tmp_path):
    code, out, _ = cli("layout", "--model", "qwen3-next-80b-a3b", "--tp", "2", "--page-size", "16", "--json")
    assert code == 0
    assert pdsim.layout("qwen3-next-80b-a3b", tp=2, page_size=16) == json.loads(out)
    sc = "scenarios/regression/page-size-mismatch.toml"
    code, out, err = cli("explain", sc, "--out", tmp_path / "cli")
    assert code == 0, err
    assert pdsim.explain(sc, out=tmp_path / "py") == out
    assert pdsim.explain(tmp_path / "py") == out
    text = (ROOT / sc).read_text()
    assert pdsim.explain(text, base_dir=ROOT / "scenarios" / "regression") == out


def test_the_gil_is_released_while_simulating(tmp_path):
    """The trace is a FIFO: the run blocks inside pdsim reading it until this thread writes it,
    which it can only do if the run let go of the GIL. Were the GIL held, no Python would run
    again: faulthandler's watchdog (a C thread) then ends the process with the stacks, so the
    suite fails instead of hanging."""
    faulthandler.dump_traceback_later(300, exit=True)
    src = ROOT / "scenarios" / "calibration" / "mooncake-1p1d.toml"
    trace = (src.parent / "mooncake-1p1d.csv").read_bytes()
    fifo = tmp_path / "trace.csv"
    os.mkfifo(fifo)
    scenario = tomllib.loads(src.read_text())
    scenario["workload"]["trace"]["path"] = str(fifo)
    done = {}

    def work():
        try:
            done["run"] = pdsim.run(scenario, summary_only=True, base_dir=src.parent)
        except BaseException as e:  # noqa: BLE001 - reported below
            done["error"] = e

    def reading() -> bool:
        """Whether a read of the FIFO is open in this process (the simulation's)."""
        for n in os.listdir("/proc/self/fd"):
            try:
                if os.readlink(f"/proc/self/fd/{n}") == str(fifo):
                    return True
            except OSError:
                pass
        return False

    def unread(fd: int) -> int:
        buf = array.array("i", [0])
        fcntl.ioctl(fd, termios.FIONREAD, buf)
        return buf[0]

    t = threading.Thread(target=work)
    t.start()
    writes = 0
    while t.is_alive():
        try:
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as e:
            if e.errno != errno.ENXIO:  # ENXIO: no reader yet
                raise
            t.join(0.01)
            continue
        os.set_blocking(fd, True)
        try:
            os.write(fd, trace)  # a pipe takes 64 KiB at once; the trace is far smaller
            writes += 1
            # One copy per read: wait until the reader took it all, close (its EOF), and wait
            # until it closed too, so the next copy starts a read of its own.
            while t.is_alive() and unread(fd) > 0:
                t.join(0.01)
        except BrokenPipeError:
            pass
        os.close(fd)
        while t.is_alive() and reading():
            t.join(0.01)
    t.join()
    faulthandler.cancel_dump_traceback_later()
    assert "error" not in done, done.get("error")
    assert writes >= 1
    ref = pdsim.run(src, summary_only=True)
    assert done["run"].summary["requests"] == ref.summary["requests"]


def test_the_notebook_script_runs_headless(tmp_path):
    pytest.importorskip("pandas")
    pytest.importorskip("matplotlib")
    shared = ROOT.parent / "shared" / "traces"
    if not shared.is_dir():
        pytest.fail(f"the notebook reads the Azure trace from {shared} (../shared beside the repository, as CI places it)")
    script = ROOT / "python" / "examples" / "capacity_planning_70b.py"
    env = dict(os.environ, MPLBACKEND="Agg", PDSIM_EXAMPLE_OUT=str(tmp_path))
    p = subprocess.run([sys.executable, str(script)], cwd=ROOT, env=env, capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    png = tmp_path / "latency-cost.png"
    assert png.is_file() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "cheapest point" in p.stdout


def test_the_notebook_has_the_script_cells():
    sys.path.insert(0, str(ROOT / "python" / "examples"))
    import notebook

    script = ROOT / "python" / "examples" / "capacity_planning_70b.py"
    nb = json.loads(script.with_suffix(".ipynb").read_text())
    got = [(c["cell_type"], "".join(c["source"])) for c in nb["cells"]]
    assert got == notebook.cells_of(script.read_text()), "regenerate: python python/examples/notebook.py"


def test_gap_slos_from_python(cli, tmp_path):
    """The [slo] keys on inter-token gaps (issue 43): stated with their populations, judged as
    the CLI judges them, bad values refused by key, figures in the summary and the sweep rows."""
    for key in ("itl_p50_ms", "itl_p90_ms", "itl_p99_ms", "tbt_p50_ms", "tbt_p90_ms", "tbt_p99_ms"):
        assert pdsim.SLO_KEYS[key]["kind"] == "percentile"
    assert "every inter-token gap" in pdsim.SLO_KEYS["itl_p99_ms"]["population"]
    assert "worst inter-token gap" in pdsim.SLO_KEYS["tbt_p90_ms"]["meaning"]
    for key in ("tbt_ms", "e2e_per_token_ms", "ttft_ms", "tpot_ms"):
        assert pdsim.SLO_KEYS[key]["kind"] == "threshold"
    sc = "scenarios/quickstart.toml"
    sets = {"run.duration_s": 10, "slo.itl_p99_ms": 30, "slo.tbt_p90_ms": 60, "slo.tbt_ms": 100, "slo.e2e_per_token_ms": 20}
    code, _, err = cli("run", sc, *[a for k, v in sets.items() for a in ("--set", f"{k}={v}")], "--out", tmp_path / "cli", "-q")
    assert code == 0, err
    r = pdsim.run(sc, set=sets, summary_only=True)
    assert r.summary_json == (tmp_path / "cli" / "summary.json").read_bytes()
    lat, slo = r.summary["latency_ms"], r.summary["slo"]
    assert lat["tbt"]["max"] == lat["itl"]["max"], "the longest gap is some request's worst"
    targets = {t["key"]: t for t in slo["targets"]}
    assert targets["itl_p99_ms"]["value"] == lat["itl"]["p99"]
    assert 0 < targets["tbt_p90_ms"]["population"] <= r.summary["requests"]["arrived"]
    assert targets["itl_p99_ms"]["population"] > 10 * targets["tbt_p90_ms"]["population"], "gaps, not requests"
    assert (slo["tbt_ms"], slo["e2e_per_token_ms"]) == (100.0, 20.0)
    with pytest.raises(pdsim.InvalidInput) as e:
        pdsim.run(sc, set={"slo.tbt_p99_ms": -1})
    assert e.value.key == "slo.tbt_p99_ms" and "positive number of milliseconds" in e.value.message
    with pytest.raises(pdsim.InvalidInput) as e:
        pdsim.run(sc, set={"slo.tbt_p95_ms": 5})
    assert "did you mean `tbt_p99_ms`?" in e.value.message
    s = pdsim.sweep(sc, {"pools.decode.instances": [1, 2]}, set={"run.duration_s": 10})
    for col in ("itl_p99_ms", "tbt_p50_ms", "tbt_p90_ms", "tbt_p99_ms", "e2e_per_token_p99_ms"):
        assert s.rows.kind(col) == "float" and not np.isnan(s.rows[col]).any(), col


# --- issue 40: arguments are checked up front, each refusal naming its argument --------------

QS = "scenarios/quickstart.toml"
SHORT = {"run.duration_s": 2, "run.drain_timeout_s": 30}


def test_an_empty_out_is_refused_and_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for verb in (
        lambda: pdsim.run(str(ROOT / QS), set=SHORT, out=""),
        lambda: pdsim.sweep(str(ROOT / QS), {"pools.decode.instances": [1]}, set=SHORT, out=""),
        lambda: pdsim.explain(str(ROOT / QS), set=SHORT, out=""),
    ):
        with pytest.raises(pdsim.InvalidInput) as e:
            verb()
        assert e.value.key == "out" and e.value.exit_code == 2
    assert list(tmp_path.iterdir()) == [], "nothing written into the working directory"


def test_resume_without_out_is_refused():
    for verb in (
        lambda: pdsim.sweep(QS, {"pools.decode.instances": [1]}, set=SHORT, resume=True),
        lambda: pdsim.plan(QS, {"pools.decode.instances": [1]}, rate=1, set=SHORT, resume=True),
    ):
        with pytest.raises(pdsim.InvalidInput) as e:
            verb()
        assert e.value.key == "resume"


@pytest.mark.parametrize(
    "call,key",
    [
        (lambda: pdsim.run(QS, seed=-1, set=SHORT), "seed"),
        (lambda: pdsim.run(QS, seed=2**64, set=SHORT), "seed"),
        (lambda: pdsim.run(QS, seed=1.5, set=SHORT), "seed"),
        (lambda: pdsim.run(QS, seed="7", set=SHORT), "seed"),
        (lambda: pdsim.sweep(QS, {"pools.decode.instances": [1]}, seeds=-1), "seeds"),
        (lambda: pdsim.sweep(QS, {"pools.decode.instances": [1]}, seeds=2**40), "seeds"),
        (lambda: pdsim.sweep(QS, {"pools.decode.instances": [1]}, jobs=-3), "jobs"),
        (lambda: pdsim.sweep(QS, {"pools.decode.instances": [1]}, jobs=0), "jobs"),
        (lambda: pdsim.sweep(QS, {"pools.decode.instances": [1]}, jobs=10**6), "jobs"),
        (lambda: pdsim.sweep(QS, {"pools.decode.instances": [1]}, jobs=2**70), "jobs"),
        (lambda: pdsim.sweep(QS, {"pools.decode.instances": [1]}, shard=3), "shard"),
        (lambda: pdsim.plan(QS, {"pools.decode.instances": [1]}, rate=10**400), "rate"),
        (lambda: pdsim.plan(QS, {"pools.decode.instances": [1]}, rate="fast"), "rate"),
        (lambda: pdsim.plan(QS, {"pools.decode.instances": [1]}, rate=1, seeds=0), "seeds"),
        (lambda: pdsim.layout("llama-3.1-8b", tp=-1), "--tp"),
        (lambda: pdsim.layout("llama-3.1-8b", tp=2**64), "--tp"),
    ],
)
def test_bad_integers_and_types_name_their_argument(call, key):
    import time

    t = time.monotonic()
    with pytest.raises(pdsim.InvalidInput) as e:
        call()
    assert e.value.key == key, e.value.message
    assert key.lstrip("-") in e.value.message
    assert time.monotonic() - t < 5, "refused up front"


def test_the_largest_seed_runs_as_the_cli_does(cli, tmp_path):
    r = pdsim.run(QS, seed=2**64 - 1, set=SHORT, summary_only=True)
    code, _, err = cli("run", QS, "--seed", str(2**64 - 1), "--set", "run.duration_s=2",
                       "--set", "run.drain_timeout_s=30", "--summary-only", "--out", tmp_path, "-q")
    assert code == 0, err
    assert r.summary_json == (tmp_path / "summary.json").read_bytes()


def test_a_non_finite_number_in_a_dict_scenario_names_its_key():
    import tomllib

    with open(ROOT / QS, "rb") as f:
        sc = tomllib.load(f)
    sc["workload"]["arrival"]["rate_per_s"] = float("nan")
    with pytest.raises(pdsim.InvalidInput) as e:
        pdsim.run(sc, base_dir=ROOT)
    assert e.value.key == "workload.arrival.rate_per_s", e.value.message
    assert "workload.arrival.rate_per_s" in e.value.message
    sc["workload"]["arrival"]["rate_per_s"] = 4.0
    sc["pools"][1]["server"]["tp_size"] = float("inf")
    with pytest.raises(pdsim.InvalidInput) as e:
        pdsim.run(sc, base_dir=ROOT)
    assert e.value.key == "pools[1].server.tp_size", e.value.message


def test_a_rate_profile_moves_the_arrivals_and_names_its_bad_key():
    with open(ROOT / QS, "rb") as f:
        sc = tomllib.load(f)
    sc["run"]["duration_s"] = 40
    sc["workload"]["arrival"] = {
        "process": "constant",
        "rate_per_s": 5.0,
        "rate_profile": {"shape": "piecewise", "at_s": [0, 20], "factor": [1.0, 0.0]},
    }
    r = pdsim.run(sc, base_dir=ROOT)
    # Constant 5/s for 20 s, then a pause to the end: 0.2 s … 19.8 s and the one at 20 s.
    assert r.summary["requests"]["arrived"] == 100, r.summary["requests"]
    sc["workload"]["arrival"]["rate_profile"] = {"shape": "diurnal", "peak_s": 0, "trough": -0.5}
    with pytest.raises(pdsim.InvalidInput) as e:
        pdsim.run(sc, base_dir=ROOT)
    assert e.value.key == "workload.arrival.rate_profile.trough", e.value.message


def test_sweep_rows_conserve_with_aborts():
    s = pdsim.sweep(
        QS,
        {"workload.arrival.rate_per_s": [4, 40]},
        set={**SHORT, "run.duration_s": 10, "workload.client_timeout": {"s": 0.5}},
    )
    rows = s.rows
    assert "aborted" in rows
    total = sum(rows[k].astype(np.int64) for k in ("completed", "failed", "corrupted", "unfinished", "aborted"))
    assert (total == rows["arrived"]).all()
    assert rows["aborted"].sum() > 0


def test_a_run_whose_pools_change_size_shows_its_fleet(cli, tmp_path):
    """`summary["autoscaling"]` and the timeseries' fleet columns reach Python as the CLI
    writes them; every request is counted once across starts and drains."""
    sc = ROOT / "scenarios" / "autoscale" / "scale-up-failure.toml"
    code, _, err = cli("run", sc, "--out", tmp_path / "cli", "-q")
    assert code == 0, err
    r = pdsim.run(sc)
    assert r.summary_json == (tmp_path / "cli" / "summary.json").read_bytes()
    a = r.summary["autoscaling"]
    assert a["policy"] == "threshold" and a["starts_failed"] == 1
    assert a["cost_usd"] == pytest.approx(2.0 * a["gpu_hours"])
    kinds = [e["kind"] for e in a["events"]]
    assert "start_failed" in kinds and kinds.count("cold_start") == a["cold_starts"]
    n = r.summary["requests"]
    assert n["arrived"] == n["completed"] + n["failed"] + n["corrupted"] + n["unfinished"] + n.get("aborted", 0)
    for c in ("state", "prefill_instances", "decode_instances"):
        assert c in r.timeseries, r.timeseries.names
    states = set(r.timeseries["state"])
    assert {"off", "serving"} <= states, states
    # A bad lifecycle key is a typed error naming it.
    with pytest.raises(pdsim.InvalidInput) as e:
        pdsim.run(sc, set={"autoscaler.weight_load_gb_per_s": 0}, summary_only=True)
    assert (e.value.exit_code, e.value.key) == (2, "autoscaler.weight_load_gb_per_s")
