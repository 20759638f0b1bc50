"""Per-example gradient clipping without per-example gradients of the whole model.

DP-SGD (Abadi et al. 2016, Algorithm 1, "Clip gradient") needs, for every lot, the sum of the
per-example gradients each rescaled to L2 norm at most C: Σ_i g_i · min(1, C / ‖g_i‖). This module
computes it from one forward and one activation-only backward pass ("ghost clipping": Bu et al.
2022, §3; Goodfellow 2015; Li et al. 2022, §4), materialising at most one layer's per-example
gradient, with ``method="vmap"`` (``torch.func``) for models the hooks cannot follow; per-layer
clipping (Abadi et al. 2016, §3.1; McMahan et al. 2018, §3) clips each module to C_l, for an L2
sensitivity √(Σ_l C_l²). The norm identities, the cost of each layer type and when each path is
taken are on the docs page "DP-SGD", section "Per-example clipping" (``docs/defenses/dpsgd.md``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from defenses.dpsgd.config import CLIPPING_METHODS
from dpaudit import _validate as v

__all__ = ["CLIPPING_METHODS", "ClippedSum", "GradientClipper", "clip_gradient", "per_example_loss"]

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def per_example_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of each example, shape (B,): the loss DP-SGD clips the gradient of."""
    return F.cross_entropy(logits, targets, reduction="none")


@dataclass(frozen=True, kw_only=True, eq=False)
class ClippedSum:
    """The clipped per-example gradient sum of one batch.

    Attributes:
        grads: parameter name → Σ_i clip(g_i) (same shapes as the parameters).
        norms: (B,) per-example gradient L2 norms before clipping (whole model).
        loss_sum: Σ_i ℓ_i over the batch (for logging only; not private).
        batch_size: B.
    """

    grads: dict[str, torch.Tensor]
    norms: torch.Tensor
    loss_sum: float
    batch_size: int


class _Layer:
    """Book-keeping for one parameterised module: what its hooks saw this batch."""

    __slots__ = ("name", "module", "kind", "params", "inputs", "outputs", "versions")

    def __init__(self, name: str, module: nn.Module, kind: str, params: dict[str, nn.Parameter]) -> None:
        self.name = name
        self.module = module
        self.kind = kind  # "linear" | "conv2d" | "generic"
        self.params = params  # local name ("weight") → parameter
        self.inputs: list[tuple] = []
        self.outputs: list[torch.Tensor] = []
        self.versions: list[int] = []

    def clear(self) -> None:
        self.inputs, self.outputs, self.versions = [], [], []


def _trainable_direct(module: nn.Module) -> dict[str, nn.Parameter]:
    return {n: p for n, p in module.named_parameters(recurse=False) if p.requires_grad}


