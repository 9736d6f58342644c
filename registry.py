"""Registries of llmopt's dialects, passes, named pipelines and targets.

Everything here is imported lazily: a registry entry is a zero-argument factory, so that
`llm-opt` on a small file does not import torch, transformers or CUDA libraries unless a
pass that needs them runs.

Researchers extend llmopt with :func:`register_pass` and :func:`register_dialect`.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable
from importlib import import_module
from typing import TYPE_CHECKING, TypeVar

from xdsl.ir import Dialect
from xdsl.passes import ModulePass, PassPipeline, PassPipelineCallbackType
from xdsl.utils.target import Target

from llmopt.target import DEFAULT_ARCH

if TYPE_CHECKING:
    from xdsl.utils.arg_spec import ArgSpec

_PassT = TypeVar("_PassT", bound=type[ModulePass])
_TargetT = TypeVar("_TargetT", bound=type[Target])

#: dialect name -> factory returning the xDSL ``Dialect``
DIALECTS: dict[str, Callable[[], Dialect]] = {}
#: pass name -> factory returning the ``ModulePass`` subclass
PASSES: dict[str, Callable[[], type[ModulePass]]] = {}


def _lazy(module: str, attr: str) -> Callable[[], object]:
    def factory() -> object:
        return getattr(import_module(module), attr)

    return factory


def register_dialect(dialect: Dialect | Callable[[], Dialect]) -> None:
    """Make a dialect (or a factory of one) known to ``llm-opt`` and the Python API."""
    if isinstance(dialect, Dialect):
        DIALECTS[dialect.name] = lambda d=dialect: d
    else:
        d = dialect()
        DIALECTS[d.name] = dialect


def register_pass(cls: _PassT) -> _PassT:
    """Class decorator: make an xDSL ``ModulePass`` subclass usable by name in ``-p``."""
    if not (isinstance(cls, type) and issubclass(cls, ModulePass)):
        raise TypeError(f"register_pass expects a ModulePass subclass, got {cls!r}")
    PASSES[cls.name] = lambda c=cls: c
    return cls


# --- llmopt's own dialects -------------------------------------------------------------------
for _name, _module, _attr in [
    ("torch", "llmopt.dialects.torch", "Torch"),
    ("prim", "llmopt.dialects.prim", "Prim"),
    ("loop", "llmopt.dialects.loop", "Loop"),
    ("tile", "llmopt.dialects.tile", "Tile"),
    ("kernel", "llmopt.dialects.kernel", "Kernel"),
    ("cuda", "llmopt.dialects.cuda", "Cuda"),
    ("mma", "llmopt.dialects.mma", "Mma"),
    ("wgmma", "llmopt.dialects.wgmma", "Wgmma"),
    ("mbarrier", "llmopt.dialects.mbarrier", "Mbarrier"),
    ("tma", "llmopt.dialects.tma", "Tma"),
]:
    DIALECTS[_name] = _lazy(_module, _attr)  # type: ignore[assignment]

# --- llmopt's own passes: name -> (module, class) -----------------------------------------------
_BUILTIN_PASSES: dict[str, tuple[str, str]] = {
    "torch-to-prim": ("llmopt.lowering.torch_to_prim", "TorchToPrim"),
    "prim-to-loop": ("llmopt.lowering.prim_to_loop", "PrimToLoop"),
    "loop-to-tile": ("llmopt.lowering.loop_to_tile", "LoopToTile"),
    "tile-to-kernel": ("llmopt.lowering.tile_to_kernel", "TileToKernel"),
    "kernel-to-cuda": ("llmopt.lowering.kernel_to_cuda", "KernelToCuda"),
    "fuse-kernels": ("llmopt.passes.loop.fuse_kernels", "FuseKernels"),
    "recompute-into-products": ("llmopt.passes.loop.recompute_into_products",
                                "RecomputeIntoProducts"),
    "hoist-reduce-factors": ("llmopt.passes.loop.hoist_reduce_factors", "HoistReduceFactors"),
    "index-set-split": ("llmopt.passes.loop.index_set_split", "IndexSetSplit"),
    "outline-repeated-kernels": ("llmopt.passes.loop.outline_repeated_kernels",
                                 "OutlineRepeatedKernels"),
    "apply-tuned": ("llmopt.passes.tile.apply_tuned", "ApplyTuned"),
    "flash-attention": ("llmopt.passes.tile.flash_attention", "FlashAttention"),
    "length-buckets": ("llmopt.passes.tile.length_buckets", "LengthBuckets"),
    "split-k": ("llmopt.passes.tile.split_k", "SplitK"),
    "warp-gemv": ("llmopt.passes.tile.warp_gemv", "WarpGemv"),
    "register-tile": ("llmopt.passes.tile.register_tile", "RegisterTilePass"),
    "stage-inputs": ("llmopt.passes.tile.stage_inputs", "StageInputs"),
    "async-copy": ("llmopt.passes.tile.async_copy", "AsyncCopy"),
    "prefetch-stages": ("llmopt.passes.tile.prefetch_stages", "PrefetchStages"),
    "pad-shared": ("llmopt.passes.tile.pad_shared", "PadShared"),
    "vector-fragments": ("llmopt.passes.tile.vector_fragments", "VectorFragments"),
    "vector-elementwise": ("llmopt.passes.tile.vector_elementwise", "VectorElementwise"),
    "vector-epilogue": ("llmopt.passes.tile.vector_epilogue", "VectorEpilogue"),
    "vector-rows": ("llmopt.passes.tile.vector_rows", "VectorRows"),
    "squeeze-unit-dims": ("llmopt.passes.tile.squeeze_unit_dims", "SqueezeUnitDims"),
    "mma-fragments": ("llmopt.passes.tile.mma_fragments", "MmaFragments"),
    "wgmma-fragments": ("llmopt.passes.tile.wgmma_fragments", "WgmmaFragments"),
    "dedup-kernels": ("llmopt.passes.kernel.dedup_kernels", "DedupKernels"),
    "hoist-constants": ("llmopt.passes.kernel.hoist_constants", "HoistConstants"),
    "inline-repeated-kernels": ("llmopt.passes.kernel.inline_repeated_kernels",
                                "InlineRepeatedKernels"),
    "merge-branches": ("llmopt.passes.kernel.merge_branches", "MergeBranches"),
    "version-row-groups": ("llmopt.passes.kernel.version_row_groups", "VersionRowGroups"),
    "fuse-launches": ("llmopt.passes.kernel.fuse_launches", "FuseLaunches"),
    "fuse-tails": ("llmopt.passes.kernel.fuse_tails", "FuseTails"),
    "plan-buffers": ("llmopt.passes.kernel.plan_buffers", "PlanBuffers"),
    "warp-specialize": ("llmopt.passes.kernel.warp_specialize", "WarpSpecialize"),
    "programmatic-launch": ("llmopt.passes.kernel.programmatic_launch", "ProgrammaticLaunch"),
    "lengths-in-memory": ("llmopt.passes.kernel.lengths_in_memory", "LengthsInMemory"),
}
for _name, (_module, _attr) in _BUILTIN_PASSES.items():
    PASSES[_name] = _lazy(_module, _attr)  # type: ignore[assignment]

#: named pipelines: name -> (default options, expansion). The expansion is a pass-pipeline
#: string whose ``{opt}`` placeholders are filled from the options given at the use site,
#: e.g. ``lower-to-cuda{arch=sm_80}``. ``outline-repeated-kernels`` hands Tile IR one copy of
#: each kernel that identical layers repeat, and ``inline-repeated-kernels`` puts the lowered
#: host code back at every call once the kernels are cleaned up, so a whole model lowers in
#: about the time of its distinct kernels. ``dedup-kernels`` runs twice: right after
#: ``tile-to-kernel`` (kernels identical without having been outlined, so the cleanups
#: that follow see one copy) and after the cleanups (kernels that only they made
#: identical). ``hoist-constants`` takes the constants out of ``tile-to-kernel``'s loop
#: nests in one step, which ``canonicalize`` would do one loop per sweep of the module.
#: ``vector-epilogue`` stores a tensor-core tile's outputs (and reads its residual) two
#: adjacent columns at a time, one 4- or 8-byte access where there were two.
#: ``fuse-kernels{recompute_limit=0}`` keeps a reduction from
#: being recomputed in several loops: attention scores become a matrix product of their own
#: (which ``register-tile`` tiles) instead of a dot product recomputed in each of softmax's
#: three loops. ``index-set-split`` splits a rotary embedding's rotate-half loop into its
#: two halves where it reads a matrix-vector product, and the second ``fuse-kernels`` makes
#: the product's two rows and the embedding one kernel (a decode step's query and key
#: projections with their rotary embeddings and the key cache append). ``merge-branches``
#: puts the length buckets of sibling products in one branch, ``fuse-launches`` makes
#: independent launches of one block shape one launch (a decode step's query, key and value
#: projections), and
#: ``programmatic-launch`` lets each kernel's blocks be scheduled while the previous kernel
#: drains (sm_90 and newer). ``version-row-groups`` gives a register tile over a runtime
#: length one K loop per count of its live row groups, so that a bucket's kernel skips the
#: padded rows' multiply-adds as a static tile does. ``warp-specialize`` gives a warpgroup
#: product's copies a producer warpgroup of their own, which fills each slot with bulk
#: tensor copies (``tensor_copies``, on by default) and gives its registers to the
#: computing warpgroups: on sm_90a the kernels ``async-copy`` marks with two roles (16-bit
#: products, over static rows or a symbolic length's; pipeline option ``roles``: 0 that
#: default, 1 none, 2 every product whose fills allow), every warpgroup product with
#: ``warp_specialize=true``. Kernels whose schedule asks for it (``register-tile``: wide
#: two-warpgroup products) run in clusters of two blocks that share the tile they both read
#: (the weight tile of two row bands), each copying half of it to both (``tma.load …
#: multicast``); ``cluster=1`` runs none so, ``cluster=2`` every one that can.
PIPELINES: dict[str, tuple[dict[str, str], str]] = {
    "lower-to-cuda": (
        {"arch": DEFAULT_ARCH, "warp_specialize": "false", "tensor_copies": "true",
         "roles": "0", "cluster": "0"},
        "torch-to-prim,canonicalize,prim-to-loop,fuse-kernels{{recompute_limit=0}},canonicalize,"
        "cse,index-set-split,fuse-kernels{{recompute_limit=0}},hoist-reduce-factors,flash-attention{{arch={arch}}},outline-repeated-kernels,"
        "loop-to-tile{{arch={arch}}},length-buckets{{arch={arch}}},apply-tuned{{arch={arch}}},"
        "split-k{{arch={arch} roles={roles}}},"
        "register-tile{{arch={arch} roles={roles}}},warp-gemv{{arch={arch}}},"
        "stage-inputs{{arch={arch}}},async-copy{{arch={arch} roles={roles}}},"
        "prefetch-stages,wgmma-fragments{{arch={arch}}},pad-shared,mma-fragments,"
        "vector-fragments,squeeze-unit-dims,vector-elementwise,vector-epilogue,"
        "tile-to-kernel,"
        "warp-specialize{{enabled={warp_specialize} tensor_copies={tensor_copies} "
        "producer_registers=40 consumer_registers=232 cluster={cluster} arch={arch}}},"
        "dedup-kernels,hoist-constants,canonicalize,cse,dedup-kernels,"
        "version-row-groups,inline-repeated-kernels,merge-branches,fuse-launches,plan-buffers,"
        "programmatic-launch{{arch={arch}}},"
        "kernel-to-cuda{{arch={arch}}}",
    ),
}

#: target name -> factory returning the xDSL ``Target`` subclass (used by ``llm-opt -t``)
TARGETS: dict[str, Callable[[], type[Target]]] = {
    "cuda": _lazy("llmopt.tools.cuda_target", "CudaTarget"),  # type: ignore[dict-item]
}


class PipelineError(ValueError):
    """A pass pipeline is malformed, names an unknown pass, or gives a pass bad options."""


def register_pipeline(name: str, expansion: str, defaults: dict[str, str] | None = None) -> None:
    """Make a named pipeline usable in ``-p``; see :data:`PIPELINES` for the expansion syntax."""
    PIPELINES[name] = (dict(defaults or {}), expansion)


def register_target(cls: _TargetT) -> _TargetT:
    """Class decorator: make an xDSL ``Target`` subclass usable by name in ``llm-opt -t``."""
    if not (isinstance(cls, type) and issubclass(cls, Target)):
        raise TypeError(f"register_target expects a Target subclass, got {cls!r}")
    TARGETS[cls.name] = lambda c=cls: c
    return cls


def available_passes() -> dict[str, Callable[[], type[ModulePass]]]:
    """All passes usable by name: xDSL's (``canonicalize``, ``cse``, ``dce``, …), those of
    installed ``xdsl.universe`` plugins, and llmopt's (which win on a name clash)."""
    from xdsl.universe import Universe

    passes = dict(Universe.get_multiverse().all_passes)
    passes.update(PASSES)
    return passes


