"""The held-out set's factory models (HELDOUT.md): adapters that make torchvision's video
and segmentation networks, and a DDPM-shaped diffusion U-Net written here (no diffusers),
into what a factory workload takes (NOTE [workloads]): a module fed one 4-D batch
(``--input image:C,H,W[:CLASSES]``) that returns one tensor of logits, (N, CLASSES).

Used as ``--model experiments.tensor_plans.models:NAME`` from the repository's root (the
root on ``sys.path``: ``python -m vdnnsim`` there, or ``PYTHONPATH`` naming it;
``experiments/`` is a namespace package). Every factory builds random weights and asks for
no download (torchvision's segmentation builders default to an ImageNet backbone:
``weights_backbone=None`` here).

What each adapter changes against the network trained for real:
- video (``r3d_18``, ``mc3_18``, ``r2plus1d_18``, ``s3d``, ``mvit_v2_s``): the clip comes as
  (N, 3*T, H, W) and is viewed as (N, 3, T, H, W) (``frames=T``): a view, no copy, no
  memory; the network and its loss are as trained (Kinetics-400: 400 classes);
- segmentation (``fcn_resnet50``, ``deeplabv3_mobilenet_v3_large``,
  ``lraspp_mobilenet_v3_large``): the network's per-pixel logits (its ``"out"``, no
  auxiliary head), (N, CLASSES, H, W), averaged over the pixels to (N, CLASSES): one mean
  op, and the loss is cross-entropy on N rows instead of N*H*W pixels (the per-pixel
  loss's log-softmax over the full map, N*CLASSES*H*W elements, is not in the step);
- ``ddpm_unet``: DDPM's 256 x 256 U-Net (Ho et al. 2020: 128 channels, multipliers
  1,1,2,2,4,4, two residual blocks a level, self-attention at 16 x 16) predicting the noise
  of (N, 3, H, W); the timestep is 0 for every sample (made in the forward pass, so its
  embedding and MLP run as in training) and the loss is the predicted noise averaged over
  the pixels, cross-entropy over its 3 channels (``image:3,256,256:3``), instead of the
  mean squared error against the noise: one mean op and a loss on (N, 3) instead of
  (N, 3, H, W).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


# -- video ---------------------------------------------------------------------------------

class VideoClips(nn.Module):
    """A video network fed (N, 3*T, H, W), viewed as the (N, 3, T, H, W) clip it takes."""

    def __init__(self, net: nn.Module, frames: int):
        super().__init__()
        self.net = net
        self.frames = frames

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, ct, h, w = x.shape
        if ct != 3 * self.frames:
            raise ValueError(f"expected 3 x {self.frames} frames = {3 * self.frames} channels, "
                             f"got {ct}")
        return self.net(x.view(n, 3, self.frames, h, w))


def _video(name: str, frames: int, num_classes: int) -> nn.Module:
    from torchvision.models import video
    return VideoClips(getattr(video, name)(weights=None, num_classes=num_classes), frames)


def r3d_18(frames: int = 16, num_classes: int = 400) -> nn.Module:
    """ResNet-3D-18 (Tran et al. 2018): 3x3x3 convolutions throughout."""
    return _video("r3d_18", frames, num_classes)


def mc3_18(frames: int = 16, num_classes: int = 400) -> nn.Module:
    """MC3-18: 3-D convolutions in the first block, 2-D (1x3x3) after."""
    return _video("mc3_18", frames, num_classes)


def r2plus1d_18(frames: int = 16, num_classes: int = 400) -> nn.Module:
    """R(2+1)D-18: each 3-D convolution split into a spatial 1x3x3 and a temporal 3x1x1."""
    return _video("r2plus1d_18", frames, num_classes)


def s3d(frames: int = 16, num_classes: int = 400) -> nn.Module:
    """S3D (Xie et al. 2018): Inception blocks of separable (spatial, then temporal) 3-D
    convolutions."""
    return _video("s3d", frames, num_classes)


def mvit_v2_s(frames: int = 16, num_classes: int = 400) -> nn.Module:
    """MViTv2-S (Li et al. 2022): a video transformer with pooling attention; built for
    16 frames of 224 x 224."""
    return _video("mvit_v2_s", frames, num_classes)


# -- segmentation --------------------------------------------------------------------------

class PixelMean(nn.Module):
    """A segmentation network's per-pixel logits (its ``"out"``) averaged over the pixels."""

    def __init__(self, net: nn.Module):
        super().__init__()
        self.net = net

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)["out"].mean(dim=(2, 3))


def _segmentation(name: str, num_classes: int) -> nn.Module:
    from torchvision.models import segmentation
    net = getattr(segmentation, name)(weights=None, weights_backbone=None,
                                      num_classes=num_classes, aux_loss=False) \
        if name != "lraspp_mobilenet_v3_large" else \
        segmentation.lraspp_mobilenet_v3_large(weights=None, weights_backbone=None,
                                               num_classes=num_classes)
    return PixelMean(net)


def fcn_resnet50(num_classes: int = 21) -> nn.Module:
    """FCN on a dilated ResNet-50 (output stride 8; Long et al. 2015)."""
    return _segmentation("fcn_resnet50", num_classes)


def deeplabv3_mobilenet_v3_large(num_classes: int = 21) -> nn.Module:
    """DeepLabV3 (atrous spatial pyramid pooling) on a dilated MobileNetV3-Large."""
    return _segmentation("deeplabv3_mobilenet_v3_large", num_classes)


def lraspp_mobilenet_v3_large(num_classes: int = 21) -> nn.Module:
    """LR-ASPP (Howard et al. 2019) on MobileNetV3-Large."""
    return _segmentation("lraspp_mobilenet_v3_large", num_classes)


