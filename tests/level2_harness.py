"""Test utilities for the level 2 problems: the KernelBench harness flow, the accuracy margin, float64 references.

The accuracy bar of the level 2 problems is stated as a margin: the harness passes a float32 output when
|ours - ref| <= 1e-4 + 1e-4 * |ref| everywhere, so margin = max(|ours - ref| / (1e-4 + 1e-4 * |ref|)) must be
<= 1 to pass, and our bar asks for <= 0.7 (#94) or <= 0.3 (#92), against eager float32 and against float64.
"""

from __future__ import annotations

import copy
import math

import torch

HARNESS_SEED = 42
HARNESS_TOL = 1e-4
HARNESS_TRIALS = 5
FRESH_SEED = 20261122   # where the 20 extra seeds of the accuracy bar are drawn from
FRESH_TRIALS = 20


def set_seed(seed: int) -> None:
    """KernelBench's set_seed: the CPU generator and the current CUDA device's."""
    torch.manual_seed(seed)
    torch.cuda.manual_seed(seed)


def draw_seeds(count: int, seed: int) -> list:
    """The harness's trial seeds: manual_seed(seed), then one torch.randint draw per trial."""
    torch.manual_seed(seed)
    return [int(torch.randint(0, 2 ** 32 - 1, (1,)).item()) for _ in range(count)]


def allclose_margin(out: torch.Tensor, ref: torch.Tensor, tol: float = HARNESS_TOL) -> float:
    """max(|out - ref| / (tol + tol * |ref|)) in float64; inf where either holds NaN or the shapes differ.
    `torch.allclose(out, ref, atol=tol, rtol=tol)` holds exactly when this is <= 1."""
    if out.shape != ref.shape:
        return math.inf
    o = out.detach().to(torch.float64)
    r = ref.detach().to(o.device, torch.float64)
    ratio = (o - r).abs() / (tol + tol * r.abs())
    if ratio.numel() == 0:
        return 0.0
    if torch.isnan(ratio).any():
        return math.inf
    return ratio.max().item()


def float64_copy(model: torch.nn.Module) -> torch.nn.Module:
    """A float64 copy of `model` (the reference computed in double precision)."""
    return copy.deepcopy(model).to(torch.float64)


def margin_report(out, ref, what: str, tol: float = HARNESS_TOL) -> str:
    """Where the margin is worst, for assertion messages."""
    o = out.detach().to(torch.float64)
    r = ref.detach().to(o.device, torch.float64)
    ratio = ((o - r).abs() / (tol + tol * r.abs())).nan_to_num(nan=math.inf)
    flat = int(ratio.flatten().argmax())
    index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), ratio.shape))
    return (f"{what}: margin {ratio.max().item():.3g} at {index}: ours {o[index].item():.8g}, "
            f"reference {r[index].item():.8g}; max abs error {(o - r).abs().max().item():.3g}")


def replay_harness(reference_source: str, candidate_source: str, device: torch.device, shape_patch=None,
                   trials: int = HARNESS_TRIALS, tol: float = HARNESS_TOL, check_inputs: bool = True,
                   degenerate_ok: bool = False) -> list:
    """KernelBench's load / construct / correctness flow; returns the margin of each trial (all must pass).

    The reference source is exec'd into a dict, `shape_patch` (if any) then overwrites module constants in
    that dict (the harness itself never does this: it is how CPU tests shrink a problem), the candidate is
    exec'd into the same dict, both models are built on the CPU under set_seed(42) and moved with
    .to(device, float32), and each trial runs both models on the same input tensors. `degenerate_ok` drops the
    check that the reference output varies (for problems whose output is constant under their initial parameters;
    their tests check perturbed parameters too).
    """
    context = {}
    exec(reference_source, context)
    if shape_patch:
        context.update(shape_patch)
    Model, get_init_inputs, get_inputs = context["Model"], context["get_init_inputs"], context["get_inputs"]
    set_seed(HARNESS_SEED)
    init_inputs = get_init_inputs()
    set_seed(HARNESS_SEED)
    model = Model(*init_inputs)
    exec(candidate_source, context)
    ModelNew = context["ModelNew"]
    set_seed(HARNESS_SEED)
    model_new = ModelNew(*init_inputs)
    model = model.to(device=device, dtype=torch.float32)
    model_new = model_new.to(device=device, dtype=torch.float32)

    margins = []
    for seed in draw_seeds(trials, HARNESS_SEED):
        set_seed(seed)
        inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in get_inputs()]
        before = [x.clone() for x in inputs] if check_inputs else []
        with torch.no_grad():
            ref = model(*inputs)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            out = model_new(*inputs)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
        assert out.shape == ref.shape, f"trial seed {seed}: shape {tuple(out.shape)} != {tuple(ref.shape)}"
        if not degenerate_ok:
            assert ref.float().std().item() > 1e-3, "reference output is degenerate: the check would prove nothing"
        assert torch.allclose(out, ref, atol=tol, rtol=tol), margin_report(out, ref, f"trial seed {seed}", tol)
        for x, x_before in zip(inputs, before):
            assert torch.equal(x, x_before), f"trial seed {seed}: ModelNew modified its input"
        margins.append(allclose_margin(out, ref, tol))
        del inputs, before, ref, out
    return margins


def accuracy_margins(model, model_new, get_inputs, seeds, device: torch.device) -> tuple:
    """(worst margin against eager float32, worst margin against float64) over `seeds`: per seed
    set_seed(seed), get_inputs(), then the three models on the same inputs. `model` and `model_new` are
    float32 on `device`; the float64 reference is made from `model`."""
    model64 = float64_copy(model)
    worst32 = worst64 = 0.0
    for seed in seeds:
        set_seed(seed)
        inputs = [x.to(device) for x in get_inputs()]
        with torch.no_grad():
            out = model_new(*inputs)
            ref32 = model(*inputs)
            worst32 = max(worst32, allclose_margin(out, ref32))
            del ref32
            ref64 = model64(*[x.to(torch.float64) for x in inputs])
            worst64 = max(worst64, allclose_margin(out, ref64))
        del inputs, out, ref64
    return worst32, worst64


def poison_allocator(nbytes: int, device: torch.device) -> None:
    """Leave a freed NaN-filled block of `nbytes` in the CUDA caching allocator, so that an output the next
    call allocates likely lands on NaN memory: elements a kernel never writes then show up as NaN."""
    block = torch.full((nbytes // 4 + 1,), float("nan"), dtype=torch.float32, device=device)
    del block
