"""The benchmark suite (``bench/suite.py``) and its report writer (``bench/report.py``) on the
CPU: the case list, every op module through capture and ``lower-to-cuda``, the numerics of a
few through the Kernel-IR interpreter, the measuring logic with stand-in systems, and the
summaries, merges and reports of synthetic results. Nothing here needs a GPU.
"""

from __future__ import annotations

import dataclasses
import gc
import itertools
import json
import math
import statistics
import sys
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import report  # noqa: E402
import suite  # noqa: E402

import llmopt  # noqa: E402
from llmopt.frontend.capture import capture  # noqa: E402
from llmopt.numerics import tolerance  # noqa: E402

TO_KERNEL = ("torch-to-prim,canonicalize,prim-to-loop,fuse-kernels,canonicalize,cse,"
             "loop-to-tile,tile-to-kernel,canonicalize,cse")
TINY = suite.ModelDims("tiny", hidden=32, intermediate=48, heads=4, kv_heads=2, head_dim=8,
                       eps=1e-5, qkv_bias=True)
SEQ = 7  # divides no tile or block


# --- the cases ----------------------------------------------------------------------------------


def test_op_case_list_has_84_distinct_names() -> None:
    """2 models x 3 sequence lengths x 14 ops, every name distinct."""
    names = suite.op_case_names()
    assert len(names) == 84
    assert len(set(names)) == 84
    assert names[0] == "tinyllama/s32/q_proj"
    assert names[-1] == "qwen2.5-7b/s512/silu_mul_down"
    assert "qwen2.5-7b/s128/naive_attention" in names
    assert len(suite.OPS) == 14


def test_block_case_names() -> None:
    """Decoder layers at 128 and 512 per model; the whole model only when asked."""
    assert suite.block_case_names() == [
        "tinyllama/s128/decoder_layer", "tinyllama/s512/decoder_layer",
        "qwen2.5-7b/s128/decoder_layer", "qwen2.5-7b/s512/decoder_layer",
    ]
    whole = suite.block_case_names(["qwen2.5-7b"], layers=False, whole_model=True)
    assert whole == ["qwen2.5-7b/s128/whole_model"]


def test_model_dims_are_the_presets() -> None:
    """The op dimensions are those of the model presets."""
    from llmopt.frontend.models import PRESETS

    for name, dims in suite.MODELS.items():
        preset = PRESETS[name]
        assert dims.hidden == preset["hidden_size"]
        assert dims.intermediate == preset["intermediate_size"]
        assert dims.heads == preset["num_attention_heads"]
        assert dims.kv_heads == preset["num_key_value_heads"]
        assert dims.head_dim == preset.get("head_dim", dims.hidden // dims.heads)
        assert dims.eps == preset["rms_norm_eps"]
        assert dims.qkv_bias == (preset["model_type"] == "qwen2")


def test_projection_shapes() -> None:
    """Each projection's (in, out, bias) follows the model's attention and MLP shape."""
    qwen = suite.MODELS["qwen2.5-7b"]
    assert suite.projection_shape(qwen, "q_proj") == (3584, 3584, True)
    assert suite.projection_shape(qwen, "k_proj") == (3584, 512, True)
    assert suite.projection_shape(qwen, "down_proj") == (18944, 3584, False)
    tiny = suite.MODELS["tinyllama"]
    assert suite.projection_shape(tiny, "v_proj") == (2048, 256, False)
    assert suite.projection_shape(tiny, "o_proj") == (2048, 2048, False)


def test_list_option_prints_the_subset(capsys: pytest.CaptureFixture[str]) -> None:
    """``--list`` prints the selected cases; a run needs ``--out-dir``."""
    assert suite.main(["ops", "--list", "--models", "tinyllama", "--seqs", "32", "512",
                       "--ops", "sdpa", "softmax"]) == 0
    assert capsys.readouterr().out.split() == [
        "tinyllama/s32/sdpa", "tinyllama/s32/softmax", "tinyllama/s512/sdpa",
        "tinyllama/s512/softmax",
    ]
    with pytest.raises(SystemExit):
        suite.parse_args(["ops"])  # no --out-dir


# --- the op modules -----------------------------------------------------------------------------


@pytest.mark.parametrize("op", suite.OPS)
def test_every_op_captures_and_lowers(op: str) -> None:
    """Every op module (tiny dims) captures and lowers to CUDA; no weight is constant."""
    case = suite.make_case(TINY, SEQ, op)
    assert case.name == f"tiny/s{SEQ}/{op}"
    for name, tensor in case.module.state_dict().items():
        if tensor.is_floating_point():
            assert tensor.min() < tensor.max(), f"{name} is constant"
    with torch.no_grad():
        out = case.module(*case.inputs)
    assert torch.isfinite(out).all()
    module = llmopt.capture(case.module, case.inputs)
    llmopt.lower(module, "lower-to-cuda")
    assert llmopt.cuda_source(module).count("__global__") >= 1


def test_cases_are_seeded_by_name() -> None:
    """The same case name gives the same data; another name other data."""
    a = suite.make_case(TINY, SEQ, "q_proj")
    b = suite.make_case(TINY, SEQ, "q_proj")
    c = suite.make_case(TINY, SEQ, "k_proj")
    assert torch.equal(a.inputs[0], b.inputs[0])
    assert torch.equal(a.module.weight, b.module.weight)
    assert not torch.equal(a.inputs[0], c.inputs[0])
    with pytest.raises(ValueError, match="unknown op"):
        suite.make_case(TINY, SEQ, "conv")


def test_naive_attention_is_causal_gqa_sdpa() -> None:
    """The written-out attention is causal GQA sdpa (float64, to rounding)."""
    case = suite.make_case(TINY, SEQ, "naive_attention")
    q, k, v = (t.double() for t in case.inputs)
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                            enable_gqa=True)
    got = case.module.double()(q, k, v)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    assert torch.equal(suite.repeat_kv(k, 2), k.repeat_interleave(2, dim=1))


def test_rmsnorm_is_torch_rms_norm() -> None:
    """The RMSNorm formula is ``F.rms_norm``."""
    case = suite.make_case(TINY, SEQ, "rmsnorm")
    (x,) = case.inputs
    want = torch.nn.functional.rms_norm(x.double(), (TINY.hidden,),
                                        case.module.weight.double(), TINY.eps)
    torch.testing.assert_close(case.module.double()(x.double()), want)


def interpreted(module: torch.nn.Module, inputs: tuple[Any, ...]) -> suite.Built:
    """llmopt on the CPU: the module captured, lowered to Kernel IR and interpreted."""
    program = capture(module, inputs)
    tol = tolerance(program.module)
    kernel = llmopt.lower(program.module.clone(), TO_KERNEL)

    def fn(*args: torch.Tensor) -> torch.Tensor:
        arrays = [a.detach().numpy() for a in program.arguments(*args)]
        (out,) = llmopt.interp.run(kernel, arrays)
        return torch.from_numpy(out)

    return suite.Built(fn=fn, compile_s=0.0, tol=tol, kernels=3)


@pytest.mark.parametrize("op", ["rmsnorm", "q_proj", "naive_attention", "silu_mul_down"])
def test_numerics_through_the_interpreter(op: str) -> None:
    """llmopt's Kernel IR, interpreted, is within tolerance of float64 PyTorch."""
    case = suite.make_case(TINY, SEQ, op)
    built = interpreted(case.module, case.inputs)
    ref = suite.reference(case.module, case.inputs)
    assert ref.dtype == torch.float64
    err = suite.rel_error(built.fn(*case.inputs), ref)
    assert built.tol is not None
    assert err <= built.tol, (err, built.tol)
    assert suite.rel_error(ref + 1.0, ref) > built.tol  # the check can fail


