"""How the batched trainer computes: k models' parameters stacked, and their per-example gradients.

Two ways, both exact: :class:`StackedModels` calls the model functionally under ``torch.func.vmap`` (any
architecture), and :class:`LayeredModels` runs stacks of ``Linear``/``Conv2d`` layers as batched matrix
products, forming each example's gradient from its layer's input and output gradient (the zoo's
models, faster). Kept apart from :mod:`dpaudit.batched`, which plans, samples, clips and noises.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence

import torch
from torch import nn
from torch.func import functional_call, stack_module_state
from torch.nn import functional as F

from dpaudit import _validate as v

__all__ = ["LayeredModels", "StackedModels", "expand_tail"]


class StackedModels:
    """k models of one architecture as stacked parameter tensors and one stateless copy to call."""

    def __init__(self, models: Sequence[nn.Module], device: torch.device) -> None:
        self.base = copy.deepcopy(models[0]).to("meta")
        params, buffers = stack_module_state(list(models))
        trainable = {n for n, p in models[0].named_parameters() if p.requires_grad}
        self.names = [n for n, _ in models[0].named_parameters() if n in trainable]
        self.params = {n: params[n].detach().to(device) for n in self.names}
        # Frozen parameters travel with the buffers: called, never stepped.
        self.fixed = {n: t.detach().to(device) for n, t in {**params, **buffers}.items() if n not in trainable}
        self.layered = LayeredModels.build(models[0])

    def logits(self, params: Mapping[str, torch.Tensor], fixed: Mapping[str, torch.Tensor], x: torch.Tensor):
        return functional_call(self.base, {**params, **fixed}, (x,))

    def unstack(self, template: nn.Module) -> list[nn.Module]:
        out = []
        k = next(iter(self.params.values())).shape[0]
        for j in range(k):
            model = copy.deepcopy(template)
            state = {n: t[j].detach().clone() for n, t in {**self.params, **self.fixed}.items()}
            model.load_state_dict(state, strict=True)
            out.append(model.eval())
        return out


# Parameter-free modules that act on each example alone: applied to all k·b examples at once.
_PER_EXAMPLE = (nn.Tanh, nn.ReLU, nn.Sigmoid, nn.MaxPool2d, nn.AvgPool2d, nn.Flatten, nn.Identity)


class LayeredModels:
    """The fast path for a Sequential of Linear, Conv2d and parameter-free per-example modules.

    Forward passes run on (k, b, ...) tensors with batched matrix products (a convolution as
    an unfold and one product per model); one backward pass gives each layer's output gradient
    per example, from which each example's gradient is formed exactly: a Linear layer's is
    g aᵀ, whose norm is ‖g‖·‖a‖ (never materialised; Goodfellow 2015), a convolution's is
    G Uᵀ with U the unfolded input. :func:`torch.func.vmap` of per-example gradients computes
    the same numbers, several times slower on a CPU for convolutions.
    """

    def __init__(self, layers: list[tuple[str, str, nn.Module]]) -> None:
        self.layers = layers

    @staticmethod
    def build(model: nn.Module) -> LayeredModels | None:
        """The plan of ``model``'s layers, or ``None`` when it is not such a Sequential."""
        if not isinstance(model, nn.Sequential) or any(True for _ in model.buffers()):
            return None
        layers: list[tuple[str, str, nn.Module]] = []
        for name, module in model.named_children():
            if isinstance(module, nn.Linear):
                layers.append(("linear", name, module))
            elif (
                isinstance(module, nn.Conv2d)
                and module.groups == 1
                and module.padding_mode == "zeros"
                and not isinstance(module.padding, str)
            ):
                layers.append(("conv", name, module))
            elif type(module) in _PER_EXAMPLE:
                layers.append(("fn", name, module))
            else:
                return None
        if not all(p.requires_grad for p in model.parameters()):
            return None
        return LayeredModels(layers)

    def sums(
        self,
        params: Mapping[str, torch.Tensor],
        x: torch.Tensor,
        y: torch.Tensor,
        weights: torch.Tensor,
        *,
        clip_norm: float | None,
    ) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """Σ_i f_i · g_i per model, with f_i = weights · C / max(‖g_i‖, C) (or ``weights`` without C).

        Args:
            params: stacked parameters (k, ...).
            x: (k, b, ...) inputs; y: (k, b) labels; weights: (k, b) (0 for padding).
            clip_norm: C, or ``None`` for plain weighted sums (no clipping; non-private training
                takes the vmap path instead, which is faster without per-example norms).

        Returns:
            ({parameter name: (k, ...) sum}, (k,) Σ weights>0 · loss per model).
        """
        k, b = x.shape[:2]
        h = x
        saved: list[tuple[str, str, nn.Module, torch.Tensor, torch.Tensor, tuple[int, ...]]] = []
        for kind, name, module in self.layers:
            if kind == "fn":
                out = module(h.flatten(0, 1))
                h = out.view(k, b, *out.shape[1:])
                continue
            weight = params[f"{name}.weight"]
            bias = params.get(f"{name}.bias")
            if kind == "linear":
                if h.dim() != 3:
                    raise v.invalid(
                        "model",
                        f"layer {name} gets inputs of shape {tuple(h.shape[2:])}; batched training needs flat ones",
                    )
                a = h
                z = torch.matmul(a, weight.transpose(1, 2))
                if bias is not None:
                    z = z + bias[:, None, :]
                shape: tuple[int, ...] = tuple(z.shape[2:])
            else:
                conv = module
                assert isinstance(conv, nn.Conv2d)
                padding = conv.padding
                assert not isinstance(padding, str)  # LayeredModels.build takes numeric padding only
                hh_out, ww_out = (
                    (size + 2 * padding[i] - conv.dilation[i] * (conv.kernel_size[i] - 1) - 1) // conv.stride[i] + 1
                    for i, size in enumerate(h.shape[-2:])
                )
                a = F.unfold(
                    h.flatten(0, 1), conv.kernel_size, dilation=conv.dilation, padding=padding, stride=conv.stride
                ).view(k, b, -1, hh_out * ww_out)
                z = torch.matmul(weight.reshape(k, 1, weight.shape[1], -1), a)
                if bias is not None:
                    z = z + bias[:, None, :, None]
                shape = (weight.shape[1], hh_out, ww_out)
            if not z.requires_grad:  # the first layer: a leaf, so the backward pass stops there
                z.requires_grad_(True)
            # The sums below are formed from the inputs' values; a kept with its graph would chain
            # every step's forward pass into the updated parameters (hundreds of MB a step).
            saved.append((kind, name, module, a.detach(), z, shape))
            h = z.view(k, b, *shape)
        losses = F.cross_entropy(h.flatten(0, 1), y.flatten(), reduction="none").view(k, b)
        live = weights > 0
        outs = torch.autograd.grad((losses * live).sum(), [s[4] for s in saved])
        sq = torch.zeros(k, b, device=x.device, dtype=x.dtype)
        per_layer: list[tuple[str, str, nn.Module, torch.Tensor, torch.Tensor, torch.Tensor | None]] = []
        for (kind, name, module, a, _z, _shape), g in zip(saved, outs):
            if kind == "linear":
                if clip_norm is not None:
                    sq += g.pow(2).sum(-1) * (a.pow(2).sum(-1) + (1.0 if module.bias is not None else 0.0))
                per_layer.append((kind, name, module, a, g, None))
            elif clip_norm is None:  # no norms needed: the weighted sum below is one product per model
                per_layer.append((kind, name, module, a, g, None))
            else:
                full = torch.matmul(g, a.transpose(-1, -2))  # (k, b, C_out, C_in·kh·kw): each example's gradient
                sq += full.pow(2).sum((-1, -2))
                if module.bias is not None:
                    sq += g.sum(-1).pow(2).sum(-1)
                per_layer.append((kind, name, module, a, g, full))
        if clip_norm is None:
            factors = weights
        else:
            factors = weights * clip_norm / sq.sqrt().clamp_min(clip_norm)
        grads: dict[str, torch.Tensor] = {}
        for kind, name, module, a, g, each in per_layer:
            fg = g * expand_tail(factors, g)
            if kind == "linear":
                grads[f"{name}.weight"] = torch.matmul(fg.transpose(1, 2), a)
                if module.bias is not None:
                    grads[f"{name}.bias"] = fg.sum(1)
            else:
                summed = (
                    torch.einsum("kbol,kbil->koi", fg, a)
                    if each is None
                    else torch.einsum("kb,kbij->kij", factors, each)
                )
                grads[f"{name}.weight"] = summed.reshape(params[f"{name}.weight"].shape)
                if module.bias is not None:
                    grads[f"{name}.bias"] = fg.sum((1, 3))
        return grads, (losses.detach() * live).sum(1)


def expand_tail(factors: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return factors.reshape(*factors.shape, *([1] * (like.dim() - 2)))