def _split_pipeline(spec: str) -> list[tuple[str, ArgSpec]]:
    """Split a pass-pipeline string into (element text, parsed element) pairs."""
    from xdsl.utils.arg_spec import PipelineLexer, SpecTokenKind, parse_pipeline
    from xdsl.utils.exceptions import ArgSpecParseError

    try:
        specs = list(parse_pipeline(spec))
        texts: list[str] = []
        if specs:
            lexer, depth, start = PipelineLexer(spec), 0, 0
            while (token := lexer.lex()).kind is not SpecTokenKind.EOF:
                if token.kind is SpecTokenKind.L_BRACE:
                    depth += 1
                elif token.kind is SpecTokenKind.R_BRACE:
                    depth -= 1
                elif token.kind is SpecTokenKind.COMMA and depth == 0:
                    texts.append(spec[start : token.span.start])
                    start = token.span.end
            texts.append(spec[start:])
    except ArgSpecParseError as err:
        raise PipelineError(str(err)) from None
    assert len(texts) == len(specs), (spec, texts)
    return list(zip(texts, specs, strict=True))


def _option_text(values: tuple[str | int | bool | float, ...]) -> str:
    """Render parsed option values back into pass-pipeline syntax."""
    parts: list[str] = []
    for value in values:
        if isinstance(value, bool):
            parts.append("true" if value else "false")
        elif isinstance(value, int):
            parts.append(str(value))
        elif isinstance(value, float):
            text = repr(value)
            mantissa, e, exponent = text.partition("e")
            parts.append(mantissa + ("" if "." in mantissa else ".0") + e + exponent)
        elif re.fullmatch(r"[A-Za-z_][A-Za-z0-9_-]*", value) and value not in ("true", "false"):
            parts.append(value)
        else:
            parts.append('"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"')
    return ",".join(parts)