class GradientClipper:
    """Computes Σ_i clip(∇ℓ_i) for batches through ``model`` (see the module docstring).

    Args:
        model: the network; its trainable parameters are what is clipped.
        clip_norm: C, the L2 bound of each example's whole gradient (flat clipping), or the
            total bound √(Σ_l C_l²) split equally over layers when ``per_layer`` is set.
        per_layer: clip each layer (module) separately to C_l.
        layer_clip_norms: explicit C_l, one per layer in :attr:`layer_names` order (implies
            per-layer clipping; ``clip_norm`` must then equal √(Σ_l C_l²)).
        method: ``hooks`` (book-keeping, default), ``vmap`` (whole-model ``torch.func``
            per-example gradients) or ``auto`` (= ``hooks``).
        loss_fn: per-example loss ``(logits, targets) -> (B,)``; cross-entropy by default.

    A *layer* (the unit of per-layer clipping) is one module with its own trainable
    parameters: a Linear's weight and bias are clipped together.

    The clipper registers forward hooks on ``model``; call :meth:`close` (or use it as a
    context manager) to remove them.

    Raises:
        ValueError: bad arguments, a model without trainable parameters, or BatchNorm.
    """

    def __init__(
        self,
        model: nn.Module,
        *,
        clip_norm: float,
        per_layer: bool = False,
        layer_clip_norms: Sequence[float] | None = None,
        method: str = "auto",
        loss_fn: LossFn = per_example_loss,
    ) -> None:
        if not isinstance(model, nn.Module):
            raise v.invalid_type("model", f"model must be a torch.nn.Module, got {type(model).__name__}")
        self.model = model
        self.clip_norm = v.positive("clip_norm", clip_norm)
        self.method = "hooks" if v.choice("method", method, CLIPPING_METHODS) == "auto" else method
        self.loss_fn = loss_fn
        mixing = [n for n, m in model.named_modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
        if mixing:
            raise v.invalid(
                "model",
                f"model contains BatchNorm ({', '.join(mixing)}), which mixes the "
                "examples of a batch: per-example gradients and their clipping are then "
                "undefined; use GroupNorm / LayerNorm instead",
            )
        self.layers: list[_Layer] = []
        for name, module in model.named_modules():
            params = _trainable_direct(module)
            if not params:
                continue
            if type(module) is nn.Linear:
                kind = "linear"
            elif type(module) is nn.Conv2d:
                kind = "conv2d"
            else:
                kind = "generic"
            self.layers.append(_Layer(name, module, kind, params))
        if not self.layers:
            raise v.invalid("model", "model has no trainable parameters to clip")
        if layer_clip_norms is not None:
            norms = tuple(v.positive("layer_clip_norms", c) for c in layer_clip_norms)
            if len(norms) != len(self.layers):
                raise v.invalid(
                    "layer_clip_norms",
                    f"layer_clip_norms must have one entry per layer ({len(self.layers)}: "
                    f"{self.layer_names}), got {len(norms)}",
                )
            total = math.sqrt(sum(c * c for c in norms))
            if not math.isclose(total, self.clip_norm, rel_tol=1e-6):
                raise v.invalid(
                    "clip_norm", f"clip_norm must equal sqrt(sum(layer_clip_norms**2)) = {total:g}, got {clip_norm!r}"
                )
            self.layer_clip_norms: tuple[float, ...] | None = norms
        elif per_layer:
            self.layer_clip_norms = (self.clip_norm / math.sqrt(len(self.layers)),) * len(self.layers)
        else:
            self.layer_clip_norms = None
        self._capturing = False
        self._handles = []
        if self.method == "hooks":
            for layer in self.layers:
                self._handles.append(layer.module.register_forward_hook(self._make_hook(layer)))

    # ------------------------------------------------------------------ public
    @property
    def layer_names(self) -> list[str]:
        """Module names of the clipped layers (the groups of per-layer clipping)."""
        return [layer.name or "<root>" for layer in self.layers]

    @property
    def sensitivity(self) -> float:
        """L2 sensitivity of the clipped sum to adding or removing one example."""
        if self.layer_clip_norms is None:
            return self.clip_norm
        return math.sqrt(sum(c * c for c in self.layer_clip_norms))

    def parameters(self) -> dict[str, nn.Parameter]:
        """Full parameter name → parameter, for every clipped parameter."""
        return {self._full(layer, n): p for layer in self.layers for n, p in layer.params.items()}

    def clipped_sum(self, inputs: torch.Tensor, targets: torch.Tensor, *, scale: float = 1.0) -> ClippedSum:
        """``scale`` · Σ_i clip(∇_θ ℓ(model(x_i), y_i)) over the batch, and the pre-clipping norms.

        Args:
            inputs: (B, …) batch.
            targets: (B,) targets for ``loss_fn``.
            scale: a constant folded into the clipping factors (e.g. 1 / expected lot size),
                which saves a pass over every gradient tensor.

        Returns:
            A :class:`ClippedSum`; an empty batch gives zero gradients.
        """
        if inputs.shape[0] != targets.shape[0]:
            raise v.invalid(
                "inputs",
                f"inputs and targets must have the same batch size, got {inputs.shape[0]} and {targets.shape[0]}",
            )
        if inputs.shape[0] == 0:
            zeros = {n: torch.zeros_like(p) for n, p in self.parameters().items()}
            return ClippedSum(grads=zeros, norms=torch.zeros(0, device=inputs.device), loss_sum=0.0, batch_size=0)
        scale = v.real("scale", scale)
        if self.method == "vmap":
            return self._vmap_sum(inputs, targets, scale)
        return self._hooks_sum(inputs, targets, scale)

    def close(self) -> None:
        """Removes the hooks from the model."""
        for h in self._handles:
            h.remove()
        self._handles = []

    def __enter__(self) -> GradientClipper:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ factors
    def _factors(self, sq_norms: list[torch.Tensor], scale: float) -> tuple[list[torch.Tensor], torch.Tensor]:
        """Clipping factors per layer (B,) from per-layer squared norms (times ``scale``), and total norms."""
        total = torch.stack(sq_norms).sum(0).clamp_min(0).sqrt()
        if self.layer_clip_norms is None:
            w = (scale * self.clip_norm) / total.clamp_min(self.clip_norm)
            return [w] * len(sq_norms), total
        return [
            (scale * c) / n.clamp_min(0).sqrt().clamp_min(c) for c, n in zip(self.layer_clip_norms, sq_norms)
        ], total

    @staticmethod
    def _full(layer: _Layer, local: str) -> str:
        return f"{layer.name}.{local}" if layer.name else local

    # ------------------------------------------------------------------ hooks path
    def _make_hook(self, layer: _Layer) -> Callable[..., None]:
        def hook(module: nn.Module, args: tuple, output: torch.Tensor) -> None:
            if not self._capturing:
                return
            if not isinstance(output, torch.Tensor):
                raise v.invalid_type(
                    "model", f"layer {layer.name!r} returns {type(output).__name__}; use method='vmap' for such models"
                )
            layer.inputs.append(tuple(a.detach() if isinstance(a, torch.Tensor) else a for a in args))
            layer.outputs.append(output)
            layer.versions.append(output._version)

        return hook

    def _hooks_sum(self, inputs: torch.Tensor, targets: torch.Tensor, scale: float) -> ClippedSum:
        for layer in self.layers:
            layer.clear()
        self._capturing = True
        try:
            with torch.enable_grad():
                losses = self.loss_fn(self.model(inputs), targets)
        finally:
            self._capturing = False
        try:
            return self._book_keeping(inputs.shape[0], losses, scale)
        finally:
            for layer in self.layers:
                layer.clear()

    def _book_keeping(self, batch: int, losses: torch.Tensor, scale: float) -> ClippedSum:
        if losses.shape != (batch,):
            raise ValueError(f"loss_fn must return one loss per example, shape ({batch},), got {tuple(losses.shape)}")
        outputs: list[torch.Tensor] = []
        for layer in self.layers:
            if not layer.outputs:
                raise RuntimeError(
                    f"layer {layer.name!r} has trainable parameters but its forward never "
                    "ran; its parameters may be used outside its forward (use "
                    "method='vmap')"
                )
            for output, ver in zip(layer.outputs, layer.versions):
                if output._version != ver:
                    raise RuntimeError(
                        f"the output of layer {layer.name!r} was modified in place (e.g. "
                        "ReLU(inplace=True)); per-example gradients would be wrong — avoid "
                        "in-place ops after it or use method='vmap'"
                    )
                outputs.append(output)
        grads_out = torch.autograd.grad(losses.sum(), outputs, allow_unused=True)
        k = 0
        prepared: list[tuple[_Layer, dict]] = []
        sq_norms: list[torch.Tensor] = []
        for layer in self.layers:
            n = len(layer.outputs)
            gs = [g if g is not None else torch.zeros_like(o) for g, o in zip(grads_out[k : k + n], layer.outputs)]
            k += n
            state, sq = self._layer_norms(layer, gs, batch)
            prepared.append((layer, state))
            sq_norms.append(sq)
        factors, total = self._factors(sq_norms, scale)
        out: dict[str, torch.Tensor] = {}
        for (layer, state), w in zip(prepared, factors):
            for local, grad in self._layer_sum(layer, state, w).items():
                out[self._full(layer, local)] = grad
        return ClippedSum(grads=out, norms=total.detach(), loss_sum=float(losses.detach().sum()), batch_size=batch)

    # Per-layer state, consumed by _layer_sum once the clipping factors are known:
    #   weight: ("lowrank", a (B,T,d), g (B,T,p)) — the clipped sum is one matmul Σ_i w_i g_iᵀ a_i;
    #           ("dense", (B, *weight.shape)) — this layer's per-example gradients, summed with w;
    #           None when the layer has no trainable weight.
    #   bias:   (B, p) per-example bias gradients, or None.
    #   generic: {local name: (B, *shape)} per-example gradients (torch.func path).
    def _layer_norms(self, layer: _Layer, gs: list[torch.Tensor], batch: int) -> tuple[dict, torch.Tensor]:
        if layer.kind == "generic":
            return self._generic_norms(layer, gs, batch)
        xs = [args[0] for args in layer.inputs]
        has_w, has_b = "weight" in layer.params, "bias" in layer.params
        if layer.kind == "linear":
            a = _cat([x.reshape(batch, -1, x.shape[-1]) for x in xs])
            g = _cat([gi.reshape(batch, -1, gi.shape[-1]) for gi in gs])
            t, d, p = a.shape[1], a.shape[2], g.shape[2]
            if t == 1:
                a, g = a[:, 0], g[:, 0]
                g_sq = _sq_norms(g)
                sq = g_sq * _sq_norms(a) if has_w else torch.zeros_like(g_sq)
                if has_b:
                    sq = sq + g_sq
                return {"weight": ("lowrank", a, g) if has_w else None, "bias": g if has_b else None}, sq
            bias = g.sum(1) if has_b else None
            weight: tuple[str, torch.Tensor] | tuple[str, torch.Tensor, torch.Tensor] | None = None
            sq = _sq_norms(bias) if bias is not None else a.new_zeros(batch)
            if has_w:
                if _use_gram(t, d, p):
                    # Gram identity: never forms the (B, p, d) per-example gradient.
                    sq = sq + (torch.bmm(a, a.transpose(1, 2)) * torch.bmm(g, g.transpose(1, 2))).sum((1, 2))
                    weight = ("lowrank", a, g)
                else:  # this layer's per-example gradient is cheaper than the Gram matrices
                    per_ex = torch.bmm(g.transpose(1, 2), a)
                    sq = sq + _sq_norms(per_ex)
                    weight = ("dense", per_ex)
            return {"weight": weight, "bias": bias}, sq
        # Conv2d
        conv = layer.module
        assert isinstance(conv, nn.Conv2d)  # the kinds are linear, generic and conv2d
        bias = _add_up([gi.sum((2, 3)) for gi in gs]) if has_b else None
        sq = _sq_norms(bias) if bias is not None else gs[0].new_zeros(batch)
        weight = None
        if has_w:
            positions = sum(gi.shape[2] * gi.shape[3] for gi in gs)
            d = conv.weight[0].numel()
            if conv.groups == 1 and _use_gram(positions, d, conv.out_channels):
                cols = _cat([_unfold(conv, x).transpose(1, 2) for x in xs])  # (B, T, d)
                g = _cat([gi.reshape(batch, gi.shape[1], -1).transpose(1, 2) for gi in gs])  # (B, T, p)
                sq = sq + (torch.bmm(cols, cols.transpose(1, 2)) * torch.bmm(g, g.transpose(1, 2))).sum((1, 2))
                weight = ("lowrank", cols, g)
            else:
                per_ex = _add_up([_conv_per_example_weight_grad(conv, x, gi) for x, gi in zip(xs, gs)])
                sq = sq + _sq_norms(per_ex)
                weight = ("dense", per_ex)
        return {"weight": weight, "bias": bias}, sq

    def _generic_norms(self, layer: _Layer, gs: list[torch.Tensor], batch: int) -> tuple[dict, torch.Tensor]:
        from torch.func import functional_call, grad, vmap

        module = layer.module
        names = list(layer.params)
        params = {n: p.detach() for n, p in layer.params.items()}
        total: dict[str, torch.Tensor] | None = None
        for args, g in zip(layer.inputs, gs):
            batched = tuple(0 if isinstance(x, torch.Tensor) else None for x in args)

            def inner(prm: dict[str, torch.Tensor], gi: torch.Tensor, *xs: object) -> torch.Tensor:
                one = tuple(x.unsqueeze(0) if isinstance(x, torch.Tensor) else x for x in xs)
                return (functional_call(module, prm, one) * gi.unsqueeze(0)).sum()

            per_ex = vmap(grad(inner), in_dims=(None, 0, *batched))(params, g.detach(), *args)
            total = per_ex if total is None else {n: total[n] + per_ex[n] for n in names}
        assert total is not None
        sq = _add_up([_sq_norms(t) for t in total.values()])
        return {"generic": total}, sq

    def _layer_sum(self, layer: _Layer, state: dict, w: torch.Tensor) -> dict[str, torch.Tensor]:
        if "generic" in state:
            return {n: _weighted_sum(w, t) for n, t in state["generic"].items()}
        out: dict[str, torch.Tensor] = {}
        weight = state["weight"]
        if weight is not None:
            shape = layer.params["weight"].shape
            if weight[0] == "dense":
                out["weight"] = _weighted_sum(w, weight[1])
            else:
                _, a, g = weight  # a (B, [T,] d), g (B, [T,] p): Σ_i w_i g_iᵀ a_i as one matmul
                small_a = a.shape[-1] <= g.shape[-1]
                a_w = a * w.view(-1, *([1] * (a.dim() - 1))) if small_a else a
                g_w = g if small_a else g * w.view(-1, *([1] * (g.dim() - 1)))
                out["weight"] = (g_w.reshape(-1, g.shape[-1]).T @ a_w.reshape(-1, a.shape[-1])).reshape(shape)
        if state["bias"] is not None:
            out["bias"] = w @ state["bias"]
        return out

    # ------------------------------------------------------------------ vmap path
    def _vmap_sum(self, inputs: torch.Tensor, targets: torch.Tensor, scale: float) -> ClippedSum:
        from torch.func import functional_call, grad_and_value, vmap

        model = self.model
        params = {n: p.detach() for n, p in self.parameters().items()}
        buffers = dict(model.named_buffers())

        def loss_one(prm: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            out = functional_call(model, {**buffers, **prm}, (x.unsqueeze(0),))
            return self.loss_fn(out, y.unsqueeze(0)).sum()

        per_ex, losses = vmap(grad_and_value(loss_one), in_dims=(None, 0, 0))(params, inputs, targets)
        batch = inputs.shape[0]
        sq_norms = []
        for layer in self.layers:
            sq_norms.append(sum(per_ex[self._full(layer, n)].reshape(batch, -1).pow(2).sum(1) for n in layer.params))
        factors, total = self._factors(sq_norms, scale)
        out = {}
        for layer, w in zip(self.layers, factors):
            for n in layer.params:
                full = self._full(layer, n)
                out[full] = _weighted_sum(w, per_ex[full])
        return ClippedSum(grads=out, norms=total.detach(), loss_sum=float(losses.sum()), batch_size=batch)


def _use_gram(t: int, d: int, p: int) -> bool:
    """Whether the Gram identity (B·T²·(d+p)) is cheaper than materialising (B·T·d·p)."""
    return t * (d + p) < d * p


def _cat(parts: list[torch.Tensor]) -> torch.Tensor:
    # Repeated calls of one module add up: their positions are concatenated.
    return parts[0] if len(parts) == 1 else torch.cat(parts, 1)


def _add_up(parts: list[torch.Tensor]) -> torch.Tensor:
    # Not builtins.sum: its leading 0 + tensor would copy the first (possibly large) part.
    out = parts[0]
    for t in parts[1:]:
        out = out + t
    return out


def _sq_norms(t: torch.Tensor) -> torch.Tensor:
    """Squared L2 norm of each example's slice of ``t`` (B, …) — one fused reduction."""
    return torch.linalg.vector_norm(t.reshape(t.shape[0], -1), dim=1).square()


def _weighted_sum(w: torch.Tensor, per_example: torch.Tensor) -> torch.Tensor:
    """Σ_i w_i · per_example[i] as one matrix-vector product."""
    return (w @ per_example.reshape(per_example.shape[0], -1)).reshape(per_example.shape[1:])


def _padded(conv: nn.Conv2d, x: torch.Tensor) -> tuple[torch.Tensor, tuple[int, ...] | int]:
    """The input with the conv's padding applied where it is not plain zero padding."""
    if isinstance(conv.padding, str) or conv.padding_mode != "zeros":
        mode = "constant" if conv.padding_mode == "zeros" else conv.padding_mode
        return F.pad(x, conv._reversed_padding_repeated_twice, mode=mode), (0, 0)
    return x, conv.padding


_PLACEHOLDERS: dict[tuple, torch.Tensor] = {}


def _placeholder(shape: tuple[int, ...], like: torch.Tensor) -> torch.Tensor:
    """An uninitialised dense tensor of ``shape``, reused between calls (never written or read)."""
    key = (shape, like.device, like.dtype)
    t = _PLACEHOLDERS.get(key)
    if t is None:
        if len(_PLACEHOLDERS) > 16:
            _PLACEHOLDERS.clear()
        t = _PLACEHOLDERS[key] = torch.empty(shape, device=like.device, dtype=like.dtype)
    return t


def _unfold(conv: nn.Conv2d, x: torch.Tensor) -> torch.Tensor:
    """Input patches (B, C_in·k·k, T) of an ungrouped Conv2d seen as a Linear on T positions."""
    x, padding = _padded(conv, x)
    return F.unfold(x, conv.kernel_size, dilation=conv.dilation, padding=padding, stride=conv.stride)


def _conv_per_example_weight_grad(conv: nn.Conv2d, x: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """(B, *weight.shape) per-example weight gradients of one Conv2d layer.

    Folding the batch into the channel axis turns B per-example weight gradients into the
    weight gradient of one convolution with B·groups groups (Rochette, Manoel & Tramel 2019,
    "Efficient Per-Example Gradient Computations in Convolutional Neural Networks"), so the
    backend's convolution kernel does the work instead of an im2col + batched matmul.
    """
    x, padding = _padded(conv, x)
    batch, c_in = x.shape[0], x.shape[1]
    c_out = g.shape[1]
    # Only the weight's shape is read, but it must be a dense tensor: a zero-stride expanded
    # placeholder sent oneDNN down a path ~80x slower with 2 threads (torch 2.15, CPU).
    shape_only = _placeholder((batch * c_out, *conv.weight.shape[1:]), g)
    _, grad_w, _ = torch.ops.aten.convolution_backward(
        g.reshape(1, batch * c_out, *g.shape[2:]),
        x.reshape(1, batch * c_in, *x.shape[2:]),
        shape_only,
        None,
        list(conv.stride),
        list(padding) if isinstance(padding, tuple) else [padding, padding],
        list(conv.dilation),
        False,
        [0, 0],
        batch * conv.groups,
        [False, True, False],
    )
    return grad_w.reshape(batch, *conv.weight.shape)


def clip_gradient(
    grads: dict[str, torch.Tensor],
    *,
    clip_norm: float,
    layer_groups: Sequence[Sequence[str]] | None = None,
    layer_clip_norms: Sequence[float] | None = None,
) -> dict[str, torch.Tensor]:
    """Clips one gradient (e.g. an audit's gradient canary) the way an example's is clipped.

    Args:
        grads: parameter name → gradient.
        clip_norm: C for flat clipping.
        layer_groups: parameter names of each layer, for per-layer clipping.
        layer_clip_norms: C_l per group (with ``layer_groups``).

    Returns:
        A new dict with the clipped gradient.
    """
    if layer_groups is None or layer_clip_norms is None:
        norm = torch.sqrt(torch.as_tensor(sum(t.double().pow(2).sum() for t in grads.values())))
        w = float(clip_norm / max(float(norm), clip_norm))
        return {n: t * w for n, t in grads.items()}
    out: dict[str, torch.Tensor] = {}
    for names, c in zip(layer_groups, layer_clip_norms):
        norm = torch.sqrt(torch.as_tensor(sum(grads[n].double().pow(2).sum() for n in names if n in grads)))
        w = float(c / max(float(norm), c))
        out.update({n: grads[n] * w for n in names if n in grads})
    return out