# -- diffusion U-Net -----------------------------------------------------------------------

def _norm(c: int) -> nn.GroupNorm:
    return nn.GroupNorm(32, c)


class ResBlock(nn.Module):
    def __init__(self, cin: int, cout: int, temb: int, dropout: float):
        super().__init__()
        self.norm1, self.conv1 = _norm(cin), nn.Conv2d(cin, cout, 3, padding=1)
        self.temb = nn.Linear(temb, cout)
        self.norm2, self.conv2 = _norm(cout), nn.Conv2d(cout, cout, 3, padding=1)
        self.dropout = nn.Dropout(dropout)
        self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        h = self.conv1(F.silu(self.norm1(x)))
        h = h + self.temb(F.silu(t))[:, :, None, None]
        h = self.conv2(self.dropout(F.silu(self.norm2(h))))
        return self.skip(x) + h


class AttnBlock(nn.Module):
    """Single-head self-attention over the pixels (DDPM's)."""

    def __init__(self, c: int):
        super().__init__()
        self.norm, self.qkv, self.proj = _norm(c), nn.Conv2d(c, 3 * c, 1), nn.Conv2d(c, c, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, c, h, w = x.shape
        q, k, v = self.qkv(self.norm(x)).reshape(n, 3, c, h * w).transpose(-1, -2).unbind(1)
        a = F.scaled_dot_product_attention(q[:, None], k[:, None], v[:, None])[:, 0]
        return x + self.proj(a.transpose(-1, -2).reshape(n, c, h, w))


class Level(nn.Module):
    """One resolution's residual blocks (each followed by attention where there is one)."""

    def __init__(self, blocks: list[ResBlock], attn: bool):
        super().__init__()
        self.blocks = nn.ModuleList(blocks)
        self.attns = nn.ModuleList(AttnBlock(b.conv2.out_channels) for b in blocks) \
            if attn else None


class DDPMUNet(nn.Module):
    """DDPM's U-Net (Ho et al. 2020, its 256 x 256 model by default): the noise predicted
    for timestep 0, averaged over the pixels."""

    def __init__(self, ch: int = 128, ch_mult: tuple[int, ...] = (1, 1, 2, 2, 4, 4),
                 num_res_blocks: int = 2, attn_res: tuple[int, ...] = (16,),
                 resolution: int = 256, dropout: float = 0.0, in_ch: int = 3):
        super().__init__()
        self.ch, temb = ch, 4 * ch
        self.temb = nn.Sequential(nn.Linear(ch, temb), nn.SiLU(), nn.Linear(temb, temb))
        half = ch // 2
        self.register_buffer("freqs", torch.exp(
            -math.log(10000) * torch.arange(half, dtype=torch.float32) / (half - 1)),
            persistent=False)
        self.conv_in = nn.Conv2d(in_ch, ch, 3, padding=1)
        chans, cur, res = [ch], ch, resolution
        self.down, self.downsample = nn.ModuleList(), nn.ModuleList()
        for i, m in enumerate(ch_mult):
            blocks = []
            for _ in range(num_res_blocks):
                blocks.append(ResBlock(cur, ch * m, temb, dropout))
                cur = ch * m
                chans.append(cur)
            self.down.append(Level(blocks, res in attn_res))
            if i != len(ch_mult) - 1:
                self.downsample.append(nn.Conv2d(cur, cur, 3, stride=2, padding=1))
                chans.append(cur)
                res //= 2
        self.mid1 = ResBlock(cur, cur, temb, dropout)
        self.mid_attn = AttnBlock(cur)
        self.mid2 = ResBlock(cur, cur, temb, dropout)
        self.up, self.upsample = nn.ModuleList(), nn.ModuleList()
        for i, m in reversed(list(enumerate(ch_mult))):
            blocks = []
            for _ in range(num_res_blocks + 1):
                blocks.append(ResBlock(cur + chans.pop(), ch * m, temb, dropout))
                cur = ch * m
            self.up.append(Level(blocks, res in attn_res))
            if i != 0:
                self.upsample.append(nn.Conv2d(cur, cur, 3, padding=1))
                res *= 2
        self.norm_out, self.conv_out = _norm(cur), nn.Conv2d(cur, in_ch, 3, padding=1)

    @staticmethod
    def _level(level: Level, h: torch.Tensor, t: torch.Tensor, i: int) -> torch.Tensor:
        h = level.blocks[i](h, t)
        return level.attns[i](h) if level.attns is not None else h

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        steps = torch.zeros(x.shape[0], device=x.device)  # timestep 0 for every sample
        e = steps[:, None] * self.freqs[None]
        t = self.temb(torch.cat([e.sin(), e.cos()], dim=1).to(x.dtype))
        hs = [self.conv_in(x)]
        for i, level in enumerate(self.down):
            for j in range(len(level.blocks)):
                hs.append(self._level(level, hs[-1], t, j))
            if i < len(self.downsample):
                hs.append(self.downsample[i](hs[-1]))
        h = self.mid2(self.mid_attn(self.mid1(hs[-1], t)), t)
        for i, level in enumerate(self.up):
            for j in range(len(level.blocks)):
                h = self._level(level, torch.cat([h, hs.pop()], dim=1), t, j)
            if i < len(self.upsample):
                h = self.upsample[i](F.interpolate(h, scale_factor=2.0, mode="nearest"))
        return self.conv_out(F.silu(self.norm_out(h))).mean(dim=(2, 3))


def ddpm_unet(ch: int = 128, resolution: int = 256) -> nn.Module:
    """DDPM's 256 x 256 U-Net (LSUN, CelebA-HQ: 114M parameters); ``ch`` and ``resolution``
    for other sizes (attention stays at 16 x 16)."""
    return DDPMUNet(ch=ch, resolution=resolution)