def expand_pipeline(spec: str, _depth: int = 0) -> str:
    """Expand the named pipelines of :data:`PIPELINES` in a pass-pipeline string.

    ``lower-to-cuda{arch=sm_80},dce`` becomes the pipeline's pass list with ``{arch}``
    filled in, followed by ``dce``. Other elements are kept verbatim; unknown names are left
    for :func:`build_pipeline` to report. Raises :class:`PipelineError` on bad syntax or an
    option the named pipeline does not have.
    """
    if _depth > 16:
        raise PipelineError(f"named pipelines nest too deeply while expanding '{spec}'")
    expanded: list[str] = []
    for text, element in _split_pipeline(spec):
        if element.name not in PIPELINES:
            expanded.append(text)
            continue
        defaults, template = PIPELINES[element.name]
        values = {key.replace("-", "_"): value for key, value in defaults.items()}
        for key, given in element.parameters.items():
            norm = key.replace("-", "_")
            if norm not in values:
                known = ", ".join(sorted(defaults)) or "none"
                raise PipelineError(
                    f"pipeline '{element.name}' has no option '{key}' (options: {known})"
                )
            if norm == "arch":
                from llmopt.options import arch_problem

                problem = arch_problem(given[0] if len(given) == 1 else given)
                if problem is not None:
                    raise PipelineError(f"invalid options for pipeline '{element.name}': "
                                        f"arch: {problem}")
            values[norm] = _option_text(given)
        try:
            body = template.format(**values)
        except (KeyError, IndexError, ValueError) as err:
            raise PipelineError(f"pipeline '{element.name}' is ill-defined: {err!r}") from None
        expanded.append(expand_pipeline(body, _depth + 1))
    return ",".join(e for e in expanded if e)