# --- measuring, with stand-in systems and timer ------------------------------------------------


class Token:
    """An object a stand-in system holds, to see (by a weak reference) when it is freed."""


class FakeGpu:
    """Stand-in systems and a fake timer that record every call, in order.

    A system made by :meth:`system` wraps a real builder; its calls append the system's name
    to ``log`` (its ``replay``, when asked for, appends ``<name>:replay``). :meth:`timer` is
    a :data:`suite.Timer`: it makes the untimed and then the timed calls, tells from the log
    which series it timed, appends ``(series, warmup, timed)`` to ``blocks``, and returns
    that series' next samples from ``times`` (cycled; 1.0 where none are given).
    """

    def __init__(self, times: dict[str, list[float]] | None = None) -> None:
        self.log: list[str] = []
        self.blocks: list[tuple[str, int, int]] = []
        self.tokens: list[weakref.ref[Token]] = []
        self._times: dict[str, Iterator[float]] = {
            name: itertools.cycle(values) for name, values in (times or {}).items()}

    def system(self, name: str, builder: suite.Builder = suite.build_eager, *,
               replay: bool = False, fail_after: int | None = None) -> suite.Builder:
        """A builder of ``builder``'s system whose calls are logged as ``name``; with
        ``fail_after``, every call (replays included) after that many raises (0: the check
        already fails)."""

        def build(module: torch.nn.Module, inputs: tuple[Any, ...]) -> suite.Built:
            inner = builder(module, inputs)
            token = Token()
            self.tokens.append(weakref.ref(token))
            calls = itertools.count(1)

            def run(series: str, args: tuple[Any, ...]) -> Any:
                self.log.append(series)
                if fail_after is not None and next(calls) > fail_after:
                    raise RuntimeError(f"{name} fell over")
                return inner.fn(*args)

            def fn(*args: torch.Tensor, _token: Token = token) -> Any:
                return run(name, args)

            def again() -> Any:
                return run(f"{name}:replay", inputs)

            return dataclasses.replace(inner, fn=fn, replay=again if replay else None)

        return build

    def timer(self, call: Callable[[], Any], reps: int, warmup: int) -> list[float]:
        """``warmup`` then ``reps`` calls of ``call``; the series' next ``reps`` samples."""
        for _ in range(warmup):
            call()
        first = len(self.log)
        for _ in range(reps):
            call()
        (series,) = set(self.log[first:])
        self.blocks.append((series, warmup, reps))
        samples = self._times.setdefault(series, itertools.repeat(1.0))
        return [next(samples) for _ in range(reps)]

    def order(self) -> list[str]:
        """The series in the order they were timed, one entry per timer call."""
        return [series for series, _, _ in self.blocks]


def stand_ins(gpu: FakeGpu, **options: dict[str, Any]) -> dict[str, suite.Builder]:
    """Every default system as a logged stand-in of eager (``options[system]`` passed on);
    the optional ones (:data:`suite.OPTIONAL_SYSTEMS`) only when ``options`` names them."""
    return {system: gpu.system(system, **options.get(system, {})) for system in suite.SYSTEMS
            if system not in suite.OPTIONAL_SYSTEMS or system in options}


def test_measure_ratios_and_accuracy() -> None:
    """Times, ratios, accuracy and compile facts land in the row."""
    gpu = FakeGpu({"eager": [2.0], "compile": [1.0], "llmopt": [0.5]})
    row = suite.run_op_case(
        TINY, SEQ, "silu_mul_down", device="cpu", reps=3, warmup=1, timer=gpu.timer,
        builders={"eager": gpu.system("eager"), "compile": gpu.system("compile"),
                  "llmopt": gpu.system("llmopt", interpreted)},
    )
    assert row["name"] == f"tiny/s{SEQ}/silu_mul_down"
    assert row["shapes"] == [[1, SEQ, 48], [1, SEQ, 48]]
    assert (row["eager_ms"], row["compile_ms"], row["llmopt_ms"]) == (2.0, 1.0, 0.5)
    assert row["vs_eager"] == pytest.approx(4.0)
    assert row["vs_compile"] == pytest.approx(2.0)
    assert row["vs_best"] == pytest.approx(2.0)
    assert row["ok"] is True
    assert row["max_err_rel"] <= row["tol"]
    assert row["eager_err_rel"] <= row["tol"]
    assert row["kernels"] == 3 and row["llmopt_compile_s"] == 0.0
    assert "error" not in row
    assert "llmopt_copy_ms" not in row  # no CUDA graph to replay: one series
    assert len(gpu.blocks) == 3 * suite.DEFAULT_ROUNDS


def test_a_failing_llmopt_is_recorded_not_raised() -> None:
    """An llmopt failure records its first line and no time."""
    def broken(module: torch.nn.Module, inputs: tuple[Any, ...]) -> suite.Built:
        raise RuntimeError("boom\nsecond line")

    gpu = FakeGpu({"eager": [2.0], "compile": [1.0]})
    row = suite.run_op_case(
        TINY, SEQ, "softmax", device="cpu", reps=3, warmup=1, timer=gpu.timer,
        builders={"eager": gpu.system("eager"), "compile": gpu.system("compile"),
                  "llmopt": broken},
    )
    assert row["error"] == "RuntimeError: boom"
    assert row["llmopt_ms"] is None
    assert row["vs_eager"] is None and row["vs_best"] is None
    assert row["eager_ms"] == 2.0 and row["ok"] is None


def test_a_case_that_cannot_be_built_is_recorded() -> None:
    """A case whose module cannot be built records the error."""
    gpu = FakeGpu()
    row = suite.run_op_case(TINY, SEQ, "no_such_op", device="cpu", timer=gpu.timer,
                            builders={})
    assert row["error"].startswith("ValueError: unknown op")
    assert row["llmopt_ms"] is None
    assert gpu.blocks == []


def tiny_config(kind: str, layers: int = 1) -> Any:
    """A small Llama or Qwen2 (q/k/v bias) config."""
    import transformers

    common: dict[str, Any] = {"hidden_size": 64, "num_hidden_layers": layers,
                              "num_attention_heads": 4, "num_key_value_heads": 2,
                              "vocab_size": 97, "max_position_embeddings": 128}
    if kind == "llama":
        return transformers.LlamaConfig(**common, intermediate_size=96, head_dim=16)
    return transformers.Qwen2Config(**common, intermediate_size=100, rms_norm_eps=1e-6)


def test_decoder_layer_block_case() -> None:
    """A (small) decoder layer through eager, the reference and llmopt's IR."""
    pytest.importorskip("transformers")
    gpu = FakeGpu({"eager": [2.0], "eager_graph": [1.5], "compile": [1.0], "llmopt": [4.0]})
    row = suite.run_block_case(
        "tiny", SEQ, "decoder_layer", config=tiny_config("qwen2"), device="cpu", reps=2,
        warmup=0, rounds=2, timer=gpu.timer,
        builders={"eager": gpu.system("eager"), "eager_graph": gpu.system("eager_graph"),
                  "compile": gpu.system("compile"),
                  "llmopt": gpu.system("llmopt", interpreted)},
    )
    assert row["name"] == f"tiny/s{SEQ}/decoder_layer"
    assert row["shapes"] == [[1, SEQ, 64], [1, SEQ, 16], [1, SEQ, 16]]
    assert "error" not in row
    assert row["ok"] is True and 0 < row["max_err_rel"] <= row["tol"]
    assert row["vs_best"] == pytest.approx(0.25)
    assert row["vs_eager_graph"] == pytest.approx(1.5 / 4.0)
    assert gpu.order() == ["eager", "eager_graph", "compile", "llmopt",
                           "eager_graph", "compile", "llmopt", "eager"]


