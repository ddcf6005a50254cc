"""Running the rows: correctness checks, then timings of every provider, one row at a time, into records.

A row that fails (an exception, a failed check) is recorded with a note and the suite goes on; a row that
does not fit in free device memory is skipped with the reason. Liger-Kernel has a record on every row: its
timings where it ran, otherwise "not installed" or "n/a: why" (liger_provider.py).
"""

from __future__ import annotations

import copy
import datetime
import gc
import math
import platform
import traceback
from dataclasses import dataclass

import torch

import correctness
import liger_provider
import providers as prov
import suite
import timing
from progress import Progress
from report import Record, RunInfo, fill_ratios

import groupnorm_inline

EPS = 1e-5
# Device memory a row needs beyond its tensors: the L2 flush buffer, float64 reference chunks, slack.
ROW_HEADROOM_BYTES = 2 * 1024**3
# Full-size tensors held at the peak of a row, in units of the input's size. Forward: x, ours' output and
# eager's output while they are compared. Training: x, dy, y and dx of the timed provider, the outputs kept
# for the backward-only timing of each provider, and the full-size temporaries of a PyTorch-ops backward.
FORWARD_TENSORS = 3
TRAINING_TENSORS = 12


def describe_run(cpu: bool) -> RunInfo:
    if cpu:
        device = f"CPU {platform.machine()}"
    else:
        device = torch.cuda.get_device_name()
    liger = liger_provider.version() if liger_provider.status() == "available" else liger_provider.status()
    return RunInfo(device=device, torch=torch.__version__, cuda=torch.version.cuda or "none",
                   package=groupnorm_inline.__version__, date=datetime.date.today().isoformat(),
                   timer="wall-clock" if cpu else "cuda-events", liger_kernel=liger or "installed, version unknown")


def has_autograd() -> bool:
    """Whether our op is differentiable: a tiny CPU backward either works or raises."""
    x = torch.rand(1, 2, 3, requires_grad=True)
    try:
        groupnorm_inline.group_norm(x, 1).sum().backward()
    except RuntimeError:
        return False
    return x.grad is not None


@dataclass
class Settings:
    device: torch.device
    plan: timing.TimingPlan
    with_compile: bool