def pipeline_elements(spec: str) -> list[tuple[str, str]]:
    """The elements of ``spec`` with its named pipelines expanded, in order: each as its text
    (``register-tile{bm=64}``) and its pass name (``register-tile``).

    Raises:
        PipelineError: bad syntax, or a named pipeline's bad option.
    """
    return [(text.strip(), element.name)
            for text, element in _split_pipeline(expand_pipeline(spec))]


LEVELS = ("torch", "prim", "loop", "tile", "kernel", "cuda")
"""The six levels, in lowering order."""
ENTERING = {"prim": "torch-to-prim", "loop": "prim-to-loop", "tile": "loop-to-tile",
            "kernel": "tile-to-kernel", "cuda": "kernel-to-cuda"}
"""The lowering pass that takes a module into each level."""


def _elements(spec: str) -> tuple[list[str], list[str]]:
    """The expanded ``spec``'s elements: their texts and their pass names."""
    pairs = _split_pipeline(expand_pipeline(spec))
    return [text.strip() for text, _ in pairs], [parsed.name for _, parsed in pairs]


def split_at_level(spec: str, level: str) -> tuple[list[str], list[str]]:
    """The elements of the expanded ``spec`` that take Torch IR to ``level`` (``torch`` …
    ``cuda``), and the elements after them. Raises :class:`PipelineError` when the pipeline
    has no pass entering the next level (it cannot stop at ``level``)."""
    texts, names = _elements(spec)
    if level == LEVELS[-1]:
        return texts, []
    entering = ENTERING[LEVELS[LEVELS.index(level) + 1]]
    if entering not in names:
        raise PipelineError(f"the pipeline '{spec}' has no '{entering}' pass, so it cannot "
                            f"stop at {level} IR")
    cut = names.index(entering)
    return texts[:cut], texts[cut:]