def test_whole_model_block_case_records_llmopt_failure_off_gpu() -> None:
    """The whole-model path runs; llmopt's and the eager graph's GPU-only steps fail
    gracefully."""
    pytest.importorskip("transformers")
    # On the CPU llmopt's program cannot be loaded (no GPU, or CPU inputs) and no CUDA graph
    # captured: recorded, not raised; eager and the float64 reference still run.
    gpu = FakeGpu({"eager": [2.0], "compile": [1.0]})
    row = suite.run_block_case(
        "tiny", SEQ, "whole_model", config=tiny_config("llama"), device="cpu", timer=gpu.timer,
        builders={"eager": gpu.system("eager"), "compile": gpu.system("compile")},
    )
    assert row["shapes"] == [[1, SEQ]]
    assert row["eager_ms"] == 2.0 and row["eager_err_rel"] < 1e-5
    assert row["llmopt_ms"] is None and row["error"]
    assert row["vs_eager"] is None and row["vs_best"] is None and row["ok"] is None
    assert row["eager_graph_ms"] is None and row["eager_graph_error"]
    assert set(gpu.order()) == {"eager", "compile"}


def test_pipeline_option_reaches_llmopt_and_the_results_file() -> None:
    """``--pipeline`` is what llmopt lowers with, and a results file says so when it is not
    the default; a pipeline that does not exist is recorded as llmopt's failure."""
    pytest.importorskip("transformers")
    meta = suite.run_metadata("blocks", commit=None, reps=1, warmup=0,
                              pipeline="lower-to-cuda,dce")
    assert meta["pipeline"] == "lower-to-cuda,dce"
    assert "pipeline" not in suite.run_metadata("blocks", commit=None, reps=1, warmup=0)
    gpu = FakeGpu({"eager": [2.0], "compile": [1.0]})
    row = suite.run_block_case(
        "tiny", SEQ, "decoder_layer", config=tiny_config("qwen2"), device="cpu",
        timer=gpu.timer,
        builders={"eager": gpu.system("eager"), "compile": gpu.system("compile")},
        pipeline="no-such-pass",
    )
    assert row["eager_ms"] == 2.0
    assert row["llmopt_ms"] is None and "no-such-pass" in row["error"]


def test_systems_are_built_first_then_timed_in_rotating_rounds() -> None:
    """Every system is built and checked before any is timed; then each round times every
    system (warm-up, then ceil(reps / rounds) calls), the order rotated by one per round;
    everything built stays alive until the timing is done and is freed after."""
    gpu = FakeGpu()
    alive_while_timing: list[bool] = []

    def timer(call: Callable[[], Any], reps: int, warmup: int) -> list[float]:
        alive_while_timing.append(all(ref() is not None for ref in gpu.tokens))
        return gpu.timer(call, reps, warmup)

    row = suite.run_op_case(TINY, SEQ, "softmax", device="cpu", reps=7, warmup=2, rounds=3,
                            timer=timer, builders=stand_ins(gpu))
    assert "error" not in row and row["ok"] is None  # stand-ins carry no tolerance
    assert gpu.order() == ["eager", "eager_graph", "compile", "llmopt",
                           "eager_graph", "compile", "llmopt", "eager",
                           "compile", "llmopt", "eager", "eager_graph"]
    assert {(w, t) for _, w, t in gpu.blocks} == {(2, 3)}  # ceil(7 / 3) timed calls
    checks = ["eager", "eager_graph", "compile", "llmopt"]  # one checking call each, first
    assert gpu.log == checks + [name for name, w, t in gpu.blocks for _ in range(w + t)]
    assert len(gpu.tokens) == 4 and all(alive_while_timing)
    gc.collect()
    assert all(ref() is None for ref in gpu.tokens)


def test_an_optional_system_is_timed_in_the_rotation_when_given() -> None:
    """torch.compile with CUDA graphs, when its builder is given, is built after the default
    mode and timed in the same rotation; being a PyTorch system, it is part of ``vs_best``."""
    gpu = FakeGpu({"eager": [2.0], "compile": [1.0], "graphs": [0.25], "llmopt": [0.5]})
    row = suite.run_op_case(TINY, SEQ, "softmax", device="cpu", reps=3, warmup=1, rounds=3,
                            timer=gpu.timer, builders=stand_ins(gpu, graphs={}))
    series = ["eager", "eager_graph", "compile", "graphs", "llmopt"]
    assert gpu.order() == [name for r in range(3) for name in series[r:] + series[:r]]
    assert row["compile_graphs_ms"] == 0.25
    assert row["vs_compile_graphs"] == pytest.approx(0.5)
    assert row["vs_best"] == pytest.approx(0.5)


def test_replay_and_copy_are_interleaved_like_systems() -> None:
    """A system with a CUDA-graph replay is timed as two series, replay into ``*_ms`` and
    the copying call into ``*_copy_ms``, both rotated with the others."""
    gpu = FakeGpu({"eager": [2.0], "compile": [1.0], "llmopt:replay": [0.25],
                   "llmopt": [0.5]})
    row = suite.run_op_case(TINY, SEQ, "softmax", device="cpu", reps=4, warmup=1, rounds=4,
                            timer=gpu.timer,
                            builders=stand_ins(gpu, llmopt={"replay": True}))
    series = ["eager", "eager_graph", "compile", "llmopt:replay", "llmopt"]
    assert gpu.order() == [name for r in range(4) for name in series[r:] + series[:r]]
    assert (row["llmopt_ms"], row["llmopt_copy_ms"]) == (0.25, 0.5)
    assert row["vs_eager"] == pytest.approx(8.0)
    assert "eager_copy_ms" not in row


@pytest.mark.parametrize("fail_after", [None, 0, 3])
def test_a_failing_system_does_not_stop_the_others(fail_after: int | None) -> None:
    """torch.compile failing in its build (``None``), its check (0) or during the timing
    (3: in the second round) records its error, no time and no samples; eager and llmopt
    are timed in every round, still in rotating order."""
    gpu = FakeGpu({"eager": [2.0], "eager_graph": [3.0], "compile": [0.1], "llmopt": [0.5]})
    builders = stand_ins(gpu)
    if fail_after is None:
        def broken(module: torch.nn.Module, inputs: tuple[Any, ...]) -> suite.Built:
            raise RuntimeError("compile fell over\nsecond line")

        builders["compile"] = broken
    else:
        builders["compile"] = gpu.system("compile", fail_after=fail_after)
    row = suite.run_op_case(TINY, SEQ, "softmax", device="cpu", reps=3, warmup=1, rounds=3,
                            timer=gpu.timer, builders=builders)
    assert row["compile_error"] == "RuntimeError: compile fell over"
    assert row["compile_ms"] is None and row["vs_compile"] is None
    assert (row["eager_ms"], row["llmopt_ms"]) == (2.0, 0.5)
    assert row["vs_best"] == pytest.approx(4.0)  # the best of what was timed
    assert "error" not in row and "eager_error" not in row
    others = [name for name in gpu.order() if name != "compile"]
    assert others == ["eager", "eager_graph", "llmopt", "eager_graph", "llmopt", "eager",
                      "llmopt", "eager", "eager_graph"]
    assert gpu.order().count("compile") == (1 if fail_after == 3 else 0)