class SuiteRunner:
    """Runs rows one at a time and collects their records; a row that fails is recorded with a note and
    the suite goes on."""

    def __init__(self, settings: Settings, progress: Progress):
        self.settings = settings
        self.progress = progress
        self.records: list[Record] = []
        self.on_cuda = settings.device.type == "cuda"
        self.flusher = timing.L2Flusher(settings.device) if self.on_cuda else None

    # ---- shared steps -------------------------------------------------------------------------------
    def _fits(self, needed_bytes: int) -> tuple[bool, str]:
        if not self.on_cuda:
            return True, ""
        gc.collect()
        torch.cuda.empty_cache()
        free = timing.free_device_bytes()
        if needed_bytes <= free:
            return True, ""
        return False, f"skipped: needs ~{needed_bytes / 1e9:.1f} GB of device memory, {free / 1e9:.1f} GB free"

    def _time(self, provider: prov.Provider, working_set_bytes: int, always_flush: bool = False):
        """(Timing, extra memory bytes) of one provider."""
        if not self.on_cuda:
            return timing.time_cpu(provider.fn, self.settings.plan), math.nan
        flush = always_flush or timing.needs_l2_flush(working_set_bytes)
        result = timing.time_cuda(provider.fn, self.settings.plan, self.flusher if flush else None)
        extra = timing.peak_extra_memory_bytes(provider.fn, provider.result_bytes)
        return result, extra

    def _time_all(self, records: dict[str, Record], providers: list[prov.Provider], working_set_bytes: int,
                  always_flush: bool = False) -> None:
        for provider in providers:
            record = records[provider.name]
            self.progress.step(f"timing {provider.name}")
            try:
                result, extra = self._time(provider, working_set_bytes, always_flush)
            except Exception as error:  # noqa: BLE001 - one provider failing must not end the suite
                record.note = _join(record.note, f"timing failed: {_short(error)}")
                self.progress.message(traceback.format_exc())
                continue
            record.median_ms, record.mean_ms, record.min_ms = result.median_ms, result.mean_ms, result.min_ms
            record.iters, record.l2_flushed, record.extra_mem_bytes = result.iters, result.l2_flushed, extra
            self.progress.step(f"{provider.name} {result.median_ms:.4f} ms (median of {result.iters})")

    def _new_records(self, direction: str, case: suite.Case, names, traffic_bytes: int) -> dict[str, Record]:
        liger = liger_provider.row_status(case.shape, self.settings.device, case.activation)
        return {name: Record(section=case.family, direction=direction, row=case.label, shape=case.shape_text,
                             groups=case.groups, dtype=suite.dtype_name(case.dtype),
                             memory_format=case.layout_name, activation=case.activation or "", provider=name,
                             traffic_bytes=traffic_bytes, liger=liger, about=case.about)
                for name in names}

    def _liger_fn(self, case: suite.Case, records: dict[str, Record]):
        """Liger's GroupNorm for this row, or None (its record then says why: not installed, n/a)."""
        record = records["liger"]
        if record.liger != "timed":
            record.note = record.liger
            return None
        return liger_provider.group_norm_function(case.groups, EPS)

    def _finish(self, records: dict[str, Record]) -> None:
        rows = list(records.values())
        fill_ratios(rows)
        self.records.extend(rows)

    def _skip(self, direction: str, case: suite.Case, reason: str) -> None:
        self.progress.step(reason)
        record = self._new_records(direction, case, ["ours"], 0)["ours"]
        record.note = _join(record.note, reason)
        self.records.append(record)

    def skip_row(self, case: suite.Case, directions, reason: str) -> None:
        """Record a row that is not run at all (e.g. past the suite's time limit)."""
        self.progress.start_row(case.label)
        for direction in directions:
            self._skip(direction, case, reason)

    def _random_inputs(self, case: suite.Case, requires_grad: bool = False):
        """x ~ U[0, 1) (as KernelBench draws) in the row's memory format, random affine weight and bias of the
        input's dtype."""
        device, dtype = self.settings.device, case.dtype
        channels = case.shape[1]
        x = torch.rand(case.shape, device=device, dtype=dtype).contiguous(memory_format=case.torch_memory_format)
        weight = (torch.rand(channels, device=device) + 0.5).to(dtype)
        bias = torch.randn(channels, device=device).to(dtype)
        for t in (x, weight, bias):
            t.requires_grad_(requires_grad)
        return x, weight, bias

    # ---- forward rows -------------------------------------------------------------------------------
    def forward_row(self, case: suite.Case) -> None:
        self.progress.start_row(case.label)
        fits, reason = self._fits(FORWARD_TENSORS * case.tensor_bytes + ROW_HEADROOM_BYTES)
        if not fits:
            self._skip("forward", case, reason)
            return
        x, weight, bias = self._random_inputs(case)
        providers = prov.forward_providers(x, weight, bias, case.groups, EPS, self.on_cuda and
                                           self.settings.with_compile, case.activation)
        records = self._new_records("forward", case, [p.name for p in providers] + ["liger", "copy"],
                                    2 * case.tensor_bytes)
        liger_fn = self._liger_fn(case, records)
        if liger_fn is not None:
            providers.append(prov.liger_forward_provider(liger_fn, x, weight, bias))
            records["liger"].note = liger_provider.layout_note(x)
        ours_out = None
        for provider in providers:  # correctness first; for torch.compile this is also its compilation
            record = records[provider.name]
            self.progress.step(f"checking {provider.name}" + (" (compiling)" if provider.name == "compile" else ""))
            try:
                _poison_next_output(x)
                out = provider.fn()
                agreement = correctness.check_against_float64(out, x, case.groups, weight, bias, EPS,
                                                              case.activation)
                record.max_abs_err = agreement.max_abs_err
                ok = agreement.ok
                if not ok:
                    record.note = _join(record.note, f"{agreement.bad_elements} of {agreement.compared} elements "
                                        "outside the float64 tolerance")
                if provider.name == "ours":
                    ours_out = out
                elif provider.name == "eager" and ours_out is not None:
                    versus = correctness.check_against(ours_out, out, case.dtype)
                    records["ours"].max_abs_diff_vs_eager = versus.max_abs_err
                    if not versus.ok and case.dtype in (torch.float16, torch.bfloat16):
                        # Both outputs carry one rounding to a half format (a bf16 step is 2^-7 relative), so
                        # two correct kernels can differ by more than 1e-2 at |y| > 1; the float64 check
                        # above decides, and the difference is kept in the record.
                        records["ours"].note = _join(records["ours"].note, "differs from eager by a half-precision "
                                                     "rounding step (float64 check decides)")
                    elif not versus.ok:
                        records["ours"].correct = "no"
                        records["ours"].note = _join(records["ours"].note, "outside allclose of eager")
                    ours_out = None  # compared with everything it is compared with: free it for compile's output
                record.correct = "yes" if ok and record.correct != "no" else "no"
                self.progress.step(f"{provider.name} max err {record.max_abs_err:.1e} against float64: "
                                   + ("ok" if record.correct == "yes" else "OUTSIDE THE TOLERANCE"))
                del out
            except Exception as error:  # noqa: BLE001
                record.correct = "no"
                record.note = _join(record.note, f"failed: {_short(error)}")
                self.progress.message(traceback.format_exc())
        del ours_out
        runnable = [p for p in providers if "failed:" not in records[p.name].note] + [prov.copy_provider(x)]
        self._time_all(records, runnable, working_set_bytes=2 * case.tensor_bytes)
        self._finish(records)

    # ---- training rows ------------------------------------------------------------------------------
    def training_row(self, case: suite.Case, directions=("fwd+bwd", "bwd")) -> None:
        """Forward + backward ("fwd+bwd") and/or the backward alone ("bwd") of one row."""
        self.progress.start_row(f"{'/'.join(directions)} {case.label}")
        fits, reason = self._fits(TRAINING_TENSORS * case.tensor_bytes + ROW_HEADROOM_BYTES)
        if not fits:
            for direction in directions:
                self._skip(direction, case, reason)
            return
        x, weight, bias = self._random_inputs(case, requires_grad=True)
        dy = torch.randn_like(x, requires_grad=False)  # same memory format as x
        with prov.retained_graph_compile_config():  # one compiled function for both directions
            with_compile = self.on_cuda and self.settings.with_compile
            compiled = prov.compiled_group_norm(case.groups, EPS) if with_compile else None
            for direction in directions:
                if direction == "bwd":
                    self.progress.step("backward alone")
                self._training_section(direction, direction == "bwd", case, x, weight, bias, dy, compiled)

    def _training_section(self, direction: str, backward_only: bool, case: suite.Case, x, weight, bias, dy,
                          compiled) -> None:
        traffic = prov.training_floor_bytes(x, backward_only)
        records = self._new_records(direction, case, ["ours", "eager"] + (["compile"] if compiled else [])
                                    + ["liger", "copy"], traffic)
        liger_fn = self._liger_fn(case, records)
        if liger_fn is not None:
            records["liger"].note = liger_provider.layout_note(x)
        try:
            providers = prov.training_providers(x, weight, bias, dy, case.groups, EPS, compiled, backward_only,
                                                liger_fn)
        except Exception as error:  # noqa: BLE001
            self._skip(direction, case, f"failed to set up: {_short(error)}")
            self.progress.message(traceback.format_exc())
            return
        for provider in providers:
            record = records[provider.name]
            self.progress.step(f"checking {provider.name} gradients")
            try:
                _poison_next_output(x)
                grads = provider.fn()[-3:]
                ok, dx_err, problem = correctness.check_gradients_against_float64(
                    grads, x, weight, bias, dy, case.groups, EPS)
                record.correct, record.max_abs_err = ("yes" if ok else "no"), dx_err
                record.note = _join(record.note, problem)
                self.progress.step(f"{provider.name} dx max err {dx_err:.1e} against float64: "
                                   + ("ok" if ok else "OUTSIDE THE TOLERANCE"))
                del grads
            except Exception as error:  # noqa: BLE001
                record.correct = "no"
                record.note = _join(record.note, f"failed: {_short(error)}")
                self.progress.message(traceback.format_exc())
        runnable = [p for p in providers if "failed:" not in records[p.name].note]
        runnable.append(prov.training_floor_provider(x, dy, backward_only))
        self._time_all(records, runnable, working_set_bytes=traffic)
        self._finish(records)

    # ---- level-2 problems ---------------------------------------------------------------------------
    def problem_row(self, key: str, model_kwargs: dict | None = None) -> None:
        """One level-2 problem; `model_kwargs` go to ModelNew only (a variant of ours, e.g. gemm="fp32")."""
        from groupnorm_inline import problems

        model_kwargs = model_kwargs or {}
        variant = ", ".join(f"{k}={v!r}" for k, v in model_kwargs.items())
        label = f"KernelBench {key}" + (f" [{variant}]" if variant else "")
        self.progress.start_row(label)
        try:
            info = problems.find(key)
        except KeyError:
            self.progress.step(f"skipped: problem {key} is not in groupnorm_inline.problems.PROBLEMS yet")
            return
        label = f"{suite.problem_label(key)} {info.file_name.split('_', 1)[-1]}"  # "L2 #94 Gemm_BiasAdd_..."
        if variant:
            label += f" [{variant}]"
        if not self.on_cuda:
            self.progress.step("skipped: problem rows run at the real shapes, on a GPU only")
            return
        try:
            module = problems.import_problem(key)
        except ImportError as error:
            self.progress.step(f"skipped: cannot import its module ({_short(error)})")
            return
        try:
            self._problem_row(module, label, info.summary, model_kwargs)
        except Exception as error:  # noqa: BLE001
            self.progress.message(traceback.format_exc())
            record = Record(section="problem", direction="forward", row=label, shape="", groups=0, dtype="fp32",
                            provider="ours", note=f"failed: {_short(error)}")
            self.records.append(record)

    def _problem_row(self, module, label: str, about: str = "", model_kwargs: dict | None = None) -> None:
        """ModelNew vs Model vs torch.compile(Model), built and fed as the KernelBench harness does."""
        device = self.settings.device
        torch.manual_seed(42)
        init = module.get_init_inputs()
        models = {}
        for name, cls, kwargs in (("eager", module.Model, {}), ("ours", module.ModelNew, model_kwargs or {})):
            torch.manual_seed(42)  # set_seed(42) before each construction, on the CPU
            models[name] = cls(*init, **kwargs).to(device=device, dtype=torch.float32)
        torch.manual_seed(42)
        inputs = [t.to(device) if isinstance(t, torch.Tensor) else t for t in module.get_inputs()]
        x = next(t for t in inputs if isinstance(t, torch.Tensor))
        groups = next((getattr(module, n) for n in ("num_groups", "groups") if hasattr(module, n)), 0)
        records = {name: Record(section="problem", direction="forward", row=label, shape="x".join(map(str, x.shape)),
                                groups=groups, dtype="fp32", memory_format="contiguous", provider=name,
                                liger="n/a: a whole KernelBench model", about=about)
                   for name in ("ours", "eager", "compile")}
        with torch.no_grad():
            self.progress.step("checking ModelNew against Model and a float64 Model")
            ref = models["eager"](*inputs)
            out = models["ours"](*inputs)
            model64 = copy.deepcopy(models["eager"]).to(torch.float64)
            ref64 = model64(*[t.to(torch.float64) if isinstance(t, torch.Tensor) else t for t in inputs])
            del model64
            margin = correctness.kernelbench_margin(out, ref)
            margin64 = correctness.kernelbench_margin(out, ref64)
            ours = records["ours"]
            ours.kb_margin, ours.correct = margin, "yes" if margin <= 1.0 else "no"
            ours.max_abs_err = (out.double() - ref64).abs().max().item() if out.shape == ref64.shape else math.inf
            ours.max_abs_diff_vs_eager = (out - ref).abs().max().item() if out.shape == ref.shape else math.inf
            ours.note = f"KernelBench margin vs eager {margin:.3g}, vs float64 {margin64:.3g} (passes at <= 1)"
            records["eager"].max_abs_err = (ref.double() - ref64).abs().max().item()
            output_bytes = out.numel() * out.element_size()
            del out, ref, ref64
            runnable = [prov.Provider("ours", lambda: models["ours"](*inputs), output_bytes),
                        prov.Provider("eager", lambda: models["eager"](*inputs), output_bytes)]
            if self.settings.with_compile:
                self.progress.step("compiling Model")
                compiled = prov.fresh_compile(models["eager"])
                runnable.append(prov.Provider("compile", lambda: compiled(*inputs), output_bytes))
            else:
                del records["compile"]
            # KernelBench flushes L2 before every call of a problem, whatever its size: do the same.
            self._time_all(records, runnable, working_set_bytes=0, always_flush=True)
        self._finish(records)


def _poison_next_output(like: torch.Tensor) -> None:
    """Fill a block of the output's size with NaN and free it, just before a provider's checked call: the caching
    allocator hands that block to the next allocation of the same size, so a provider that leaves (part of) its
    output unwritten shows NaN there instead of a previous provider's correct values."""
    block = torch.empty_like(like, requires_grad=False)
    block.fill_(math.nan)
    del block


def _short(error: BaseException) -> str:
    text = f"{type(error).__name__}: {error}".splitlines()[0]
    return text if len(text) <= 160 else text[:157] + "..."


def _join(*parts: str) -> str:
    return "; ".join(p for p in parts if p)


__all__ = ["EPS", "Settings", "SuiteRunner", "describe_run", "has_autograd"]