def insert_before(spec: str, anchor: str, element: str) -> str:
    """``spec`` for this machine's GPU (:func:`for_device`) expanded, with ``element``
    before the first pass named ``anchor`` (``insert_before("lower-to-cuda",
    "kernel-to-cuda", "lengths-in-memory")``). Raises :class:`PipelineError` when no pass is
    named so."""
    texts, names = _elements(for_device(spec))
    if anchor not in names:
        raise PipelineError(f"the pipeline '{spec}' has no '{anchor}' pass")
    cut = names.index(anchor)
    return ",".join([*texts[:cut], element, *texts[cut:]])


def for_device(spec: str) -> str:
    """``spec`` with the architecture of this machine's GPU (:func:`with_arch` of
    :func:`llmopt.target.default_arch`: ``sm_90a`` on an H200, ``sm_90`` without a GPU) in
    every element that takes one and sets none, as :func:`llmopt.compile` lowers. An
    expansion keeps it: expanded bare, ``lower-to-cuda`` would pin its default, ``sm_90``."""
    from llmopt.target import default_arch

    return with_arch(spec, default_arch())


def without(spec: str, name: str) -> str:
    """``spec`` for this machine's GPU (:func:`for_device`) expanded, every pass named
    ``name`` left out (``without("lower-to-cuda", "programmatic-launch")``: the pipeline as
    it would be without that step, for comparing the two). Raises :class:`PipelineError`
    when no pass is named so."""
    spec = for_device(spec)
    texts, names = _elements(spec)
    if name not in names:
        raise PipelineError(f"the pipeline '{spec}' has no '{name}' pass")
    return ",".join(t for t, n in zip(texts, names, strict=True) if n != name)


def with_options(spec: str, *overrides: str) -> str:
    """``spec`` for this machine's GPU (:func:`for_device`) expanded, each pass named by an
    override taking that override's options on top of its own (``with_options(
    "lower-to-cuda", "async-copy{stages=4 lag=1}", "wgmma-fragments{pending=1}")``: the
    pipeline with those knobs set, for an A/B of them). Raises :class:`PipelineError` on bad
    syntax or when no pass is named as an override is."""
    spec = for_device(spec)
    changes: dict[str, dict[str, str]] = {}
    for override in overrides:
        for _, element in _split_pipeline(override):
            changes.setdefault(element.name, {}).update(
                {k: _option_text(v) for k, v in element.parameters.items()})
    pairs = _split_pipeline(expand_pipeline(spec))
    missing = sorted(set(changes) - {element.name for _, element in pairs})
    if missing:
        raise PipelineError(f"the pipeline '{spec}' has no '{missing[0]}' pass")
    out: list[str] = []
    for text, element in pairs:
        if element.name not in changes:
            out.append(text.strip())
            continue
        options = {**{k: _option_text(v) for k, v in element.parameters.items()},
                   **changes[element.name]}
        out.append(f"{element.name}{{{' '.join(f'{k}={v}' for k, v in options.items())}}}")
    return ",".join(out)


def pipeline_arch(spec: str) -> str | None:
    """The architecture ``spec`` names: the ``arch`` of its first element that sets one
    (``lower-to-cuda{arch=sm_90a}``: ``sm_90a``), else ``None``.

    Raises:
        PipelineError: bad syntax.
    """
    for _, element in _split_pipeline(spec):
        if "arch" in element.parameters:
            return _option_text(element.parameters["arch"])
    return None