@pytest.mark.parametrize("fail_after", [2, 3])
def test_a_failing_series_drops_all_of_its_system(fail_after: int) -> None:
    """When a replayed system's replay (2: its first timed call) or copying call (3: its
    first warm-up) fails, neither series keeps a time, the replay's samples of the same
    round included, and its copying call is not timed after its replay failed; the other
    systems go on."""
    gpu = FakeGpu({"eager": [2.0], "compile": [1.0], "llmopt:replay": [0.25]})
    builders = stand_ins(gpu, llmopt={"replay": True, "fail_after": fail_after})
    row = suite.run_op_case(TINY, SEQ, "softmax", device="cpu", reps=2, warmup=1, rounds=2,
                            timer=gpu.timer, builders=builders)
    assert row["error"] == "RuntimeError: llmopt fell over"
    assert row["llmopt_ms"] is None and "llmopt_copy_ms" not in row
    assert (row["eager_ms"], row["compile_ms"]) == (2.0, 1.0)
    replayed = ["llmopt:replay"] if fail_after == 3 else []
    assert gpu.order() == ["eager", "eager_graph", "compile", *replayed,
                           "eager_graph", "compile", "eager"]
    assert gpu.log.count("llmopt") == (2 if fail_after == 3 else 1)  # the check, warm-up


def test_the_time_is_the_median_of_all_samples() -> None:
    """A system's time is the median over every round's samples, not of one round nor a
    median of the rounds' medians; each round takes ceil(reps / rounds) samples."""
    rounds_samples = [[1.0, 30.0], [2.0, 3.0], [4.0, 5.0]]
    gpu = FakeGpu({"eager": list(itertools.chain(*rounds_samples))})
    row = suite.run_op_case(TINY, SEQ, "softmax", device="cpu", reps=5, warmup=1, rounds=3,
                            timer=gpu.timer, builders=stand_ins(gpu))
    assert [t for name, _, t in gpu.blocks if name == "eager"] == [2, 2, 2]
    assert row["eager_ms"] == 3.5
    assert statistics.median(statistics.median(s) for s in rounds_samples) == 4.5
    assert 3.5 not in {statistics.median(s) for s in rounds_samples}
    assert row["compile_ms"] == 1.0  # the fake's default sample


def test_interleaving_needs_positive_rounds_and_reps() -> None:
    """Zero rounds or reps, or a negative warm-up, is refused before anything is timed."""
    gpu = FakeGpu()
    call = suite.TimedCall("eager", "eager_ms", lambda: gpu.log.append("eager"))
    for bad in ({"rounds": 0}, {"reps": 0}, {"warmup": -1}):
        kwargs = {"reps": 1, "warmup": 0, "rounds": 1, **bad}
        with pytest.raises(ValueError, match="rounds >= 1"):
            suite.interleaved_samples([call], gpu.timer, **kwargs)
    assert gpu.log == []
    samples, errors = suite.interleaved_samples([call], gpu.timer, reps=3, warmup=0,
                                                rounds=10)
    assert samples == {"eager_ms": [1.0] * 10} and errors == {}  # at least one per round