def with_arch(spec: str, arch: str) -> str:
    """``spec`` lowering for ``arch``: every element that has an ``arch`` option and does
    not set it — a named pipeline such as ``lower-to-cuda`` or a pass such as
    ``kernel-to-cuda`` — gets ``arch=<arch>``; ``lower-to-cuda,dce`` becomes
    ``lower-to-cuda{arch=sm_80},dce``. An element that sets ``arch`` keeps its own. What
    ``llmopt.compile`` lowers with, so that a program is built for the GPU it runs on.

    Raises:
        PipelineError: bad syntax.
    """
    passes = available_passes()
    out: list[str] = []
    for text, element in _split_pipeline(spec):
        name = element.name
        if name in PIPELINES:
            takes = "arch" in PIPELINES[name][0]
        elif name in passes:
            fields = getattr(passes[name](), "__dataclass_fields__", {})
            takes = "arch" in fields
        else:
            takes = False  # unknown: left for build_pipeline to report
        if not takes or "arch" in element.parameters:
            out.append(text.strip())
            continue
        options = {**{k: _option_text(v) for k, v in element.parameters.items()},
                   "arch": _option_text((arch,))}
        out.append(f"{name}{{{' '.join(f'{k}={v}' for k, v in options.items())}}}")
    return ",".join(out)


def unknown_pass_message(name: str, known: Iterable[str]) -> str:
    """An error message for an unknown pass ``name``, suggesting close matches."""
    matches = difflib.get_close_matches(name, sorted(set(known)), n=3, cutoff=0.6)
    if not matches:
        return f"unknown pass '{name}'"
    quoted = [f"'{match}'" for match in matches]
    hint = quoted[0] if len(quoted) == 1 else "one of " + ", ".join(quoted)
    return f"unknown pass '{name}'; did you mean {hint}?"


_TYPE_NAMES = {"int": "an integer", "float": "a number", "str": "a string", "bool": "true or false"}


def _check_option_types(cls: type[ModulePass], element: ArgSpec) -> None:
    """Raise ``ValueError`` naming the option of ``element`` whose value is not of the type
    of its field in ``cls`` (an ``int`` option given ``sixty``, ``1.5`` or ``true``)."""
    import dataclasses

    if not dataclasses.is_dataclass(cls):
        return
    types = {f.name: f.type if isinstance(f.type, str) else getattr(f.type, "__name__", "")
             for f in dataclasses.fields(cls)}
    for key, values in element.parameters.items():
        wanted = types.get(key.replace("-", "_"))
        if wanted not in _TYPE_NAMES or len(values) != 1:
            continue
        value = values[0]
        ok = {"int": isinstance(value, int) and not isinstance(value, bool),
              "float": isinstance(value, int | float) and not isinstance(value, bool),
              "str": isinstance(value, str), "bool": isinstance(value, bool)}[wanted]
        if not ok:
            raise ValueError(f"{key} must be {_TYPE_NAMES[wanted]}, got {_option_text(values)}")


def build_pipeline(
    spec: str,
    passes: dict[str, Callable[[], type[ModulePass]]] | None = None,
    callback: PassPipelineCallbackType | None = None,
) -> PassPipeline:
    """Parse a pass-pipeline string (named pipelines expanded) into an xDSL ``PassPipeline``.

    ``passes`` defaults to :func:`available_passes`. Raises :class:`PipelineError` for bad
    syntax, unknown pass names (with close matches) and bad pass options (of the wrong type,
    or out of the ranges of :mod:`llmopt.options`).
    """
    if passes is None:
        passes = available_passes()
    elements = [element for _, element in _split_pipeline(expand_pipeline(spec))]
    unknown = [element.name for element in elements if element.name not in passes]
    if unknown:
        known = [*passes, *PIPELINES]
        raise PipelineError("\n".join(unknown_pass_message(n, known) for n in unknown))
    from llmopt.options import check_pass

    instances: list[ModulePass] = []
    for element in elements:
        cls = passes[element.name]()
        try:
            _check_option_types(cls, element)
            instance = cls.from_pass_spec(element)
            check_pass(instance, element.name)
        except (ValueError, TypeError) as err:
            raise PipelineError(f"invalid options for pass '{element.name}': {err}") from None
        instances.append(instance)
    return PassPipeline(tuple(instances), callback)