def test_rounds_option_reaches_the_cases_and_the_results_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--rounds`` (default 5) goes to every case runner and into the results file's
    timing; a run that is not positive is refused."""
    assert suite.parse_args(["ops", "--list"]).rounds == suite.DEFAULT_ROUNDS == 5
    with pytest.raises(SystemExit):
        suite.parse_args(["ops", "--out-dir", str(tmp_path), "--rounds", "0"])
    seen: list[dict[str, Any]] = []

    def fake_case(dims: suite.ModelDims, seq: int, op: str, **kwargs: Any) -> report.Case:
        seen.append(kwargs)
        return report.add_ratios({"name": suite.case_name(dims.name, seq, op),
                                  "eager_ms": 2.0, "compile_ms": 1.0, "llmopt_ms": 0.5})

    # Pretend to be a GPU host; the cases themselves are stand-ins, so nothing touches one.
    monkeypatch.setattr(suite.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(suite.torch.cuda, "get_device_name", lambda: "NVIDIA H200")
    monkeypatch.setattr(suite, "configure_precision", lambda: None)
    monkeypatch.setattr(suite, "run_op_case", fake_case)
    assert suite.main(["ops", "--out-dir", str(tmp_path), "--models", "tinyllama", "--seqs",
                       "32", "--ops", "softmax", "sdpa", "--reps", "10", "--warmup", "2",
                       "--rounds", "3", "--commit", "abc"]) == 0
    assert [(k["reps"], k["warmup"], k["rounds"]) for k in seen] == [(10, 2, 3)] * 2
    doc = json.loads((tmp_path / "ops-h200.json").read_text())
    assert doc["rounds"] == 3
    assert doc["timing"].startswith("median of 12 calls per system")
    assert "3 interleaved rounds" in doc["timing"] and "4 timed calls" in doc["timing"]
    assert "5 interleaved rounds" in suite.run_metadata("ops", commit=None, reps=100,
                                                        warmup=10)["timing"]


def test_compile_graphs_option_adds_a_system_and_its_ratio(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--compile-graphs`` hands the cases a ``graphs`` builder (torch.compile with CUDA
    graphs); its time gets ``vs_compile_graphs``, a geomean and a minimum, and counts in
    ``vs_best``. Without the option no case has the field and the summary has no such
    key."""
    seen: list[dict[str, Any]] = []

    def fake_case(model: str, seq: int, what: str, **kwargs: Any) -> report.Case:
        seen.append(kwargs)
        row = {"name": suite.case_name(model, seq, what), "eager_ms": 2.0, "compile_ms": 1.0,
               "llmopt_ms": 0.5}
        if "graphs" in (kwargs.get("builders") or {}):
            row["compile_graphs_ms"] = 0.25  # faster than llmopt: vs best sees it
        return report.add_ratios(row)

    monkeypatch.setattr(suite.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(suite.torch.cuda, "get_device_name", lambda: "NVIDIA H200")
    monkeypatch.setattr(suite, "configure_precision", lambda: None)
    monkeypatch.setattr(suite, "run_block_case", fake_case)
    args = ["blocks", "--models", "tinyllama", "--seqs", "128", "--commit", "abc"]
    assert suite.main([*args, "--out-dir", str(tmp_path / "a"), "--compile-graphs"]) == 0
    assert seen[0]["builders"] == {"graphs": suite.build_torch_compile_graphs}
    doc = json.loads((tmp_path / "a" / "blocks-h200.json").read_text())
    case = doc["cases"][0]
    assert case["vs_compile_graphs"] == pytest.approx(0.5)
    assert case["vs_best"] == pytest.approx(0.5)
    assert doc["geomean_vs_compile_graphs"] == pytest.approx(0.5)
    assert doc["min_vs_compile_graphs"] == pytest.approx(0.5)
    text = (tmp_path / "a" / "blocks-h200.md").read_text()
    assert "| tinyllama/s128/decoder_layer | 1 | 0.25 | 0.5 | 0.50× |" in text
    assert "geomean vs torch.compile with CUDA graphs: **0.50×**" in text
    assert suite.main([*args, "--out-dir", str(tmp_path / "b")]) == 0
    assert seen[1]["builders"] == {}
    plain = json.loads((tmp_path / "b" / "blocks-h200.json").read_text())
    assert "compile_graphs_ms" not in plain["cases"][0]
    assert "geomean_vs_compile_graphs" not in plain and "min_vs_compile_graphs" not in plain
    assert plain["cases"][0]["vs_best"] == pytest.approx(2.0)
    assert "CUDA graphs" not in (tmp_path / "b" / "blocks-h200.md").read_text()


def test_results_file_is_rewritten_after_every_case(tmp_path: Path) -> None:
    """The JSON is rewritten per case and accumulates across runs unless fresh."""
    path = tmp_path / "ops-h200.json"
    meta = {"kind": "ops", "gpu": "test"}
    results = suite.ResultsFile(path, meta)
    assert json.loads(path.read_text())["cases"] == []
    results.add({"name": "a", "eager_ms": 2.0, "compile_ms": 3.0, "llmopt_ms": 1.0})
    doc = json.loads(path.read_text())
    assert [c["name"] for c in doc["cases"]] == ["a"]
    assert doc["geomean_vs_eager"] == pytest.approx(2.0)
    # a second run into the same directory keeps the cases, unless fresh
    again = suite.ResultsFile(path, meta)
    again.add({"name": "b", "eager_ms": 1.0, "compile_ms": 1.0, "llmopt_ms": None})
    doc = json.loads(path.read_text())
    assert [c["name"] for c in doc["cases"]] == ["a", "b"]
    assert doc["cases_failed"] == 1
    suite.ResultsFile(path, meta, fresh=True)
    assert json.loads(path.read_text())["cases"] == []


# --- the report ---------------------------------------------------------------------------------


def synthetic() -> list[dict[str, Any]]:
    """Three cases: llmopt 2x faster, 4x slower than torch.compile, failed."""
    return [
        {"name": "m/s32/a", "eager_ms": 2.0, "compile_ms": 4.0, "llmopt_ms": 1.0,
         "max_err_rel": 1e-7, "ok": True},
        {"name": "m/s32/b", "eager_ms": 1.0, "compile_ms": 0.5, "llmopt_ms": 2.0,
         "max_err_rel": 2e-7, "ok": True},
        {"name": "m/s32/c", "eager_ms": 1.0, "compile_ms": 1.0, "llmopt_ms": None,
         "error": "CaptureError: unsupported op"},
    ]


def test_summary_geomeans_and_failures() -> None:
    """Geomeans over timed cases, min vs best, failures counted."""
    cases = synthetic()
    summary = report.summarize(cases)
    assert summary["geomean_vs_eager"] == pytest.approx(1.0)  # ratios 2 and 0.5
    assert summary["geomean_vs_compile"] == pytest.approx(1.0)  # ratios 4 and 0.25
    assert summary["min_vs_best"] == pytest.approx(0.25)  # b: min(1, 0.5) / 2
    assert (summary["cases_total"], summary["cases_timed"], summary["cases_failed"]) == (3, 2, 1)
    assert cases[0]["vs_best"] == pytest.approx(2.0)
    assert cases[2]["vs_eager"] is None
    assert [c["name"] for c in report.losses(cases)] == ["m/s32/b"]
    assert report.geomean([]) is None
    assert report.geomean([4.0, None, 1.0, math.nan]) == pytest.approx(2.0)


def test_merge_later_file_wins() -> None:
    """Merging keeps every case, the later file's version of a repeated one."""
    first = {"kind": "ops", "commit": "aaa", "gpu": "g1", "cases": synthetic()}
    second = {"kind": "ops", "commit": "bbb", "gpu": "g2", "cases": [
        {"name": "m/s32/c", "eager_ms": 1.0, "compile_ms": 1.0, "llmopt_ms": 0.5},
        {"name": "m/s32/d", "eager_ms": 3.0, "compile_ms": 3.0, "llmopt_ms": 3.0},
    ]}
    merged = report.merge([first, second])
    assert [c["name"] for c in merged["cases"]] == ["m/s32/a", "m/s32/b", "m/s32/c", "m/s32/d"]
    assert merged["cases"][2]["llmopt_ms"] == 0.5 and "error" not in merged["cases"][2]
    assert merged["cases_failed"] == 0 and merged["cases_total"] == 4
    assert merged["gpu"] == "g2" and merged["commits"] == ["aaa", "bbb"]
    assert merged["geomean_vs_eager"] == pytest.approx((2.0 * 0.5 * 2.0 * 1.0) ** 0.25)
    with pytest.raises(ValueError, match="different kinds"):
        report.merge([first, {"kind": "blocks", "cases": []}])


def test_markdown_lists_cases_geomeans_failures_and_losses() -> None:
    """The Markdown has a row per case, the geomeans, failures and losses."""
    doc = {"kind": "ops", "gpu": "NVIDIA H200", "commit": "abc123", "cases": synthetic()}
    text = report.markdown(doc)
    for case in synthetic():
        assert f"| {case['name']} |" in text
    assert "| m/s32/a | 2 | — | 4 | 1 | 2.00× | — | 4.00× | 2.00× | 1.0e-07 | yes |" in text
    assert "geomean vs eager: **1.00×** (2 of 3 cases timed)" in text
    assert "geomean vs torch.compile: **1.00×**" in text
    assert "min vs best: **0.25×**" in text
    assert "- m/s32/c: CaptureError: unsupported op" in text
    assert "## Losses (vs best < 1): 1" in text
    assert "- m/s32/b: 0.25×" in text
    assert "abc123" in text and "NVIDIA H200" in text
    lines = report.table(doc).splitlines()
    assert len(lines) == 2 + 3 + 2 and lines[-1].startswith("geomean vs eager 1.000")


def test_json_keeps_non_finite_numbers_as_strings(tmp_path: Path) -> None:
    """Non-finite numbers survive strict JSON as strings."""
    path = tmp_path / "x.json"
    report.write_json({"cases": [{"name": "a", "max_err_rel": math.inf}]}, path)
    assert json.loads(path.read_text())["cases"][0]["max_err_rel"] == "inf"


def test_report_command_merges_directories(tmp_path: Path) -> None:
    """``report.py DIR DIR`` writes the merged JSON, Markdown and (with matplotlib) PNG."""
    for k, (name, ms) in enumerate([("m/s32/a", 1.0), ("m/s32/a", 4.0)]):
        run = tmp_path / f"run{k}"
        run.mkdir()
        report.write_json({"kind": "ops", "commit": f"c{k}",
                           "cases": [{"name": name, "eager_ms": 2.0, "compile_ms": 2.0,
                                      "llmopt_ms": ms}]}, run / "ops-h200.json")
    out = tmp_path / "out"
    assert report.main([str(tmp_path / "run0"), str(tmp_path / "run1"),
                        "--out-dir", str(out)]) == 0
    doc = json.loads((out / "ops-h200.json").read_text())
    assert [c["llmopt_ms"] for c in doc["cases"]] == [4.0]
    assert doc["geomean_vs_eager"] == pytest.approx(0.5)
    assert "| m/s32/a |" in (out / "ops-h200.md").read_text()
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert not (out / "ops-h200.png").exists()
    else:
        assert (out / "ops-h200.png").read_bytes()[:4] == b"\x89PNG"
    assert not (out / "blocks-h200.json").exists()
    assert report.main([str(tmp_path / "nothing-here")]) == 1


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")
def test_the_eager_graph_replays_eager_on_a_gpu() -> None:
    """The eager CUDA graph computes what eager does, for the captured inputs (replay) and
    for new ones (copied into its static buffers first)."""
    case = suite.make_case(TINY, SEQ, "silu_mul_down", device="cuda")
    with torch.no_grad():
        built = suite.build_eager_graph(case.module, case.inputs)
        assert built.replay is not None and built.compile_s is not None
        torch.testing.assert_close(built.replay(), case.module(*case.inputs))
        other = tuple(torch.randn_like(t) for t in case.inputs)
        torch.testing.assert_close(built.fn(*other).clone(), case.module(*other))
        assert built.replay() is built.fn(*other)  # one static output


def test_all_systems_are_timed_in_one_order() -> None:
    """Every system has its fields, in the order they are built (and timed in the first
    round)."""
    assert suite.SYSTEMS == ("eager", "eager_graph", "compile", "graphs", "cublas", "llmopt")
    assert suite.OPTIONAL_SYSTEMS == ("graphs", "cublas")
    assert set(itertools.chain(suite.MS_FIELD, suite.ERR_FIELD, suite.ERROR_FIELD)) == set(
        suite.SYSTEMS)


# --- 16 bits: --dtype, cuBLAS, the error goal --------------------------------------------------

BF16 = torch.bfloat16


def test_dtype_option_and_file_names(capsys: pytest.CaptureFixture[str]) -> None:
    """``--dtype`` defaults to float32 (whose file names stay ``<kind>-<tag>``); a 16-bit
    run lists the same cases and writes ``<kind>-<dtype>-<tag>``; other dtypes are refused."""
    assert suite.parse_args(["ops", "--list"]).dtype == "float32"
    assert suite.parse_args(["blocks", "--list", "--dtype", "bfloat16"]).dtype == "bfloat16"
    for bad in (["ops", "--list", "--dtype", "int8"], ["ops", "--list", "--dtype", "float64"]):
        with pytest.raises(SystemExit):
            suite.parse_args(bad)
    subset = ["ops", "--list", "--models", "tinyllama", "--seqs", "128", "--ops", "q_proj",
              "gate_proj", "down_proj", "rmsnorm", "sdpa"]
    assert suite.main(subset) == 0
    plain = capsys.readouterr().out
    assert suite.main([*subset, "--dtype", "bfloat16"]) == 0
    assert capsys.readouterr().out == plain
    assert plain.split() == [f"tinyllama/s128/{op}" for op in
                             ("q_proj", "gate_proj", "down_proj", "rmsnorm", "sdpa")]
    assert report.results_stem("ops", "h200") == "ops-h200"
    assert report.results_stem("ops", "h200", "float32") == "ops-h200"
    assert report.results_stem("ops", "h200", "bfloat16") == "ops-bfloat16-h200"
    assert report.results_stem("sweep", "a100", "float16") == "sweep-float16-a100"



@pytest.mark.parametrize(("name", "tag"), [
    ("NVIDIA H200", "h200"), ("NVIDIA H100 80GB HBM3", "h100"),
    ("NVIDIA A100-SXM4-80GB", "a100"), ("NVIDIA GeForce RTX 5090", "rtx5090"),
    ("Tesla T4", "t4"), ("NVIDIA L40S", "l40s")])
def test_results_are_named_for_the_gpu_they_ran_on(name: str, tag: str) -> None:
    """A results file's suffix is the GPU's model (not the last word of its name: an H100
    reports itself as '... 80GB HBM3'); without a GPU, the default tag."""
    assert report.gpu_tag(name) == tag
    if not torch.cuda.is_available():
        assert report.gpu_tag() == report.DEFAULT_TAG
        assert suite.parse_args(["ops", "--list"]).tag == report.DEFAULT_TAG
    assert suite.parse_args(["ops", "--list", "--tag", "x1"]).tag == "x1"

def test_a_16_bit_case_is_the_float32_case_rounded() -> None:
    """Weights and inputs are drawn as in float32 and rounded: same seed, same data; the
    causal mask stays boolean."""
    for op in ("silu_mul_down", "rmsnorm", "naive_attention"):
        wide = suite.make_case(TINY, SEQ, op)
        half = suite.make_case(TINY, SEQ, op, dtype=BF16)
        for a, b in zip(wide.inputs, half.inputs, strict=True):
            assert b.dtype == BF16 and torch.equal(a.to(BF16), b)
        for (name, a), (_, b) in zip(wide.module.state_dict().items(),
                                     half.module.state_dict().items(), strict=True):
            want = a.to(BF16) if a.is_floating_point() else a
            assert b.dtype == want.dtype and torch.equal(b, want), name
    assert suite.make_case(TINY, SEQ, "q_proj").inputs[0].dtype == torch.float32


def test_block_models_cast_their_weights_but_not_the_rotary_frequencies() -> None:
    """A 16-bit block model holds the float32 model's weights rounded and keeps its rotary
    ``inv_freq`` in float32 (as ``build_model(dtype=...)`` does); float32 is untouched."""
    pytest.importorskip("transformers")
    from llmopt.frontend.models import build_model

    config = tiny_config("llama")
    wide = suite.block_model(config, "whole_model", device="cpu", perturb_seed=5)
    half = suite.block_model(config, "whole_model", device="cpu", dtype=BF16, perturb_seed=5)
    built = build_model(config, device="cpu", dtype=BF16)
    for name, param in half.named_parameters():
        assert param.dtype == BF16, name
        assert torch.equal(param, wide.get_parameter(name).to(BF16)), name
    buffers = dict(half.named_buffers())
    assert buffers["model.rotary_emb.inv_freq"].dtype == torch.float32
    assert dict(built.named_buffers())["model.rotary_emb.inv_freq"].dtype == torch.float32
    assert all(p.dtype == torch.float32 for p in wide.parameters())
    meta = suite.block_model(config, "decoder_layer", device="meta", dtype=BF16)
    assert {p.dtype for p in meta.parameters()} == {BF16}
    assert len(meta.model.layers) == 1


def test_the_products_and_their_shapes() -> None:
    """The projections, matmul_residual and silu_mul_down are products, with ``[M, N, K]``;
    the bare product is the linear layer on its own input (``silu(g) * u`` for
    silu_mul_down, no residual for matmul_residual)."""
    found = []
    for op in suite.OPS:
        case = suite.make_case(TINY, SEQ, op, dtype=BF16)
        if suite.product_mnk(case.module, case.inputs) is not None:
            found.append(op)
    assert tuple(found) == suite.PRODUCT_OPS
    case = suite.make_case(TINY, SEQ, "silu_mul_down", dtype=BF16)
    assert suite.product_mnk(case.module, case.inputs) == [SEQ, 32, 48]
    layer, (h,) = suite.bare_product(case.module, case.inputs)
    g, u = case.inputs
    assert layer is case.module.down_proj and h.dtype == BF16
    assert torch.equal(h, torch.nn.functional.silu(g) * u)
    case = suite.make_case(TINY, SEQ, "matmul_residual", dtype=BF16)
    layer, args = suite.bare_product(case.module, case.inputs)
    assert layer is case.module.o_proj and args == (case.inputs[0],)
    case = suite.make_case(TINY, SEQ, "k_proj")
    assert suite.product_mnk(case.module, case.inputs) == [SEQ, 16, 32]
    with pytest.raises(ValueError, match="not a matrix product"):
        suite.bare_product(suite.Softmax(), (torch.zeros(2, 2),))


def test_the_error_goal() -> None:
    """At most twice PyTorch's own error plus one epsilon of the dtype; a float32 row gets
    nothing; the ratio is missing where PyTorch's error is 0."""
    eps = suite.HALF_EPS["bfloat16"]
    assert suite.within_error_goal(2e-3, 1e-3, "bfloat16")
    assert suite.within_error_goal(2e-3 + eps, 1e-3, "bfloat16")
    assert not suite.within_error_goal(2.01e-3 + eps, 1e-3, "bfloat16")
    assert not suite.within_error_goal(math.nan, 1e-3, "bfloat16")
    assert suite.within_error_goal(5e-4, 0.0, "float16")
    assert not suite.within_error_goal(2e-3, 0.0, "float16")  # 2**-10 < 2e-3
    row = suite.add_error_goal({"max_err_rel": 3e-3, "eager_err_rel": 1e-3}, BF16)
    assert row["err_vs_eager"] == pytest.approx(3.0) and row["ok_vs_eager"] is True
    row = suite.add_error_goal({"max_err_rel": 3e-2, "eager_err_rel": 1e-3}, BF16)
    assert row["ok_vs_eager"] is False
    row = suite.add_error_goal({"max_err_rel": 5e-4, "eager_err_rel": 0.0}, torch.float16)
    assert row["err_vs_eager"] is None and row["ok_vs_eager"] is True
    row = suite.add_error_goal({"max_err_rel": None, "eager_err_rel": 1e-3}, BF16)
    assert row["err_vs_eager"] is None and row["ok_vs_eager"] is None
    assert suite.add_error_goal({"max_err_rel": 1.0, "eager_err_rel": 1e-9},
                                torch.float32) == {"max_err_rel": 1.0, "eager_err_rel": 1e-9}


def test_half_errors_measure_against_float64_from_the_same_values() -> None:
    """The float64 reference widens the 16-bit weights and inputs exactly; PyTorch's own
    bfloat16 error against it is positive and small, and a run that is PyTorch's has the
    same error."""
    case = suite.make_case(TINY, SEQ, "silu_mul_down", dtype=BF16)
    ref = suite.reference(case.module, case.inputs)
    g, u = (t.double() for t in case.inputs)
    down = case.module.down_proj
    want = torch.nn.functional.linear(torch.nn.functional.silu(g) * u, down.weight.double())
    torch.testing.assert_close(ref, want, rtol=1e-12, atol=1e-12)
    ours, theirs = suite.half_errors(case.module, case.inputs, case.module)
    assert ours == theirs and 0 < theirs < 8 * suite.HALF_EPS["bfloat16"]
    worse, _ = suite.half_errors(case.module, case.inputs,
                                 lambda *a: case.module(*a) * (1 + 2**-5))
    assert worse > 2 * theirs
    ours, theirs = suite.half_errors(lambda a, b: a * b, list(case.inputs),
                                     lambda a, b: (a.float() * b.float()).to(BF16))
    assert ours == theirs


def cpu_graph(log: list[str]) -> suite.Builder:
    """A stand-in of :func:`suite.build_eager_graph` without CUDA: the replay is a plain
    call of the module on the inputs it was built with, logged as ``cublas:replay``."""

    def build(module: torch.nn.Module, inputs: tuple[Any, ...]) -> suite.Built:
        def replay() -> Any:
            log.append("cublas:replay")
            return module(*inputs)

        return suite.Built(fn=lambda *args: module(*args), compile_s=0.0, replay=replay)

    return build


def test_cublas_times_the_bare_product_in_the_same_rounds(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """In bfloat16 a product case times cuBLAS on its bare product, replayed, in the
    rotation of the other systems (no copying series), checked against the product's own
    float64 result; the row gets ``mnk``, ``vs_cublas``, both TFLOP/s and the error goal."""
    gpu = FakeGpu({"eager": [2.0], "eager_graph": [1.0], "compile": [1.0],
                   "cublas:replay": [0.5], "llmopt": [0.25]})
    monkeypatch.setattr(suite, "build_eager_graph", cpu_graph(gpu.log))
    builders = {**stand_ins(gpu), "cublas": suite.build_cublas}
    row = suite.run_op_case(TINY, SEQ, "matmul_residual", device="cpu", reps=2, warmup=0,
                            rounds=2, timer=gpu.timer, builders=builders, dtype=BF16)
    assert "error" not in row and "cublas_error" not in row
    series = ["eager", "eager_graph", "compile", "cublas:replay", "llmopt"]
    assert gpu.order() == series + series[1:] + series[:1]
    assert row["cublas_ms"] == 0.5 and "cublas_copy_ms" not in row
    assert row["cublas_capture_s"] == 0.0
    assert row["mnk"] == [SEQ, 32, 32]
    assert row["vs_cublas"] == pytest.approx(2.0)
    assert row["vs_best"] == pytest.approx(4.0)  # cuBLAS is no part of it
    flops = 2 * SEQ * 32 * 32
    assert row["llmopt_tflops"] == pytest.approx(flops / 0.25e-3 / 1e12)
    assert row["cublas_tflops"] == pytest.approx(flops / 0.5e-3 / 1e12)
    # its error is the bare product's (the residual is not in it), a bfloat16 rounding's
    assert 0 < row["cublas_err_rel"] < 8 * suite.HALF_EPS["bfloat16"]
    # llmopt's stand-in is eager: its error is PyTorch's own, the goal met
    assert 0 < row["eager_err_rel"] == row["max_err_rel"]
    assert row["err_vs_eager"] == 1.0 and row["ok_vs_eager"] is True
    # in float32 the row is as it always was: no cuBLAS, no error goal
    gpu = FakeGpu()
    plain = suite.run_op_case(TINY, SEQ, "matmul_residual", device="cpu", reps=1, warmup=0,
                              rounds=1, timer=gpu.timer, builders=stand_ins(gpu))
    assert not {"cublas_ms", "mnk", "vs_cublas", "llmopt_tflops", "err_vs_eager",
                "ok_vs_eager"} & set(plain)


def test_only_16_bit_products_get_cublas() -> None:
    """The optional systems of a case: cuBLAS for the matrix products of a 16-bit ops run
    only, torch.compile with CUDA graphs when asked for."""
    assert suite.extra_builders("ops", "q_proj", "bfloat16") == {"cublas": suite.build_cublas}
    assert suite.extra_builders("ops", "silu_mul_down", "float16") == {
        "cublas": suite.build_cublas}
    assert suite.extra_builders("ops", "q_proj", "float32") == {}
    assert suite.extra_builders("ops", "sdpa", "bfloat16") == {}
    assert suite.extra_builders("blocks", "decoder_layer", "bfloat16") == {}
    assert suite.extra_builders("ops", "rmsnorm", "bfloat16", compile_graphs=True) == {
        "graphs": suite.build_torch_compile_graphs}


def test_a_bfloat16_run_writes_its_own_files(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """``--dtype bfloat16`` hands every case its dtype and the products a cuBLAS builder,
    records the dtype and PyTorch's reduced-precision setting, and writes
    ``ops-bfloat16-h200.*`` beside (not over) the float32 files."""
    seen: list[tuple[str, dict[str, Any]]] = []

    def fake_case(dims: suite.ModelDims, seq: int, op: str, **kwargs: Any) -> report.Case:
        seen.append((op, kwargs))
        row = {"name": suite.case_name(dims.name, seq, op), "eager_ms": 2.0,
               "eager_graph_ms": 1.0, "compile_ms": 1.0, "llmopt_ms": 0.5,
               "max_err_rel": 3e-3, "eager_err_rel": 2e-3}
        if "cublas" in kwargs["builders"]:
            row |= {"cublas_ms": 0.25, "mnk": [128, 2048, 2048]}
        return report.add_ratios(suite.add_error_goal(row, kwargs["dtype"]))

    monkeypatch.setattr(suite.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(suite.torch.cuda, "get_device_name", lambda: "NVIDIA H200")
    monkeypatch.setattr(suite, "configure_precision", lambda: None)
    monkeypatch.setattr(suite, "run_op_case", fake_case)
    args = ["ops", "--out-dir", str(tmp_path), "--models", "tinyllama", "--seqs", "128",
            "--ops", "q_proj", "rmsnorm", "--commit", "abc"]
    assert suite.main([*args, "--dtype", "bfloat16"]) == 0
    assert [op for op, _ in seen] == ["q_proj", "rmsnorm"]
    assert all(kwargs["dtype"] == BF16 for _, kwargs in seen)
    assert "cublas" in seen[0][1]["builders"] and "cublas" not in seen[1][1]["builders"]
    assert sorted(p.name for p in tmp_path.glob("ops-*.json")) == ["ops-bfloat16-h200.json"]
    doc = json.loads((tmp_path / "ops-bfloat16-h200.json").read_text())
    assert doc["dtype"] == "bfloat16"
    assert doc["reduced_precision_reduction"] == suite.reduced_precision_reduction("bfloat16")
    assert doc["geomean_vs_cublas"] == pytest.approx(0.5)
    assert doc["cases_below_cublas_goal"] == 1
    assert doc["max_err_vs_eager"] == pytest.approx(1.5)
    assert doc["cases_over_2x_eager"] == 0 and doc["cases_over_error_goal"] == 0
    text = (tmp_path / "ops-bfloat16-h200.md").read_text()
    assert "bfloat16 weights and inputs, every system in bfloat16" in text
    assert "| tinyllama/s128/q_proj | 128×2048×2048 | 0.25 | 0.5 | 0.50× | 4.3 | 2.1 | NO |" \
        in text
    # the float32 run into the same directory keeps its names and its records' fields
    seen.clear()
    assert suite.main(args) == 0
    assert all(kwargs["dtype"] == torch.float32 and "cublas" not in kwargs["builders"]
               for _, kwargs in seen)
    plain = json.loads((tmp_path / "ops-h200.json").read_text())
    assert plain["dtype"] == "float32" and "reduced_precision_reduction" not in plain
    assert "err_vs_eager" not in plain["cases"][0] and "geomean_vs_cublas" not in plain
    assert json.loads((tmp_path / "ops-bfloat16-h200.json").read_text())["dtype"] == "bfloat16"
    assert "FP32, TF32 off" in (tmp_path / "ops-h200.md").read_text()


def bf16_synthetic() -> list[dict[str, Any]]:
    """Three bfloat16 cases: a product at 1.25x cuBLAS's speed within the error goal, a
    product at 0.5x over it, a norm (no cuBLAS)."""
    return [
        {"name": "m/s128/q_proj", "eager_ms": 0.02, "compile_ms": 0.02, "llmopt_ms": 0.008,
         "cublas_ms": 0.01, "mnk": [128, 1024, 1024], "max_err_rel": 2e-3,
         "eager_err_rel": 2e-3, "err_vs_eager": 1.0, "ok_vs_eager": True, "ok": True},
        {"name": "m/s128/down_proj", "eager_ms": 0.04, "compile_ms": 0.04, "llmopt_ms": 0.04,
         "cublas_ms": 0.02, "mnk": [128, 1024, 4096], "max_err_rel": 4e-2,
         "eager_err_rel": 2e-3, "err_vs_eager": 20.0, "ok_vs_eager": False, "ok": False,
         "tol": 3e-2},
        {"name": "m/s128/rmsnorm", "eager_ms": 0.01, "compile_ms": 0.01, "llmopt_ms": 0.005,
         "max_err_rel": 5e-3, "eager_err_rel": 2e-3, "err_vs_eager": 2.5,
         "ok_vs_eager": True, "ok": True},
    ]


def test_the_report_of_a_bfloat16_run(tmp_path: Path) -> None:
    """A 16-bit results document: its files carry the dtype; the Markdown has the products
    against cuBLAS with both TFLOP/s per shape and the errors against PyTorch's own; the
    summary counts the products below 0.8x cuBLAS and the cases over the error goal; the
    report command finds the files by ``--dtype`` and will not merge dtypes."""
    doc = {"kind": "ops", "dtype": "bfloat16", "gpu": "NVIDIA H200", "commit": "abc",
           "reduced_precision_reduction": True, "cases": bf16_synthetic()}
    run = tmp_path / "run"
    written = report.write_report(doc, run)
    assert [p.name for p in written][:2] == ["ops-bfloat16-h200.json", "ops-bfloat16-h200.md"]
    saved = json.loads((run / "ops-bfloat16-h200.json").read_text())
    assert saved["geomean_vs_cublas"] == pytest.approx((1.25 * 0.5) ** 0.5)
    assert saved["min_vs_cublas"] == pytest.approx(0.5)
    assert saved["cases_below_cublas_goal"] == 1
    assert saved["max_err_vs_eager"] == pytest.approx(20.0)
    assert saved["cases_over_2x_eager"] == 2 and saved["cases_over_error_goal"] == 1
    case = saved["cases"][0]
    assert case["vs_cublas"] == pytest.approx(1.25)
    assert case["llmopt_tflops"] == pytest.approx(2 * 128 * 1024 * 1024 / 8e-6 / 1e12)
    assert case["cublas_tflops"] == pytest.approx(2 * 128 * 1024 * 1024 / 1e-5 / 1e12)
    assert "vs_cublas" not in saved["cases"][2] and "llmopt_tflops" not in saved["cases"][2]
    text = (run / "ops-bfloat16-h200.md").read_text()
    assert "reduced-precision reductions allowed" in text
    assert "## Matrix products against cuBLAS" in text
    assert "| m/s128/q_proj | 128×1024×1024 | 0.01 | 0.008 | 1.25× | 26.8 | 33.6 | yes |" in text
    assert "| m/s128/down_proj | 128×1024×4096 | 0.02 | 0.04 | 0.50× | 53.7 | 26.8 | NO |" in text
    assert "m/s128/rmsnorm | 128" not in text
    assert "below 0.8×: 1 of 2 products" in text
    assert "## Accuracy against PyTorch's own bfloat16" in text
    assert "| m/s128/q_proj | 2.00e-03 | 2.00e-03 | 1.00 | yes | yes |" in text
    assert "| m/s128/down_proj | 4.00e-02 | 2.00e-03 | 20.00 | NO | NO |" in text
    assert "| m/s128/rmsnorm | 5.00e-03 | 2.00e-03 | 2.50 | NO | yes |" in text
    assert "## Over the error goal (2× PyTorch's own)" in text
    assert "- m/s128/down_proj: err 4.00e-02, PyTorch's 2.00e-03" in text
    terminal = report.table(saved)
    assert "vs cuBLAS 1.25" in terminal and "1 over 2x + eps" in terminal
    out = tmp_path / "out"
    assert report.main([str(run), "--out-dir", str(out)]) == 1  # no float32 files there
    assert report.main([str(run), "--out-dir", str(out), "--dtype", "bfloat16"]) == 0
    assert (out / "ops-bfloat16-h200.md").read_text() == text
    assert not (out / "ops-h200.json").exists()
    with pytest.raises(ValueError, match="different dtypes"):
        report.merge([doc, {"kind": "ops", "cases": synthetic()}])
    # a float32 document says nothing of cuBLAS or PyTorch's own error
    plain = report.markdown({"kind": "ops", "dtype": "float32", "cases": synthetic()})
    assert "cuBLAS" not in plain and "PyTorch's own" not in plain and "FP32, TF32 off" in plain


def test_the_dry_run_lowers_the_selected_cases_in_their_dtype(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """``--dry-run`` captures and lowers each selected case on the CPU in the dtype asked
    for (tiny dimensions here), without ``--out-dir``; a case that cannot be lowered makes
    it fail."""
    monkeypatch.setitem(suite.MODELS, "tinyllama", dataclasses.replace(TINY, name="tinyllama"))
    argv = ["ops", "--dry-run", "--dtype", "bfloat16", "--models", "tinyllama", "--seqs",
            str(SEQ), "--ops", "q_proj", "softmax"]
    assert suite.main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith(f"tinyllama/s{SEQ}/q_proj: bfloat16, lowered for sm_90 in")
    assert lines[0].endswith(f"product {SEQ}x32x32")
    assert lines[1].startswith(f"tinyllama/s{SEQ}/softmax: bfloat16, lowered")
    assert "tol 3." in lines[1]  # float32 arithmetic + four bfloat16 epsilons
    assert suite.main([*argv, "--pipeline", "no-such-pass"]) == 1
    assert "failed" in capsys.readouterr().out
